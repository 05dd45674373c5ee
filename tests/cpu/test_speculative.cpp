// Speculative decoding on the fp32 CPU reference (docs/speculative.md): the bookkeeping ops on
// hand-computed cases and the acceptance rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu/cpu_backend.h"
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
  for (const char* bad : {"", "x", "-1", "3x", "rate:", "rate:1.5", "rate:-0.1", "rate:0.5:", "rate:0.5:x", "rate0.5"})
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

}  // namespace
}  // namespace sl
