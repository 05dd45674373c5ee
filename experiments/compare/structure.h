// What the traces say about each side, and how the sides differ (profiler/trace_profile.h,
// trace_diff.h): streams with GPU work, events recorded and waited on, the concurrency profile,
// aux work hidden per layer type, each kernel's wait split by cause, the critical path of each
// step, and the role-matched kernel table against the baseline; from each side's traced run
// (live and recorded compares) or from trace-file inputs.
#pragma once
#include <string>
#include <vector>

#include "experiments/compare/comparison.h"
#include "experiments/compare/report.h"

namespace sl::compare {

// The traced runs of a run folder's sides (their eager traces; graph replay traces for the
// streams a replay used). Sides without a traced run are left out of the structure sections.
StructureReport structure_of_folder(const std::string& folder, const Comparison& c);

// Trace-file inputs with their side labels (run folders among them are skipped); the first trace
// is the baseline of the diffs.
StructureReport structure_of_inputs(const std::vector<std::string>& inputs, const std::vector<std::string>& labels);

// Writes summary.json, report.md and report.html into `folder` (each atomically).
void write_report_files(const Report& r, const std::string& folder);

}  // namespace sl::compare
