// A GPU op's role: what it does in the program, independent of where it ran, so that the ops
// of two runs of one program line up (stream ids, stream names and correlation ids differ
// between stream policies and processes; the program's ranges do not).
//
// Definitions:
// - path: the names of the push/pop ranges (NVTX, or PyTorch's `user_annotation`) open around
//   the op's launch call on the launching thread, outermost first, joined by '/', each without
//   an instance number ("ProfilerStep#12" -> "ProfilerStep"; see strip_instance_number). E.g.
//   "decode/target/L3.c4a/attn/phase_a/rmsnorm".
//   Ops of a CUDA graph launch get the ranges around their cudaGraphLaunch. Ops without a
//   launch record (libraries launching through the driver API with its records off) are placed
//   by their `queued` timestamp in the innermost range, of any thread of the process, that was
//   open then, taking the most recently opened one (analysis.cpp's by_op rule). Ops with
//   neither get the path "(no launch call)"; ops launched outside every range "(no range)".
// - name: the kernel's name; memcpys and memsets by Kineto's display name.
// - ordinal: the op's place among the ops of the same name launched inside the same innermost
//   range instance, in launch order (launch call start, then GPU start: the nodes of one graph
//   launch share the call and go by start time). It tells apart the three GEMMs of one op.
//   Ops outside every range (no instance to count in) all get ordinal 0: one role per name.
// - step: the index, in time order, of the instance of the step range (RoleOptions::step_range,
//   e.g. "decode") that holds the launch; with no step range chosen, of the outermost range.
//   kNoStep when the launch is in none. Roles do not include the step: one role recurs once
//   per step, and its statistics are over the steps.
//
// Cost: 8 bytes per op kept (role id, step); role strings interned once per distinct path and
// name. Building sorts the ops once (by range instance, name, launch time) and sweeps each
// thread's ranges once with a stack.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "profiler/gpu_ops.h"
#include "profiler/trace.h"

namespace sl::prof {

inline constexpr uint32_t kNoStep = kNoId;
inline constexpr const char* kNoRangePath = "(no range)";
inline constexpr const char* kNoLaunchPath = "(no launch call)";

struct RoleOptions {
  // Range name whose instances are the steps ("decode"; a PyTorch trace: "ProfilerStep"),
  // compared without instance numbers. Empty: every outermost push/pop range is a step.
  std::string step_range;
};

struct Role {
  uint32_t path = 0;     // id in KernelRoles::strings
  uint32_t name = 0;     // id in KernelRoles::strings
  uint32_t ordinal = 0;
};

struct OpRole {
  uint32_t role = kNoId;     // index into KernelRoles::roles
  uint32_t step = kNoStep;   // index into KernelRoles::steps
};

// One instance of the step range (the host-side range: its start is where a step's latency is
// measured from).
struct StepInstance {
  Ns start = 0, end = 0;
  uint32_t nvtx = kNoId;  // index into Trace::nvtx
  uint32_t pid = 0, tid = 0;
};

struct KernelRoles {
  RoleOptions options;
  StringTable strings;              // paths and op names
  std::vector<Role> roles;          // distinct roles
  std::vector<OpRole> ops;          // per GPU op (GpuOps numbering)
  std::vector<StepInstance> steps;  // in time order
  uint64_t placed_by_launch = 0;    // ops placed by their launch call inside a range
  uint64_t placed_by_queued = 0;    // ops without a launch call placed by `queued`
  uint64_t without_range = 0;       // launched (or queued) outside every range
  uint64_t without_launch = 0;      // no launch call, no `queued`: "(no launch call)"

  const std::string& path(uint32_t role) const { return strings.str(roles[role].path); }
  const std::string& name(uint32_t role) const { return strings.str(roles[role].name); }
  // Stable text key of a role (role_key), the same in every trace of the program.
  std::string key(uint32_t role) const;
};

// "ProfilerStep#12" -> "ProfilerStep"; a name without a trailing '#' and digits is unchanged.
std::string_view strip_instance_number(std::string_view range_name);

// "<path> :: <name> #<ordinal>", e.g. "decode/target/L3.c4a/attn/phase_a/rmsnorm :: rmsnorm #0".
std::string role_key(std::string_view path, std::string_view name, uint32_t ordinal);

// Splits a role path at '/' ("decode/target/L3.c4a" -> {"decode", "target", "L3.c4a"}).
std::vector<std::string_view> path_elements(std::string_view path);

KernelRoles compute_roles(const GpuOps& ops, const RoleOptions& opts = {});

// The ops of two traces paired by (step, role key, occurrence): the n-th op of a role in a step
// of one trace with the n-th of the same role and step in the other (occurrences count in start
// order; they differ from 0 only when a path repeats inside a step, e.g. a range per layer that
// does not name the layer).
struct RoleMatch {
  std::vector<std::pair<OpId, OpId>> pairs;  // (op in a, op in b), by a's op id
  std::vector<OpId> only_a, only_b;
};
RoleMatch match_roles(const KernelRoles& a, const KernelRoles& b);

}  // namespace sl::prof
