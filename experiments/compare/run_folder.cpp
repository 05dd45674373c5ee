#include "experiments/compare/run_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/gzip.h"

namespace sl::compare {

namespace fs = std::filesystem;
using nlohmann::json;

json plan_to_json(const std::vector<PlannedRun>& plan) {
  json a = json::array();
  for (const auto& r : plan)
    a.push_back({{"side", r.side},
                 {"policy", r.policy},
                 {"repetition", r.repetition},
                 {"traced", r.traced},
                 {"out", r.out},
                 {"log", r.log}});
  return a;
}

namespace {

// Plain or gzip (recorded folders keep summary.json gzipped to travel small in the repository).
json read_json_file(const std::string& path) {
  try {
    if (is_gzip_file(path)) return json::parse(gunzip_file(path));
    std::ifstream f(path);
    SL_CHECK(f, "cannot read '", path, "'");
    return json::parse(f);
  } catch (const json::exception& e) {
    fail("'", path, "' is not valid JSON: ", e.what());
  }
}

std::string str_at(const json& j, const char* key, const std::string& where) {
  SL_CHECK(j.is_object() && j.contains(key) && j[key].is_string(), where, ": expected a string field \"", key, "\"");
  return j[key].get<std::string>();
}

// A path inside the folder that must not climb out of it (summary.json is input, too).
std::string inside(const std::string& folder, const std::string& rel, const std::string& where) {
  SL_CHECK(!rel.empty() && rel[0] != '/' && rel.find("..") == std::string::npos, where, ": the path '", rel,
           "' must stay inside the run folder");
  return folder + "/" + rel;
}

}  // namespace

std::string summary_path(const std::string& folder) {
  const std::string plain = folder + "/summary.json";
  std::error_code ec;
  SL_CHECK(!(fs::exists(plain, ec) && fs::exists(plain + ".gz", ec)), "'", folder,
           "' holds both summary.json and summary.json.gz: keep the current one");
  return plain_or_gz(plain);
}

namespace {

// The summary's fields into f (nlohmann throws on a field of the wrong type).
void read_run_folder_fields(RunFolder& f, const std::string& path, const std::string& where) {
  SL_CHECK(f.summary.is_object() && f.summary.value("schema", "") == "streamlab.compare/1", where,
           ": not a streamlab compare summary (schema streamlab.compare/1)");
  const json& settings = f.summary["settings"];
  SL_CHECK(settings.is_object() && settings.contains("runs") && settings["runs"].is_array(), where,
           ": settings.runs is missing (a summary of inputs, not of a live run?)");
  std::set<fs::path> run_files;  // each run file once (normalised: "runs/./a.json" is "runs/a.json")
  for (const auto& j : settings["runs"]) {
    PlannedRun r;
    r.side = str_at(j, "side", where + " settings.runs[]");
    SL_CHECK(!r.side.empty(), where, ": settings.runs[] has an empty side label");
    r.policy = str_at(j, "policy", where + " settings.runs[]");
    r.out = str_at(j, "out", where + " settings.runs[]");
    r.log = j.value("log", "");
    r.traced = j.value("traced", false);
    r.repetition = j.value("repetition", 0);
    SL_CHECK(run_files.insert(fs::path(inside(path, r.out, where)).lexically_normal()).second, where,
             ": settings.runs lists '", r.out, "' twice (its steps would count double in the verdict)");
    f.runs.push_back(r);
    if (std::find(f.side_labels.begin(), f.side_labels.end(), r.side) == f.side_labels.end())
      f.side_labels.push_back(r.side);
  }
  SL_CHECK(!f.runs.empty(), where, ": lists no runs");
  f.baseline = str_at(settings, "baseline", where + " settings");
  if (settings.contains("baseline_again") && settings["baseline_again"].is_string())
    f.baseline_again = settings["baseline_again"].get<std::string>();
  // The A-vs-A noise of a side against itself would be zero: the margin would be the floor while
  // saying it was measured.
  SL_CHECK(!f.baseline_again || *f.baseline_again != f.baseline, where, ": settings.baseline_again names the "
           "baseline itself ('", f.baseline, "')");
  if (settings.contains("reference") && settings["reference"].is_string())
    f.reference = settings["reference"].get<std::string>();
}

}  // namespace

RunFolder read_run_folder(const std::string& path) {
  RunFolder f;
  f.path = path;
  SL_CHECK(fs::is_directory(path), "'", path, "' is not a folder");
  const std::string sp = summary_path(path);
  SL_CHECK(fs::is_regular_file(sp), "'", path,
           "' is not a compare run folder: it has no summary.json (or summary.json.gz)");
  f.summary = read_json_file(sp);
  const std::string where = "'" + sp + "'";
  try {
    read_run_folder_fields(f, path, where);
  } catch (const json::exception& e) {
    // (nlohmann's own words name neither the file nor the field.)
    fail(where, ": a field holds a value of the wrong type (", e.what(), ")");
  }
  return f;
}

std::vector<Side> load_sides(const RunFolder& f) {
  std::vector<Side> sides;
  for (const auto& label : f.side_labels) {
    Side s;
    s.label = label;
    s.origin = f.path;
    sides.push_back(s);
  }
  auto side_of = [&](const std::string& label) -> Side& {
    for (auto& s : sides)
      if (s.label == label) return s;
    fail("internal: no side '", label, "'");
  };
  for (const auto& r : f.runs) {
    const std::string p = inside(f.path, r.out, "'" + f.path + "/summary.json'");
    SL_CHECK(fs::is_regular_file(p), "'", f.path, "': the run '", r.out, "' listed in summary.json is missing");
    Measurement m = read_measurement(p);
    Side& s = side_of(r.side);
    if (r.traced) {
      s.traced_runs.push_back(std::move(m));
    } else {
      add_measurement(s, m);
    }
  }
  return sides;
}

RecordedRun find_recorded_run(const std::string& root, const std::vector<std::string>& policies,
                              const std::vector<std::string>& model_args) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  std::string best, best_date, match, match_date;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory() || e.path().filename().string().rfind('.', 0) == 0) continue;
    json j;
    try {
      const std::string sp = summary_path(e.path().string());  // throws on two summaries: skipped
      if (!fs::is_regular_file(sp)) continue;
      j = read_json_file(sp);
    } catch (...) {
      continue;  // not ours or damaged: never the one shown
    }
    // A field of the wrong type (a damaged or hand-edited summary) skips the folder like any other
    // damage: one bad folder must not stop every compare without a GPU.
    try {
      if (!j.is_object() || j.value("schema", "") != "streamlab.compare/1") continue;
      const json& prov = j["provenance"];
      if (!prov.is_object() || !prov.contains("gpu") || !prov["gpu"].is_string()) continue;
      const std::string gpu = prov["gpu"].get<std::string>();
      if (gpu.empty() || gpu.rfind("none", 0) == 0) continue;
      const std::string date = prov.value("date", "");
      if (best.empty() || date > best_date) {
        best = e.path().string();
        best_date = date;
      }
      const json st = j.value("settings", json::object());
      if (!policies.empty() && st.is_object() && st.value("policies", json()) == json(policies) &&
          st.value("model_args", json()) == json(model_args) && (match.empty() || date > match_date)) {
        match = e.path().string();
        match_date = date;
      }
    } catch (const json::exception&) {
      continue;
    }
  }
  if (!match.empty()) return {match, true};
  return {best, false};
}

std::string run_folder_name(const std::string& date_utc, const std::string& gpu, const std::string& commit) {
  auto clean = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') out += c;
      else if (!out.empty() && out.back() != '-') out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? std::string("unknown") : out;
  };
  return clean(date_utc.substr(0, 10)) + "_" + clean(gpu) + "_" + clean(commit);
}

}  // namespace sl::compare
