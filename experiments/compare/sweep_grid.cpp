#include "experiments/compare/sweep_grid.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sl::compare {

using nlohmann::json;

std::string SweepCell::id() const {
  std::string p;
  for (char c : policy) p += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  return p + "_n" + std::to_string(mtp_layers) + "_c" + std::to_string(mtp_compress) + "_q" +
         (connections ? std::to_string(connections) : std::string("default")) + "_" + mode + "_b" +
         std::to_string(batch) + (source != "cuda" ? "_" + source : "") + (placement == "vllm-head" ? "_head" : "") +
         (graph_scope != "step" ? "_" + graph_scope : "");
}

json SweepCell::to_json() const {
  return {{"policy", policy},   {"mtp_layers", mtp_layers},   {"mtp_compress", mtp_compress},
          {"connections", connections}, {"mode", mode}, {"batch", batch},
          {"source", source},   {"placement", placement},     {"graph_scope", graph_scope}};
}

namespace {

int int_at(const json& j, const char* k, const std::string& where) {
  SL_CHECK(j.is_object() && j.contains(k) && j[k].is_number_integer(), where, ": expected an integer \"", k, "\"");
  return j[k].get<int>();
}
std::string str_at(const json& j, const char* k, const std::string& where) {
  SL_CHECK(j.is_object() && j.contains(k) && j[k].is_string(), where, ": expected a string \"", k, "\"");
  return j[k].get<std::string>();
}
// A number in [lo, hi] (finite); `fallback` when the key is absent and not required. A record
// edited by hand or damaged must not become a step of 0 or -5 ms in the summary.
double num_at(const json& j, const char* k, const std::string& where, bool required, double lo, double hi,
              double fallback = 0) {
  if (!j.contains(k)) {
    SL_CHECK(!required, where, ": expected a number \"", k, "\"");
    return fallback;
  }
  SL_CHECK(j[k].is_number(), where, ": \"", k, "\" must be a number, not ", j[k].dump());
  const double v = j[k].get<double>();
  SL_CHECK(std::isfinite(v) && v >= lo && v <= hi, where, ": \"", k, "\" is ", j[k].dump(), ", outside [", lo, ", ",
           hi, "]");
  return v;
}
template <class T>
std::vector<T> list_at(const json& j, const char* k, const std::string& where) {
  SL_CHECK(j.is_object() && j.contains(k) && j[k].is_array(), where, ": expected an array \"", k, "\"");
  try {
    return j[k].get<std::vector<T>>();
  } catch (const json::exception&) {
    fail(where, ": \"", k, "\" holds a value of the wrong type");
  }
}

}  // namespace

SweepCell SweepCell::from_json(const json& j, const std::string& where) {
  SweepCell c;
  c.policy = str_at(j, "policy", where);
  c.mtp_layers = int_at(j, "mtp_layers", where);
  c.mtp_compress = int_at(j, "mtp_compress", where);
  c.connections = int_at(j, "connections", where);
  c.mode = str_at(j, "mode", where);
  c.batch = int_at(j, "batch", where);
  // Added later: logs before them are cuda, vllm-fix, step.
  if (j.contains("source")) c.source = str_at(j, "source", where);
  if (j.contains("placement")) c.placement = str_at(j, "placement", where);
  if (j.contains("graph_scope")) c.graph_scope = str_at(j, "graph_scope", where);
  return c;
}

std::vector<SweepCell> SweepGrid::cells() const {
  std::vector<SweepCell> out;
  for (const auto& src : sources)
    for (const auto& pl : placements)
      for (int b : batches)
        for (const auto& m : modes)
          for (const auto& gs : graph_scopes) {
            if (m == "eager" && gs != graph_scopes.front()) continue;  // the scope only matters to graphs
            for (int q : connections)
              for (int n : mtp_layers)
                for (int c : mtp_compress)
                  for (const auto& p : policies) {
                    SweepCell cell{p, n, c, q, m, b};
                    cell.source = src;
                    cell.placement = pl;
                    cell.graph_scope = m == "graph" ? gs : "step";
                    out.push_back(cell);
                  }
          }
  return out;
}

json SweepGrid::to_json() const {
  return {{"policies", policies}, {"mtp_layers", mtp_layers}, {"mtp_compress", mtp_compress},
          {"connections", connections}, {"modes", modes}, {"batches", batches},
          {"sources", sources}, {"placements", placements}, {"graph_scopes", graph_scopes}};
}

SweepGrid SweepGrid::from_json(const json& j, const std::string& where) {
  SweepGrid g;
  g.policies = list_at<std::string>(j, "policies", where);
  g.mtp_layers = list_at<int>(j, "mtp_layers", where);
  g.mtp_compress = list_at<int>(j, "mtp_compress", where);
  g.connections = list_at<int>(j, "connections", where);
  g.modes = list_at<std::string>(j, "modes", where);
  g.batches = list_at<int>(j, "batches", where);
  if (j.contains("sources")) g.sources = list_at<std::string>(j, "sources", where);
  if (j.contains("placements")) g.placements = list_at<std::string>(j, "placements", where);
  if (j.contains("graph_scopes")) g.graph_scopes = list_at<std::string>(j, "graph_scopes", where);
  g.validate();
  return g;
}

void SweepGrid::validate() const {
  SL_CHECK(!policies.empty() && !mtp_layers.empty() && !mtp_compress.empty() && !connections.empty() &&
               !modes.empty() && !batches.empty(),
           "sweep: every dimension needs at least one value");
  for (int n : mtp_layers) SL_CHECK(n >= 0 && n <= 64, "sweep: --mtp-layers values must be in [0, 64], not ", n);
  for (int c : mtp_compress)
    SL_CHECK(c == 0 || c == 4 || c == 128, "sweep: --mtp-compress values must be 0, 4 or 128, not ", c);
  for (int q : connections)
    SL_CHECK(q >= 0 && q <= 32, "sweep: --connections values must be in [1, 32] (0 = unset), not ", q);
  for (const auto& m : modes) SL_CHECK(m == "eager" || m == "graph", "sweep: --modes takes eager and graph, not '", m, "'");
  for (int b : batches) SL_CHECK(b >= 1 && b <= 4096, "sweep: --batches values must be in [1, 4096], not ", b);
  SL_CHECK(!sources.empty() && !placements.empty() && !graph_scopes.empty(),
           "sweep: every dimension needs at least one value");
  for (const auto& x : sources) SL_CHECK(x == "cuda" || x == "torch", "sweep: --sources takes cuda and torch, not '", x, "'");
  for (const auto& x : placements)
    SL_CHECK(x == "vllm-fix" || x == "vllm-head", "sweep: --placements takes vllm-fix and vllm-head, not '", x, "'");
  for (const auto& x : graph_scopes)
    SL_CHECK(x == "step" || x == "split" || x == "piecewise",
             "sweep: --graph-scopes takes step, split and piecewise, not '", x, "'");
  const size_t n = policies.size() * mtp_layers.size() * mtp_compress.size() * connections.size() * modes.size() *
                   batches.size() * sources.size() * placements.size() * graph_scopes.size();
  SL_CHECK(n <= 100000, "sweep: ", n, " cells is more than 100000; choose subsets");
  std::set<std::string> ids;
  for (const auto& c : cells()) SL_CHECK(ids.insert(c.id()).second, "sweep: the cell ", c.id(), " is listed twice");
}

json CellRecord::to_json() const {
  json j{{"cell", cell.to_json()}, {"id", cell.id()}, {"status", status}, {"seconds", seconds}};
  if (status == "ok")
    j.update({{"measurement", measurement},
              {"step_ms", step_ms},
              {"target_ms", target_ms},
              {"draft_ms", draft_ms},
              {"spread_pct", spread_pct},
              {"streams_created", streams_created},
              {"graph_nodes", graph_nodes},
              {"graph_edges", graph_edges},
              {"peak_bytes", peak_bytes},
              {"library_bytes", library_bytes}});
  else
    j["reason"] = reason;
  return j;
}

CellRecord CellRecord::from_json(const json& j, const std::string& where) {
  CellRecord r;
  SL_CHECK(j.is_object() && j.contains("cell"), where, ": expected a cell record");
  r.cell = SweepCell::from_json(j["cell"], where + ".cell");
  r.status = str_at(j, "status", where);
  SL_CHECK(r.status == "ok" || r.status == "failed", where, ": status must be ok or failed, not '", r.status, "'");
  r.seconds = num_at(j, "seconds", where, false, 0, 1e9);
  if (r.status == "ok") {
    constexpr double kMaxMs = 1e10, kMaxCount = 1e12, kMaxBytes = 1e18;
    r.measurement = str_at(j, "measurement", where);
    r.step_ms = num_at(j, "step_ms", where, true, 1e-6, kMaxMs);  // a step takes time: 0 would be a fake result
    r.target_ms = num_at(j, "target_ms", where, false, 0, kMaxMs);
    r.draft_ms = num_at(j, "draft_ms", where, false, 0, kMaxMs);
    r.spread_pct = num_at(j, "spread_pct", where, false, 0, 1e6);
    r.streams_created = int(num_at(j, "streams_created", where, false, 0, 1e6));
    r.graph_nodes = size_t(num_at(j, "graph_nodes", where, false, 0, kMaxCount));
    r.graph_edges = size_t(num_at(j, "graph_edges", where, false, 0, kMaxCount));
    r.peak_bytes = num_at(j, "peak_bytes", where, false, 0, kMaxBytes);
    r.library_bytes = num_at(j, "library_bytes", where, false, 0, kMaxBytes);
  } else {
    if (j.contains("reason")) r.reason = str_at(j, "reason", where);
  }
  return r;
}

std::map<std::string, CellRecord> read_cell_log(const std::string& path, size_t* torn) {
  std::map<std::string, CellRecord> out;
  const std::vector<std::string> lines = read_complete_lines(path, torn);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = "'" + path + "' line " + std::to_string(i + 1);
    json j;
    try {
      j = json::parse(lines[i]);
    } catch (const json::exception& e) {
      fail(where, ": not JSON (", e.what(), ")");
    }
    CellRecord r = CellRecord::from_json(j, where);
    out[r.cell.id()] = r;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> v;
  size_t i = 0;
  SL_CHECK(!text.empty(), flag, ": expected comma-separated integers");
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    SL_CHECK(!item.empty() && used == item.size(), flag, ": '", item, "' is not an integer");
    v.push_back(x);
    i = j + 1;
  }
  return v;
}

}  // namespace sl::compare
