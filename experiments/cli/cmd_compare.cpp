// `streamlab compare`: the verdict on stream policies as one command.
//
//   streamlab compare                 on a GPU: run the default comparison live (per-layer vs shared,
//                                     serial as the no-overlap reference) and write a report folder;
//                                     without one: show the comparison recorded on a GPU (an H200,
//                                     or an H100 where no H200 ran it) that ships in the repository
//                                     (results/compare/; summary.json may be gzipped there)
//   streamlab compare A B [C ...]     compare existing inputs: run folders of earlier compares, our
//                                     JSON / SQLite traces, PyTorch profiler (Kineto) JSON
//
// The statistics are in core/stats.h, the comparison in experiments/compare/comparison.h, the
// child processes in experiments/compare/live_plan.h.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/gzip.h"
#include "experiments/cli/backend_choice.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/number_checks.h"
#include "experiments/cli/model_options.h"
#include "experiments/cli/provenance.h"
#include "experiments/compare/child_process.h"
#include "experiments/compare/comparison.h"
#include "experiments/compare/live_plan.h"
#include "experiments/compare/report.h"
#include "experiments/compare/run_folder.h"
#include "experiments/compare/structure.h"
#include "experiments/compare/trace_side.h"
#include "profiler/trace_io.h"
#ifdef STREAMLAB_HAVE_UI
#include "ui/viewer_app.h"
#endif

namespace sl::cli {
namespace {

namespace fs = std::filesystem;
using compare::Report;

struct CompareCliOptions {
  std::vector<std::string> inputs;
  ModelOptions model;
  std::string backend = "cuda";
  std::string kernel_variants;  // passed to every measure child
  std::vector<std::string> policies{"per-layer", "shared", "serial"};
  int repetitions = 5;
  int steps = 20, warmup = 3, traced_steps = 5;
  std::vector<std::string> modes{"eager", "graph"};
  bool no_trace = false, no_baseline_twice = false;
  std::string out_dir = "results/compare";
  bool out_dir_given = false;
  std::string recorded;  // a run folder to show instead of measuring
  int gpus = 0;          // --gpus N: --backend cuda --expert-ranks N
  std::string policy_filter;
  std::string step_range;
  std::string connections;
  double margin_pct = 1.0;
  bool margin_given = false;  // --margin on the command line (else a folder's own margin is used)
  double fail_if_slower = -1;
  double child_timeout_s = 900;
  bool json = false;
  bool screenshots = false;     // timeline screenshots into the report folder
  bool rewrite_report = false;  // one run folder: write its reports again with this binary
};

// compare's defaults for the model: the flash-shaped decode step where every MTP layer runs and
// its aux streams carry work (4 MTP layers with compress ratio 4, 4 draft steps), batch 1.
void apply_compare_defaults(ModelOptions& m) {
  if (!m.batch) m.batch = 1;
  if (!m.context) m.context = 2048;
  if (!m.mtp_layers) m.mtp_layers = 4;
  if (!m.mtp_compress) m.mtp_compress = 4;
  if (!m.draft_steps) m.draft_steps = 4;
}

std::vector<std::string> model_args(const ModelOptions& m, const std::string& kernel_variants = "") {
  std::vector<std::string> a{"--config", m.config};
  auto add = [&](const char* flag, const auto& v) {
    if (v) a.insert(a.end(), {flag, std::to_string(*v)});
  };
  add("--batch", m.batch);
  add("--context", m.context);
  add("--mtp-layers", m.mtp_layers);
  add("--mtp-compress", m.mtp_compress);
  add("--draft-steps", m.draft_steps);
  add("--prefill-chunk", m.prefill_chunk);
  add("--seed", m.seed);
  if (m.rope) a.insert(a.end(), {"--rope", *m.rope});
  if (m.aux_priority != "default") a.insert(a.end(), {"--aux-priority", m.aux_priority});
  if (m.no_shared_expert_stream) a.push_back("--no-shared-expert-stream");
  if (m.stream_source != "cuda") a.insert(a.end(), {"--stream-source", m.stream_source});
  if (m.placement != "vllm-fix") a.insert(a.end(), {"--placement", m.placement});
  if (m.graph_scope != "step") a.insert(a.end(), {"--graph-scope", m.graph_scope});
  if (m.weights != "bf16") a.insert(a.end(), {"--weights", m.weights});
  if (m.kv_cache != "bf16") a.insert(a.end(), {"--kv-cache", m.kv_cache});
  if (m.expert_ranks > 1) a.insert(a.end(), {"--expert-ranks", std::to_string(m.expert_ranks)});
  if (m.expert_scheme != "all-gather") a.insert(a.end(), {"--expert-scheme", m.expert_scheme});
  if (m.attention_tp) a.push_back("--attention-tp");
  if (!kernel_variants.empty()) a.insert(a.end(), {"--kernel-variants", kernel_variants});
  return a;
}


// The measurements' provenance (the first child's: GPU, driver, CUDA, commit, date).
nlohmann::json measured_provenance(const std::vector<compare::Side>& sides) {
  for (const auto& s : sides)
    if (!s.runs.empty()) return s.runs.front().provenance;
  return nlohmann::json::object();
}

// How the children hold --kv-cache fp8 caches: packed in vLLM's FP8 bytes (the CPU backend; the
// CUDA backend under --kernel-variants fp8-kv=packed) or emulated in bf16; "" without them.
std::string kv_cache_storage(const std::string& backend, const std::string& kv_cache, const std::string& variants) {
  if (kv_cache != "fp8") return "";
  return backend == "cpu" || KernelVariants::parse(variants).fp8_kv_packed ? "packed" : "emulated";
}

std::string describe_setup(const nlohmann::json& settings) {
  const auto& m = settings.value("model", nlohmann::json::object());
  if (m.empty()) return "";
  char buf[600];
  const bool kv8 = m.value("kv_cache", std::string("bf16")) == "fp8";
  // Packed in FP8 bytes or emulated in bf16; files from before it was recorded do not say.
  const std::string storage = m.value("kv_cache_storage", std::string());
  const std::string kv8_words = ", fp8 KV cache" + (storage.empty() ? std::string() : " (" + storage + ")");
  // A split model: which system the figures are true of (rank 0 of N, its collectives included).
  const int ranks = m.value("expert_ranks", 1);
  const std::string split = ranks > 1 ? ", experts split over " + std::to_string(ranks) + " ranks" +
                                            (m.value("attention_tp", false) ? " with the attention's heads" : "") +
                                            " (rank 0 timed)"
                                      : "";
  std::snprintf(buf, sizeof buf,
                "%s (%s weights%s%s), batch %d, context %d, %d MTP layers (compress %d), %d draft steps; %d repetitions "
                "per policy%s, %d timed steps per mode",
                m.value("config", std::string("?")).c_str(), m.value("weights", std::string("bf16")).c_str(),
                kv8 ? kv8_words.c_str() : "", split.c_str(), m.value("batch", 0), m.value("context", 0), m.value("mtp_layers", 0), m.value("mtp_compress", 0),
                m.value("draft_steps", 0),
                settings.value("repetitions", 0), settings.value("baseline_twice", false) ? ", baseline twice" : "",
                settings.value("steps", 0));
  return buf;
}

std::string short_commit(const nlohmann::json& p) {
  std::string c = p.value("commit", std::string("unknown"));
  const bool dirty = c.size() > 6 && c.compare(c.size() - 6, 6, "-dirty") == 0;
  if (dirty) c.resize(c.size() - 6);
  return (c.size() > 7 ? c.substr(0, 7) : c) + (dirty ? "-dirty" : "");
}

std::string gpu_words(const nlohmann::json& p) {
  std::string s = p.value("gpu", std::string("unknown GPU"));
  if (s.rfind("none", 0) == 0) return "the CPU (no GPU; the fp32 reference, streams as labels)";
  const std::string drv = p.value("driver", std::string());
  const int rt = p.value("cuda_runtime_version", 0);
  if (!drv.empty() || rt) {
    s += " (";
    if (!drv.empty()) s += "driver " + drv;
    if (rt) s += std::string(drv.empty() ? "" : ", ") + "CUDA " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
    s += ")";
  }
  return s;
}

// Builds the report of a folder's sides (live or recorded).
Report folder_report(const compare::RunFolder& f, std::vector<compare::Side> sides, const CompareCliOptions& o) {
  auto index_of = [&](const std::string& label) -> size_t {
    for (size_t i = 0; i < sides.size(); ++i)
      if (sides[i].label == label) return i;
    fail("'", f.path, "': summary.json names '", label, "', which has no runs");
  };
  const size_t a = index_of(f.baseline);
  std::optional<size_t> again, ref;
  if (f.baseline_again) again = index_of(*f.baseline_again);
  if (f.reference) ref = index_of(*f.reference);
  compare::CompareOptions co;
  // A folder's verdicts use the margin it was measured for, unless --margin is given (then the
  // rewritten summary records that one).
  const nlohmann::json settings = f.summary.value("settings", nlohmann::json::object());
  const bool recorded_margin = !o.margin_given && settings.contains("margin_floor_pct") &&
                               settings["margin_floor_pct"].is_number() &&
                               settings["margin_floor_pct"].get<double>() > 0 &&
                               settings["margin_floor_pct"].get<double>() < 100;
  co.margin_floor = (recorded_margin ? settings["margin_floor_pct"].get<double>() : o.margin_pct) / 100;
  Report r;
  r.cmp = compare::compare_sides(std::move(sides), a, again, ref, co);
  for (const auto& s : r.cmp.sides) r.resources.push_back(compare::resources_of(s));
  r.provenance = measured_provenance(r.cmp.sides);
  r.settings = settings;
  if (!recorded_margin && r.settings.is_object()) r.settings["margin_floor_pct"] = o.margin_pct;
  if (!r.settings.contains("description")) r.settings["description"] = describe_setup(r.settings);
  r.structure = compare::structure_of_folder(f.path, r.cmp);
  return r;
}

// Timeline screenshots of each side's traced eager steps into folder/screenshots/ (the viewer,
// when this binary has it, in a hidden window: needs a display, e.g. under xvfb-run). Returns
// (label, png) pairs; `required` turns "no viewer / no display" from a note into an error.
std::vector<std::pair<std::string, std::string>> take_screenshots(const std::string& folder, Report& r, bool required) {
  std::vector<std::pair<std::string, std::string>> shots;
#ifdef STREAMLAB_HAVE_UI
  if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY")) {
    SL_CHECK(!required, "compare --screenshots: no display (run it under xvfb-run -a)");
    r.cmp.notes.push_back("no timeline screenshots: no display (xvfb-run -a streamlab compare ... --screenshots)");
    return shots;
  }
  fs::create_directories(folder + "/screenshots");
  for (const auto& side : r.cmp.sides)
    for (const auto& m : side.traced_runs)
      for (const auto& w : m.traced) {
        if (w.mode != "eager") continue;
        ui::ViewerOptions v;
        v.trace = plain_or_gz(folder + "/traces/" + w.trace_json);
        v.screenshot = folder + "/screenshots/" + compare::file_slug(side.label) + ".png";
        v.frames = 3;
        v.width = 1600;
        v.height = 900;
        v.group_streams_by_role = true;
        try {
          ui::run_viewer(v);
          shots.push_back({side.label, v.screenshot});
        } catch (const Error& e) {
          SL_CHECK(!required, "compare --screenshots: ", e.what());
          r.cmp.notes.push_back(std::string("no timeline screenshot of ") + side.label + ": " + e.what());
        }
      }
#else
  SL_CHECK(!required, "compare --screenshots: this streamlab was built without the viewer (STREAMLAB_UI=OFF)");
  (void)folder;
  (void)r;
#endif
  return shots;
}

std::string unique_folder(const std::string& root, const std::string& name) {
  std::string p = root + "/" + name;
  for (int k = 2; fs::exists(p); ++k) p = root + "/" + name + "_" + std::to_string(k);
  return p;
}

int finish(const Report& r, const CompareCliOptions& o) {
  if (o.json) std::printf("%s\n", compare::report_json(r).dump(2).c_str());
  else std::printf("%s", compare::report_text(r).c_str());
  std::fflush(stdout);
  if (o.fail_if_slower >= 0) {
    const auto slower = compare::slower_than(r.cmp, o.fail_if_slower);
    for (const auto* d : slower)
      std::fprintf(stderr, "compare: %s is slower than %s on %s by more than %.2f %% (95 %% interval %s)\n",
                   r.cmp.sides[d->b].label.c_str(), r.cmp.sides[d->a].label.c_str(), d->key.c_str(), o.fail_if_slower,
                   compare::format_interval(d->interval).c_str());
    if (!slower.empty()) return 3;
  }
  return 0;
}

int run_live(const CompareCliOptions& o) {
  SL_CHECK(o.backend == "cuda" || o.kernel_variants.empty(), "compare: --kernel-variants choose among CUDA kernels; "
           "use --backend cuda");
  check_split_options(o.model);
  if (o.model.expert_ranks > 1)
    for (const auto& md : o.modes)
      SL_CHECK(md == "eager", "compare --expert-ranks ", o.model.expert_ranks, ": only --modes eager (graph capture of "
               "the ranks' collectives is not supported yet)");
  compare::LiveSpec spec;
  spec.exe = compare::self_executable();
  spec.backend = o.backend;
  ModelOptions m = o.model;
  apply_compare_defaults(m);
  spec.model_args = model_args(m, o.kernel_variants);
  spec.policies = o.policies;
  spec.repetitions = o.repetitions;
  spec.baseline_twice = !o.no_baseline_twice;
  spec.steps = o.steps;
  spec.warmup = o.warmup;
  spec.modes = o.modes;
  spec.trace = !o.no_trace && o.backend == "cuda";
  spec.traced_steps = o.traced_steps;
  spec.child_timeout_s = o.child_timeout_s;
  if (!o.connections.empty()) spec.env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", o.connections});
  if (o.backend == "cpu")
    for (const auto& md : spec.modes)
      SL_CHECK(md == "eager", "compare --backend cpu: only --modes eager (the CPU reference has no CUDA graphs)");
  resolve_config(m, "");
  const std::vector<compare::PlannedRun> plan = compare::plan_live(spec);

  if (!fs::exists(o.out_dir)) {
    SL_CHECK(!o.out_dir_given, "compare: the output folder '", o.out_dir, "' does not exist");
    fs::create_directories(o.out_dir);
  }
  remove_stale_staging(o.out_dir);
  const nlohmann::json prov = provenance("streamlab compare");
  const std::string gpu = o.backend == "cpu" ? "cpu" : prov.value("gpu", std::string("gpu"));
  const std::string date = utc_now();
  StagedDir dir(unique_folder(o.out_dir, compare::run_folder_name(date, gpu, build_commit_short())));
  for (const char* sub : {"runs", "traces", "logs"}) fs::create_directory(dir.path() + "/" + sub);
  std::fprintf(stderr, "compare: %zu child processes (%zu policies x %d repetitions%s%s), results in %s\n", plan.size(),
               spec.policies.size(), spec.repetitions, spec.baseline_twice ? " + the baseline again" : "",
               spec.trace ? " + one traced run per policy" : "", dir.final_path().c_str());
  compare::execute_plan(spec, plan, dir.path(), stderr);
  // Traces compress about tenfold; readers take either form (sl::plain_or_gz, load_trace).
  for (const auto& e : fs::directory_iterator(dir.path() + "/traces")) {
    const std::string n = e.path().filename().string();
    const bool json = n.size() > 5 && n.rfind(".json") == n.size() - 5;
    const bool trace_file = n.size() > 11 && (n.rfind(".eager.json") == n.size() - 11 || n.rfind(".graph.json") == n.size() - 11 ||
                                              (json && n.find(".rank") != std::string::npos));  // other ranks' traces
    if (trace_file || n.rfind(".sqlite") == n.size() - 7) gzip_file_in_place(e.path().string());
  }

  compare::RunFolder f;
  f.path = dir.path();
  f.runs = plan;
  for (const auto& r : plan)
    if (std::find(f.side_labels.begin(), f.side_labels.end(), r.side) == f.side_labels.end())
      f.side_labels.push_back(r.side);
  f.baseline = spec.policies[0];
  if (spec.baseline_twice) f.baseline_again = compare::again_label(spec.policies[0]);
  for (const auto& p : spec.policies)
    if (p == "serial" && p != spec.policies[0]) f.reference = p;
  nlohmann::json settings{{"kind", "live"},
                          {"backend", o.backend},
                          {"model",
                           {{"config", m.config},
                            {"batch", *m.batch},
                            {"context", *m.context},
                            {"mtp_layers", *m.mtp_layers},
                            {"mtp_compress", *m.mtp_compress},
                            {"draft_steps", *m.draft_steps},
                            {"weights", m.weights},
                            {"kv_cache", m.kv_cache},
                            {"kv_cache_storage", kv_cache_storage(o.backend, m.kv_cache, o.kernel_variants)},
                            {"expert_ranks", m.expert_ranks},
                            {"attention_tp", m.attention_tp}}},
                          {"model_args", spec.model_args},
                          {"policies", spec.policies},
                          {"repetitions", spec.repetitions},
                          {"baseline_twice", spec.baseline_twice},
                          {"steps", spec.steps},
                          {"warmup", spec.warmup},
                          {"traced_steps", spec.trace ? spec.traced_steps : 0},
                          {"modes", spec.modes},
                          {"connections", o.connections},
                          {"margin_floor_pct", o.margin_pct},
                          {"baseline", f.baseline},
                          {"baseline_again", f.baseline_again ? nlohmann::json(*f.baseline_again) : nlohmann::json()},
                          {"reference", f.reference ? nlohmann::json(*f.reference) : nlohmann::json()},
                          {"runs", compare::plan_to_json(plan)}};
  f.summary = {{"settings", settings}};
  std::vector<compare::Side> sides = compare::load_sides(f);
  for (auto& s : sides) s.origin = "live";
  Report r = folder_report(f, std::move(sides), o);
  const std::string folder_name = fs::path(dir.final_path()).filename().string();
  r.source_line = "streamlab compare: measured live on " + gpu_words(r.provenance) + ", commit " +
                  short_commit(r.provenance) + ", " + date + " (" + dir.final_path() + ")";
  r.files = {"report.md", "report.html", "summary.json", "runs/", "traces/", "logs/"};
  r.written_by = build_commit_short();
  if (spec.trace) r.screenshots = take_screenshots(dir.path(), r, o.screenshots);
  if (!r.screenshots.empty()) r.files.push_back("screenshots/");
  compare::write_report_files(r, dir.path());
  dir.commit();
  std::fprintf(stderr, "compare: report in %s/report.html (and report.md, summary.json)\n", dir.final_path().c_str());
  return finish(r, o);
}

int run_recorded(const CompareCliOptions& o, const std::string& why_no_gpu) {
  std::string folder = o.recorded;
  bool same_settings = true;
  if (folder.empty()) {
    for (const std::string& root : {std::string(STREAMLAB_SOURCE_DIR) + "/results/compare", std::string("results/compare")}) {
      // Preferably a run of the very settings asked for (by default: compare's defaults).
      ModelOptions m = o.model;
      apply_compare_defaults(m);
      const compare::RecordedRun rec = compare::find_recorded_run(root, o.policies, model_args(m, o.kernel_variants));
      folder = rec.folder;
      same_settings = rec.same_settings;
      if (!folder.empty()) break;
    }
    // A gate asks about this build on this machine: judging a recorded run instead would pass or
    // fail on someone else's measurement (a nightly job without a GPU reported "passed").
    SL_CHECK(o.fail_if_slower < 0, "compare --fail-if-slower: no GPU here (", why_no_gpu, "), so nothing can be "
             "measured and there is nothing to gate; give run folders as inputs to gate on a recorded run");
    SL_CHECK(!folder.empty(), "compare: no GPU here (", why_no_gpu,
             ") and no recorded compare run under results/compare/ to show; run it on a GPU, or give inputs "
             "(streamlab compare A B)");
  }
  const compare::RunFolder f = compare::read_run_folder(folder);
  Report r = folder_report(f, compare::load_sides(f), o);
  const std::string date = r.provenance.value("date", std::string("an unknown date"));
  // A recorded run of other settings than those asked for (another config, weight format,
  // policies...) is still shown, but never as if it answered the question: the line says so, and
  // the setup line below it names what was measured.
  r.source_line = (o.recorded.empty() ? "No GPU here (" + why_no_gpu + "): showing the comparison recorded on "
                                      : "Showing the comparison recorded on ") +
                  gpu_words(r.provenance) + " at commit " + short_commit(r.provenance) +
                  " on " + date + " (" + folder + ")" +
                  (same_settings ? "" : "; no recorded run has the settings asked for, so this is the newest one, "
                                        "measured with the settings on the next line") +
                  "; run streamlab compare on a GPU to measure yours.";
  return finish(r, o);
}

int run_inputs(const CompareCliOptions& o) {
  for (const auto& in : o.inputs) SL_CHECK(fs::exists(in), "compare: '", in, "' does not exist");
  SL_CHECK(o.inputs.size() >= 2 || fs::is_directory(o.inputs[0]),
           "compare: give two or more inputs (run folders or trace files), or one run folder");
  std::vector<compare::Side> sides;
  bool all_folders = true;
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& in : o.inputs) {
    inputs.push_back(in);
    if (fs::is_directory(in)) {
      const compare::RunFolder f = compare::read_run_folder(in);
      if (o.inputs.size() == 1 && o.policy_filter.empty()) try {
        // One folder: its own comparison, recomputed from its runs.
        Report r = folder_report(f, compare::load_sides(f), o);
        r.source_line = "streamlab compare: the runs in " + in + ", measured on " + gpu_words(r.provenance) +
                        " at commit " + short_commit(r.provenance);
        if (o.rewrite_report) {
          // The measurements stay as they are; the reports are computed again by this binary
          // (newer analyses, screenshots), and say so.
          const nlohmann::json old = f.summary;
          r.source_line = old.value("source", r.source_line);
          r.files = old.value("files", std::vector<std::string>{});
          r.written_by = build_commit_short();
          if (o.screenshots) r.screenshots = take_screenshots(in, r, true);
          if (!r.screenshots.empty() && std::find(r.files.begin(), r.files.end(), "screenshots/") == r.files.end())
            r.files.push_back("screenshots/");
          compare::write_report_files(r, in);
          std::fprintf(stderr, "compare: rewrote %s/report.md, report.html and %s\n", in.c_str(),
                       fs::path(compare::summary_path(in)).filename().c_str());
        }
        return finish(r, o);
      } catch (const nlohmann::json::exception& e) {
        // A field of the wrong type that only the report reads (source, files, description...).
        fail("'", compare::summary_path(in), "': a field holds a value of the wrong type (", e.what(), ")");
      }
      for (auto& s : compare::load_sides(f)) {
        if (!o.policy_filter.empty() && s.label != o.policy_filter) continue;
        if (o.policy_filter.empty() && f.baseline_again && s.label == *f.baseline_again) continue;
        s.label = fs::path(in).filename().string() + ":" + s.label;
        sides.push_back(std::move(s));
      }
      // Two folders of one name (two nights' <date>_<gpu>_<commit> folders under other parents):
      // their sides would read "X:shared vs X:shared"; the later one's get the input's number.
      for (size_t k = sides.size(); k-- > 0;)
        for (size_t e = 0; e < k; ++e)
          if (sides[e].label == sides[k].label && sides[k].origin != sides[e].origin) {
            sides[k].label += " (input " + std::to_string(inputs.size()) + ")";
            break;
          }
    } else {
      all_folders = false;
      const prof::Trace t = prof::load_trace(in);
      compare::TraceStepOptions so;
      so.step_range = o.step_range;
      sides.push_back(compare::side_from_trace(t, fs::path(in).filename().string(), in, so));
    }
  }
  SL_CHECK(sides.size() >= 2, "compare: the inputs hold ", sides.size(), " side(s)",
           o.policy_filter.empty() ? "" : " with policy '" + o.policy_filter + "'", "; need two or more");
  compare::CompareOptions co;
  co.margin_floor = o.margin_pct / 100;
  Report r;
  r.cmp = compare::compare_sides(std::move(sides), 0, std::nullopt, std::nullopt, co);
  for (const auto& s : r.cmp.sides) r.resources.push_back(compare::resources_of(s));
  r.provenance = measured_provenance(r.cmp.sides);
  r.settings = {{"kind", "inputs"}, {"inputs", inputs}};
  r.source_line = "streamlab compare: " + std::to_string(o.inputs.size()) + " inputs, A = " + r.cmp.sides[0].label;
  if (!all_folders) {
    std::vector<std::string> labels;
    for (const auto& in : o.inputs) labels.push_back(fs::path(in).filename().string());
    r.structure = compare::structure_of_inputs(o.inputs, labels);
  }
  return finish(r, o);
}

int compare_main(CompareCliOptions o) {
  for (auto& in : o.inputs)  // "folder/" and "folder" are one input (labels, paths in messages)
    while (in.size() > 1 && in.back() == '/') in.pop_back();
  SL_CHECK(!o.rewrite_report || (o.inputs.size() == 1 && fs::is_directory(o.inputs[0])),
           "compare --rewrite-report takes exactly one run folder");
  SL_CHECK(o.margin_pct > 0 && o.margin_pct < 100, "compare: --margin must be in (0, 100) percent, not ", o.margin_pct);
  // Bad live settings fail here, before any child starts (and also where they would be ignored).
  SL_CHECK(o.steps >= 1 && o.steps <= 100000, "compare: --steps must be in [1, 100000], not ", o.steps);
  SL_CHECK(o.warmup >= 1 && o.warmup <= 1000, "compare: --warmup must be in [1, 1000], not ", o.warmup);
  SL_CHECK(o.traced_steps >= 1 && o.traced_steps <= 1000, "compare: --traced-steps must be in [1, 1000], not ",
           o.traced_steps);
  SL_CHECK(o.child_timeout_s > 0, "compare: --child-timeout must be positive");
  SL_CHECK(!o.modes.empty(), "compare: --modes is empty");
  for (const auto& md : o.modes)
    SL_CHECK(md == "eager" || md == "graph", "compare: --modes takes eager and/or graph, not '", md, "'");
  // Each policy in its one spelling ("pool:+2" and "pool:02" are pool:2): two spellings of one
  // policy were two sides writing one run file, the second over the first.
  {
    std::map<std::string, std::string> seen;
    for (auto& p : o.policies) {
      const std::string canon = StreamPolicy::parse(p).str();
      const auto [it, fresh] = seen.emplace(canon, p);
      SL_CHECK(fresh, "compare: --policies: ", canon, " is listed twice ('", it->second, "' and '", p, "')");
      p = canon;
    }
  }
  if (!o.inputs.empty()) return run_inputs(o);
  std::string why;
  if (o.backend == "cuda" && o.recorded.empty() && gpu_present(&why)) return run_live(o);
  if (o.backend == "cpu" && o.recorded.empty()) return run_live(o);
  return run_recorded(o, why);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "The verdict on stream policies: with no inputs, run per-layer vs shared (serial as the reference) on this GPU "
      "and write a report folder, or without a GPU show the comparison recorded in results/compare (on an H200, or an "
      "H100 where no H200 ran it); with inputs (run "
      "folders, our JSON / SQLite traces, PyTorch profiler JSON), compare those");
  cmd->add_option("inputs", o->inputs, "run folders or trace files to compare (the first is the baseline A)");
  add_model_options(cmd, o->model);
  // The policies come from --policies here; --policy picks a side of run-folder inputs.
  cmd->remove_option(cmd->get_option("--policy"));
  o->model.config = "flash-6l";
  cmd->get_option("--config")->default_str("flash-6l");
  cmd->add_option("--kernel-variants", o->kernel_variants, std::string("live: ") + kKernelVariantsHelp)
      ->check(kernel_variants_error);
  cmd->add_option("--policies", o->policies, "live: policies to run, the first is the baseline A; serial is the "
                  "no-overlap reference")->delimiter(',')->capture_default_str();
  cmd->add_option("--repetitions,-r", o->repetitions, "live: processes per policy")->capture_default_str();
  cmd->add_option("--steps", o->steps, "live: timed decode steps per mode and process")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "live: untimed steps per mode before them")->capture_default_str();
  cmd->add_option("--traced-steps", o->traced_steps, "live: steps per mode in each policy's traced run")
      ->capture_default_str();
  cmd->add_flag("--no-trace", o->no_trace, "live: no traced run (no structure, waits or critical path)");
  cmd->add_flag("--no-baseline-twice", o->no_baseline_twice,
                "live: measure the baseline once (the margin is then --margin, not the measured noise)");
  cmd->add_option("--modes", o->modes, "live: eager and/or graph")->delimiter(',')->capture_default_str();
  CLI::Option* backend_opt =
      cmd->add_option("--backend", o->backend, "live: cuda, or cpu (the CPU reference, tiny configs: tests only)")
          ->check(CLI::IsMember({"cpu", "cuda"}))
          ->capture_default_str();
  cmd->add_option("--gpus", o->gpus, "live: expert parallelism over N GPUs (one process each over NCCL, rank 0 "
                                     "timed): --backend cuda --expert-ranks N; --modes eager")
      ->check(CLI::Range(1, 64))
      ->excludes(backend_opt)
      ->excludes(cmd->get_option("--expert-ranks"));
  cmd->add_option("--connections", o->connections,
                  "live: CUDA_DEVICE_MAX_CONNECTIONS for the children (hardware queues, 1..32)")
      ->check(CLI::Range(1, 32))
      // Text (empty = unset), passed on as written: made plain decimal first, so "0x3" or "1.5" is
      // refused rather than handed to the driver.
      ->transform(CLI::Validator(decimal_whole_number, "", "decimal"));
  cmd->add_option("--out-dir", o->out_dir, "live: where the report folder <date>_<gpu>_<commit>/ goes")
      ->capture_default_str()
      ->each([o](const std::string&) { o->out_dir_given = true; });
  cmd->add_option("--recorded", o->recorded, "show this recorded run folder instead of measuring");
  cmd->add_option("--policy", o->policy_filter, "inputs: take only this policy's side from each run folder");
  cmd->add_option("--step-range", o->step_range,
                  "inputs: the range that delimits a step in traces (a name, or a prefix with *); default decode, "
                  "else ProfilerStep*, else the whole trace");
  cmd->add_option("--margin", o->margin_pct,
                  "equivalence margin floor in percent (the margin is the larger of this and the A-vs-A noise; "
                  "a run folder shown again uses the margin it was recorded with unless this is given)")
      ->each([o](const std::string&) { o->margin_given = true; })
      ->capture_default_str();
  cmd->add_option("--fail-if-slower", o->fail_if_slower,
                  "exit 3 when the 95 % interval says a contender's whole step is slower than A by more than PCT "
                  "percent")
      ->check(finite_in(0, 1000));
  cmd->add_option("--child-timeout", o->child_timeout_s, "live: seconds one child process may take")
      ->check(finite_in(0, 1e6, true))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the summary as JSON on stdout (progress stays on stderr)");
  cmd->add_flag("--screenshots", o->screenshots,
                "timeline screenshots of each side's traced steps into the report (needs the viewer and a display: "
                "xvfb-run -a); a live compare takes them anyway when it can");
  cmd->add_flag("--rewrite-report", o->rewrite_report,
                "with one run folder: write its report.md, report.html and summary.json again with this binary "
                "(the measurements are not touched)");
  cmd->callback([o, cmd] {
    if (o->gpus > 0) {
      o->backend = "cuda";
      o->model.expert_ranks = o->gpus;
    }
    // Options that would be ignored where they were given are refused instead.
    SL_CHECK(!o->rewrite_report || o->policy_filter.empty(), "compare --rewrite-report rewrites the whole folder's "
             "reports; --policy picks one side of each of several inputs");
    SL_CHECK(cmd->get_option("--traced-steps")->count() == 0 || (o->backend == "cuda" && o->inputs.empty()),
             "compare --traced-steps: the traced runs are live CUDA runs (--backend cuda, no inputs)");
    const int rc = compare_main(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sl::cli
