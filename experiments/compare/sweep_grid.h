// streamlab sweep: a grid of measurements (policy x MTP layers x MTP compress x hardware queues x
// eager/graph x batch), each cell one child process (`streamlab measure`), logged one JSON line per
// finished cell so that a killed sweep resumes where it stopped without repeating or losing a
// cell. This file holds the grid and the log's records; cmd_sweep.cpp runs it.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sl::compare {

struct SweepCell {
  std::string policy;
  int mtp_layers = 1, mtp_compress = 0;
  int connections = 0;  // CUDA_DEVICE_MAX_CONNECTIONS; 0 = unset (driver default 8)
  std::string mode;     // eager | graph
  int batch = 1;
  std::string source = "cuda";         // --stream-source
  std::string placement = "vllm-fix";  // --placement
  std::string graph_scope = "step";    // --graph-scope (graph cells)
  // Stable and file-name safe: "shared_n4_c4_q8_graph_b1", with "_torch", "_head", "_split"
  // appended for the non-default source, placement and graph scope (so older logs keep their ids).
  std::string id() const;
  nlohmann::json to_json() const;
  static SweepCell from_json(const nlohmann::json& j, const std::string& where);
  bool operator==(const SweepCell& o) const { return id() == o.id(); }
};

struct SweepGrid {
  std::vector<std::string> policies{"per-layer", "shared"};
  std::vector<int> mtp_layers{1, 2, 4, 8};
  std::vector<int> mtp_compress{0, 4};
  std::vector<int> connections{1, 4, 8, 32};
  std::vector<std::string> modes{"eager", "graph"};
  std::vector<int> batches{1, 8, 64};
  std::vector<std::string> sources{"cuda"};
  std::vector<std::string> placements{"vllm-fix"};
  std::vector<std::string> graph_scopes{"step"};  // graph cells only; eager cells run once
  // Cells in run order: the policies innermost, so that the two policies of one setting run
  // back to back (the closest to an A/B the grid offers).
  std::vector<SweepCell> cells() const;
  nlohmann::json to_json() const;
  static SweepGrid from_json(const nlohmann::json& j, const std::string& where);
  void validate() const;  // throws sl::Error on an empty or out-of-range dimension
};

// One finished cell, as logged.
struct CellRecord {
  SweepCell cell;
  std::string status;      // "ok" or "failed"
  std::string reason;      // failed: why (the child's last error line)
  std::string measurement; // ok: the measurement file, relative to the sweep folder
  double seconds = 0;
  // ok: medians of the measurement (ms) for the summary.
  double step_ms = 0, target_ms = 0, draft_ms = 0, spread_pct = 0;
  int streams_created = 0;
  size_t graph_nodes = 0, graph_edges = 0;
  double peak_bytes = 0, library_bytes = 0;
  nlohmann::json to_json() const;
  static CellRecord from_json(const nlohmann::json& j, const std::string& where);
};

// The complete lines of a cell log (a torn last line, from a kill mid-write, is dropped and
// counted in *torn). A later record of a cell replaces an earlier one.
std::map<std::string, CellRecord> read_cell_log(const std::string& path, size_t* torn = nullptr);

// Parses "1,2,4" ("" is an error naming `flag`).
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);

}  // namespace sl::compare
