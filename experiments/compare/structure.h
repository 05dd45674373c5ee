// What the traces say about each side, and how the sides differ: streams with GPU work, events
// recorded and waited on, overlap and the concurrency profile, aux work hidden under the main
// stream, queue waits and suspected false dependencies (profiler/analysis.h), computed from each
// side's traced run (live and recorded compares) or from trace-file inputs.
#pragma once
#include <string>
#include <vector>

#include "experiments/compare/comparison.h"
#include "experiments/compare/report.h"

namespace sl::compare {

// The traced runs of a run folder's sides (their eager traces; graph replay traces for the
// streams a replay used). Sides without a traced run are left out of the structure sections.
StructureReport structure_of_folder(const std::string& folder, const Comparison& c);

// Trace-file inputs, in the order of the comparison's sides (run folders among them are skipped).
StructureReport structure_of_inputs(const std::vector<std::string>& inputs, const Comparison& c);

// Writes summary.json, report.md and report.html into `folder` (each atomically).
void write_report_files(const Report& r, const std::string& folder);

}  // namespace sl::compare
