// A trace file as a compare side: step latencies read from the trace itself.
//
// A step is an instance of a named range (NVTX push/pop, or a PyTorch `user_annotation` such as
// "ProfilerStep#12"): its latency is the GPU time from the first start to the last end of the
// GPU ops launched inside it (launch calls matched by correlation id; ops without a launch record
// are placed by their queued time). Parts of a step are sub-ranges ("target", "draft*" in
// streamlab traces). All steps of one trace come from one process: one group.
#pragma once
#include <string>
#include <vector>

#include "experiments/compare/comparison.h"
#include "profiler/trace.h"

namespace sl::compare {

struct TraceStepOptions {
  // The range that delimits a step: a name, or a prefix ending in '*' ("ProfilerStep*").
  // "" = "decode" when the trace has it, else "ProfilerStep*" when it has those, else the whole
  // trace is one step.
  std::string step_range;
};

struct TraceSteps {
  std::string step_range;             // the one used ("" = the whole trace)
  std::vector<double> step_ms;        // per step instance with GPU work, in time order
  std::vector<double> target_ms, draft_ms;  // per step, when the sub-ranges exist (else empty)
};

// The step range a trace's own ranges suggest: "decode" when it has one, else "ProfilerStep*"
// when it has those, else "" (the whole trace is one step).
std::string default_step_range(const prof::Trace& t);

TraceSteps trace_steps(const prof::Trace& t, const TraceStepOptions& o = {});

// One side from a loaded trace: the steps above as one process; `label` names it.
Side side_from_trace(const prof::Trace& t, const std::string& label, const std::string& origin,
                     const TraceStepOptions& o = {});

}  // namespace sl::compare
