// The op-by-op checker (model/check_backend.h) on the CPU: two CPU backends agree exactly on
// the whole tiny model (prefill + decode + MTP drafts), and a deliberately faulty backend is
// caught at exactly the op and range path where it misbehaves, with no failure spreading to
// later ops (every op runs on identical inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/rng.h"
#include "model/check_backend.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/forwarding_backend.h"
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

// Prefill + `steps` decode steps on `be`; the outputs of every step.
std::vector<StepOutput> run_tiny(Backend& be, const ModelConfig& c, int steps) {
  RunShape s;
  s.batch = c.batch;
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
                         "hc_post",
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
    if (op == "hc_post" && starts_with(path, "decode#1/target/L2.")) outs[0].ptr<float>()[0] += 100.f;
  };
  CheckOptions opt;
  opt.stop_at_first_failure = true;
  auto check = make_check_backend(*ref, dut, opt);
  try {
    run_tiny(*check, c, 1);
    FAIL() << "no failure reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("decode#1/target/L2.c4a/attn/hc_post.attn hc_post.X_out"), std::string::npos) << what;
  }
  const auto& recs = check_records(*check);
  ASSERT_FALSE(recs.empty());
  EXPECT_TRUE(recs.back().failed);
  EXPECT_TRUE(ends_with(recs.back().path, "/hc_post.attn"));
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
  check->moe_experts_mxfp4(Stream{}, mo, x, ids, wts, w1, w1s, w2, w2s, w3, w3s, 10.f, work);

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
