#include "experiments/compare/trace_side.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "profiler/trace_index.h"

namespace sl::compare {

using prof::Ns;

namespace {

bool name_matches(const std::string& name, const std::string& pattern) {
  if (!pattern.empty() && pattern.back() == '*') return name.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0;
  return name == pattern;
}


// A GPU op reduced to what step timing needs: its interval and when / where it was launched.
struct Op {
  Ns start, end;
  Ns host = prof::kNoTime;  // the launch call's start, or the kernel's queued time
  uint32_t pid = 0, tid = 0;
  bool has_thread = false;
};

std::vector<Op> gpu_ops(const prof::Trace& t) {
  const prof::LaunchIndex launches(t);
  std::vector<Op> ops;
  auto add = [&](Ns s, Ns e, uint32_t pid, uint32_t corr, Ns queued) {
    Op op{s, std::max(s, e)};
    const uint32_t ai = launches.find(pid, corr);
    if (ai != prof::kNoId) {
      op.host = t.api_calls[ai].start;
      op.pid = t.api_calls[ai].pid;
      op.tid = t.api_calls[ai].tid;
      op.has_thread = true;
    } else if (queued != prof::kNoTime) {
      op.host = queued;
      op.pid = pid;
    }
    ops.push_back(op);
  };
  for (const auto& k : t.kernels) add(k.start, k.end, k.pid, k.correlation, k.queued);
  for (const auto& m : t.memcpys) add(m.start, m.end, m.pid, m.correlation, prof::kNoTime);
  for (const auto& m : t.memsets) add(m.start, m.end, m.pid, m.correlation, prof::kNoTime);
  return ops;
}

}  // namespace

std::string default_step_range(const prof::Trace& t) {
  bool profiler_step = false;
  for (const auto& r : t.nvtx) {
    if (r.kind != prof::NvtxKind::PushPop) continue;
    const std::string& n = t.str(r.name);
    if (n == "decode") return "decode";
    if (n.rfind("ProfilerStep", 0) == 0) profiler_step = true;
  }
  return profiler_step ? "ProfilerStep*" : "";
}

TraceSteps trace_steps(const prof::Trace& t, const TraceStepOptions& o) {
  TraceSteps out;
  out.step_range = o.step_range.empty() ? default_step_range(t) : o.step_range;
  const std::vector<Op> ops = gpu_ops(t);
  if (out.step_range.empty()) {  // the whole trace is one step
    Ns s = prof::kNoTime, e = prof::kNoTime;
    for (const auto& op : ops) {
      s = s == prof::kNoTime ? op.start : std::min(s, op.start);
      e = e == prof::kNoTime ? op.end : std::max(e, op.end);
    }
    if (s != prof::kNoTime) out.step_ms.push_back(double(e - s) / 1e6);
    return out;
  }
  // Step instances and the draft ranges inside them, per host thread.
  struct Instance {
    const prof::NvtxRange* range;
    Ns first_draft = prof::kNoTime;  // host start of the first draft* range inside, if any
    Ns start = prof::kNoTime, end = prof::kNoTime, target_end = prof::kNoTime;
  };
  std::vector<Instance> inst;
  for (const auto& r : t.nvtx)
    if (r.kind == prof::NvtxKind::PushPop && name_matches(t.str(r.name), out.step_range)) inst.push_back({&r});
  SL_CHECK(!inst.empty(), "the trace has no range named '", out.step_range, "' to take steps from");
  std::sort(inst.begin(), inst.end(), [](const Instance& a, const Instance& b) { return a.range->start < b.range->start; });
  // Trace::finalize sorts ranges by start: the ranges inside an instance are a contiguous run.
  for (auto& in : inst) {
    auto r = std::lower_bound(t.nvtx.begin(), t.nvtx.end(), in.range->start,
                              [](const prof::NvtxRange& x, Ns s) { return x.start < s; });
    for (; r != t.nvtx.end() && r->start < in.range->end; ++r)
      if (r->kind == prof::NvtxKind::PushPop && r->pid == in.range->pid && r->tid == in.range->tid &&
          r->end <= in.range->end && t.str(r->name).rfind("draft", 0) == 0) {
        in.first_draft = r->start;
        break;
      }
  }
  for (const auto& op : ops) {
    if (op.host == prof::kNoTime) continue;
    // The instance holding the launch: the last one starting at or before it (steps do not nest).
    auto it = std::upper_bound(inst.begin(), inst.end(), op.host,
                               [](Ns h, const Instance& i) { return h < i.range->start; });
    if (it == inst.begin()) continue;
    Instance& in = *std::prev(it);
    if (op.host >= in.range->end || in.range->pid != op.pid || (op.has_thread && in.range->tid != op.tid)) continue;
    in.start = in.start == prof::kNoTime ? op.start : std::min(in.start, op.start);
    in.end = in.end == prof::kNoTime ? op.end : std::max(in.end, op.end);
    if (in.first_draft != prof::kNoTime && op.host < in.first_draft)
      in.target_end = in.target_end == prof::kNoTime ? op.end : std::max(in.target_end, op.end);
  }
  bool parts = true;
  for (const auto& in : inst) {
    if (in.start == prof::kNoTime) continue;  // a step without GPU work (e.g. cut by the window)
    out.step_ms.push_back(double(in.end - in.start) / 1e6);
    if (in.first_draft == prof::kNoTime || in.target_end == prof::kNoTime) parts = false;
    else {
      out.target_ms.push_back(double(in.target_end - in.start) / 1e6);
      out.draft_ms.push_back(double(in.end - in.target_end) / 1e6);
    }
  }
  if (!parts) out.target_ms.clear(), out.draft_ms.clear();
  return out;
}

Side side_from_trace(const prof::Trace& t, const std::string& label, const std::string& origin,
                     const TraceStepOptions& o) {
  const TraceSteps st = trace_steps(t, o);
  SL_CHECK(!st.step_ms.empty(), origin, ": no GPU work inside any '", st.step_range, "' range: no steps to time");
  Side s;
  s.label = label;
  s.origin = origin;
  s.one_process = true;
  s.system = t.metadata.count("source") && t.metadata.at("source") == "kineto" ? "a PyTorch profiler trace"
                                                                               : "a streamlab trace";
  if (auto it = t.metadata.find("policy"); it != t.metadata.end()) s.policy = it->second;
  // A trace's steps are as the program ran them: eager unless every kernel is a graph node.
  bool graph = !t.kernels.empty();
  for (const auto& k : t.kernels) graph = graph && k.graph_id != 0;
  const std::string mode = graph ? "graph" : "eager";
  s.samples[sample_key(mode, "step")].push_back(st.step_ms);
  if (!st.target_ms.empty()) {
    s.samples[sample_key(mode, "target")].push_back(st.target_ms);
    s.samples[sample_key(mode, "draft")].push_back(st.draft_ms);
  }
  return s;
}

}  // namespace sl::compare
