// The critical path of a hand-computed two-stream fork/join step.
#include <gtest/gtest.h>

#include "profiler/critical_path.h"
#include "profiler/synthetic.h"

using namespace sl::prof;

namespace {

// Step range [0, 1000) on the launching thread. Launch call -> GPU:
//   A  s1 [10,20) -> [30,100)
//   fork: event 1 recorded on s1 after A, s2 waits on it
//   B  s2 [30,40) -> [110,300)   waits on A (ended 100), starts 10 later
//   C  s1 [40,50) -> [100,150)   behind A on its stream
//   join: event 2 recorded on s2 after B, s1 waits on it
//   D  s1 [50,60) -> [305,400)   behind C (150), then waits on B (300), starts 5 later
// D ends last. Walking back: D <- B (event) <- A (event) <- host (A's launch call).
Trace fork_join() {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("step", 0, 1000);
  b.kernel(1, 30, 100, "A", 10, 20);
  b.record_and_wait(1, /*on=*/1, /*waiting=*/2, 25);
  b.kernel(2, 110, 300, "B", 30, 40);
  b.kernel(1, 100, 150, "C", 40, 50);
  b.record_and_wait(2, /*on=*/2, /*waiting=*/1, 45);
  b.kernel(1, 305, 400, "D", 50, 60);
  b.nvtx("step", 2000, 2100);  // a second step that launched nothing: no path
  t.finalize();
  return t;
}

}  // namespace

TEST(CriticalPath, ForkJoinStep) {
  const Trace t = fork_join();
  const GpuOps ops(t);
  const KernelRoles roles = compute_roles(ops, {"step"});
  const WaitAttribution waits = attribute_waits(ops);
  const std::vector<StepCriticalPath> paths = critical_paths(ops, roles, waits);
  ASSERT_EQ(paths.size(), 1u);
  const StepCriticalPath& p = paths[0];
  EXPECT_EQ(p.step, 0u);
  EXPECT_EQ(p.start, 0);
  EXPECT_EQ(p.end, 400);
  auto k = [&](const char* name) {
    for (OpId op = 0; op < ops.size(); ++op)
      if (ops.name(op) == name) return op;
    return kNoOp;
  };
  const std::vector<PathSegment> want = {
      {0, 20, SegmentKind::Host, WaitCause::Host, k("A")},
      {20, 30, SegmentKind::LaunchGap, WaitCause::Host, k("A")},
      {30, 100, SegmentKind::Kernel, WaitCause::Host, k("A")},
      {100, 110, SegmentKind::HandoffWait, WaitCause::Event, k("B")},
      {110, 300, SegmentKind::Kernel, WaitCause::Host, k("B")},
      {300, 305, SegmentKind::HandoffWait, WaitCause::Event, k("D")},
      {305, 400, SegmentKind::Kernel, WaitCause::Host, k("D")},
  };
  ASSERT_EQ(p.segments.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.segments[i].start, want[i].start) << i;
    EXPECT_EQ(p.segments[i].end, want[i].end) << i;
    EXPECT_EQ(p.segments[i].kind, want[i].kind) << i;
    EXPECT_EQ(p.segments[i].cause, want[i].cause) << i;
    EXPECT_EQ(p.segments[i].op, want[i].op) << i;
  }
  EXPECT_EQ(p.by_kind[size_t(SegmentKind::Kernel)], 70 + 190 + 95);
  EXPECT_EQ(p.by_kind[size_t(SegmentKind::LaunchGap)], 10);
  EXPECT_EQ(p.by_kind[size_t(SegmentKind::HandoffWait)], 15);
  EXPECT_EQ(p.by_kind[size_t(SegmentKind::Host)], 20);
  EXPECT_EQ(p.latency(), 400);

  // Per role: B 190 kernel + 10 wait, D 95 + 5, A 70 + 10 (launch gap); C is off the path.
  const std::vector<RolePathTime> by_role = path_time_by_role(paths, roles);
  ASSERT_EQ(by_role.size(), 3u);
  EXPECT_EQ(roles.key(by_role[0].role), "step :: B #0");
  EXPECT_EQ(by_role[0].kernel, 190);
  EXPECT_EQ(by_role[0].wait, 10);
  EXPECT_EQ(roles.key(by_role[1].role), "step :: D #0");
  EXPECT_EQ(by_role[1].total(), 100);
  EXPECT_EQ(roles.key(by_role[2].role), "step :: A #0");
  EXPECT_EQ(by_role[2].kernel, 70);
  EXPECT_EQ(by_role[2].wait, 10);
  EXPECT_EQ(by_role[2].steps, 1u);
}

// Overlap on the path (the next op starts before the one that bound it ends, e.g. under
// programmatic dependent launch): the earlier op's segment is cut, segments still tile the step.
TEST(CriticalPath, OverlappingOpsAreCutToTile) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("step", 0, 100);
  b.kernel(1, 10, 60, "first", 1, 5);
  b.kernel(1, 50, 90, "second", 6, 8);  // starts 10 before "first" ends: own stream binds
  t.finalize();
  const GpuOps ops(t);
  const KernelRoles roles = compute_roles(ops, {"step"});
  const auto paths = critical_paths(ops, roles, attribute_waits(ops));
  ASSERT_EQ(paths.size(), 1u);
  const auto& s = paths[0].segments;
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].kind, SegmentKind::Host);       // [0, 5)
  EXPECT_EQ(s[1].kind, SegmentKind::LaunchGap);  // [5, 10)
  EXPECT_EQ(s[2].kind, SegmentKind::Kernel);     // first, cut to [10, 50)
  EXPECT_EQ(s[2].end, 50);
  EXPECT_EQ(s[3].start, 50);                     // second [50, 90)
  Ns sum = 0;
  for (const auto& x : s) sum += x.duration();
  EXPECT_EQ(sum, paths[0].latency());
}
