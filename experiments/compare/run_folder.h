// A compare run folder (results/compare/<date>_<gpu>_<commit>/): summary.json (gzipped as
// summary.json.gz in the recorded folders), report.md, report.html, runs/ (one measurement per
// untraced child process), traces/ (the traced processes: measurement, Kineto JSON, SQLite),
// logs/. summary.json lists every run with its side, so that the folder can be read back (compare
// FOLDER, and compare without a GPU, which reads the runs recorded on a GPU that ship in the
// repository).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/compare/comparison.h"
#include "experiments/compare/live_plan.h"

namespace sl::compare {

nlohmann::json plan_to_json(const std::vector<PlannedRun>& plan);

struct RunFolder {
  std::string path;
  nlohmann::json summary;
  std::vector<PlannedRun> runs;
  std::vector<std::string> side_labels;      // in the order of the live run (baseline first)
  std::string baseline;
  std::optional<std::string> baseline_again, reference;
};

// The folder's summary: summary.json, or summary.json.gz where only that exists. A folder holding
// both is refused (which one is current cannot be told). Without either, summary.json (for the
// caller's error message).
std::string summary_path(const std::string& folder);

// Throws sl::Error naming the folder and what is missing or malformed.
RunFolder read_run_folder(const std::string& path);

// One side per label (measurements read from the folder); traced runs attached to their side.
std::vector<Side> load_sides(const RunFolder& f);

// The newest folder under `root` holding a live compare measured on a GPU (folder "" when none).
// With `policies` and `model_args` given, the newest of those measured with exactly these settings
// comes first (what the same command would have measured; same_settings true), then the newest of
// any (same_settings false: the caller must say that its settings differ from those asked for).
struct RecordedRun {
  std::string folder;
  bool same_settings = false;
};
RecordedRun find_recorded_run(const std::string& root, const std::vector<std::string>& policies = {},
                              const std::vector<std::string>& model_args = {});

// "<date>_<gpu>_<commit>", file-name safe ("2026-12-04_NVIDIA-H200_1a2b3c4").
std::string run_folder_name(const std::string& date_utc, const std::string& gpu, const std::string& commit);

}  // namespace sl::compare
