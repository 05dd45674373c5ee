// `streamlab sweep`: the stream policies over a grid of settings, each cell in a child process of
// its own (`streamlab measure`), resumable.
//
// The sweep folder (results/sweep/<date>_<gpu>_<commit>/) holds sweep.json (the grid and settings,
// written before the first cell), cells.jsonl (one line per finished cell, appended with one
// write and fsynced), cells/<id>.json (each cell's measurement), logs/, and at the end
// summary.json, summary.md and summary.html. A sweep killed at any point (Ctrl-C, SIGKILL, a lost
// machine) resumes with `streamlab sweep --resume DIR`: the cells with a line are kept, a cell
// cut short has none and runs again.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/stats.h"
#include "experiments/cli/backend_choice.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/number_checks.h"
#include "experiments/cli/model_options.h"
#include "experiments/cli/provenance.h"
#include "experiments/compare/child_process.h"
#include "experiments/compare/measurement.h"
#include "experiments/compare/report.h"
#include "experiments/compare/run_folder.h"
#include "experiments/compare/svg_plot.h"
#include "experiments/compare/sweep_grid.h"
#include "model/config.h"

namespace sl::cli {
namespace {

namespace fs = std::filesystem;
using compare::CellRecord;
using compare::SweepCell;
using compare::SweepGrid;
using nlohmann::json;

struct SweepOptions {
  std::string policies = "per-layer,shared", mtp_layers = "1,2,4,8", mtp_compress = "0,4", connections = "1,4,8,32",
              modes = "eager,graph", batches = "1,8,64";
  std::string sources = "cuda", placements = "vllm-fix", graph_scopes = "step";
  std::string config = "flash-6l";
  int context = 2048;
  int draft_steps = 0;  // 0: as many as MTP layers (every MTP layer runs once per step)
  int steps = 10, warmup = 3;
  std::string backend = "cuda";
  std::string kernel_variants;  // every cell's (model/kernel_variants.h)
  std::string weights = "bf16";  // every cell's weight format (--weights)
  int expert_ranks = 1;          // every cell's split over ranks (--expert-ranks; rank 0 timed)
  bool attention_tp = false;     // and whether the attention's heads are split too
  int gpus = 0;                  // --gpus N: --backend cuda --expert-ranks N
  std::string out_dir = "results/sweep";
  bool out_dir_given = false;
  std::string resume;
  bool retry_failed = false;
  double child_timeout_s = 600;
  bool json_out = false;
};


std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(item);
  return v;
}

std::vector<std::string> cell_argv(const json& settings, const SweepCell& c, const std::string& folder) {
  // 0 draft steps: one per MTP layer, none without MTP layers (a plain decode step).
  const int draft = settings["draft_steps"].get<int>() > 0 ? settings["draft_steps"].get<int>() : c.mtp_layers;
  std::vector<std::string> argv{compare::self_executable(), "measure",
          "--backend", settings["backend"].get<std::string>(),
          "--config", settings["config"].get<std::string>(),
          "--context", std::to_string(settings["context"].get<int>()),
          "--policy", c.policy,
          "--mtp-layers", std::to_string(c.mtp_layers),
          "--mtp-compress", std::to_string(c.mtp_compress),
          "--draft-steps", std::to_string(draft),
          "--batch", std::to_string(c.batch),
          "--modes", c.mode,
          "--steps", std::to_string(settings["steps"].get<int>()),
          "--warmup", std::to_string(settings["warmup"].get<int>()),
          "--stream-source", c.source,
          "--placement", c.placement,
          "--graph-scope", c.graph_scope,
          "--out", folder + "/cells/" + c.id() + ".json"};
  // Older sweep.json files have neither weights nor kernel_variants: bf16 and the defaults.
  if (const std::string w = settings.value("weights", std::string("bf16")); w != "bf16")
    argv.insert(argv.end(), {"--weights", w});
  if (const std::string kv = settings.value("kernel_variants", std::string()); !kv.empty())
    argv.insert(argv.end(), {"--kernel-variants", kv});
  // Older sweep.json files have no split: one rank.
  if (const int ranks = settings.value("expert_ranks", 1); ranks > 1) {
    argv.insert(argv.end(), {"--expert-ranks", std::to_string(ranks)});
    if (settings.value("attention_tp", false)) argv.push_back("--attention-tp");
  }
  return argv;
}

// The child's own words for a failure: its last line that says "error", else its last line.
std::string failure_reason(const std::string& log, const compare::ChildResult& r) {
  const std::string tail = compare::tail_of(log, 40);
  std::string best, last;
  std::stringstream ss(tail);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("  | ", 0) == 0) line = line.substr(4);
    if (line.empty()) continue;
    last = line;
    if (line.find("error") != std::string::npos) best = line;
  }
  return r.describe() + ": " + (best.empty() ? last : best);
}

CellRecord record_of(const SweepCell& c, const std::string& folder, double seconds) {
  CellRecord r;
  r.cell = c;
  r.status = "ok";
  r.seconds = seconds;
  r.measurement = "cells/" + c.id() + ".json";
  const compare::Measurement m = compare::read_measurement(folder + "/" + r.measurement);
  const compare::ModeSamples* s = m.mode(c.mode);
  SL_CHECK(s && !s->step_ms.empty(), folder, "/", r.measurement, ": no ", c.mode, " steps in the measurement");
  r.step_ms = stats::median(s->step_ms);
  r.target_ms = stats::median(s->target_ms);
  r.draft_ms = stats::median(s->draft_ms);
  r.spread_pct = r.step_ms > 0 ? 100 * stats::mad(s->step_ms) / r.step_ms : 0;
  r.streams_created = m.streams_created;
  r.graph_nodes = s->graph_nodes;
  r.graph_edges = s->graph_edges;
  r.peak_bytes = m.peak_bytes;
  r.library_bytes = m.library_bytes;
  return r;
}


// ---- the summary: one row per setting, the policies side by side.

struct SummaryRow {
  std::string setting;  // "batch 1, graph, queues 8, 4 MTP layers, compress 4"
  std::vector<const CellRecord*> by_policy;  // in the grid's policy order (nullptr: not run)
};

std::vector<SummaryRow> summary_rows(const SweepGrid& g, const std::map<std::string, CellRecord>& done) {
  std::vector<SummaryRow> rows;
  std::map<std::string, size_t> index;
  for (const auto& c : g.cells()) {
    SweepCell key = c;
    key.policy = "";
    const std::string k = key.id();
    if (!index.count(k)) {
      index[k] = rows.size();
      SummaryRow r;
      r.setting = "batch " + std::to_string(c.batch) + ", " + c.mode + ", queues " +
                  (c.connections ? std::to_string(c.connections) : std::string("default")) + ", " +
                  std::to_string(c.mtp_layers) + " MTP, compress " + std::to_string(c.mtp_compress);
      // The dimensions added later, named when the grid varies them or they are not the default.
      if (g.sources.size() > 1 || c.source != "cuda") r.setting += ", " + c.source;
      if (g.placements.size() > 1 || c.placement != "vllm-fix") r.setting += ", " + c.placement;
      if (c.mode == "graph" && (g.graph_scopes.size() > 1 || c.graph_scope != "step"))
        r.setting += ", " + c.graph_scope + " graphs";
      r.by_policy.assign(g.policies.size(), nullptr);
      rows.push_back(r);
    }
    const size_t p = size_t(std::find(g.policies.begin(), g.policies.end(), c.policy) - g.policies.begin());
    auto it = done.find(c.id());
    if (it != done.end()) rows[index[k]].by_policy[p] = &it->second;
  }
  return rows;
}

std::string cell_text(const CellRecord* r) {
  if (!r) return "not run";
  if (r->status != "ok") return "failed";
  char b[64];
  std::snprintf(b, sizeof b, "%.3f ms +-%.1f%%", r->step_ms, r->spread_pct);
  return b;
}

std::optional<double> ratio(const SummaryRow& row) {
  if (row.by_policy.size() < 2) return std::nullopt;
  const CellRecord *a = row.by_policy[0], *b = row.by_policy[1];
  if (!a || !b || a->status != "ok" || b->status != "ok" || a->step_ms <= 0) return std::nullopt;
  return b->step_ms / a->step_ms - 1;
}

std::string summary_text(const SweepGrid& g, const std::vector<SummaryRow>& rows, const std::string& head) {
  std::ostringstream os;
  os << head << "\n";
  char buf[512];
  size_t width = 52;
  for (const auto& r : rows) width = std::max(width, r.setting.size() + 2);
  std::snprintf(buf, sizeof buf, "  %-*s", int(width), "setting");
  os << buf;
  for (const auto& p : g.policies) {
    std::snprintf(buf, sizeof buf, "%-22s", p.c_str());
    os << buf;
  }
  if (g.policies.size() >= 2) os << g.policies[1] << "/" << g.policies[0] << " - 1";
  os << "\n";
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "  %-*s", int(width), r.setting.c_str());
    os << buf;
    for (const auto* c : r.by_policy) {
      std::snprintf(buf, sizeof buf, "%-22s", cell_text(c).c_str());
      os << buf;
    }
    if (auto x = ratio(r)) os << compare::format_pct(*x);
    os << "\n";
  }
  return os.str();
}

void write_summary(const std::string& folder, const SweepGrid& g, const json& settings,
                   const std::map<std::string, CellRecord>& done, const std::string& head) {
  const std::vector<SummaryRow> rows = summary_rows(g, done);
  json cells = json::array();
  for (const auto& [id, r] : done) cells.push_back(r.to_json());
  json jrows = json::array();
  for (const auto& r : rows) {
    json x{{"setting", r.setting}};
    for (size_t p = 0; p < r.by_policy.size(); ++p)
      x[g.policies[p]] = r.by_policy[p] ? r.by_policy[p]->to_json() : json();
    if (auto q = ratio(r)) x["relative_difference"] = *q;
    jrows.push_back(x);
  }
  write_file_atomic(folder + "/summary.json",
                    json{{"schema", "streamlab.sweep/1"}, {"settings", settings}, {"rows", jrows}, {"cells", cells}}
                            .dump(1) + "\n");
  const std::string text = summary_text(g, rows, head);
  write_file_atomic(folder + "/summary.md", "# streamlab sweep\n\n```\n" + text + "```\n\n" +
                                                "One process per cell; each figure is the median decode step "
                                                "(GPU time between timing marks) of that process, +- the median "
                                                "absolute deviation of its steps. Cells: cells.jsonl; measurements: "
                                                "cells/.\n");
  std::vector<std::string> cats;
  compare::Series s{g.policies.size() >= 2 ? g.policies[1] + " / " + g.policies[0] + " - 1" : "", {}};
  for (const auto& r : rows)
    if (auto q = ratio(r)) {
      cats.push_back(r.setting);
      s.values.push_back(100 * *q);
    }
  std::string html = "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>streamlab sweep</title>"
                     "<style>body{font-family:system-ui,sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em}"
                     "</style></head><body><h1>streamlab sweep</h1><pre>" +
                     compare::html_escape(text) + "</pre>";
  // Differences can be negative: bars show them shifted so that 0 % is readable in the title.
  if (!cats.empty()) {
    double lo = 0;
    for (double v : s.values) lo = std::min(lo, v);
    compare::Series shifted = s;
    for (double& v : shifted.values) v -= lo;
    html += compare::svg_bars("Step time difference per setting (%; bars start at " + compare::format_pct(lo / 100) +
                                  ")",
                              cats, {shifted}, "% above the lowest");
  }
  html += "</body></html>\n";
  write_file_atomic(folder + "/summary.html", html);
}

// One sweep per folder at a time: two runs of `--resume DIR` would run the same cells at once (on
// one GPU, each spoiling the other's timings) and both append to cells.jsonl. An flock on
// DIR/sweep.lock, held until the process ends (the kernel drops it on any death, SIGKILL included).
void lock_sweep_folder(const std::string& folder) {
  const std::string path = folder + "/sweep.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SL_CHECK(fd >= 0, "sweep: cannot open '", path, "': ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    SL_CHECK(err != EWOULDBLOCK, "sweep: '", folder, "' is in use by another sweep",
             n > 0 ? " (process " + std::string(pid, size_t(n)) + ")" : std::string(),
             "; two sweeps of one folder would run the same cells at once");
    fail("sweep: cannot lock '", path, "': ", std::strerror(err));
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    std::fprintf(stderr, "sweep: warning: cannot write the process id into '%s' (%s)\n", path.c_str(),
                 std::strerror(errno));
  // The descriptor stays open (and the lock held) for the life of the process.
}

// sweep.json as read back on --resume: every key the cells use, of its type and range, so that a
// damaged or hand-edited file is named here rather than failing each cell in turn.
void check_settings(const json& st, const std::string& sp) {
  SL_CHECK(st.is_object(), "'", sp, "': expected a JSON object");
  SL_CHECK(st.value("schema", std::string()) == "streamlab.sweep/1", "'", sp, "': \"schema\" must be "
           "\"streamlab.sweep/1\" (not a sweep's settings?), not ", st.contains("schema") ? st["schema"].dump() : "absent");
  auto need = [&](const char* k, bool ok, const char* what) {
    SL_CHECK(st.contains(k) && ok, "'", sp, "': \"", k, "\" must be ", what,
             st.contains(k) ? ", not " + st[k].dump() : std::string(" (absent)"));
  };
  auto whole = [&](const char* k, int lo, int hi) {
    const bool ok = st.contains(k) && st[k].is_number_integer() && st[k].get<int64_t>() >= lo && st[k].get<int64_t>() <= hi;
    need(k, ok, ("a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]").c_str());
  };
  need("config", st.contains("config") && st["config"].is_string() && !st["config"].get<std::string>().empty(),
       "a config name or path");
  whole("context", 1, 1 << 24);
  whole("draft_steps", 0, 4096);
  whole("steps", 1, 1 << 24);
  whole("warmup", 1, 1 << 24);
  const std::string backend = st.contains("backend") && st["backend"].is_string() ? st["backend"].get<std::string>() : "";
  need("backend", backend == "cpu" || backend == "cuda", "\"cpu\" or \"cuda\"");
  // Keys added later are optional (older sweeps), but typed when present.
  if (st.contains("weights")) {
    const std::string w = st["weights"].is_string() ? st["weights"].get<std::string>() : "";
    need("weights", w == "bf16" || w == "native" || w == "native-w4a8", "bf16, native or native-w4a8");
  }
  if (st.contains("kernel_variants")) {
    need("kernel_variants", st["kernel_variants"].is_string(), "a string");
    const std::string why = kernel_variants_error(st["kernel_variants"].get<std::string>());
    SL_CHECK(why.empty(), "'", sp, "': \"kernel_variants\": ", why);
  }
  if (st.contains("expert_ranks")) whole("expert_ranks", 1, 1024);
  if (st.contains("attention_tp")) need("attention_tp", st["attention_tp"].is_boolean(), "true or false");
  if (st.contains("config_json")) need("config_json", st["config_json"].is_object(), "an object");
  need("provenance", st.contains("provenance") && st["provenance"].is_object(), "an object");
  if (st.contains("commit")) need("commit", st["commit"].is_string(), "a string");
}

// The grid's MTP layer counts against the draft steps: with N > 0 draft steps every cell needs an
// MTP layer (a cell of 0 MTP layers would fail in its child, after the others had run).
void check_draft_steps(const SweepGrid& grid, int draft_steps, const std::string& where) {
  if (draft_steps <= 0) return;
  for (int n : grid.mtp_layers)
    SL_CHECK(n >= 1, where, ": --draft-steps ", draft_steps, " needs MTP layers, and --mtp-layers has 0 (leave "
             "--draft-steps at 0: one draft step per MTP layer, none without)");
}

// The config a sweep starts with, as DeepSeek-layout JSON: recorded in sweep.json, so that a
// resumed sweep whose config file changed in between is refused instead of mixing two models.
json config_snapshot(const std::string& name_or_path) { return config_to_json(load_config(name_or_path)); }

// --resume FOLDER: the grid and settings the sweep started with.
std::string resume_sweep(const SweepOptions& o, SweepGrid& grid, json& settings) {
  const std::string folder = o.resume;
  const std::string sp = folder + "/sweep.json";
  SL_CHECK(fs::is_regular_file(sp), "sweep --resume: '", folder, "' has no sweep.json (not a sweep folder)");
  std::ifstream f(sp);
  try {
    settings = json::parse(f);
  } catch (const json::exception& e) {
    fail("'", sp, "' is not valid JSON: ", e.what());
  }
  check_settings(settings, sp);
  grid = SweepGrid::from_json(settings.value("grid", json::object()), "'" + sp + "' grid");
  check_draft_steps(grid, settings["draft_steps"].get<int>(), "'" + sp + "'");
  const std::string config = settings["config"].get<std::string>();
  if (settings.contains("config_json")) {
    json now;
    try {
      now = config_snapshot(config);
    } catch (const Error& e) {
      fail("sweep --resume: the sweep's config '", config, "' no longer loads: ", e.what());
    }
    if (now != settings["config_json"]) {
      std::string key;
      for (const auto& [k, v] : settings["config_json"].items())
        if (!now.contains(k) || now[k] != v) {
          key = k + ": was " + v.dump() + ", now " + (now.contains(k) ? now[k].dump() : std::string("absent"));
          break;
        }
      fail("sweep --resume: the config '", config, "' changed since the sweep started (", key.empty() ? "a key added" : key,
           "): its cells would mix two models. Restore it, or start a new sweep");
    }
  }
  const std::string was = settings.value("commit", std::string());
  if (was != build_commit())
    std::fprintf(stderr, "sweep: warning: the sweep started at commit %s, this binary is %s: its cells will mix "
                 "commits (each cell's measurement records its own)\n", was.c_str(), build_commit().c_str());
  return folder;
}

// A new sweep: the grid from the options, checked before any child runs; a new folder with its
// sweep.json.
std::string start_sweep(const SweepOptions& o, SweepGrid& grid, json& settings) {
  grid.policies = split(o.policies);
  grid.mtp_layers = compare::parse_int_list(o.mtp_layers, "--mtp-layers");
  grid.mtp_compress = compare::parse_int_list(o.mtp_compress, "--mtp-compress");
  grid.connections = compare::parse_int_list(o.connections, "--connections");
  grid.modes = split(o.modes);
  grid.batches = compare::parse_int_list(o.batches, "--batches");
  grid.sources = split(o.sources);
  grid.placements = split(o.placements);
  grid.graph_scopes = split(o.graph_scopes);
  grid.validate();
  check_draft_steps(grid, o.draft_steps, "sweep");
  for (const auto& p : grid.policies) StreamPolicy::parse(p);  // a bad name fails before any child runs
  // A config given as a file is recorded by its absolute path (a resume from another folder must
  // find it), and its content with it; a bad config fails here, before any child runs.
  std::error_code ec;
  const std::string config = fs::is_regular_file(o.config, ec) ? fs::absolute(o.config).lexically_normal().string()
                                                                : o.config;
  const json config_json = config_snapshot(config);
  SL_CHECK(o.steps >= 1 && o.warmup >= 1, "sweep: --steps and --warmup must be >= 1");
  if (o.backend == "cpu")
    for (const auto& m : grid.modes) SL_CHECK(m == "eager", "sweep --backend cpu: only --modes eager");
  SL_CHECK(!o.attention_tp || o.expert_ranks > 1, "sweep: --attention-tp splits the attention over the ranks of "
           "--expert-ranks N (N >= 2)");
  if (o.expert_ranks > 1)
    for (const auto& m : grid.modes)
      SL_CHECK(m == "eager", "sweep --expert-ranks ", o.expert_ranks, ": only --modes eager (graph capture of the "
               "ranks' collectives is not supported yet)");
  std::string why;
  SL_CHECK(o.backend == "cpu" || gpu_present(&why), "sweep: needs a GPU (", why,
           "); the recorded H200 sweeps are under results/sweep/");
  if (!fs::exists(o.out_dir)) {
    SL_CHECK(!o.out_dir_given, "sweep: the output folder '", o.out_dir, "' does not exist");
    fs::create_directories(o.out_dir);
  }
  const json prov = provenance("streamlab sweep");
  const std::string gpu = o.backend == "cpu" ? "cpu" : prov.value("gpu", std::string("gpu"));
  const std::string date = utc_now();
  std::string folder = o.out_dir + "/" + compare::run_folder_name(date, gpu, build_commit_short()) + "_sweep";
  for (int k = 2; fs::exists(folder); ++k)
    folder = o.out_dir + "/" + compare::run_folder_name(date, gpu, build_commit_short()) + "_sweep_" + std::to_string(k);
  fs::create_directory(folder);
  settings = {{"schema", "streamlab.sweep/1"}, {"grid", grid.to_json()},   {"config", config},
              {"config_json", config_json},
              {"context", o.context},          {"draft_steps", o.draft_steps}, {"steps", o.steps},
              {"warmup", o.warmup},            {"backend", o.backend},    {"kernel_variants", o.kernel_variants},
              {"weights", o.weights},
              {"expert_ranks", o.expert_ranks},
              {"attention_tp", o.attention_tp},
              {"commit", build_commit()},
              {"provenance", prov},            {"started", date}};
  write_file_atomic(folder + "/sweep.json", settings.dump(1) + "\n");
  return folder;
}

// Runs the cells in `todo`, one child process each, appending each cell's record to
// cells.jsonl as it ends (durably: a kill loses at most the running cell). False when the user
// interrupted.
bool run_cells(const SweepOptions& o, const std::vector<SweepCell>& todo, size_t total, const json& settings,
               const std::string& folder, std::map<std::string, CellRecord>& done) {
  const std::string log_path = folder + "/cells.jsonl";
  compare::install_interrupt_handlers();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < todo.size(); ++i) {
    const SweepCell& c = todo[i];
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[%zu/%zu] %s (%s)\n", total - todo.size() + i + 1, total, c.id().c_str(),
                 i ? ("about " + compare::clock_text(elapsed / double(i) * double(todo.size() - i)) + " left").c_str()
                   : "estimating");
    std::vector<std::pair<std::string, std::string>> env;
    if (c.connections) env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(c.connections)});
    const std::string log = folder + "/logs/" + c.id() + ".log";
    const compare::ChildResult res = compare::run_child(cell_argv(settings, c, folder), log, o.child_timeout_s, env);
    if (res.interrupted) {
      size_t ok = 0, failed = 0;
      for (const auto& [id, r] : done) (r.status == "ok" ? ok : failed)++;
      std::fprintf(stderr, "sweep: interrupted; %zu of %zu cells have a result (%zu ok, %zu failed). Resume with: "
                   "streamlab sweep --resume %s%s\n", ok + failed, total, ok, failed, folder.c_str(),
                   o.retry_failed && failed ? " --retry-failed" : "");
      return false;
    }
    CellRecord r;
    if (res.ok()) {
      r = record_of(c, folder, res.seconds);
    } else {
      r.cell = c;
      r.status = "failed";
      r.seconds = res.seconds;
      r.reason = failure_reason(log, res);
      std::fprintf(stderr, "  failed: %s\n", r.reason.c_str());
    }
    append_line_durable(log_path, r.to_json().dump());
    done[c.id()] = r;
  }
  return true;
}

int sweep_main(const SweepOptions& o) {
  SL_CHECK(o.backend == "cuda" || o.kernel_variants.empty(), "sweep: --kernel-variants choose among CUDA kernels; "
           "use --backend cuda");
  SweepGrid grid;
  json settings;
  const std::string folder = o.resume.empty() ? start_sweep(o, grid, settings) : resume_sweep(o, grid, settings);
  lock_sweep_folder(folder);
  for (const char* sub : {"cells", "logs"}) fs::create_directories(folder + "/" + sub);
  const std::string log_path = folder + "/cells.jsonl";
  size_t torn = 0;
  std::map<std::string, CellRecord> done = compare::read_cell_log(log_path, &torn);
  if (torn) {
    drop_torn_tail(log_path);
    std::fprintf(stderr, "sweep: the last line of cells.jsonl was cut short (a kill mid-write): removed, its cell "
                 "runs again\n");
  }
  const std::vector<SweepCell> cells = grid.cells();
  {
    // A record of a cell the grid does not hold (a hand-edited log) is no result of this sweep.
    std::set<std::string> ids;
    for (const auto& c : cells) ids.insert(c.id());
    for (auto it = done.begin(); it != done.end();)
      if (ids.count(it->first)) {
        ++it;
      } else {
        std::fprintf(stderr, "sweep: warning: cells.jsonl holds the cell %s, which is not in the sweep's grid: "
                     "ignored\n", it->first.c_str());
        it = done.erase(it);
      }
  }
  std::vector<SweepCell> todo;
  for (const auto& c : cells) {
    auto it = done.find(c.id());
    if (it == done.end() || (o.retry_failed && it->second.status != "ok")) todo.push_back(c);
  }
  const size_t total = cells.size();
  std::fprintf(stderr, "sweep: %zu cells, %zu done, %zu to run; folder %s\n", total, total - todo.size(), todo.size(),
               folder.c_str());
  if (!run_cells(o, todo, total, settings, folder, done)) return 128 + compare::interrupt_signal();
  const std::string head = "streamlab sweep: " + settings.value("config", std::string()) + " (" +
                           settings.value("weights", std::string("bf16")) + " weights" +
                           (settings.value("expert_ranks", 1) > 1
                                ? ", experts split over " + std::to_string(settings.value("expert_ranks", 1)) +
                                      " ranks" + (settings.value("attention_tp", false) ? " with the attention's heads" : "") +
                                      ", rank 0 timed"
                                : std::string()) +
                           "), context " +
                           std::to_string(settings.value("context", 0)) + ", on " +
                           settings["provenance"].value("gpu", std::string("?")) + ", commit " +
                           settings.value("commit", std::string("?")) + " (" + folder + ")";
  write_summary(folder, grid, settings, done, head);
  if (o.json_out) {
    std::ifstream f(folder + "/summary.json");
    std::printf("%s", std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()).c_str());
  } else {
    std::printf("%s", summary_text(grid, summary_rows(grid, done), head).c_str());
  }
  size_t failed = 0;
  for (const auto& [id, r] : done) failed += r.status != "ok";
  if (!failed) return 0;
  // A nightly job must notice: the table above has the cells that ran, the exit status says not all did.
  std::fprintf(stderr, "sweep: %zu of %zu cells failed (reasons in summary.json and logs/; --resume --retry-failed "
               "runs them again)\n", failed, total);
  return 1;
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Stream policies over a grid (policy x MTP layers x MTP compress x hardware queues x eager/graph x "
               "batch), each cell in its own process; resumable after a kill (--resume). Exit status: 0 every cell ran, 1 "
               "an error or a cell that failed (the others' results are still written), 128 + the signal when interrupted (130 for Ctrl-C, 143 for SIGTERM)");
  cmd->add_option("--policies", o->policies, "policies (the first two are compared per setting)")->capture_default_str();
  cmd->add_option("--mtp-layers", o->mtp_layers, "MTP layer counts")->capture_default_str();
  cmd->add_option("--mtp-compress", o->mtp_compress, "MTP compress ratios (0, 4, 128)")->capture_default_str();
  cmd->add_option("--connections", o->connections, "CUDA_DEVICE_MAX_CONNECTIONS values (0 = unset)")->capture_default_str();
  cmd->add_option("--modes", o->modes, "eager and/or graph")->capture_default_str();
  cmd->add_option("--batches", o->batches, "batch sizes")->capture_default_str();
  cmd->add_option("--sources", o->sources, "stream sources: cuda and/or torch")->capture_default_str();
  cmd->add_option("--placements", o->placements, "phase-B placements: vllm-fix and/or vllm-head")
      ->capture_default_str();
  cmd->add_option("--graph-scopes", o->graph_scopes, "graph cells: step, split and/or piecewise")
      ->capture_default_str();
  cmd->add_option("--config", o->config, "model config")->capture_default_str();
  cmd->add_option("--context", o->context, "prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--draft-steps", o->draft_steps, "draft steps per decode step (0: as many as MTP layers)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps per cell")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed steps per cell before them")->capture_default_str();
  CLI::Option* backend_opt = cmd->add_option("--backend", o->backend, "cuda, or cpu (the CPU reference: tests only)")
                                 ->check(CLI::IsMember({"cpu", "cuda"}))
                                 ->capture_default_str();
  CLI::Option* ranks_opt =
      cmd->add_option("--expert-ranks", o->expert_ranks,
                      "every cell's model split over this many ranks (expert parallelism, processes; rank 0 timed; "
                      "--modes eager)")
          ->check(CLI::Range(1, 1024))
          ->capture_default_str();
  cmd->add_flag("--attention-tp", o->attention_tp, "with --expert-ranks: the attention's heads split over the ranks too");
  cmd->add_option("--gpus", o->gpus, "--backend cuda --expert-ranks N: every cell over N GPUs, NCCL")
      ->check(CLI::Range(1, 64))
      ->excludes(backend_opt)
      ->excludes(ranks_opt);
  cmd->add_option("--kernel-variants", o->kernel_variants, kKernelVariantsHelp)->check(kernel_variants_error);
  cmd->add_option("--weights", o->weights,
                  "every cell's weight format: bf16, native (FP8 projections and shared expert, MXFP4 routed "
                  "experts, as the real checkpoint) or native-w4a8 (the same, the routed experts fed FP8 activations)")
      ->check(CLI::IsMember({"bf16", "native", "native-w4a8"}))
      ->capture_default_str();
  cmd->add_option("--out-dir", o->out_dir, "where the sweep folder goes")
      ->capture_default_str()
      ->each([o](const std::string&) { o->out_dir_given = true; });
  cmd->add_option("--resume", o->resume, "continue the sweep in this folder (its grid and settings)");
  cmd->add_flag("--retry-failed", o->retry_failed, "with --resume: run failed cells again");
  cmd->add_option("--child-timeout", o->child_timeout_s, "seconds one cell may take")
      ->check(finite_in(0, 1e6, true))
      ->capture_default_str();
  cmd->add_flag("--json", o->json_out, "print summary.json instead of the table");
  cmd->callback([o, cmd] {
    // A resumed sweep runs the folder's own grid and settings (sweep.json): an option that would
    // change them is refused rather than silently ignored.
    if (!o->resume.empty()) {
      std::string given;
      for (const CLI::Option* opt : cmd->get_options())
        if (opt->count() > 0 && opt->get_name() != "--resume" && opt->get_name() != "--retry-failed" &&
            opt->get_name() != "--child-timeout" && opt->get_name() != "--json" && opt->get_name() != "--help")
          given += (given.empty() ? "" : ", ") + opt->get_name();
      SL_CHECK(given.empty(), "sweep --resume: the folder's sweep.json fixes the grid and settings; ", given,
               " cannot change them (start a new sweep for another grid)");
    }
    if (o->gpus > 0) {
      o->backend = "cuda";
      o->expert_ranks = o->gpus;
    }
    const int rc = sweep_main(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sl::cli
