// Where two traces line up in the viewer's A/B mode: the start of one instance of an NVTX range
// (a decode step, a ProfilerStep) in each, so that the same step of two runs starts at 0 on one
// time axis. Each trace keeps its own clock; the viewer shifts by the difference of the two
// starts (exact integer nanoseconds), never by rewriting the traces.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "profiler/trace.h"

namespace sl::ui {

// --align NAME[:INDEX]: the INDEX-th (from 0, in time order) range called NAME.
struct AlignSpec {
  std::string name;
  size_t index = 0;
};

// Parses "NAME" or "NAME:INDEX". Throws sl::Error on an empty name or an index that is not a
// non-negative integer.
AlignSpec parse_align(const std::string& spec);

// The starts of the NVTX ranges (not marks) of any thread called `name`, in time order. A name
// without an instance number also matches the numbered instances ("ProfilerStep" matches
// "ProfilerStep#4"); "ProfilerStep#4" matches only that one.
std::vector<prof::Ns> range_starts(const prof::Trace& t, const std::string& name);

// The default alignment: the first "decode" when both traces have one, else the first
// "ProfilerStep" (PyTorch's profiler steps) when both have one, else none (align the traces'
// starts).
std::optional<AlignSpec> default_alignment(const prof::Trace& a, const prof::Trace& b);

// The start of the range `spec` picks in `t`. Throws sl::Error naming `source`, the range and
// how many instances the trace has when there is no such instance.
prof::Ns alignment_point(const prof::Trace& t, const std::string& source, const AlignSpec& spec);

// "decode:7" / "ProfilerStep:0": the spec as --align takes it.
std::string to_string(const AlignSpec& spec);

}  // namespace sl::ui
