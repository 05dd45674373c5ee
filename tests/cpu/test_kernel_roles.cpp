// Kernel roles on hand-made traces: one program under two stream policies whose stream ids
// differ, every kernel matched to its counterpart; ordinals of repeated names in launch order;
// a CUDA graph launch; a kernel without a launch call placed by `queued`; steps.
#include <gtest/gtest.h>

#include <map>

#include "profiler/gpu_ops.h"
#include "profiler/kernel_roles.h"
#include "profiler/synthetic.h"

using namespace sl::prof;

namespace {

// The streams one policy gives the program's jobs.
struct Policy {
  uint32_t main, l0_aux0, l0_aux1, l1_aux0, mtp_aux0;
};
const Policy kPerLayer{7, 14, 15, 16, 19};
const Policy kShared{21, 22, 23, 22, 22};

// One decode step from t0: ranges decode / target / L<n>.c4a / attn|moe ..., draft0 / mtp0.c4a.
// GPU times do not depend on the policy, so a kernel's counterpart starts at the same time.
void decode_step(TraceBuilder& b, const Policy& p, Ns t0) {
  Trace& t = b.trace();
  b.nvtx("decode", t0, t0 + 1000);
  b.nvtx("target", t0 + 10, t0 + 500);
  b.nvtx("L0.c4a", t0 + 20, t0 + 200);
  b.nvtx("attn", t0 + 30, t0 + 150);
  b.nvtx("moe", t0 + 160, t0 + 190);
  b.nvtx("L1.c4a", t0 + 210, t0 + 400);
  b.nvtx("attn", t0 + 220, t0 + 300);
  b.nvtx("graph_part", t0 + 410, t0 + 480);
  b.nvtx("draft0", t0 + 510, t0 + 900);
  b.nvtx("mtp0.c4a", t0 + 520, t0 + 800);
  b.nvtx("attn", t0 + 530, t0 + 700);
  // Launched at 40 and 50: the second starts first (another stream), the ordinal follows launches.
  b.kernel(p.main, t0 + 100, t0 + 150, "gemm", t0 + 40, t0 + 45);
  b.kernel(p.l0_aux0, t0 + 90, t0 + 160, "gemm", t0 + 50, t0 + 55);
  b.kernel(p.l0_aux1, t0 + 120, t0 + 130, "rmsnorm", t0 + 60, t0 + 65);
  b.kernel(p.main, t0 + 200, t0 + 260, "gemm", t0 + 170, t0 + 172);
  // A library kernel launched through the driver API (no record): placed by `queued` in "moe".
  const size_t lib = b.kernel(p.main, t0 + 260, t0 + 300, "cublas_gemm");
  t.kernels[lib].queued = t0 + 175;
  b.kernel(p.main, t0 + 300, t0 + 350, "gemm", t0 + 230, t0 + 235);
  b.kernel(p.l1_aux0, t0 + 310, t0 + 330, "gemm", t0 + 240, t0 + 245);
  // A graph launch in "graph_part": three nodes, one correlation id, ordinals by start time.
  const uint32_t g = uint32_t(b.api("cudaGraphLaunch_v10000", t0 + 420, t0 + 430));
  for (auto [stream, start, name] : {std::tuple{p.main, Ns(650), "node"}, std::tuple{p.main, Ns(600), "node"},
                                     std::tuple{p.l1_aux0, Ns(610), "other"}}) {
    const size_t k = b.kernel(stream, t0 + start, t0 + start + 20, name);
    t.kernels[k].correlation = t.api_calls[g].correlation;
    t.kernels[k].graph_id = 1;
  }
  b.kernel(p.mtp_aux0, t0 + 720, t0 + 760, "gemm", t0 + 540, t0 + 545);
}

Trace program(const Policy& p) {
  Trace t;
  TraceBuilder b(t);
  decode_step(b, p, 0);
  b.kernel(p.main, 1600, 1610, "tail", 1500, 1505);  // between the steps: in no range
  decode_step(b, p, 2000);
  b.kernel(p.main, 3600, 3610, "tail", 3500, 3505);  // a second one: the same role
  t.finalize();
  return t;
}

// Hand-written: the role of each kernel of a step, by its start relative to the step.
const std::map<Ns, std::string> kExpectedKey = {
    {100, "decode/target/L0.c4a/attn :: gemm #0"},
    {90, "decode/target/L0.c4a/attn :: gemm #1"},
    {120, "decode/target/L0.c4a/attn :: rmsnorm #0"},
    {200, "decode/target/L0.c4a/moe :: gemm #0"},
    {260, "decode/target/L0.c4a/moe :: cublas_gemm #0"},
    {300, "decode/target/L1.c4a/attn :: gemm #0"},
    {310, "decode/target/L1.c4a/attn :: gemm #1"},
    {600, "decode/target/graph_part :: node #0"},
    {650, "decode/target/graph_part :: node #1"},
    {610, "decode/target/graph_part :: other #0"},
    {720, "decode/draft0/mtp0.c4a/attn :: gemm #0"},
};

}  // namespace

TEST(KernelRoles, StripInstanceNumberAndKeys) {
  EXPECT_EQ(strip_instance_number("ProfilerStep#12"), "ProfilerStep");
  EXPECT_EQ(strip_instance_number("decode"), "decode");
  EXPECT_EQ(strip_instance_number("a#b"), "a#b");
  EXPECT_EQ(strip_instance_number("trailing#"), "trailing#");
  EXPECT_EQ(role_key("a/b", "k", 2), "a/b :: k #2");
  EXPECT_EQ(path_elements("decode/target/L3.c4a"), (std::vector<std::string_view>{"decode", "target", "L3.c4a"}));
  EXPECT_EQ(path_elements("x"), (std::vector<std::string_view>{"x"}));
}

TEST(KernelRoles, EveryKernelOfOnePolicyHasItsRole) {
  const Trace t = program(kPerLayer);
  const GpuOps ops(t);
  RoleOptions o;
  o.step_range = "decode";
  const KernelRoles r = compute_roles(ops, o);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].start, 0);
  EXPECT_EQ(r.steps[1].start, 2000);
  ASSERT_EQ(r.ops.size(), t.kernels.size());
  for (OpId op = 0; op < ops.size(); ++op) {
    const Kernel& k = t.kernels[op];
    if (t.str(k.name) == "tail") {
      EXPECT_EQ(r.key(r.ops[op].role), "(no range) :: tail #0");
      EXPECT_EQ(r.ops[op].step, kNoStep);
      continue;
    }
    const uint32_t step = k.start >= 2000 ? 1 : 0;
    auto want = kExpectedKey.find(k.start - 2000 * step);
    ASSERT_NE(want, kExpectedKey.end()) << "kernel at " << k.start;
    EXPECT_EQ(r.key(r.ops[op].role), want->second) << "kernel at " << k.start;
    EXPECT_EQ(r.ops[op].step, step) << "kernel at " << k.start;
  }
  // Each role once per step: 11 roles + the tail (outside ranges: one role per name).
  EXPECT_EQ(r.roles.size(), 12u);
  EXPECT_EQ(r.placed_by_queued, 2u);
  EXPECT_EQ(r.without_range, 2u);
  EXPECT_EQ(r.without_launch, 0u);
  EXPECT_EQ(r.placed_by_launch, t.kernels.size() - 4);
}

TEST(KernelRoles, TwoPoliciesMatchKernelForKernel) {
  const Trace a = program(kPerLayer), b = program(kShared);
  const GpuOps oa(a), ob(b);
  const KernelRoles ra = compute_roles(oa, {"decode"}), rb = compute_roles(ob, {"decode"});
  const RoleMatch m = match_roles(ra, rb);
  EXPECT_TRUE(m.only_a.empty());
  EXPECT_TRUE(m.only_b.empty());
  ASSERT_EQ(m.pairs.size(), a.kernels.size());
  size_t stream_changed = 0;
  for (auto [x, y] : m.pairs) {
    // The counterpart: same GPU start by construction, same name, another stream id.
    EXPECT_EQ(a.kernels[x].start, b.kernels[y].start);
    EXPECT_EQ(a.str(a.kernels[x].name), b.str(b.kernels[y].name));
    stream_changed += a.kernels[x].stream != b.kernels[y].stream;
  }
  EXPECT_EQ(stream_changed, a.kernels.size());  // no stream id in common
}

// Without a step range, each outermost range is a step (here the two "decode" ranges).
TEST(KernelRoles, OutermostRangesAreTheDefaultSteps) {
  const Trace t = program(kPerLayer);
  const GpuOps ops(t);
  const KernelRoles r = compute_roles(ops);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[1].nvtx, 11u);  // the 12th range by start: the second "decode"
  for (OpId op = 0; op < ops.size(); ++op) {
    const Ns start = t.kernels[op].start;
    const uint32_t want = start < 1000 ? 0 : start >= 2000 && start < 3000 ? 1 : kNoStep;
    EXPECT_EQ(r.ops[op].step, want) << "kernel at " << start;
  }
}

// A memcpy and a kernel in one range: both get roles, each by its own name.
TEST(KernelRoles, MemcpysHaveRolesToo) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("step", 0, 100);
  b.nvtx("copy_in", 5, 50);
  b.memcpy(3, 20, 30, 4096, MemcpyKind::HtoD, 10, 12);
  b.kernel(3, 40, 50, "k", 15, 16);
  t.finalize();
  const GpuOps ops(t);
  const KernelRoles r = compute_roles(ops, {"step"});
  EXPECT_EQ(r.key(r.ops[ops.kernel_op(0)].role), "step/copy_in :: k #0");
  EXPECT_EQ(r.key(r.ops[ops.memcpy_op(0)].role), "step/copy_in :: Memcpy HtoD (Pageable -> Device) #0");
}
