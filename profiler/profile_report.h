// Reports of a trace profile and of a diff of two: JSON (stable keys, times as integers in ns,
// medians and fractions as numbers) and human-readable text (times in us).
//
// The JSON holds every role, every step's latency and its time per segment kind; the segments
// themselves only for two representative steps (the one of median latency and the slowest),
// since a long trace has millions.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "profiler/trace_diff.h"
#include "profiler/trace_profile.h"

namespace sl::prof {

nlohmann::json profile_to_json(const TraceProfile& p);
// `top`: rows of each table.
std::string profile_to_text(const TraceProfile& p, size_t top = 15);

nlohmann::json diff_to_json(const TraceDiff& d);
std::string diff_to_text(const TraceDiff& d, size_t top = 15);

// The step of median latency (of an even count, the lower middle), or nullptr without steps.
const StepCriticalPath* typical_step(const std::vector<StepCriticalPath>& paths);
const StepCriticalPath* slowest_step(const std::vector<StepCriticalPath>& paths);

}  // namespace sl::prof
