// What compare reports, gathered once and rendered four ways: the terminal table, summary.json,
// report.md and a self-contained report.html (report_html.cpp).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/compare/comparison.h"

namespace sl::compare {

// Structure and resources of one side, from its measurements (medians over its processes).
struct SideResources {
  std::string label;
  std::string system;                 // which system the figures are true of
  int streams_created = 0;
  std::vector<std::string> stream_names, stream_owners;
  double stream_setup_ms = 0;
  int events_created = 0;
  double library_bytes = 0, peak_bytes = 0, weights_bytes = 0;
  size_t graph_nodes = 0, graph_edges = 0;
  std::string graph_scope = "step";
  size_t graph_count = 1;
  std::string placement = "vllm-fix";
  int cublas_handles = 0, cublas_workspaces = 0;  // 0: not recorded (older measurements)
  std::vector<std::string> aliased;   // torch source: pool streams serving several users
  std::string connections;            // CUDA_DEVICE_MAX_CONNECTIONS ("" = driver default)
  // Tracing on / off inside the traced process: median traced step / median untraced step.
  std::optional<double> tracing_ratio_eager, tracing_ratio_graph;
};
SideResources resources_of(const Side& s);

// What the traces say, per side and as differences (filled from profiler/trace_profile when
// traces exist; empty otherwise).
struct StructureReport {
  nlohmann::json json;                // per side profiles and per contender diffs
  std::string text;                   // the terminal rendering
  std::string markdown;               // report.md's sections
  std::string html;                   // report.html's sections (SVG plots inline)
};

struct Report {
  std::string source_line;            // the first line: where the figures come from
  nlohmann::json provenance;          // GPU, driver, CUDA, commit, date of the measurements
  nlohmann::json settings;            // what was run, or which inputs were read
  Comparison cmp;
  std::vector<SideResources> resources;
  StructureReport structure;
  std::vector<std::string> files;     // files of the run folder, for links (relative)
  // Timeline screenshots of each side's traced steps (label, PNG path): report.html embeds them.
  std::vector<std::pair<std::string, std::string>> screenshots;
  std::string written_by;             // the commit of the binary that wrote the report
};

// The verdict sentences, most important first (each difference with its verdict and interval).
std::vector<std::string> verdict_lines(const Report& r);

std::string report_text(const Report& r);
std::string report_markdown(const Report& r);
std::string report_html(const Report& r);
nlohmann::json report_json(const Report& r);

// A difference's verdict as a table cell: "per-layer faster", "no meaningful difference",
// "inconclusive (~12 repetitions would settle it)".
std::string verdict_label(const Comparison& c, const MetricDiff& d);

// The resources table, one row per figure: {name, value per side...} (all renderings use it).
std::vector<std::vector<std::string>> resource_rows(const std::vector<SideResources>& res);
// "per-layer: torch.pool.p0.00 = target.aux0 + mtp9.aux1", one line per aliased CUDA stream of
// each side (the torch source past the pool's 32 draws); empty when nothing aliases.
std::vector<std::string> aliasing_lines(const std::vector<SideResources>& res);

// Which system a side's figures are true of, in words ("cuda" -> a C++ engine creating streams).
std::string system_words(const std::string& system);

// "+1.23 %" style formatting shared by the renderers.
std::string format_pct(double fraction, int decimals = 2);
std::string format_interval(const stats::DiffInterval& d);
std::string format_bytes(double bytes);  // "544.0 MiB"

// Milliseconds, relative spread and count of one side's key ("2.215 ms +-0.3 % (5x20)").
std::string format_latency(const LatencySummary& s);

}  // namespace sl::compare
