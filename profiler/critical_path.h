// The critical path of each step: the chain of GPU ops and waits that sets the step's latency.
//
// A step (KernelRoles::steps) runs from the start of its host range to the end of the last
// op it launched. The path starts from that op and walks back through what bound each op's
// start (WaitAttribution: OpWait::cause / bound_by):
// - own-stream predecessor, event producer, unrelated blocker or, in a graph, the node of the
//   same launch that ended last: the path goes on from that op, with a handoff wait from its
//   end to this op's start (the GPU-side delay of the handoff: zero when the two touch);
// - the host launch: the chain leaves the GPU. A launch gap runs from the end of the launch
//   call to the op's start, and a host segment from the step's start to the end of the call
//   (what the host did before it launched that op: earlier launches, Python, syncs).
// The walk also stops when an op started before the step did (work launched by an earlier step;
// its segment is cut at the step's start). Segments are cut so that they tile
// [step start, step end] without overlap: when an op starts before the op that bound it ended
// (programmatic dependent launch, clock skew), the earlier op's segment ends at the later one's
// start. So per step, the segment durations sum to the latency.
//
// Segment kinds: kernel (any GPU op on the path), launch_gap, handoff_wait, host.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "profiler/gpu_ops.h"
#include "profiler/kernel_roles.h"
#include "profiler/wait_attribution.h"

namespace sl::prof {

enum class SegmentKind : uint8_t { Kernel = 0, LaunchGap = 1, HandoffWait = 2, Host = 3 };
inline constexpr size_t kSegmentKinds = 4;
const char* to_string(SegmentKind k);  // "kernel", "launch_gap", "handoff_wait", "host"

struct PathSegment {
  Ns start = 0, end = 0;
  SegmentKind kind = SegmentKind::Kernel;
  WaitCause cause = WaitCause::Host;  // handoff_wait: which constraint (own_stream, event, ...)
  // kernel: the op; launch_gap / handoff_wait: the op that waited; host: the op whose launch
  // the host time led up to.
  OpId op = kNoOp;
  Ns duration() const { return end - start; }
};

struct StepCriticalPath {
  uint32_t step = kNoStep;
  Ns start = 0, end = 0;                 // step range start .. end of its last-ending op
  std::vector<PathSegment> segments;     // in time order
  std::array<Ns, kSegmentKinds> by_kind{};  // sums of segment durations per kind
  Ns latency() const { return end - start; }
};

// One path per step that launched at least one op, in step order.
std::vector<StepCriticalPath> critical_paths(const GpuOps& ops, const KernelRoles& roles, const WaitAttribution& waits);

// Time on the paths per role, summed over steps: the role's kernel segments, and the waits
// (launch gap, handoff) its ops spent on the path before they started.
struct RolePathTime {
  uint32_t role = kNoId;
  uint64_t steps = 0;    // steps whose path holds one of the role's ops
  Ns kernel = 0;
  Ns wait = 0;
  Ns total() const { return kernel + wait; }
};
// Sorted by total, descending (ties by role id). Host segments belong to no role.
std::vector<RolePathTime> path_time_by_role(const std::vector<StepCriticalPath>& paths, const KernelRoles& roles);

}  // namespace sl::prof
