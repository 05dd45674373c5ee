// The op-by-op checker (model/check_backend.h) on the CPU: two CPU backends agree exactly on
// the whole tiny model (prefill + decode + MTP drafts), and a deliberately faulty backend is
// caught at exactly the op and range path where it misbehaves, with no failure spreading to
// later ops (every op runs on identical inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "model/check_backend.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/forwarding_backend.h"
#include "model/kv_fp8_entry.h"
#include "model/speculative.h"

namespace sl {
namespace {

// A CPU backend with a hook after every op: the hook sees the op name, the range path (same
// format as CheckRecord::path) and the op's results (host memory), and may corrupt them.
class FaultyCpu final : public ForwardingBackend {
 public:
  using Hook = std::function<void(const std::string& op, const std::string& path, const std::vector<Tensor>& outs)>;
  Hook hook;
  // Report bf16 activations and weights like the CUDA backend (only memory, init, fill and
  // copy then work: the CPU ops want f32).
  bool bf16 = false;

  FaultyCpu() : ForwardingBackend(make_cpu_backend()) {}
  std::string name() const override { return "faulty-cpu"; }
  DType act_dtype() const override { return bf16 ? DType::BF16 : inner().act_dtype(); }
  DType weight_dtype() const override { return bf16 ? DType::BF16 : inner().weight_dtype(); }
  void range_push(const char* n) override {
    if (ranges_.empty()) ++top_[n];
    ranges_.emplace_back(n);
  }
  void range_pop() override { ranges_.pop_back(); }

 private:
  void after_op(const char* op, Stream, const OpIo& io) override {
    if (!hook) return;
    std::vector<Tensor> outs;
    for (const OpIo::Arg& a : io)
      if (OpIo::result(a.role)) outs.push_back(*a.tensor);
    std::string p;
    for (size_t i = 0; i < ranges_.size(); ++i)
      p += (i ? "/" : "") + ranges_[i] + (i == 0 ? "#" + std::to_string(top_[ranges_[0]]) : "");
    hook(op, p, outs);
  }

  std::vector<std::string> ranges_;
  std::map<std::string, int> top_;
};

// The configuration the H200 disagreement showed up with: one MTP layer of compress ratio 4
// (with indexer), 3 draft steps, batch 2.
ModelConfig tiny_c4(int draft_steps = 3) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = 1;
  c.mtp_compress_ratio = 4;
  c.compress_ratios.back() = 4;
  c.draft_steps = draft_steps;
  c.batch = 2;
  validate(c);
  return c;
}

// Prefill + `steps` decode steps on `be`; the outputs of every step. kv_fp8: FP8 KV caches,
// packed where the backend takes them.
std::vector<StepOutput> run_tiny(Backend& be, const ModelConfig& c, int steps, bool kv_fp8 = false) {
  RunShape s;
  s.batch = c.batch;
  s.kv_fp8 = kv_fp8;
  s.max_positions = c.context_length + steps + c.draft_steps + 2;
  s.max_seq_tokens = c.context_length;
  DeepSeekV4 m(be, c, StreamPolicy::parse("shared"), s);
  m.init_random(c.seed);
  std::vector<int32_t> p;
  for (int i = 0; i < c.batch * c.context_length; ++i)
    p.push_back(int32_t(splitmix64(7 + uint64_t(i)) % uint64_t(c.vocab_size)));
  std::vector<StepOutput> out{m.prefill(p, c.context_length)};
  for (int i = 0; i < steps; ++i) out.push_back(m.decode_step());
  return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

TEST(CheckBackend, CpuAgainstCpuIsExactEverywhere) {
  const ModelConfig c = tiny_c4();
  auto ref = make_cpu_backend(), dut = make_cpu_backend(), plain = make_cpu_backend();
  auto check = make_check_backend(*ref, *dut);
  EXPECT_EQ(check->act_dtype(), DType::F32);
  const auto got = run_tiny(*check, c, 2);
  const auto want = run_tiny(*plain, c, 2);
  // The wrapper changes nothing in what the dut computes.
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].last_logits, want[i].last_logits) << "step " << i;
    EXPECT_EQ(got[i].drafts, want[i].drafts) << "step " << i;
  }

  const auto& recs = check_records(*check);
  const CheckSummary s = summarize_checks(recs);
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.selection_diffs, 0);
  EXPECT_EQ(s.worst_rel_err, 0.0);
  std::set<std::string> ops, tops;
  for (const CheckRecord& r : recs) {
    EXPECT_EQ(r.rel_err, 0.0) << r.describe();
    EXPECT_EQ(r.max_abs, 0.0) << r.describe();
    EXPECT_EQ(r.mismatches, 0) << r.describe();
    ops.insert(r.op);
    tops.insert(r.path.substr(0, r.path.find('/')));
  }
  // Every op the model uses was compared, in every phase.
  for (const char* op : {"init_uniform",
                         "gemm",
                         "gemm_grouped",
                         "rmsnorm",
                         "rope",
                         "embed",
                         "argmax",
                         "gather_rows",
                         "shift_tokens",
                         "hc_pre_norm",
                         "rmsnorm_pair",
                         "rmsnorm_rope",
                         "gemm_pair",
                         "gemm_swiglu",
                         "hc_post_pre_norm",
                         "add_hc_post",
                         "hc_head",
                         "hc_expand",
                         "mtp_combine",
                         "swa_insert",
                         "compressor_save",
                         "compressor_pool",
                         "indexer_topk",
                         "sparse_attention",
                         "route",
                         "moe_experts",
                         "copy"})
    EXPECT_TRUE(ops.count(op)) << op << " was never checked";
  EXPECT_TRUE(tops.count("prefill#1") && tops.count("decode#1") && tops.count("decode#2"));
  // A draft-step path as the report shows it.
  EXPECT_TRUE(std::any_of(recs.begin(), recs.end(), [](const CheckRecord& r) {
    return r.path == "decode#2/draft2/mtp0.c4a/attn/sparse_attention" && r.op == "sparse_attention";
  }));
}

// The verifying decode step (docs/speculative.md) through the checker: its own ops (input
// tokens, acceptance, cache rollback) are compared like every other, exactly, in the step's
// phases, and the wrapper changes nothing in the accepted counts.
TEST(CheckBackend, CpuAgainstCpuVerifyingStepIsExact) {
  const ModelConfig c = tiny_c4(2);
  auto run = [&](Backend& be) {
    RunShape s;
    s.batch = c.batch;
    s.verify = true;
    s.max_positions = c.context_length + 4 * (1 + c.draft_steps);
    s.max_seq_tokens = c.context_length;
    DeepSeekV4 m(be, c, StreamPolicy::parse("shared"), s);
    m.init_random(c.seed);
    m.set_accept_rule(parse_accept_rule("rate:0.5:2"));
    std::vector<int32_t> p;
    for (int i = 0; i < c.batch * c.context_length; ++i)
      p.push_back(int32_t(splitmix64(7 + uint64_t(i)) % uint64_t(c.vocab_size)));
    std::vector<StepOutput> out{m.prefill(p, c.context_length)};
    for (int i = 0; i < 2; ++i) out.push_back(m.decode_step());
    return out;
  };
  auto ref = make_cpu_backend(), dut = make_cpu_backend(), plain = make_cpu_backend();
  auto check = make_check_backend(*ref, *dut);
  const auto got = run(*check), want = run(*plain);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].accepted, want[i].accepted) << "step " << i;
    EXPECT_EQ(got[i].last_logits, want[i].last_logits) << "step " << i;
    EXPECT_EQ(got[i].drafts, want[i].drafts) << "step " << i;
  }
  const auto& recs = check_records(*check);
  EXPECT_EQ(summarize_checks(recs).failures, 0);
  std::map<std::string, int> seen;
  for (const CheckRecord& r : recs) {
    EXPECT_EQ(r.mismatches, 0) << r.describe();
    EXPECT_EQ(r.rel_err, 0.0) << r.describe();
    if (starts_with(r.path, "decode#2/")) ++seen[r.op + "." + r.output];
  }
  EXPECT_EQ(seen["verify_tokens.out"], 1);
  for (const char* out : {"accepted", "bonus", "new_len", "mtp_tokens", "last_rows", "draft_pos"})
    EXPECT_EQ(seen[std::string("accept_drafts.") + out], 1) << out;
  // Target: 6 window rings, 4 compressors, 2 indexers; then the c4a MTP layer's three.
  EXPECT_EQ(seen["cache_rollback.tags"], 12 + 3);
  EXPECT_EQ(seen["cache_rollback.entries"], 6 + 2);
  EXPECT_TRUE(std::any_of(recs.begin(), recs.end(), [](const CheckRecord& r) {
    return r.path == "decode#1/rollback/mtp0/rollback.indexer" && r.op == "cache_rollback";
  }));
}

// Rows of two sequences swapped in every decode sparse attention with T > 1: the first failure
// is the first such call, and every failure is a sparse_attention (nothing spreads).
TEST(CheckBackend, FindsSwappedAttentionRows) {
  const ModelConfig c = tiny_c4();
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  std::string first_fault;
  int faults = 0;
  dut.hook = [&](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    const Tensor& o = outs[0];
    if (op != "sparse_attention" || !starts_with(path, "decode#") || o.dim(0) < 2) return;
    const int64_t row = o.numel() / o.dim(0);
    std::swap_ranges(o.ptr<float>(), o.ptr<float>() + row, o.ptr<float>() + row);
    if (faults++ == 0) first_fault = path;
  };
  auto check = make_check_backend(*ref, dut);
  run_tiny(*check, c, 2);
  const auto& recs = check_records(*check);
  const CheckSummary s = summarize_checks(recs);
  ASSERT_NE(s.first_failure, nullptr);
  EXPECT_EQ(s.first_failure->op, "sparse_attention");
  EXPECT_EQ(s.first_failure->output, "o");
  EXPECT_EQ(s.first_failure->path, first_fault);
  EXPECT_EQ(first_fault, "decode#1/target/L0.sliding/attn/sparse_attention");
  EXPECT_GT(s.first_failure->rel_err, 0.1);
  EXPECT_EQ(s.failures, faults);
  print_check_report(stdout, recs, 2e-2, 5, 5);  // what a user sees
  for (const CheckRecord& r : recs) {
    if (r.failed) {
      EXPECT_EQ(r.op, "sparse_attention") << r.describe();
    }
  }
}

// 10% error on one gemm call deep in the drafts: exactly that call fails, with rel err 0.1.
TEST(CheckBackend, FindsOneNoisyGemm) {
  const ModelConfig c = tiny_c4();
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  std::string fault;
  int gemms = 0;
  dut.hook = [&](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    if (op != "gemm" || !starts_with(path, "decode#2/draft1/") || ++gemms != 5) return;
    float* p = outs[0].ptr<float>();
    for (int64_t i = 0; i < outs[0].numel(); ++i) p[i] *= (i % 2) ? 1.1f : 0.9f;
    fault = path;
  };
  auto check = make_check_backend(*ref, dut);
  run_tiny(*check, c, 2);
  ASSERT_FALSE(fault.empty());
  const auto& recs = check_records(*check);
  const CheckSummary s = summarize_checks(recs);
  ASSERT_NE(s.first_failure, nullptr);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.first_failure->op, "gemm");
  EXPECT_EQ(s.first_failure->output, "out");
  EXPECT_EQ(s.first_failure->path, fault);
  EXPECT_NEAR(s.first_failure->rel_err, 0.1, 1e-6);
  EXPECT_EQ(s.worst, s.first_failure);
}

// A write one element past the output view is caught as a write outside the output, at that op.
TEST(CheckBackend, FindsWriteOutsideTheOutput) {
  const ModelConfig c = tiny_c4(1);
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  std::string fault;
  dut.hook = [&](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    // The first fused hc_pre + RMSNorm of the step; its results are y, post, comb, out.
    if (op != "hc_pre_norm" || !starts_with(path, "decode#1/") || !fault.empty()) return;
    outs[3].ptr<float>()[outs[3].numel()] += 1.f;  // decode views are row prefixes of prefill-sized buffers
    fault = path;
  };
  auto check = make_check_backend(*ref, dut);
  run_tiny(*check, c, 1);
  const CheckSummary s = summarize_checks(check_records(*check));
  ASSERT_NE(s.first_failure, nullptr);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.outside_view, 1);
  EXPECT_EQ(s.first_failure->kind, CheckRecord::Kind::OutsideView);
  EXPECT_EQ(s.first_failure->op, "hc_pre_norm");
  EXPECT_TRUE(starts_with(s.first_failure->output, "out (outside the view")) << s.first_failure->output;
  EXPECT_EQ(s.first_failure->path, fault);
  EXPECT_EQ(s.first_failure->mismatches, 1);
  EXPECT_EQ(s.worst_rel_err, 0.0);  // the view itself was right
}

// The first decode step's first indexer top-k: row 0's last chosen entry is replaced by an entry
// it did not choose. Records the range path in *fault (once).
FaultyCpu::Hook flip_one_selection(std::string* fault) {
  return [fault](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    if (op != "indexer_topk" || !starts_with(path, "decode#1/") || !fault->empty()) return;
    int32_t* sel = outs[0].ptr<int32_t>();
    const int64_t K = outs[0].dim(1);
    std::set<int32_t> have(sel, sel + K);
    int32_t missing = 0;
    while (have.count(missing)) ++missing;
    int64_t last = K - 1;
    while (last > 0 && sel[last] < 0) --last;
    ASSERT_GE(sel[last], 0) << "row 0 selected nothing";
    sel[last] = missing;
    *fault = path;
  };
}

// A different top-k choice is a selection difference, not a failure, and the sparse attention
// that reads it still sees identical inputs on both sides.
TEST(CheckBackend, SelectionDifferencesAreReportedApart) {
  const ModelConfig c = tiny_c4(1);
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  std::string fault;
  dut.hook = flip_one_selection(&fault);
  auto check = make_check_backend(*ref, dut);
  run_tiny(*check, c, 1);
  ASSERT_FALSE(fault.empty());
  const auto& recs = check_records(*check);
  const CheckSummary s = summarize_checks(recs);
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.selection_diffs, 1);
  const auto it = std::find_if(recs.begin(), recs.end(), [](const CheckRecord& r) { return r.mismatches > 0; });
  ASSERT_NE(it, recs.end());
  EXPECT_EQ(it->kind, CheckRecord::Kind::Selection);
  EXPECT_EQ(it->op, "indexer_topk");
  EXPECT_EQ(it->path, fault);
  EXPECT_EQ(it->mismatches, 1);
}

// Sync::DecisionsToDut: a dut that picks another indexer entry is put back on the ref's choice,
// so (CPU vs CPU, identical arithmetic otherwise) its logits equal a plain run's exactly; a
// float fault is not copied back and shows in the logits. With the default sync, the changed
// choice itself stays in the dut (resync goes dut -> ref) and changes its logits.
TEST(CheckBackend, DecisionsToDutPinsTheRefsChoicesOnly) {
  const ModelConfig c = tiny_c4(1);
  auto plain = make_cpu_backend();
  const auto want = run_tiny(*plain, c, 2);
  for (auto sync : {CheckOptions::Sync::DecisionsToDut, CheckOptions::Sync::DutToRef}) {
    auto ref = make_cpu_backend();
    FaultyCpu dut;
    std::string fault;
    dut.hook = flip_one_selection(&fault);
    CheckOptions o;
    o.sync = sync;
    auto check = make_check_backend(*ref, dut, o);
    const auto got = run_tiny(*check, c, 2);
    ASSERT_FALSE(fault.empty());
    EXPECT_EQ(summarize_checks(check_records(*check)).selection_diffs, 1);
    bool all_equal = true;
    for (size_t i = 0; i < got.size(); ++i) all_equal = all_equal && got[i].last_logits == want[i].last_logits;
    if (sync == CheckOptions::Sync::DecisionsToDut)
      EXPECT_TRUE(all_equal) << "the ref's selection was not pinned into the dut";
    else
      EXPECT_FALSE(all_equal) << "the dut's own selection should have changed its logits";
  }
  // A float fault in DecisionsToDut mode stays in the dut: its logits differ from the plain run.
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  dut.hook = [](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    if (op == "gemm" && starts_with(path, "decode#1/") && outs[0].dtype == DType::F32) outs[0].ptr<float>()[0] += 1.f;
  };
  CheckOptions o;
  o.sync = CheckOptions::Sync::DecisionsToDut;
  auto check = make_check_backend(*ref, dut, o);
  const auto got = run_tiny(*check, c, 2);
  EXPECT_NE(got[1].last_logits, want[1].last_logits);
}

// Routing: the same experts in another order are no difference at all (the weights are
// compared expert by expert); another expert is a selection difference whose row is left out
// of the weights' comparison. Hash-routed layers (ids from tid2eid) are exact.
TEST(CheckBackend, RouteWeightsFollowTheirExperts) {
  const ModelConfig c = tiny_c4(1);
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  std::string swapped, replaced, hashed;
  dut.hook = [&](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    if (op != "route" || !starts_with(path, "decode#1/target/")) return;
    int32_t* ids = outs[0].ptr<int32_t>();
    float* w = outs[1].ptr<float>();
    const int64_t k = outs[0].dim(1);
    if (starts_with(path, "decode#1/target/L3.")) {  // score routing: swap slots 0 and 1 of row 0
      std::swap(ids[0], ids[1]);
      std::swap(w[0], w[1]);
      swapped = path;
    } else if (starts_with(path, "decode#1/target/L4.")) {  // score routing: another expert in row 1
      std::set<int32_t> have(ids + k, ids + 2 * k);
      int32_t e = 0;
      while (have.count(e)) ++e;
      ids[k] = e;
      replaced = path;
    } else if (starts_with(path, "decode#1/target/L0.")) {  // hash routing: any change is a bug
      std::swap(ids[0], ids[1]);
      hashed = path;
    }
  };
  auto check = make_check_backend(*ref, dut);
  run_tiny(*check, c, 1);
  ASSERT_FALSE(swapped.empty() || replaced.empty() || hashed.empty());
  const auto& recs = check_records(*check);
  const CheckSummary s = summarize_checks(recs);
  EXPECT_EQ(s.selection_diffs, 1);
  ASSERT_NE(s.first_failure, nullptr);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.first_failure->path, hashed);
  EXPECT_EQ(s.first_failure->output, "ids");
  EXPECT_EQ(s.first_failure->kind, CheckRecord::Kind::Int);
  for (const CheckRecord& r : recs) {
    if (r.path == replaced && r.output == "ids") {
      EXPECT_EQ(r.kind, CheckRecord::Kind::Selection);
      EXPECT_EQ(r.mismatches, 1);
    }
    if (r.path == replaced && r.output == "weights") {
      EXPECT_EQ(r.note, "1 rows left out: their ids differ");
    }
    if (r.path == swapped) {
      EXPECT_EQ(r.mismatches, 0) << r.describe();
    }
  }
}

TEST(CheckBackend, StopsAtFirstFailureWithItsPath) {
  const ModelConfig c = tiny_c4(1);
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  dut.hook = [&](const std::string& op, const std::string& path, const std::vector<Tensor>& outs) {
    // outs[0]: X_out, hc_post's result (the later parts of the op read it uncorrupted).
    if (op == "hc_post_pre_norm" && starts_with(path, "decode#1/target/L2.")) outs[0].ptr<float>()[0] += 100.f;
  };
  CheckOptions opt;
  opt.stop_at_first_failure = true;
  auto check = make_check_backend(*ref, dut, opt);
  try {
    run_tiny(*check, c, 1);
    FAIL() << "no failure reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("decode#1/target/L2.c4a/ffn/hc_post.attn+hc_pre.ffn hc_post_pre_norm.X_out"),
              std::string::npos)
        << what;
  }
  const auto& recs = check_records(*check);
  ASSERT_FALSE(recs.empty());
  // The failing op's results are all recorded, X_out failed, and nothing after that op.
  const auto bad = std::find_if(recs.begin(), recs.end(), [](const CheckRecord& r) { return r.failed; });
  ASSERT_NE(bad, recs.end());
  EXPECT_TRUE(ends_with(bad->path, "/hc_post.attn+hc_pre.ffn"));
  EXPECT_EQ(bad->output, "X_out");
  for (auto r = bad; r != recs.end(); ++r) {
    EXPECT_EQ(r->path, bad->path);
    EXPECT_EQ(r->failed, r == bad) << r->describe();
  }
}

// A bf16 dut against the f32 reference, as with CUDA: views translate by elements on both
// sides (2-byte vs 4-byte), uploads convert, initialisation leaves both sides with the dut's
// bf16 values, and downloads answer from the dut.
TEST(CheckBackend, TranslatesViewsAcrossDtypes) {
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  dut.bf16 = true;
  auto check = make_check_backend(*ref, dut);
  EXPECT_EQ(check->act_dtype(), DType::BF16);
  const Tensor a = check->alloc("a", DType::BF16, {4, 3}, AllocKind::Activation);
  const Tensor b = check->alloc("b", DType::BF16, {4, 3}, AllocKind::Weight);
  EXPECT_EQ(a.dtype, DType::BF16);
  EXPECT_EQ(check->buffer_name(b.buffer), "b");
  std::vector<uint16_t> host;
  for (float v : {1.5f, -2.25f, 3.f, 0.375f, -7.f, 96.f}) host.push_back(float_to_bf16(v));
  check->upload(Stream{}, a.rows(1, 3), host.data(), host.size() * 2);
  check->init_uniform(Stream{}, b.rows(2, 4), 1, 2, 0.7f, 0.1f);
  // a[0:2] = b[2:4]: the ref copies its resynced (bf16-exact) b, so the copy is exact, and
  // a[2] (uploaded) must match outside the view.
  check->copy(Stream{}, a.rows(0, 2), b.rows(2, 4));
  const auto& recs = check_records(*check);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].op, "init_uniform");
  EXPECT_EQ(recs[0].ref_dtype, DType::F32);
  EXPECT_EQ(recs[0].dut_dtype, DType::BF16);
  EXPECT_GT(recs[0].rel_err, 0.0);  // the bf16 rounding of the dut
  EXPECT_LT(recs[0].rel_err, 1e-2);
  EXPECT_EQ(recs[1].op, "copy");
  EXPECT_EQ(recs[1].rel_err, 0.0) << recs[1].describe();
  EXPECT_EQ(summarize_checks(recs).failures, 0);
  std::vector<uint16_t> got(6), want(6);
  check->download(got.data(), a.rows(0, 2), 12);
  check->download(want.data(), b.rows(2, 4), 12);
  EXPECT_EQ(got, want);
  check->download(got.data(), a.rows(1, 3), 12);
  EXPECT_EQ(std::vector<uint16_t>(got.begin() + 3, got.end()), std::vector<uint16_t>(host.begin() + 3, host.end()));
}

// The ops on the checkpoint's formats are checked like every other (the checker is generated from
// the op table): gemm_fp8's result compared, a planted error found at that op; the MXFP4 experts'
// result compared exactly, their workspace (scratch) not.
TEST(CheckBackend, ChecksTheNativeWeightOps) {
  auto ref = make_cpu_backend();
  FaultyCpu dut;
  dut.hook = [](const std::string& op, const std::string&, const std::vector<Tensor>& outs) {
    if (op == "gemm_fp8") outs[0].ptr<float>()[3] += 1000.f;  // far over the tolerance
  };
  auto check = make_check_backend(*ref, dut);
  std::mt19937 rng(9);
  auto u8 = [&](const char* name, Shape shape, int lo, int hi) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<uint8_t> v(size_t(shape.numel()));
    for (auto& x : v) x = uint8_t(d(rng));
    const Tensor t = check->alloc(name, DType::U8, shape, AllocKind::Weight);
    check->upload(Stream{}, t, v.data(), v.size());
    return t;
  };
  auto f32 = [&](const char* name, Shape shape, float scale, float offset) {
    const Tensor t = check->alloc(name, DType::F32, shape, AllocKind::Activation);
    check->init_uniform(Stream{}, t, 7, uint64_t(shape.numel()), scale, offset);
    return t;
  };
  // gemm_fp8: out[2, 256] = a[2, 384] . W^T, W e4m3 codes (0..126: no NaN) with 2 x 3 block scales.
  const Tensor w = u8("w", {256, 384}, 0, 126), ws = f32("w_scale", {2, 3}, 0.001f, 0.002f);
  const Tensor a = f32("a", {2, 384}, 1.f, 0.f), out = check->alloc("out", DType::F32, {2, 256}, AllocKind::Activation);
  check->gemm_fp8(Stream{}, out, a, w, ws, 1);
  // moe_experts_mxfp4: 3 tokens, 2 of 4 experts each, D = 64, F = 32.
  const int64_t T = 3, k = 2, E = 4, D = 64, F = 32;
  const Tensor x = f32("x", {T, D}, 1.f, 0.f), wts = f32("wts", {T, k}, 0.3f, 0.5f);
  const Tensor ids = check->alloc("ids", DType::I32, {T, k}, AllocKind::Activation);
  const std::vector<int32_t> idv = {0, 1, 2, 3, 1, 2};
  check->upload(Stream{}, ids, idv.data(), idv.size() * 4);
  const Tensor w1 = u8("w1", {E, F, D / 2}, 0, 255), w1s = u8("w1s", {E, F, D / 32}, 120, 126);
  const Tensor w3 = u8("w3", {E, F, D / 2}, 0, 255), w3s = u8("w3s", {E, F, D / 32}, 120, 126);
  const Tensor w2 = u8("w2", {E, D, F / 2}, 0, 255), w2s = u8("w2s", {E, D, F / 32}, 120, 126);
  const Tensor work = check->alloc("ws", DType::U8, {int64_t(check->moe_workspace_bytes(T, int(k), int(D), int(F), int(E)))},
                                   AllocKind::Workspace);
  const Tensor mo = check->alloc("mo", DType::F32, {T, D}, AllocKind::Activation);
  check->moe_experts_mxfp4(Stream{}, mo, x, ids, wts, w1, w1s, w2, w2s, w3, w3s, 10.f, false, work);

  std::vector<const CheckRecord*> fp8, moe;
  for (const CheckRecord& r : check_records(*check)) {
    if (r.op == "gemm_fp8") fp8.push_back(&r);
    if (r.op == "moe_experts_mxfp4") moe.push_back(&r);
  }
  ASSERT_EQ(fp8.size(), 1u);
  EXPECT_EQ(fp8[0]->output, "out");
  EXPECT_TRUE(fp8[0]->failed) << fp8[0]->describe();
  EXPECT_EQ(fp8[0]->max_abs_index, 3);
  ASSERT_EQ(moe.size(), 1u);  // out only: the workspace is scratch
  EXPECT_EQ(moe[0]->output, "out");
  EXPECT_FALSE(moe[0]->failed);
  EXPECT_EQ(moe[0]->rel_err, 0.0) << moe[0]->describe();
}

// ---------------------------------------------------------------- packed FP8 caches

// The whole tiny model with packed FP8 caches, CPU against CPU, plain decode steps and verifying
// ones (cache_rollback): every record exact; the packed caches swa_insert and compressor_pool
// write, and the ones cache_rollback rolls back, are compared by decoded value (Float records).
TEST(CheckBackend, PackedCachesCpuAgainstCpuAreExact) {
  for (const bool verify : {false, true}) {
    SCOPED_TRACE(verify ? "verifying steps" : "decode steps");
    const ModelConfig c = tiny_c4(verify ? 2 : 1);
    auto ref = make_cpu_backend(), dut = make_cpu_backend();
    auto check = make_check_backend(*ref, *dut);
    ASSERT_TRUE(check->packed_kv_caches());
    if (verify) {
      RunShape s;
      s.batch = c.batch;
      s.verify = true;
      s.kv_fp8 = true;
      s.max_positions = c.context_length + 4 * (1 + c.draft_steps);
      s.max_seq_tokens = c.context_length;
      DeepSeekV4 m(*check, c, StreamPolicy::parse("shared"), s);
      ASSERT_TRUE(m.kv_packed());
      m.init_random(c.seed);
      m.set_accept_rule(parse_accept_rule("rate:0.5:2"));
      std::vector<int32_t> p;
      for (int i = 0; i < c.batch * c.context_length; ++i)
        p.push_back(int32_t(splitmix64(7 + uint64_t(i)) % uint64_t(c.vocab_size)));
      m.prefill(p, c.context_length);
      for (int i = 0; i < 2; ++i) m.decode_step();
    } else {
      run_tiny(*check, c, 1, /*kv_fp8=*/true);
    }
    const auto& recs = check_records(*check);
    EXPECT_EQ(summarize_checks(recs).failures, 0);
    std::map<std::string, int> packed;  // op: packed cache records
    for (const CheckRecord& r : recs) {
      EXPECT_EQ(r.rel_err, 0.0) << r.describe();
      EXPECT_EQ(r.max_abs, 0.0) << r.describe();
      EXPECT_EQ(r.mismatches, 0) << r.describe();
      if (r.dut_dtype != DType::U8 || r.kind == CheckRecord::Kind::OutsideView) continue;
      if (r.op == "compressor_pool" || r.op == "swa_insert" || r.op == "cache_rollback") {
        EXPECT_EQ(r.kind, CheckRecord::Kind::Float) << r.describe();
        EXPECT_NE(r.note.find("compared by decoded value"), std::string::npos) << r.describe();
        ++packed[r.op];
      }
    }
    EXPECT_GT(packed["compressor_pool"], 0);
    EXPECT_GT(packed["swa_insert"], 0);
    // Target: 4 compressors, 2 indexers, then the c4a MTP layer's two, per verifying step.
    if (verify) {
      EXPECT_EQ(packed["cache_rollback"], 2 * (6 + 2));
    }
  }
}

// The values of packed entries decoded by hand from core/fp8.h and core/bf16.h (not through
// model/kv_fp8_entry.h, which the checker uses): nope > 0 KV entries, 0 indexer keys.
std::vector<double> decode_by_hand(const std::vector<uint8_t>& bytes, int64_t d, int64_t nope, int64_t width) {
  std::vector<double> v;
  for (size_t e0 = 0; e0 < bytes.size(); e0 += size_t(width)) {
    const uint8_t* e = bytes.data() + e0;
    for (int64_t i = 0; i < d; ++i) {
      if (nope == 0) {
        float s;
        std::memcpy(&s, e + d, 4);
        v.push_back(double(lowp::e4m3_to_float(e[i])) * s);
      } else if (i < nope) {
        const int64_t scale_byte = nope + 2 * (d - nope) + i / 64;
        v.push_back(double(lowp::e4m3_to_float(e[i])) * lowp::e8m0_to_float(e[scale_byte]));
      } else {
        const uint8_t* r = e + nope + 2 * (i - nope);
        v.push_back(bf16_to_float(uint16_t(r[0] | r[1] << 8)));
      }
    }
  }
  return v;
}

// sqrt(sum (b - a)^2 / sum a^2): the checker's relative error, by hand.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (b[i] - a[i]) * (b[i] - a[i]), den += a[i] * a[i];
  return std::sqrt(num / den);
}

// compressor_pool on packed entries through the checker, the dut a CPU backend whose result is
// disturbed by `perturb` (after the hook saved what it computed: the ref's bytes, CPU on both
// sides). B = 1, ratio 4 without overlap, a ring of 8 slots holding positions 0..7: tokens at pos
// 3 and 7 pool entries 0 and 1 of 3 (entry 2 stays unwritten). d = 72 makes KV entries (64 e4m3
// + 8 bf16 + a scale byte: 88 bytes), d = 64 indexer keys (64 e4m3 + an fp32 scale: 68 bytes).
struct PackedPool {
  std::function<void(uint8_t* entries)> perturb;
  std::vector<uint8_t> pristine;  // the dut's bytes before perturb: the ref's
  int64_t d, nope, width;
  std::unique_ptr<Backend> ref = make_cpu_backend();
  FaultyCpu dut;
  std::unique_ptr<Backend> check;
  Tensor entries, su, sg, tags, norm_w, table;
  uint64_t key = 0;  // init_uniform's, one per tensor

  PackedPool(int64_t d_, bool kv, CheckOptions o = {})
      : d(d_), nope(kv ? kvfp8::kv_entry_nope(d_, kvfp8::kv_entry_bytes(64, d_ - 64)) : 0),
        width(kv ? kvfp8::kv_entry_bytes(64, d_ - 64) : kvfp8::indexer_key_bytes(d_)) {
    dut.hook = [this](const std::string& op, const std::string&, const std::vector<Tensor>& outs) {
      if (op != "compressor_pool") return;
      uint8_t* e = outs[0].ptr<uint8_t>();
      pristine.assign(e, e + outs[0].numel());
      if (perturb) perturb(e);
    };
    check = make_check_backend(*ref, dut, o);
    entries = check->alloc("entries", DType::U8, {1, 3, width}, AllocKind::Cache);
    check->upload(Stream{}, entries, std::vector<uint8_t>(size_t(3 * width), 0).data(), size_t(3 * width));
    su = f32("state_u", {1, 8, d}, 1.f, 0.f);
    sg = f32("state_g", {1, 8, d}, 1.f, 0.f);
    norm_w = f32("norm_w", {d}, 0.2f, 1.f);
    table = f32("table", {16, 8}, 3.f, 0.f);
    tags = i32("tags", {0, 1, 2, 3, 4, 5, 6, 7});
  }
  Tensor f32(const char* name, Shape shape, float scale, float offset) {
    const Tensor t = check->alloc(name, DType::F32, shape, AllocKind::Activation);
    check->init_uniform(Stream{}, t, 5, ++key, scale, offset);
    return t;
  }
  Tensor i32(const char* name, const std::vector<int32_t>& v) {
    const Tensor t = check->alloc(name, DType::I32, {int64_t(v.size())}, AllocKind::Activation);
    check->upload(Stream{}, t, v.data(), v.size() * 4);
    return t;
  }
  // One call; its entries record.
  const CheckRecord& pool(const std::vector<int32_t>& pos) {
    const Tensor p = i32("pos", pos), s = i32("seq", std::vector<int32_t>(pos.size(), 0));
    check->compressor_pool(Stream{}, entries, su, sg, tags.view({1, 8}), norm_w, table, p, s, 4, false, 1e-6f);
    const auto& recs = check_records(*check);
    EXPECT_FALSE(recs.empty());
    for (auto it = recs.rbegin(); it != recs.rend(); ++it)
      if (it->op == "compressor_pool" && it->output == "entries") return *it;
    ADD_FAILURE() << "no compressor_pool record";
    return recs.back();
  }
  std::vector<uint8_t> dut_bytes() {
    std::vector<uint8_t> b(size_t(3 * width));
    check->download(b.data(), entries, b.size());
    return b;
  }
};

// The first code of entry `entry` (1 unless told) that one step up (+1 on the code:
// sign-magnitude) keeps finite and nonzero: its byte in the view.
int64_t steppable_code(const uint8_t* entries, int64_t width, int64_t codes, int64_t entry = 1) {
  for (int64_t i = 0; i < codes; ++i) {
    const int mag = entries[entry * width + i] & 0x7f;
    if (mag >= 1 && mag <= 0x7d) return entry * width + i;
  }
  return -1;
}

// How far one step up of the code at byte `at` of a KV entry (nope e4m3 values, one scale byte
// per 64 after the bf16 rope values) moves its value, by hand.
double kv_code_step(const std::vector<uint8_t>& bytes, int64_t at, int64_t d, int64_t nope, int64_t width) {
  const int64_t entry = at / width, i = at % width;
  const double scale = lowp::e8m0_to_float(bytes[size_t(entry * width + nope + 2 * (d - nope) + i / 64)]);
  const uint8_t q = bytes[size_t(at)];
  return std::fabs(double(lowp::e4m3_to_float(uint8_t(q + 1)) - lowp::e4m3_to_float(q))) * scale;
}

// The last record of op.output.
const CheckRecord* last_record(const Backend& check, const std::string& op, const std::string& output) {
  const auto& recs = check_records(check);
  for (auto it = recs.rbegin(); it != recs.rend(); ++it)
    if (it->op == op && it->output == output) return &*it;
  return nullptr;
}

// A dut whose pooled entry lands one e4m3 step away in one code (what its own bf16 arithmetic may
// do before quantising) passes: a small relative error over the decoded values, exactly the one
// computed by hand, at that code's byte, and no int mismatch although the bytes differ. The ref
// then holds the dut's bytes: a second call (entry 2) finds both sides equal everywhere.
void expect_one_step_passes(int64_t d, bool kv) {
  SCOPED_TRACE(kv ? "KV entries" : "indexer keys");
  PackedPool p(d, kv);
  int64_t at = -1;
  p.perturb = [&](uint8_t* e) {
    at = steppable_code(e, p.width, kv ? p.nope : d);
    if (at >= 0) e[at] += 1;
  };
  const CheckRecord r = p.pool({3, 7});
  ASSERT_GE(at, 0) << "entry 1 has no code to step";
  const std::vector<uint8_t> got = p.dut_bytes();
  std::vector<uint8_t> want = p.pristine;
  want[size_t(at)] += 1;
  ASSERT_EQ(got, want);  // the dut kept its bytes; they differ from the ref's in one byte
  const std::vector<double> a = decode_by_hand(p.pristine, d, p.nope, p.width),
                            b = decode_by_hand(got, d, p.nope, p.width);
  const double scale = kv ? lowp::e8m0_to_float(p.pristine[size_t(p.width + p.nope + 2 * (d - p.nope))])
                          : [&] {
                              float s;
                              std::memcpy(&s, p.pristine.data() + p.width + d, 4);
                              return double(s);
                            }();
  const uint8_t q = p.pristine[size_t(at)];
  const double step = std::fabs(double(lowp::e4m3_to_float(uint8_t(q + 1)) - lowp::e4m3_to_float(q))) * scale;
  EXPECT_EQ(r.kind, CheckRecord::Kind::Float) << r.describe();
  EXPECT_FALSE(r.failed) << r.describe();
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.dut_dtype, DType::U8);
  EXPECT_EQ(r.shape, (Shape{1, 3, p.width}));
  EXPECT_NE(r.note.find(kv ? "packed FP8 KV entries of 72 values (64 e4m3, 8 bf16) compared by decoded value"
                           : "packed FP8 indexer keys of 64 e4m3 values compared by decoded value"),
            std::string::npos)
      << r.note;
  EXPECT_GT(r.rel_err, 0.0);
  EXPECT_NEAR(r.rel_err, rel_err(a, b), 1e-12 * rel_err(a, b)) << r.describe();
  EXPECT_LT(r.rel_err, 1e-2) << r.describe();  // one step (at most 1/8 of the value) in one of 128+ values
  EXPECT_DOUBLE_EQ(r.max_abs, step) << r.describe();
  EXPECT_EQ(r.max_abs_index, at) << r.describe();  // the stepped code's byte
  const CheckSummary s = summarize_checks(check_records(*p.check));
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.int_failures, 0);
  EXPECT_EQ(s.outside_view, 0);

  // Resync: the ref now holds the stepped byte, so entry 1 agrees exactly on the next call.
  p.perturb = nullptr;
  p.check->upload(Stream{}, p.tags, std::vector<int32_t>{8, 9, 10, 11, 4, 5, 6, 7}.data(), 32);
  const CheckRecord r2 = p.pool({11});
  EXPECT_EQ(r2.rel_err, 0.0) << r2.describe();
  EXPECT_EQ(r2.max_abs, 0.0) << r2.describe();
  EXPECT_FALSE(r2.failed);
  EXPECT_EQ(p.dut_bytes()[size_t(at)], uint8_t(q + 1));
  const std::vector<uint8_t> after = p.dut_bytes();
  EXPECT_TRUE(std::any_of(after.begin() + 2 * p.width, after.end(), [](uint8_t x) { return x != 0; }))
      << "entry 2 was not pooled";
}

TEST(CheckBackend, PackedPoolOneRoundingStepPasses) {
  expect_one_step_passes(72, /*kv=*/true);
  expect_one_step_passes(64, /*kv=*/false);
}

// The bound is one e4m3 step per value, not the float tolerance: a dut whose every e4m3 value of
// entry 1 is one step up (each side quantizes its own floats; near rounding boundaries many may
// land so) passes although the relative error is past the tolerance, and one value two steps up
// (within its binade: codes of mantissa <= 5, normal) fails, named in the note.
TEST(CheckBackend, PackedPoolIsHeldToOneE4m3Step) {
  for (bool kv : {true, false}) {
    SCOPED_TRACE(kv ? "KV entries" : "indexer keys");
    const int64_t d = kv ? 72 : 64, codes = kv ? 64 : 64;
    {
      PackedPool p(d, kv);
      p.perturb = [&](uint8_t* e) {
        for (int64_t i = 0; i < codes; ++i) {
          const int mag = e[p.width + i] & 0x7f;
          if (mag >= 1 && mag <= 0x7d) e[p.width + i] += 1;
        }
      };
      const CheckRecord r = p.pool({3, 7});
      const std::vector<double> a = decode_by_hand(p.pristine, d, p.nope, p.width),
                                b = decode_by_hand(p.dut_bytes(), d, p.nope, p.width);
      EXPECT_NEAR(r.rel_err, rel_err(a, b), 1e-12 * rel_err(a, b)) << r.describe();
      EXPECT_GT(r.rel_err, 2e-2) << "every value a step up should be past the default tolerance";
      EXPECT_FALSE(r.failed) << r.describe();
    }
    {
      PackedPool p(d, kv);
      int64_t at = -1;
      p.perturb = [&](uint8_t* e) {
        for (int64_t i = 0; i < codes && at < 0; ++i) {
          const uint8_t q = e[p.width + i];
          if (((q >> 3) & 0xf) >= 1 && (q & 7) <= 5) at = p.width + i;
        }
        if (at >= 0) e[at] += 2;
      };
      const CheckRecord r = p.pool({3, 7});
      ASSERT_GE(at, 0) << "entry 1 has no normal code of mantissa <= 5";
      EXPECT_TRUE(r.failed) << r.describe();
      EXPECT_NE(r.note.find("1 of " + std::to_string(3 * d) + " values more than one e4m3 step"), std::string::npos)
          << r.note;
      EXPECT_EQ(r.max_abs_index, at) << r.describe();
    }
  }
}

// A gross corruption fails: entry 1's scale 32x (KV: its scale byte + 5; indexer key: the fp32
// scale times 32), i.e. every value of the block 32x, at the relative error computed by hand.
TEST(CheckBackend, PackedPoolWrongScaleFails) {
  for (bool kv : {true, false}) {
    SCOPED_TRACE(kv ? "KV entries" : "indexer keys");
    const int64_t d = kv ? 72 : 64;
    PackedPool p(d, kv);
    p.perturb = [&](uint8_t* e) {
      uint8_t* entry1 = e + p.width;
      if (kv) {
        entry1[p.nope + 2 * (d - p.nope)] += 5;
      } else {
        float s;
        std::memcpy(&s, entry1 + d, 4);
        s *= 32.f;
        std::memcpy(entry1 + d, &s, 4);
      }
    };
    const CheckRecord r = p.pool({3, 7});
    const std::vector<double> a = decode_by_hand(p.pristine, d, p.nope, p.width);
    const std::vector<double> b = decode_by_hand(p.dut_bytes(), d, p.nope, p.width);
    // By construction: the 64 scaled values of entry 1 are 32x, all else equal.
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool scaled = int64_t(i) / d == 1 && int64_t(i) % d < 64;
      EXPECT_EQ(b[i], scaled ? 32 * a[i] : a[i]) << "value " << i;
      num += scaled ? 31 * 31 * a[i] * a[i] : 0;
      den += a[i] * a[i];
    }
    EXPECT_EQ(r.kind, CheckRecord::Kind::Float) << r.describe();
    EXPECT_TRUE(r.failed) << r.describe();
    EXPECT_NEAR(r.rel_err, std::sqrt(num / den), 1e-12 * std::sqrt(num / den)) << r.describe();
    EXPECT_GT(r.rel_err, 1.0);
    std::printf("%s\n", r.describe().c_str());  // what a user sees
    const CheckSummary s = summarize_checks(check_records(*p.check));
    EXPECT_EQ(s.failures, 1);
    EXPECT_EQ(s.float_failures, 1);
    EXPECT_EQ(s.int_failures, 0);
  }
}

// Sync::DecisionsToDut: packed pooled entries are float results there, so the dut keeps its own
// (they are not pinned to the ref's like a discrete output).
TEST(CheckBackend, PackedPoolIsNotPinnedByDecisionsToDut) {
  CheckOptions o;
  o.sync = CheckOptions::Sync::DecisionsToDut;
  PackedPool p(72, true, o);
  int64_t at = -1;
  p.perturb = [&](uint8_t* e) {
    at = steppable_code(e, p.width, p.nope);
    if (at >= 0) e[at] += 1;
  };
  const CheckRecord r = p.pool({3, 7});
  ASSERT_GE(at, 0);
  EXPECT_FALSE(r.failed) << r.describe();
  EXPECT_GT(r.rel_err, 0.0);
  EXPECT_EQ(p.dut_bytes()[size_t(at)], uint8_t(p.pristine[size_t(at)] + 1));
}

// A packed window cache through the checker: U8 [1, 4 slots, 88 bytes] (KV entries of d = 72
// values: 64 e4m3 + 8 bf16 + a scale byte), its tags, and a dut (a CPU backend) whose packed
// result of op `perturb`'s key may be disturbed after the hook saved what it computed
// (`pristine`: the ref's bytes too when both sides started from the same ones).
struct PackedSwa {
  static constexpr int64_t d = 72, cap = 4;
  const int64_t width = kvfp8::kv_entry_bytes(64, 8);
  std::map<std::string, std::function<void(uint8_t* cache)>> perturb;  // by op
  std::map<std::string, std::vector<uint8_t>> pristine;                // by op
  std::unique_ptr<Backend> ref = make_cpu_backend();
  FaultyCpu dut;
  std::unique_ptr<Backend> check;
  Tensor cache, tags;
  uint64_t key = 0;

  explicit PackedSwa(CheckOptions o = {}) {
    dut.hook = [this](const std::string& op, const std::string&, const std::vector<Tensor>& outs) {
      for (const Tensor& t : outs) {
        if (t.dtype != DType::U8) continue;
        uint8_t* e = t.ptr<uint8_t>();
        pristine[op].assign(e, e + t.numel());
        const auto it = perturb.find(op);
        if (it != perturb.end() && it->second) it->second(e);
      }
    };
    check = make_check_backend(*ref, dut, o);
    cache = check->alloc("swa", DType::U8, {1, cap, width}, AllocKind::Cache);
    upload_cache(std::vector<uint8_t>(size_t(cap * width), 0));
    tags = check->alloc("tags", DType::I32, {1, cap}, AllocKind::Cache);
    check->fill(Stream{}, tags, -1.f);
  }
  void upload_cache(const std::vector<uint8_t>& bytes) { check->upload(Stream{}, cache, bytes.data(), bytes.size()); }
  Tensor i32(const char* name, const std::vector<int32_t>& v) {
    const Tensor t = check->alloc(name, DType::I32, {int64_t(v.size())}, AllocKind::Activation);
    check->upload(Stream{}, t, v.data(), v.size() * 4);
    return t;
  }
  // One swa_insert of a random key per position (sequence 0); its cache record.
  const CheckRecord& insert(const std::vector<int32_t>& positions) {
    const int64_t T = int64_t(positions.size());
    const Tensor k = check->alloc("k", DType::F32, {T, d}, AllocKind::Activation);
    check->init_uniform(Stream{}, k, 3, ++key, 1.f, 0.f);
    check->swa_insert(Stream{}, cache, tags, k, i32("pos", positions), i32("seq", std::vector<int32_t>(size_t(T), 0)));
    return record("swa_insert", "cache");
  }
  // cache_rollback of the cache's slots as entries of ratio 1 to new_len: slots j with
  // new_len < j + 1 <= new_len + extent become zero; its entries record.
  const CheckRecord& rollback(int32_t new_len, int extent) {
    check->cache_rollback(Stream{}, tags, cache, i32("new_len", {new_len}), 1, extent);
    return record("cache_rollback", "entries");
  }
  const CheckRecord& record(const char* op, const char* output) {
    const CheckRecord* r = last_record(*check, op, output);
    EXPECT_NE(r, nullptr) << "no " << op << "." << output << " record";
    return r ? *r : check_records(*check).back();
  }
  std::vector<uint8_t> dut_bytes() {
    std::vector<uint8_t> b(size_t(cap * width));
    check->download(b.data(), cache, b.size());
    return b;
  }
};

// swa_insert on a packed cache is compared by decoded value: each side quantises its own key,
// and under DecisionsToDut the two sides' keys drift apart. A dut whose key lands one e4m3 step
// away in one code passes, at the relative error computed by hand, at that code's byte; the ref
// then holds the dut's bytes (a second insert finds the slot equal).
TEST(CheckBackend, PackedSwaInsertOneRoundingStepPasses) {
  PackedSwa p;
  int64_t at = -1;
  p.perturb["swa_insert"] = [&](uint8_t* e) {
    at = steppable_code(e, p.width, 64);  // a code of slot 1, the one pos 1 writes
    if (at >= 0) e[at] += 1;
  };
  const CheckRecord r = p.insert({1});
  ASSERT_GE(at, 0) << "slot 1 has no code to step";
  const std::vector<uint8_t> ref_bytes = p.pristine["swa_insert"];
  const std::vector<uint8_t> got = p.dut_bytes();
  std::vector<uint8_t> want = ref_bytes;
  want[size_t(at)] += 1;
  ASSERT_EQ(got, want);  // the dut's bytes differ from the ref's in one byte
  const std::vector<double> a = decode_by_hand(ref_bytes, p.d, 64, p.width), b = decode_by_hand(got, p.d, 64, p.width);
  EXPECT_EQ(r.kind, CheckRecord::Kind::Float) << r.describe();
  EXPECT_FALSE(r.failed) << r.describe();
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.shape, (Shape{1, 4, 88}));
  EXPECT_NE(r.note.find("packed FP8 KV entries of 72 values (64 e4m3, 8 bf16) compared by decoded value"),
            std::string::npos)
      << r.note;
  EXPECT_GT(r.rel_err, 0.0);
  EXPECT_NEAR(r.rel_err, rel_err(a, b), 1e-12 * rel_err(a, b)) << r.describe();
  EXPECT_LT(r.rel_err, 2e-2) << r.describe();  // one step (at most 1/8 of the value) in one of 72 values
  EXPECT_DOUBLE_EQ(r.max_abs, kv_code_step(ref_bytes, at, p.d, 64, p.width)) << r.describe();
  EXPECT_EQ(r.max_abs_index, at) << r.describe();
  const CheckSummary s = summarize_checks(check_records(*p.check));
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.int_failures, 0);

  // Resync (bytes copied dut -> ref): slot 1 agrees exactly on the next insert (slot 2).
  p.perturb.clear();
  const CheckRecord r2 = p.insert({2});
  EXPECT_EQ(r2.kind, CheckRecord::Kind::Float);
  EXPECT_EQ(r2.rel_err, 0.0) << r2.describe();
  EXPECT_EQ(r2.max_abs, 0.0) << r2.describe();
  EXPECT_EQ(p.dut_bytes()[size_t(at)], uint8_t(ref_bytes[size_t(at)] + 1));
}

// cache_rollback on a packed cache swa_insert wrote: its entries (an inout: the rows it leaves
// alone are each side's own) are compared by the values they decode to, in the layout swa_insert
// wrote. A dut one code away in an untouched row passes at the relative error computed by hand;
// by default the ref then takes the dut's bytes (a second rollback finds them equal).
TEST(CheckBackend, PackedRollbackIsComparedByDecodedValue) {
  PackedSwa p;
  p.insert({1, 2});  // slots 1 and 2
  int64_t at = -1;
  p.perturb["cache_rollback"] = [&](uint8_t* e) {
    at = steppable_code(e, p.width, 64);  // slot 1: kept (its position 1 < new_len 2)
    if (at >= 0) e[at] += 1;
  };
  const CheckRecord r = p.rollback(2, 2);  // clears slots 2 and 3
  ASSERT_GE(at, 0);
  const std::vector<uint8_t> ref_bytes = p.pristine["cache_rollback"], got = p.dut_bytes();
  EXPECT_TRUE(std::any_of(ref_bytes.begin() + p.width, ref_bytes.begin() + 2 * p.width, [](uint8_t x) { return x; }))
      << "slot 1 was not kept";
  EXPECT_TRUE(std::all_of(ref_bytes.begin() + 2 * p.width, ref_bytes.end(), [](uint8_t x) { return !x; }))
      << "slots 2 and 3 were not cleared";
  std::vector<uint8_t> want = ref_bytes;
  want[size_t(at)] += 1;
  ASSERT_EQ(got, want);
  const std::vector<double> a = decode_by_hand(ref_bytes, p.d, 64, p.width), b = decode_by_hand(got, p.d, 64, p.width);
  EXPECT_EQ(r.kind, CheckRecord::Kind::Float) << r.describe();
  EXPECT_FALSE(r.failed) << r.describe();
  EXPECT_NE(r.note.find("packed FP8 KV entries of 72 values (64 e4m3, 8 bf16) compared by decoded value"),
            std::string::npos)
      << r.note;
  EXPECT_GT(r.rel_err, 0.0);
  EXPECT_NEAR(r.rel_err, rel_err(a, b), 1e-12 * rel_err(a, b)) << r.describe();
  EXPECT_DOUBLE_EQ(r.max_abs, kv_code_step(ref_bytes, at, p.d, 64, p.width)) << r.describe();
  EXPECT_EQ(r.max_abs_index, at) << r.describe();
  const CheckRecord& t = p.record("cache_rollback", "tags");
  EXPECT_EQ(t.kind, CheckRecord::Kind::Int);
  EXPECT_EQ(t.mismatches, 0);
  EXPECT_EQ(summarize_checks(check_records(*p.check)).failures, 0);

  p.perturb.clear();
  const CheckRecord r2 = p.rollback(2, 2);
  EXPECT_EQ(r2.kind, CheckRecord::Kind::Float);
  EXPECT_EQ(r2.rel_err, 0.0) << r2.describe();
  EXPECT_EQ(p.dut_bytes()[size_t(at)], uint8_t(ref_bytes[size_t(at)] + 1));
}

// Sync::DecisionsToDut with the entries compressor_pool wrote, the dut's entry 0 one code away
// from the ref's (its own pooling): cache_rollback clears entry 1 on both sides and compares by
// decoded value (indexer keys and KV entries alike); the dut keeps its entry 0 (not pinned to the
// ref's bytes), and so does the ref.
TEST(CheckBackend, PackedRollbackIsNotPinnedByDecisionsToDut) {
  for (bool kv : {true, false}) {
    SCOPED_TRACE(kv ? "KV entries" : "indexer keys");
    const int64_t d = kv ? 72 : 64;
    CheckOptions o;
    o.sync = CheckOptions::Sync::DecisionsToDut;
    PackedPool p(d, kv, o);
    int64_t at = -1;
    p.perturb = [&](uint8_t* e) {
      at = steppable_code(e, p.width, kv ? p.nope : d, /*entry=*/0);
      if (at >= 0) e[at] += 1;
    };
    p.pool({3, 7});  // entries 0 and 1
    ASSERT_GE(at, 0);
    // Rolled back to 4 positions: entry 0 (block 0..3) is kept, entry 1 (4..7) cleared.
    const Tensor tags = p.i32("rollback_tags", {0, 1, 2, 3, 4, 5, 6, 7});
    p.check->cache_rollback(Stream{}, tags.view({1, 8}), p.entries, p.i32("new_len", {4}), 4, 4);
    const CheckRecord* r = last_record(*p.check, "cache_rollback", "entries");
    ASSERT_NE(r, nullptr);
    std::vector<uint8_t> ref_bytes = p.pristine;  // the ref's pooled entries, entry 1 cleared
    std::fill(ref_bytes.begin() + p.width, ref_bytes.begin() + 2 * p.width, uint8_t(0));
    std::vector<uint8_t> want = ref_bytes;
    want[size_t(at)] += 1;
    EXPECT_EQ(p.dut_bytes(), want);  // the dut's own entry 0, not the ref's
    const std::vector<double> a = decode_by_hand(ref_bytes, d, p.nope, p.width),
                              b = decode_by_hand(want, d, p.nope, p.width);
    EXPECT_EQ(r->kind, CheckRecord::Kind::Float) << r->describe();
    EXPECT_FALSE(r->failed) << r->describe();
    EXPECT_NE(r->note.find("compared by decoded value"), std::string::npos) << r->note;
    EXPECT_GT(r->rel_err, 0.0);
    EXPECT_NEAR(r->rel_err, rel_err(a, b), 1e-12 * rel_err(a, b)) << r->describe();
    EXPECT_EQ(r->max_abs_index, at) << r->describe();
    EXPECT_EQ(summarize_checks(check_records(*p.check)).failures, 0);

    // The ref kept its own too: the same rollback again still sees the one code apart.
    p.check->cache_rollback(Stream{}, tags.view({1, 8}), p.entries, p.i32("new_len", {4}), 4, 4);
    const CheckRecord* r2 = last_record(*p.check, "cache_rollback", "entries");
    ASSERT_NE(r2, nullptr);
    EXPECT_EQ(r2->rel_err, r->rel_err) << r2->describe();
    EXPECT_EQ(p.dut_bytes(), want);
  }
}

// A packed buffer no swa_insert or compressor_pool wrote (its layout unknown: cache_rollback
// does not tell how many values an entry holds), or one uploaded since, is compared byte for
// byte: one byte off in a kept row is an int mismatch there. Under DecisionsToDut such bytes are
// a discrete output: the ref's go into the dut.
TEST(CheckBackend, PackedRollbackOfUnknownLayoutIsExact) {
  for (const bool uploaded_after_insert : {false, true})
    for (const auto sync : {CheckOptions::Sync::DutToRef, CheckOptions::Sync::DecisionsToDut}) {
      SCOPED_TRACE(std::string(uploaded_after_insert ? "uploaded after swa_insert" : "never written by an op") +
                   (sync == CheckOptions::Sync::DecisionsToDut ? ", DecisionsToDut" : ", DutToRef"));
      CheckOptions o;
      o.sync = sync;
      PackedSwa p(o);
      if (uploaded_after_insert) {
        p.insert({1, 2});
        EXPECT_EQ(p.record("swa_insert", "cache").kind, CheckRecord::Kind::Float);
      }
      std::vector<uint8_t> bytes(size_t(p.cap * p.width));
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 % 251 + 1);
      p.upload_cache(bytes);
      const int64_t at = p.width + 3;  // slot 1: kept
      p.perturb["cache_rollback"] = [&](uint8_t* e) { e[at] += 1; };
      const CheckRecord r = p.rollback(2, 2);
      EXPECT_EQ(r.kind, CheckRecord::Kind::Int) << r.describe();
      EXPECT_TRUE(r.failed);
      EXPECT_EQ(r.mismatches, 1) << r.describe();
      EXPECT_EQ(r.max_abs_index, at) << r.describe();
      EXPECT_TRUE(r.note.empty()) << r.note;
      const CheckSummary s = summarize_checks(check_records(*p.check));
      EXPECT_EQ(s.failures, 1);
      EXPECT_EQ(s.int_failures, 1);
      std::vector<uint8_t> want = bytes;  // slots 2 and 3 cleared
      std::fill(want.begin() + 2 * p.width, want.end(), uint8_t(0));
      if (sync == CheckOptions::Sync::DutToRef) want[size_t(at)] += 1;  // the dut's bytes stay
      EXPECT_EQ(p.dut_bytes(), want);
    }
}

TEST(CheckBackend, RefusesGraphsAndForeignBackends) {
  auto ref = make_cpu_backend(), dut = make_cpu_backend();
  auto check = make_check_backend(*ref, *dut);
  EXPECT_THROW(check->graph_begin_capture(0), Error);
  EXPECT_THROW(check_records(*ref), Error);
  EXPECT_THROW(make_check_backend(*ref, *ref), Error);
  // A tensor the wrapper did not allocate is refused with the op's name.
  const Tensor foreign = ref->alloc("foreign", DType::F32, {4}, AllocKind::Activation);
  const Tensor mine = check->alloc("mine", DType::F32, {4}, AllocKind::Activation);
  try {
    check->add(Stream{}, mine, mine, foreign);
    FAIL() << "foreign tensor accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
}

// The report names the first failure and lists the worst outputs.
TEST(CheckBackend, ReportNamesFirstFailure) {
  std::vector<CheckRecord> recs(3);
  for (int i = 0; i < 3; ++i) {
    recs[size_t(i)].seq = i;
    recs[size_t(i)].op = "gemm";
    recs[size_t(i)].output = "out";
    recs[size_t(i)].path = "decode#1/target/L" + std::to_string(i) + ".sliding/attn/wq_a";
    recs[size_t(i)].shape = Shape{2, 8};
  }
  recs[1].rel_err = 0.5;
  recs[1].failed = true;
  recs[2].rel_err = 0.01;
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  print_check_report(f, recs, 2e-2, 2);
  std::fclose(f);
  const std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("FIRST FAILURE: #1 decode#1/target/L1.sliding/attn/wq_a gemm.out [2, 8]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("worst 2 float op outputs"), std::string::npos) << text;
  EXPECT_EQ(text.find("L0.sliding"), std::string::npos) << text;  // not among the worst 2
}

}  // namespace
}  // namespace sl
