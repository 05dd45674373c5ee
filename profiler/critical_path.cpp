#include "profiler/critical_path.h"

#include <algorithm>
#include <unordered_map>

namespace sl::prof {

const char* to_string(SegmentKind k) {
  switch (k) {
    case SegmentKind::Kernel: return "kernel";
    case SegmentKind::LaunchGap: return "launch_gap";
    case SegmentKind::HandoffWait: return "handoff_wait";
    case SegmentKind::Host: return "host";
  }
  return "?";
}

namespace {

// Per step, the op it launched that ended last (kNoOp for steps that launched nothing).
std::vector<OpId> last_ops(const GpuOps& ops, const KernelRoles& roles) {
  std::vector<OpId> last(roles.steps.size(), kNoOp);
  for (OpId op = 0; op < ops.size(); ++op) {
    const uint32_t s = roles.ops[op].step;
    if (s == kNoStep) continue;
    if (last[s] == kNoOp || ops.end(op) > ops.end(last[s])) last[s] = op;
  }
  return last;
}

// Appends [from, to) clipped to the step's start; segments are collected back to front.
void push(std::vector<PathSegment>& out, Ns step_start, Ns from, Ns to, SegmentKind kind, WaitCause cause, OpId op) {
  from = std::max(from, step_start);
  if (to <= from) return;
  out.push_back({from, to, kind, cause, op});
}

StepCriticalPath walk(const GpuOps& ops, const WaitAttribution& waits, uint32_t step, Ns step_start, OpId last) {
  StepCriticalPath p;
  p.step = step;
  p.start = step_start;
  p.end = std::max(step_start, ops.end(last));
  std::vector<PathSegment> rev;
  Ns cut = p.end;  // where the current op's segment ends: its successor's start on the path
  for (OpId cur = last; cur != kNoOp;) {
    const Ns start = ops.start(cur);
    push(rev, step_start, start, std::min(cut, ops.end(cur)), SegmentKind::Kernel, WaitCause::Host, cur);
    if (start <= step_start) break;
    const OpWait& w = waits.ops[cur];
    const OpId next = w.cause == WaitCause::Host ? kNoOp : w.bound_by;
    if (next == kNoOp || ops.start(next) >= start) {  // the chain leaves the GPU here
      const uint32_t a = ops.launch(cur);
      const Ns launch_end = a == kNoId ? start : std::min(start, ops.trace().api_calls[a].end);
      push(rev, step_start, launch_end, start, SegmentKind::LaunchGap, WaitCause::Host, cur);
      push(rev, step_start, step_start, launch_end, SegmentKind::Host, WaitCause::Host, cur);
      break;
    }
    const Ns handoff_from = std::min(ops.end(next), start);
    push(rev, step_start, handoff_from, start, SegmentKind::HandoffWait, w.cause, cur);
    cut = handoff_from;
    cur = next;
  }
  p.segments.assign(rev.rbegin(), rev.rend());
  for (const PathSegment& s : p.segments) p.by_kind[size_t(s.kind)] += s.duration();
  return p;
}

}  // namespace

std::vector<StepCriticalPath> critical_paths(const GpuOps& ops, const KernelRoles& roles, const WaitAttribution& waits) {
  std::vector<StepCriticalPath> out;
  const std::vector<OpId> last = last_ops(ops, roles);
  for (uint32_t s = 0; s < roles.steps.size(); ++s)
    if (last[s] != kNoOp) out.push_back(walk(ops, waits, s, roles.steps[s].start, last[s]));
  return out;
}

std::vector<RolePathTime> path_time_by_role(const std::vector<StepCriticalPath>& paths, const KernelRoles& roles) {
  std::unordered_map<uint32_t, RolePathTime> by;
  std::unordered_map<uint32_t, uint32_t> seen_in;  // role -> last step counted
  for (const StepCriticalPath& p : paths) {
    for (const PathSegment& s : p.segments) {
      if (s.kind == SegmentKind::Host || s.op == kNoOp) continue;
      const uint32_t role = roles.ops[s.op].role;
      RolePathTime& r = by[role];
      r.role = role;
      (s.kind == SegmentKind::Kernel ? r.kernel : r.wait) += s.duration();
      auto [it, fresh] = seen_in.try_emplace(role, p.step);
      if (fresh || it->second != p.step) r.steps++, it->second = p.step;
    }
  }
  std::vector<RolePathTime> out;
  out.reserve(by.size());
  for (auto& [_, r] : by) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const RolePathTime& a, const RolePathTime& b) {
    return a.total() != b.total() ? a.total() > b.total() : a.role < b.role;
  });
  return out;
}

}  // namespace sl::prof
