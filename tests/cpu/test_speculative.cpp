// Speculative decoding on the fp32 CPU reference (docs/speculative.md): the bookkeeping ops on
// hand-computed cases, the acceptance rules, and the verifying decode step of the whole tiny
// model: its logits equal a prefill's, a rejected draft leaves no trace in any cache (target and
// MTP layers of every type, at compression block edges), and sequences that advance by
// different amounts stay exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"
#include "model/speculative.h"

namespace sl {
namespace {

// ---------------------------------------------------------------- the ops, by hand

class SpecOps : public ::testing::Test {
 public:  // run_accept below builds its tensors through the fixture
  std::unique_ptr<Backend> be = make_cpu_backend();
  Tensor i32(const std::string& name, Shape shape, const std::vector<int32_t>& values = {}) {
    Tensor t = be->alloc(name, DType::I32, shape, AllocKind::Activation);
    if (!values.empty()) {
      EXPECT_EQ(int64_t(values.size()), t.numel()) << name;
      be->upload(Stream{}, t, values.data(), values.size() * 4);
    }
    return t;
  }
  std::vector<int32_t> get(const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
  std::vector<float> getf(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
};

TEST_F(SpecOps, VerifyTokensInterleavesBonusAndDrafts) {
  const Tensor bonus = i32("bonus", {2}, {7, 8});
  const Tensor drafts = i32("drafts", {3, 2}, {10, 20, 11, 21, 12, 22});  // [k, B]: step-major
  const Tensor out = i32("out", {8});
  be->verify_tokens(Stream{}, out, bonus, drafts);
  EXPECT_EQ(get(out), (std::vector<int32_t>{7, 10, 11, 12, 8, 20, 21, 22}));
  EXPECT_THROW(be->verify_tokens(Stream{}, i32("short", {6}), bonus, drafts), Error);
  EXPECT_THROW(be->verify_tokens(Stream{}, out, bonus, i32("wrong_b", {4, 1})), Error);
}

// Four sequences (k = 3, R = 4) at different positions, one target row per position:
//   0: every draft confirmed;  1: the first draft wrong;  2: the third draft wrong;
//   3: the first wrong, the second right (acceptance is a prefix: 0).
struct AcceptCase {
  std::vector<int32_t> target{100, 101, 102, 103,   // seq 0
                              200, 201, 202, 203,   // seq 1
                              300, 301, 302, 303,   // seq 2
                              400, 401, 402, 403};  // seq 3
  // drafts[i, b] is checked against target[b, i].
  std::vector<int32_t> drafts{100, 9, 300, 9,    // draft 1 of each sequence
                              101, 201, 301, 401,  // draft 2
                              102, 202, 9, 402};   // draft 3
  std::vector<int32_t> pos;
  AcceptCase() {
    for (int32_t p : {10, 20, 30, 5})
      for (int i = 0; i < 4; ++i) pos.push_back(p + i);
  }
};

struct AcceptOut {
  std::vector<int32_t> accepted, bonus, new_len, mtp_tokens, last_rows, draft_pos;
};

AcceptOut run_accept(SpecOps& t, const AcceptCase& c, const std::vector<int32_t>& forced) {
  const Tensor target = t.i32("target", {4, 4}, c.target), drafts = t.i32("drafts", {3, 4}, c.drafts);
  const Tensor f = t.i32("forced", {4}, forced), pos = t.i32("pos", {16}, c.pos);
  const Tensor acc = t.i32("accepted", {4}), bonus = t.i32("bonus", {4}), nl = t.i32("new_len", {4});
  const Tensor mtp = t.i32("mtp_tokens", {16}), last = t.i32("last_rows", {4}), dpos = t.i32("draft_pos", {3, 4});
  t.be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, target, drafts, f, pos);
  return {t.get(acc), t.get(bonus), t.get(nl), t.get(mtp), t.get(last), t.get(dpos)};
}

TEST_F(SpecOps, AcceptDraftsGreedy) {
  const AcceptCase c;
  const AcceptOut o = run_accept(*this, c, {-1, -1, -1, -1});
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{3, 0, 2, 0}));
  EXPECT_EQ(o.bonus, (std::vector<int32_t>{103, 200, 302, 400}));  // target[b, a]
  EXPECT_EQ(o.new_len, (std::vector<int32_t>{14, 21, 33, 6}));     // p + a + 1
  EXPECT_EQ(o.last_rows, (std::vector<int32_t>{3, 4, 10, 12}));    // b * 4 + a
  // Greedy: an accepted draft equals the target's token, so the MTP rows are the target's.
  EXPECT_EQ(o.mtp_tokens, c.target);
  // Row s of draft_pos: new_len + s - 1.
  EXPECT_EQ(o.draft_pos, (std::vector<int32_t>{13, 20, 32, 5, 14, 21, 33, 6, 15, 22, 34, 7}));
}

TEST_F(SpecOps, AcceptDraftsForced) {
  const AcceptCase c;
  // Forced counts overrule the comparison either way, and a count above k accepts all k.
  const AcceptOut o = run_accept(*this, c, {1, 2, 0, 7});
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{1, 2, 0, 3}));
  EXPECT_EQ(o.bonus, (std::vector<int32_t>{101, 202, 300, 403}));
  EXPECT_EQ(o.new_len, (std::vector<int32_t>{12, 23, 31, 9}));
  EXPECT_EQ(o.last_rows, (std::vector<int32_t>{1, 6, 8, 15}));
  // Rows before a carry the accepted drafts (what was committed), row a and later the target's.
  EXPECT_EQ(o.mtp_tokens, (std::vector<int32_t>{100, 101, 102, 103,  //
                                                9, 201, 202, 203,    // seq 1 committed draft "9" at p+1
                                                300, 301, 302, 303,  //
                                                9, 401, 402, 403}));
  EXPECT_EQ(o.draft_pos, (std::vector<int32_t>{11, 22, 30, 8, 12, 23, 31, 9, 13, 24, 32, 10}));
}

TEST_F(SpecOps, AcceptDraftsValidates) {
  const Tensor target = i32("target", {2, 3}), drafts = i32("drafts", {2, 2}), forced = i32("forced", {2});
  const Tensor pos = i32("pos", {6}, {4, 5, 6, 9, 10, 11});
  const Tensor acc = i32("a", {2}), bonus = i32("b", {2}), nl = i32("n", {2}), mtp = i32("m", {6});
  const Tensor last = i32("l", {2}), dpos = i32("d", {2, 2});
  be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, target, drafts, forced, pos);
  // Wrong shapes, an output aliasing an input, rows that are not consecutive positions.
  EXPECT_THROW(be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, target, i32("d3", {3, 2}), forced, pos),
               Error);
  EXPECT_THROW(be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, target, drafts, i32("f3", {3}), pos),
               Error);
  EXPECT_THROW(be->accept_drafts(Stream{}, forced, bonus, nl, mtp, last, dpos, target, drafts, forced, pos), Error);
  EXPECT_THROW(be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, target, drafts, forced,
                                 i32("gap", {6}, {4, 5, 7, 9, 10, 11})),
               Error);
  EXPECT_THROW(be->accept_drafts(Stream{}, acc, bonus, nl, mtp, last, dpos, i32("t1", {2, 1}), i32("d0", {0, 2}),
                                 forced, i32("p2", {2})),
               Error);  // k = 0: nothing to verify
}

TEST_F(SpecOps, CacheRollbackClearsRejectedPositions) {
  // Two sequences, an 8-slot ring; sequence 0 keeps 5 positions, sequence 1 keeps 9.
  const Tensor tags = i32("tags", {2, 8}, {0, 1, 2, 3, 4, 5, 6, -1,  //
                                           8, 9, 10, 3, 4, 5, 6, 7});
  const Tensor new_len = i32("new_len", {2}, {5, 9});
  Tensor entries = be->alloc("entries", DType::F32, {2, 6, 3}, AllocKind::Cache);
  be->fill(Stream{}, entries, 1.f);
  // ratio 2, extent 3: rows with new_len < (j+1)*2 <= new_len + 3 become zero: j = 2, 3 for
  // sequence 0 (blocks ending at 5 and 7); j = 4, 5 for sequence 1 (ends 9, 11).
  be->cache_rollback(Stream{}, tags, entries, new_len, 2, 3);
  EXPECT_EQ(get(tags), (std::vector<int32_t>{0, 1, 2, 3, 4, -1, -1, -1,  //
                                             8, -1, -1, 3, 4, 5, 6, 7}));
  const std::vector<float> e = getf(entries);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 6; ++j) {
      const bool cleared = b == 0 ? (j == 2 || j == 3) : (j >= 4);
      for (int c = 0; c < 3; ++c) EXPECT_EQ(e[size_t((b * 6 + j) * 3 + c)], cleared ? 0.f : 1.f) << b << " " << j;
    }
  // Tags only (a sliding-window ring), and a length landing exactly on a block edge: block 1
  // (positions 2, 3) is complete within 4 and stays.
  be->fill(Stream{}, entries, 1.f);
  be->upload(Stream{}, new_len, std::vector<int32_t>{4, 4}.data(), 8);
  be->cache_rollback(Stream{}, tags, Tensor{}, new_len, 1, 3);
  EXPECT_EQ(get(tags), (std::vector<int32_t>{0, 1, 2, 3, -1, -1, -1, -1,  //
                                             -1, -1, -1, 3, -1, -1, -1, -1}));
  be->cache_rollback(Stream{}, tags, entries, new_len, 2, 3);
  const std::vector<float> e2 = getf(entries);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(e2[size_t(j * 3)], j == 2 ? 0.f : 1.f) << j;  // only (4, 7]: j = 2
  EXPECT_THROW(be->cache_rollback(Stream{}, tags, entries, i32("nl3", {3}), 2, 3), Error);
  EXPECT_THROW(be->cache_rollback(Stream{}, tags, entries, new_len, 0, 3), Error);
  EXPECT_THROW(be->cache_rollback(Stream{}, tags, Tensor{}, new_len, 1, -1), Error);
}

// ---------------------------------------------------------------- acceptance rules

TEST(AcceptRule, ParsesAndPrints) {
  EXPECT_EQ(parse_accept_rule("greedy").kind, AcceptRule::Kind::Greedy);
  const AcceptRule n = parse_accept_rule("3");
  EXPECT_EQ(n.kind, AcceptRule::Kind::Count);
  EXPECT_EQ(n.count, 3);
  const AcceptRule r = parse_accept_rule("rate:0.25:42");
  EXPECT_EQ(r.kind, AcceptRule::Kind::Rate);
  EXPECT_EQ(r.rate, 0.25);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(parse_accept_rule("rate:1").seed, 0u);
  for (const char* s : {"greedy", "0", "3", "rate:0.25:42"}) EXPECT_EQ(accept_rule_str(parse_accept_rule(s)), s);
  for (const char* bad : {"", "x", "-1", "3x", "rate:", "rate:1.5", "rate:-0.1", "rate:0.5:", "rate:0.5:x", "rate0.5",
                          " 2", "2 ", "0x3", "rate:0x1p-1", "rate: 0.5", "rate:inf", "rate:nan"})
    EXPECT_THROW(parse_accept_rule(bad), Error) << bad;
}

TEST(AcceptRule, ForcedCounts) {
  EXPECT_EQ(forced_accept_counts(parse_accept_rule("greedy"), 3, 2, 0), (std::vector<int32_t>{-1, -1, -1}));
  EXPECT_EQ(forced_accept_counts(parse_accept_rule("5"), 2, 3, 9), (std::vector<int32_t>{3, 3}));  // min(N, k)
  EXPECT_EQ(forced_accept_counts(parse_accept_rule("rate:0"), 2, 3, 1), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(forced_accept_counts(parse_accept_rule("rate:1"), 2, 3, 1), (std::vector<int32_t>{3, 3}));
  // Seeded and per step: the same step draws the same counts, and the mean prefix length of
  // rate R over k drafts is R + R^2 + ... + R^k (0.875 for R = 0.5, k = 3).
  const AcceptRule r = parse_accept_rule("rate:0.5:7");
  EXPECT_EQ(forced_accept_counts(r, 4, 3, 11), forced_accept_counts(r, 4, 3, 11));
  double sum = 0;
  int n = 0;
  bool steps_differ = false;
  for (uint64_t step = 0; step < 2000; ++step) {
    const auto c = forced_accept_counts(r, 2, 3, step);
    for (int32_t a : c) {
      EXPECT_TRUE(a >= 0 && a <= 3);
      sum += a;
      ++n;
    }
    steps_differ = steps_differ || c != forced_accept_counts(r, 2, 3, 0);
  }
  EXPECT_TRUE(steps_differ);
  EXPECT_NEAR(sum / n, 0.875, 0.05);
}

// ---------------------------------------------------------------- the verifying step

std::vector<int32_t> prompt(int B, int T0, int vocab, uint64_t seed = 7) {
  std::vector<int32_t> t;
  for (int i = 0; i < B * T0; ++i) t.push_back(int32_t(splitmix64(seed * 1000003 + uint64_t(i)) % uint64_t(vocab)));
  return t;
}

ModelConfig tiny(int mtp_layers, int draft_steps, int mtp_compress, int batch = 1) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = mtp_layers;
  c.draft_steps = draft_steps;
  set_mtp_compress_ratio(c, mtp_compress);
  c.batch = batch;
  validate(c);
  return c;
}

// Room for a prompt of up to `tokens` in one chunk, plus `steps` verifying steps.
RunShape verify_shape(const ModelConfig& c, int tokens, int steps) {
  RunShape s;
  s.batch = c.batch;
  s.verify = true;
  s.max_seq_tokens = std::max(tokens, 1 + c.draft_steps);
  s.max_positions = tokens + (steps + 2) * (1 + c.draft_steps);
  return s;
}

struct ModelRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<DeepSeekV4> model;
  ModelRun(const ModelConfig& c, const RunShape& shape) {
    model = std::make_unique<DeepSeekV4>(*be, c, StreamPolicy::parse("shared"), shape);
    model->init_random(c.seed);
  }
};

// Relative to the largest reference value: the CPU reference computes every row on its own in
// the same order whatever the batch (its GEMM row equals dot() of that row; attention, pooling,
// routing and experts are per token), so a row verified among 1 + k equals the same row of a
// prefill bit for bit (measured: difference 0). The tolerance leaves room for nothing but a
// changed summation order (~1e-6 in fp32 over these sizes); a wrong cache entry or position
// moves the logits by O(1). The cache comparisons below are exact for the same reason.
constexpr double kRowTolerance = 1e-5;

double max_rel_diff(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << "non-finite logit at " << i;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// verify(k) after prefill(n): the target's logits at positions n..n+k equal those of a prefill
// of n + k + 1 tokens (the prompt, the first prefill's greedy token, its drafts). Two sequences,
// so rows are checked in their sequence-major places.
void expect_verify_equals_prefill(int n, int k) {
  const ModelConfig c = tiny(1, k, 4, 2);
  const int B = 2, R = 1 + k, V = c.vocab_size;
  std::vector<int32_t> p = prompt(B, n, V);
  RunShape sa = verify_shape(c, n, 1);
  sa.all_logits = true;
  ModelRun run(c, sa);
  const StepOutput pre = run.model->prefill(p, n);
  const StepOutput ver = run.model->decode_step();
  ASSERT_EQ(ver.all_logits.size(), size_t(B * R) * size_t(V));
  ASSERT_EQ(ver.accepted.size(), size_t(B));

  std::vector<int32_t> full;
  for (int b = 0; b < B; ++b) {
    full.insert(full.end(), p.begin() + b * n, p.begin() + (b + 1) * n);
    full.push_back(pre.sampled[size_t(b)]);
    for (int i = 0; i < k; ++i) full.push_back(pre.drafts[size_t(i)][size_t(b)]);
  }
  RunShape sb = verify_shape(c, n + R, 0);
  sb.all_logits = true;
  ModelRun ref(c, sb);
  const StepOutput want = ref.model->prefill(full, n + R);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < R; ++i) {
      const float* got = ver.all_logits.data() + size_t(b * R + i) * size_t(V);
      const float* exp = want.all_logits.data() + size_t(b * (n + R) + n + i) * size_t(V);
      EXPECT_LT(max_rel_diff(got, exp, size_t(V)), kRowTolerance) << "n=" << n << " seq " << b << " row " << i;
    }
  // The greedy acceptance agrees with these logits: a is the longest confirmed prefix and the
  // bonus is the target's token at row a.
  for (int b = 0; b < B; ++b) {
    std::vector<int32_t> t(static_cast<size_t>(R));
    for (int i = 0; i < R; ++i) {
      const float* row = ver.all_logits.data() + size_t(b * R + i) * size_t(V);
      t[size_t(i)] = int32_t(std::max_element(row, row + V) - row);
    }
    int a = 0;
    while (a < k && pre.drafts[size_t(a)][size_t(b)] == t[size_t(a)]) ++a;
    EXPECT_EQ(ver.accepted[size_t(b)], a) << "seq " << b;
    EXPECT_EQ(ver.sampled[size_t(b)], t[size_t(a)]) << "seq " << b;
    EXPECT_EQ(run.model->position(b), n + a + 1);
  }
}

// Rows 45..48: position 47 completes a block of ratio 4 and 16 inside the verified rows.
TEST(Verify, LogitsEqualPrefillAcrossABlockEdge) { expect_verify_equals_prefill(45, 3); }
// Rows 40..41 (k = 1): position 40 starts a block.
TEST(Verify, LogitsEqualPrefillOneDraft) { expect_verify_equals_prefill(40, 1); }

// Everything of a cache that a later read can observe, in host memory.
struct CacheView {
  std::vector<int32_t> swa_tags, comp_tags, idx_tags;
  std::vector<float> swa, comp_u, comp_g, comp_entries, idx_u, idx_g, idx_entries;
};

template <class T>
std::vector<T> fetch(Backend& be, const Tensor& t) {
  std::vector<T> v(size_t(t.empty() ? 0 : t.numel()));
  if (!v.empty()) be.download(v.data(), t, v.size() * sizeof(T));
  return v;
}

CacheView view_of(Backend& be, const LayerCache& c) {
  CacheView v;
  v.swa_tags = fetch<int32_t>(be, c.swa_tags);
  v.swa = fetch<float>(be, c.swa);
  if (c.type != LayerType::Sliding) {
    v.comp_tags = fetch<int32_t>(be, c.comp.state_tags);
    v.comp_u = fetch<float>(be, c.comp.state_u);
    v.comp_g = fetch<float>(be, c.comp.state_g);
    v.comp_entries = fetch<float>(be, c.comp.entries);
  }
  if (c.type == LayerType::C4A) {
    v.idx_tags = fetch<int32_t>(be, c.indexer.state_tags);
    v.idx_u = fetch<float>(be, c.indexer.state_u);
    v.idx_g = fetch<float>(be, c.indexer.state_g);
    v.idx_entries = fetch<float>(be, c.indexer.entries);
  }
  return v;
}

// Ring slots holding positions at or past `live_from` (what a read from now on may use) must
// hold the same position and data in both runs; target rings hold nothing at or past `len`.
// Returns the number of slots compared.
int compare_ring(const std::vector<int32_t>& tags_a, const std::vector<int32_t>& tags_b,
                 const std::vector<std::vector<float>*>& data_a, const std::vector<std::vector<float>*>& data_b,
                 int live_from, int len, bool target, const std::string& what) {
  int compared = 0;
  const size_t slots = tags_a.size();
  live_from = std::max(live_from, 0);  // tag -1 marks an empty slot: never read, whatever its data
  for (size_t i = 0; i < slots; ++i) {
    const int32_t ta = tags_a[i], tb = tags_b[i];
    if (target) {
      EXPECT_LT(ta, len) << what << ": slot " << i << " still holds a rejected position";
    }
    if (ta < live_from && tb < live_from) continue;
    ++compared;
    EXPECT_EQ(ta, tb) << what << ": slot " << i;
    if (ta != tb) continue;
    for (size_t d = 0; d < data_a.size(); ++d) {
      const size_t w = data_a[d]->size() / slots;
      const std::vector<float> row_a(data_a[d]->begin() + long(i * w), data_a[d]->begin() + long((i + 1) * w));
      const std::vector<float> row_b(data_b[d]->begin() + long(i * w), data_b[d]->begin() + long((i + 1) * w));
      EXPECT_EQ(row_a, row_b) << what << ": slot " << i << " (position " << ta << ")";
    }
  }
  return compared;
}

// After prefill(n) and one verifying step accepting exactly `a` of k drafts, every cache
// equals that of a run that never saw the rejected tokens: a prefill of the n + a + 1
// committed tokens (prompt, the first greedy token, the accepted drafts), whose own draft
// steps then write the MTP layer exactly where the verifying step's do. One MTP layer, so
// that every draft step of both runs writes the same layer.
void expect_rollback_equals_clean_run(int n, int k, int a, int mtp_compress) {
  ModelConfig c = tiny(1, k, mtp_compress);
  const int len = n + a + 1, W = c.sliding_window, L = c.num_hidden_layers;
  const std::string tag = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " a=" + std::to_string(a) +
                          " mtp_compress=" + std::to_string(mtp_compress);
  const std::vector<int32_t> p = prompt(1, n, c.vocab_size, 3);
  const RunShape shape = verify_shape(c, len, 1);  // both runs: equal capacities, equal slots
  ModelRun run(c, shape);
  run.model->set_accept_rule(parse_accept_rule(std::to_string(a)));
  const StepOutput pre = run.model->prefill(p, n);
  const StepOutput ver = run.model->decode_step();
  ASSERT_EQ(ver.accepted, std::vector<int32_t>{a}) << tag;
  ASSERT_EQ(run.model->position(), len) << tag;

  std::vector<int32_t> committed = p;
  committed.push_back(pre.sampled[0]);
  for (int i = 0; i < a; ++i) committed.push_back(pre.drafts[size_t(i)][0]);
  ModelRun clean(c, shape);
  const StepOutput want = clean.model->prefill(committed, len);
  // The target at the last committed position, the bonus, and the drafts from there agree.
  EXPECT_LT(max_rel_diff(ver.last_logits.data(), want.last_logits.data(), ver.last_logits.size()), kRowTolerance)
      << tag;
  EXPECT_EQ(ver.sampled, want.sampled) << tag;
  EXPECT_EQ(ver.drafts, want.drafts) << tag;

  int compared = 0;
  for (int l = 0; l < L + c.num_nextn_predict_layers; ++l) {
    const LayerCache& lc = run.model->caches()[size_t(l)];
    CacheView va = view_of(*run.be, lc), vb = view_of(*clean.be, clean.model->caches()[size_t(l)]);
    const bool target = l < L;
    const std::string where = tag + " layer " + std::to_string(l) + " (" + layer_type_name(lc.type) + ")";
    compared += compare_ring(va.swa_tags, vb.swa_tags, {&va.swa}, {&vb.swa}, len - W + 1, len, target,
                             where + " window");
    if (lc.type != LayerType::Sliding) {
      const int span = (lc.comp.overlap ? 2 : 1) * lc.comp.ratio;
      compared += compare_ring(va.comp_tags, vb.comp_tags, {&va.comp_u, &va.comp_g}, {&vb.comp_u, &vb.comp_g},
                               len - span + 1, len, target, where + " compressor state");
      // Entries of completed blocks equal, every other one zero in both (the clean run never
      // pooled it; the verifying run's rollback cleared it).
      EXPECT_EQ(va.comp_entries, vb.comp_entries) << where << " compressor entries";
    }
    if (lc.type == LayerType::C4A) {
      const int span = 2 * lc.indexer.ratio;
      compared += compare_ring(va.idx_tags, vb.idx_tags, {&va.idx_u, &va.idx_g}, {&vb.idx_u, &vb.idx_g},
                               len - span + 1, len, target, where + " indexer state");
      EXPECT_EQ(va.idx_entries, vb.idx_entries) << where << " indexer entries";
    }
  }
  EXPECT_GT(compared, 0) << tag;
}

// Verified rows n..n+4. With a = 0 the rejected rows include 47 (resp. 127), which completes a
// block of ratio 4 and 16 (resp. also 128); a = 2 ends the committed tokens exactly on that
// block edge (length 48 / 128), a = 3 one past it. Target layers: sliding, c4a (4), c128a (16);
// the MTP layer: sliding, c4a, c128a (128).
TEST(Verify, RollbackEqualsCleanRunSlidingMtp) {
  for (int a : {0, 2, 3}) expect_rollback_equals_clean_run(45, 4, a, 0);
}
TEST(Verify, RollbackEqualsCleanRunMtp4) {
  for (int a : {0, 2, 3}) expect_rollback_equals_clean_run(45, 4, a, 4);
}
TEST(Verify, RollbackEqualsCleanRunMtp128) {
  for (int a : {0, 2, 3}) expect_rollback_equals_clean_run(125, 4, a, 128);
}
// All drafts accepted (nothing to roll back but the MTP's garbage-free rows), and k = 1.
TEST(Verify, RollbackEqualsCleanRunAllAcceptedAndOneDraft) {
  expect_rollback_equals_clean_run(45, 2, 2, 4);
  expect_rollback_equals_clean_run(46, 1, 0, 4);
  expect_rollback_equals_clean_run(46, 1, 1, 0);
}

// Several verifying steps with random acceptance on a batch of two: the sequences drift apart
// in position, and each ends exactly where a prefill of its committed tokens ends (logits, the
// bonus, the drafts), while the accepted counts are the ones the rule drew.
TEST(Verify, SequencesAtDifferentPositionsStayExact) {
  const ModelConfig c = tiny(1, 3, 4, 2);
  const int B = 2, n = 37, steps = 6;
  const std::vector<int32_t> p = prompt(B, n, c.vocab_size, 5);
  const AcceptRule rule = parse_accept_rule("rate:0.6:3");
  ModelRun run(c, verify_shape(c, n + steps * 4, steps));
  run.model->set_accept_rule(rule);
  std::vector<std::vector<int32_t>> committed(B);
  for (int b = 0; b < B; ++b) committed[size_t(b)].assign(p.begin() + b * n, p.begin() + (b + 1) * n);
  StepOutput out = run.model->prefill(p, n);
  int accepted_some = 0;
  for (int s = 0; s < steps; ++s) {
    const StepOutput prev = out;
    out = run.model->decode_step();
    EXPECT_EQ(out.accepted, forced_accept_counts(rule, B, c.draft_steps, uint64_t(s))) << "step " << s;
    for (int b = 0; b < B; ++b) {
      committed[size_t(b)].push_back(prev.sampled[size_t(b)]);
      for (int i = 0; i < out.accepted[size_t(b)]; ++i) committed[size_t(b)].push_back(prev.drafts[size_t(i)][size_t(b)]);
      accepted_some += out.accepted[size_t(b)];
      EXPECT_EQ(run.model->position(b), int(committed[size_t(b)].size())) << "step " << s << " seq " << b;
    }
  }
  ASSERT_GT(accepted_some, 0);
  ASSERT_NE(run.model->position(0), run.model->position(1)) << "the seed should make the sequences drift apart";
  const size_t V = size_t(c.vocab_size);
  for (int b = 0; b < B; ++b) {
    ModelConfig c1 = c;
    c1.batch = 1;
    const int len = int(committed[size_t(b)].size());
    ModelRun ref(c1, verify_shape(c1, len, 0));
    const StepOutput want = ref.model->prefill(committed[size_t(b)], len);
    EXPECT_LT(max_rel_diff(out.last_logits.data() + size_t(b) * V, want.last_logits.data(), V), kRowTolerance)
        << "seq " << b;
    EXPECT_EQ(out.sampled[size_t(b)], want.sampled[0]) << "seq " << b;
    for (int i = 0; i < c.draft_steps; ++i) EXPECT_EQ(out.drafts[size_t(i)][size_t(b)], want.drafts[size_t(i)][0]);
  }
}

// decode_prepare / decode_enqueue / decode_collect (the graph path's halves, eager here: the
// CPU has no graphs) give what decode_step gives, with two MTP layers.
TEST(Verify, StepHalvesEqualDecodeStep) {
  const ModelConfig c = tiny(2, 2, 0, 2);
  const auto p = prompt(2, 30, c.vocab_size);
  const AcceptRule rule = parse_accept_rule("rate:0.5:1");
  ModelRun a(c, verify_shape(c, 30, 3)), b(c, verify_shape(c, 30, 3));
  a.model->set_accept_rule(rule);
  b.model->set_accept_rule(rule);
  a.model->prefill(p, 30);
  b.model->prefill(p, 30);
  for (int s = 0; s < 3; ++s) {
    const StepOutput x = a.model->decode_step();
    b.model->decode_prepare();
    b.model->decode_enqueue();
    const StepOutput y = b.model->decode_collect();
    EXPECT_EQ(x.last_logits, y.last_logits) << "step " << s;
    EXPECT_EQ(x.sampled, y.sampled) << "step " << s;
    EXPECT_EQ(x.accepted, y.accepted) << "step " << s;
    EXPECT_EQ(x.drafts, y.drafts) << "step " << s;
  }
}

TEST(Verify, RefusesWhatItCannotRun) {
  ModelConfig c = tiny(1, 3, 0);
  RunShape s = verify_shape(c, 20, 1);
  s.max_seq_tokens = 3;  // < 1 + k
  EXPECT_THROW(ModelRun(c, s), Error);
  ModelConfig none = tiny(1, 0, 0);  // no drafts to verify
  EXPECT_THROW(ModelRun(none, verify_shape(none, 20, 1)), Error);
  ModelConfig c0 = tiny(1, 3, 0);
  RunShape tight = verify_shape(c0, 20, 0);
  tight.max_positions = 20 + 2 * 3 - 1;  // the first step's drafts would reach position 25
  ModelRun r(c0, tight);
  r.model->prefill(prompt(1, 20, c0.vocab_size), 20);
  EXPECT_THROW(r.model->decode_step(), Error);
}

// The null backend (what `streamlab schedule` records on) runs the verifying step, and its
// schedule holds the step's own ops, ordered on the main stream without hazards.
TEST(Verify, NullBackendRecordsTheVerifyingStep) {
  const ModelConfig c = tiny(2, 3, 4, 2);
  auto be = make_null_backend();
  DeepSeekV4 m(*be, c, StreamPolicy::parse("per-layer"), verify_shape(c, 8, 2));
  m.prefill(std::vector<int32_t>(16, 1), 8);
  Schedule sched;
  m.describe_streams(sched);
  m.ops().attach_schedule(&sched);
  const StepOutput out = m.decode_step();
  m.ops().attach_schedule(nullptr);
  EXPECT_EQ(out.accepted, (std::vector<int32_t>{0, 0}));  // the null backend's downloads are zeros
  EXPECT_EQ(m.position(1), 9);
  std::map<std::string, int> ops;
  for (const auto& e : sched.entries())
    if (e.kind == ScheduleEntry::Op) ++ops[e.name];
  EXPECT_EQ(ops["verify_tokens"], 1);
  EXPECT_EQ(ops["accept_drafts"], 1);
  // Every layer's window ring; compressors of c4a / c128a layers (2 + 2 target, the MTP layers
  // are c4a); indexers of c4a layers (2 target + 2 MTP).
  EXPECT_EQ(ops["rollback.swa"], c.num_hidden_layers + 2);
  EXPECT_EQ(ops["rollback.compressor"], 4 + 2);
  EXPECT_EQ(ops["rollback.indexer"], 2 + 2);
  EXPECT_TRUE(sched.hazards().empty());
}

}  // namespace
}  // namespace sl
