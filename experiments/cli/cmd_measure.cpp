// `streamlab measure`: one process's measurement of decode steps under one stream policy, written
// as JSON (experiments/compare/measurement.h). `compare` and `sweep` run it as their child
// process, once per policy and repetition, so that no policy inherits another's context, queues
// or memory; it can also be run by hand.
//
// Untraced (default): after the prefill and a warm-up, each mode's steps are timed twice over:
// the host wall clock from enqueue to completion, and the GPU time between timing marks on the
// main stream (step start, target done, step end). With --trace, the same process instead traces
// one window per mode with CUPTI (the structure compare analyses), then stops tracing and times
// the same number of steps untraced: the tracing on/off ratio inside one process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/socket_group.h"
#include "experiments/cli/backend_choice.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/model_options.h"
#include "experiments/cli/provenance.h"
#include "experiments/cli/rank_processes.h"
#include "experiments/compare/measurement.h"
#include "model/deepseek_v4.h"
#if STREAMLAB_HAVE_CUDA
#include "profiler/cupti/cupti_session.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/summary.h"
#endif

namespace sl::cli {
namespace {

struct MeasureOptions {
  ModelOptions model;
  std::string backend = "cuda";
  std::string kernel_variants;  // --kernel-variants (model/kernel_variants.h)
  std::vector<std::string> modes{"eager", "graph"};
  int steps = 20;
  int warmup = 3;
  std::string out;
  bool trace = false;
  bool allow_invalid_records = false;
  int gpus = 0;          // --gpus N: --backend cuda --expert-ranks N
  std::string rank_of;   // set only in the copies rank 0 starts: "R:SOCKET"
};

char** g_measure_argv = nullptr;
int g_measure_argc = 0;

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}


// One decode step in `mode`, timed. The device half alone is between the two synchronizations
// (the position upload before it and the token download after it are not part of a step's
// latency in a serving loop that keeps tokens on the device).
struct StepTiming {
  double host_ms = 0, enqueue_ms = 0;
  DeepSeekV4::StepTimes marks;
};
StepTiming timed_step(DeepSeekV4& model, const std::string& mode) {
  model.decode_prepare();
  model.backend().synchronize();
  StepTiming t;
  const auto t0 = clock_type::now();
  if (mode == "graph")
    model.decode_replay();
  else
    model.decode_enqueue();
  t.enqueue_ms = ms_since(t0);
  model.backend().synchronize();
  t.host_ms = ms_since(t0);
  model.decode_collect();
  t.marks = model.last_step_times();
  return t;
}

void record_graphs(const DeepSeekV4& model, compare::ModeSamples& s) {
  const auto& g = model.graph_stats();
  s.graph_nodes = g.nodes;
  s.graph_edges = g.edges;
  s.capture_ms = g.capture_ms;
  s.instantiate_ms = g.instantiate_ms;
  for (const auto& p : model.graphs()) s.graphs.push_back({p.name, p.stats.nodes, p.stats.edges});
}

compare::ModeSamples measure_mode(DeepSeekV4& model, const std::string& mode, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) timed_step(model, mode);  // the graph's capture is in the first
  compare::ModeSamples s;
  s.mode = mode;
  for (int i = 0; i < steps; ++i) {
    const StepTiming t = timed_step(model, mode);
    s.step_ms.push_back(t.marks.step_ms);
    s.target_ms.push_back(t.marks.target_ms);
    s.draft_ms.push_back(t.marks.draft_ms);
    s.host_ms.push_back(t.host_ms);
    s.enqueue_ms.push_back(t.enqueue_ms);
  }
  if (mode == "graph") record_graphs(model, s);
  return s;
}

std::vector<double> host_times(DeepSeekV4& model, const std::string& mode, int steps) {
  std::vector<double> v;
  for (int i = 0; i < steps; ++i) v.push_back(timed_step(model, mode).host_ms);
  return v;
}

// The decode steps a measure process runs after its prefill, in order, as (mode, count): what
// measure_mode / measure_traced do on rank 0, and what every other rank of a split model repeats.
std::vector<std::pair<std::string, int>> step_sequence(const MeasureOptions& o) {
  std::vector<std::pair<std::string, int>> seq;
  if (!o.trace) {
    for (const auto& m : o.modes) seq.push_back({m, o.warmup + o.steps});
  } else {
    for (const auto& m : o.modes) seq.push_back({m, o.warmup});
    for (int pass = 0; pass < 2; ++pass)  // traced, then untraced
      for (const auto& m : o.modes) seq.push_back({m, o.steps});
  }
  return seq;
}

std::string sibling(const std::string& out, const std::string& suffix) {
  std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + suffix)).string();
}

// Where rank r > 0 of a split model writes its trace of a mode's window (beside rank 0's).
std::string rank_trace_file(const std::string& out, const std::string& mode, int rank) {
  return sibling(out, "." + mode + ".rank" + std::to_string(rank) + ".json");
}

// Refuses bad options and a backend that cannot do what they ask, before anything is allocated.
void check_measure_options(const MeasureOptions& o) {
  check_split_options(o.model);
  if (o.model.expert_ranks > 1) {
    // The ranks are processes (rank 0 measures, the others repeat its steps); eager only: NCCL's
    // collectives inside captured graphs are not validated here yet.
    for (const auto& m : o.modes)
      SL_CHECK(m == "eager", "measure --expert-ranks ", o.model.expert_ranks, ": only --modes eager (graph capture of "
               "the ranks' collectives is not supported yet)");
    SL_CHECK(o.model.expert_scheme == "all-gather", "measure --expert-ranks: the all-gather scheme only (every rank "
             "runs every sequence; rank 0's step times are the job's)");
  }
  SL_CHECK(!o.out.empty(), "measure: --out FILE.json is required");
  SL_CHECK(o.steps >= 1 && o.steps <= 100000, "measure: --steps must be in [1, 100000], not ", o.steps);
  SL_CHECK(o.warmup >= 1 && o.warmup <= 1000, "measure: --warmup must be in [1, 1000] (the first step of a mode "
           "loads modules and captures the graph), not ", o.warmup);
  SL_CHECK(!o.modes.empty(), "measure: --modes is empty");
  for (const auto& m : o.modes) SL_CHECK(m == "eager" || m == "graph", "measure: --modes takes eager and/or graph, not '", m, "'");
  if (o.backend == "cpu") {
    // The CPU reference runs ops one by one on the host: no graphs, no tracer. It is here so that
    // compare and sweep can be exercised end to end on a machine without a GPU (tests, CI).
    for (const auto& m : o.modes) SL_CHECK(m == "eager", "measure --backend cpu: only --modes eager (no CUDA graphs on the CPU)");
    SL_CHECK(!o.trace, "measure --backend cpu: --trace needs the CUDA backend");
  } else {
    std::string why;
    SL_CHECK(gpu_present(&why), "measure: needs a GPU (", why, "); --backend cpu measures the CPU reference");
  }
}

// What was measured: the set-up, the streams and events the model made (before any step).
void describe_setup(compare::Measurement& m, const MeasureOptions& o, const ModelConfig& cfg,
                    const StreamPolicy& policy, DeepSeekV4& model) {
  m.provenance = provenance(command_line(g_measure_argc, g_measure_argv));
  // The CPU reference runs ops one by one whatever the source: it says so, and which source it
  // modelled ("cpu-reference:torch").
  m.stream_source = (o.backend == "cpu" ? std::string("cpu-reference:") : std::string()) +
                    stream_source_name(policy.source);
  m.config = cfg.name;
  m.layers = cfg.num_hidden_layers;
  m.mtp_layers = cfg.num_nextn_predict_layers;
  m.mtp_compress = cfg.mtp_compress_ratio;
  m.batch = cfg.batch;
  m.context = cfg.context_length;
  m.draft_steps = cfg.draft_steps;
  m.weights = o.model.weights;
  m.kv_cache = o.model.kv_cache;
  m.policy = policy.str();
  m.aux_priority = o.model.aux_priority;
  m.shared_expert_stream = policy.shared_expert_stream;
  m.connections = connections_setting();
  m.placement = placement_name(policy.placement);
  m.graph_scope = graph_scope_name(model.graph_scope());
  for (int k : model.stream_plan().aliased())
    m.aliased.push_back(model.stream_plan().label(k));
  m.streams_created = int(model.created_streams().size());
  // Named as the trace names them: under the torch source a pool stream lists every role drawn
  // onto it.
  Schedule names;
  model.describe_streams(names);
  for (const auto& s : names.streams())
    if (s.id != 0) {
      m.stream_names.push_back(s.name);
      m.stream_owners.push_back(s.owner);
    }
  m.stream_setup_ms = model.stream_setup_ms();
  m.events_created = int(model.events_created());
}

#if STREAMLAB_HAVE_CUDA
// --trace: one CUPTI window per mode, written beside --out (Kineto JSON; the eager one also as
// nsys-layout SQLite), then the same number of steps untraced (the tracing on/off ratio).
void measure_traced(compare::Measurement& m, const MeasureOptions& o, const ModelConfig& cfg,
                    const StreamPolicy& policy, DeepSeekV4& model) {
  auto& session = prof::CuptiSession::instance();
  for (const auto& mode : o.modes) host_times(model, mode, o.warmup);  // modules, CUPTI code, graph capture
  std::vector<compare::TracedWindow> windows;
  for (const auto& mode : o.modes) {
    std::fprintf(stderr, "measure: tracing %d %s steps\n", o.steps, mode.c_str());
    compare::TracedWindow w;
    w.mode = mode;
    session.begin_window();
    w.traced_step_ms = host_times(model, mode, o.steps);
    prof::Trace trace = session.end_window();
    trace.metadata["policy"] = policy.str();
    trace.metadata["mode"] = mode;
    trace.metadata["config"] = cfg.name;
    if (o.model.expert_ranks > 1) {  // rank 0's view of a split model (the others do not trace)
      trace.rank = 0;
      trace.world_size = o.model.expert_ranks;
    }
    const std::string warn = prof::record_count_warnings(trace.counts);
    if (!warn.empty()) {
      std::fprintf(stderr, "measure: %s\n", warn.c_str());
      SL_CHECK(o.allow_invalid_records || trace.counts.clean(), "measure: the ", mode,
               " trace has dropped or invalid records (see above); --allow-invalid-records keeps it");
    }
    const std::string json_path = sibling(o.out, "." + mode + ".json");
    prof::write_kineto_json_file(trace, json_path);
    w.trace_json = std::filesystem::path(json_path).filename().string();
    for (int r = 1; r < o.model.expert_ranks; ++r)  // written by the other ranks (checked when they end)
      w.rank_traces.push_back(std::filesystem::path(rank_trace_file(o.out, mode, r)).filename().string());
    if (mode == "eager") {
      const std::string sqlite_path = sibling(o.out, "." + mode + ".sqlite");
      prof::write_nsys_sqlite(trace, sqlite_path);
      w.trace_sqlite = std::filesystem::path(sqlite_path).filename().string();
    }
    windows.push_back(std::move(w));
  }
  session.stop();
  for (auto& w : windows) {
    std::fprintf(stderr, "measure: %d untraced %s steps (tracing on/off)\n", o.steps, w.mode.c_str());
    w.untraced_step_ms = host_times(model, w.mode, o.steps);
  }
  m.traced = std::move(windows);
  if (model.graph_captured()) {
    compare::ModeSamples g;
    g.mode = "graph";
    record_graphs(model, g);
    m.modes.push_back(g);
  }
}
#endif

// Rank r > 0 of a split model (--rank-of): joins the group, builds its share, and repeats rank
// 0's prefill and steps, meeting it in every collective; it writes nothing (its log is its output).
void measure_other_rank(const MeasureOptions& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const RankOf me = parse_rank_of(o.rank_of);
  const int world = o.model.expert_ranks;
  SL_CHECK(me.rank < world, "--rank-of ", o.rank_of, ": rank ", me.rank, " of ", world);
  ModelConfig cfg = resolve_config(o.model, "");
  const StreamPolicy policy = resolve_policy(o.model);
  const auto seq = step_sequence(o);
  int total = 0;
  for (const auto& s : seq) total += s.second;
  RunShape shape = run_shape(cfg, o.model, total + 1, false);
  shape.expert_rank = me.rank;
  std::unique_ptr<Communicator> host = join_socket_group(me.socket, me.rank, world);
  std::unique_ptr<Communicator> gpu;
  try {
    auto be = make_backend(o.backend, KernelVariants::parse(o.kernel_variants), o.backend == "cuda" ? me.rank : 0);
    if (o.backend == "cuda") gpu = make_gpu_group(*host);
    be->set_communicator(gpu ? gpu.get() : host.get());
    DeepSeekV4 model(*be, cfg, policy, shape);
    model.set_graph_scope(parse_graph_scope(o.model.graph_scope));
    model.enable_step_marks();
    model.init_random(cfg.seed);
    model.prefill(seeded_prompt(cfg), cfg.context_length);
    std::printf("measure rank %d of %d: prefill done, %d steps to repeat\n", me.rank, world, total);
#if STREAMLAB_HAVE_CUDA
    // --trace: this rank traces the same windows as rank 0 (the second pass of the sequence),
    // its trace beside rank 0's, naming its rank.
    auto& session = prof::CuptiSession::instance();
    if (o.trace)
      SL_CHECK(session.start({}) == prof::SessionState::Tracing, "measure rank ", me.rank, " --trace: ", session.message());
#endif
    for (size_t k = 0; k < seq.size(); ++k) {
      const auto& [mode, n] = seq[k];
      const bool traced = o.trace && k >= o.modes.size() && k < 2 * o.modes.size();
#if STREAMLAB_HAVE_CUDA
      if (traced) session.begin_window();
#endif
      for (int i = 0; i < n; ++i) timed_step(model, mode);
#if STREAMLAB_HAVE_CUDA
      if (traced) {
        prof::Trace trace = session.end_window();
        trace.rank = me.rank;
        trace.world_size = world;
        trace.metadata["policy"] = policy.str();
        trace.metadata["mode"] = mode;
        trace.metadata["config"] = cfg.name;
        prof::write_kineto_json_file(trace, rank_trace_file(o.out, mode, me.rank));
        if (k + 1 == 2 * o.modes.size()) session.stop();
      }
#else
      (void)traced;
#endif
    }
    be->synchronize();
    (gpu ? *gpu : *host).finish();  // with every rank: no normal exit may look like a failure
  } catch (const std::exception& e) {
    (gpu ? gpu.get() : host.get())->abort("measure rank " + std::to_string(me.rank) + ": " + e.what());
    throw;
  }
  std::printf("measure rank %d of %d: done\n", me.rank, world);
}

// Rank 0 (or the only process): the prefill and the timed (or traced) steps, as a measurement.
compare::Measurement measure_rank0(const MeasureOptions& o, const ModelConfig& cfg, const StreamPolicy& policy,
                                   const RunShape& shape, Backend& backend) {
  Backend* be = &backend;
  DeepSeekV4 model(*be, cfg, policy, shape);
  model.set_graph_scope(parse_graph_scope(o.model.graph_scope));
  model.enable_step_marks();
  model.init_random(cfg.seed);
  model.prefill(seeded_prompt(cfg), cfg.context_length);

  compare::Measurement m;
  describe_setup(m, o, cfg, policy, model);
  m.expert_ranks = shape.expert_world;
  m.attention_tp = shape.attention_tp;
  if (!o.trace) {
    for (const auto& mode : o.modes) {
      std::fprintf(stderr, "measure: %s, %d warm-up + %d timed steps\n", mode.c_str(), o.warmup, o.steps);
      m.modes.push_back(measure_mode(model, mode, o.warmup, o.steps));
    }
  } else {
#if STREAMLAB_HAVE_CUDA
    measure_traced(m, o, cfg, policy, model);
#endif
  }
  const MemoryStats mem = be->memory();
  m.weights_bytes = double(mem.weights_bytes);
  m.activations_bytes = double(mem.activations_bytes);
  m.peak_bytes = double(mem.peak_bytes);
  m.library_bytes = double(mem.library_bytes);
  m.cublas_handles = int(mem.blas_handles);
  m.cublas_workspaces = int(mem.blas_workspaces);
  return m;
}


void measure(const MeasureOptions& o) {
  check_measure_options(o);
  if (!o.rank_of.empty()) return measure_other_rank(o);
  ModelConfig cfg = resolve_config(o.model, "");
  const StreamPolicy policy = resolve_policy(o.model);
#if STREAMLAB_HAVE_CUDA
  if (o.trace) {
    prof::CuptiSession::reexec_with_nvtx_injection(g_measure_argv, "streamlab");
    SL_CHECK(prof::CuptiSession::instance().start({}) == prof::SessionState::Tracing, "measure --trace: ",
             prof::CuptiSession::instance().message());
  }
#endif
  // --out is checked (its folder exists, it is no folder or FIFO) before minutes of measuring, not
  // after: the file is opened beside its destination now and renamed into place at the end. (After
  // the re-exec above, which would leave the temporary file behind.)
  AtomicFile out(o.out);
  const int per_mode = o.warmup + o.steps + (o.trace ? 2 * o.steps : 0);
  RunShape shape = run_shape(cfg, o.model, per_mode * int(o.modes.size()) + 1, false);
  std::fprintf(stderr, "measure: %s, policy %s, batch %d, context %d, %d MTP layers (compress %d), %d draft steps%s\n",
               cfg.name.c_str(), policy.str().c_str(), cfg.batch, cfg.context_length, cfg.num_nextn_predict_layers,
               cfg.mtp_compress_ratio, cfg.draft_steps, o.trace ? ", traced" : "");
  auto be = make_backend(o.backend, KernelVariants::parse(o.kernel_variants));
  check_memory_fits(*be, cfg, shape, "measure");
  // A split model: ranks 1 .. N-1 as copies of this process, repeating its steps; rank 0 measures.
  std::optional<RankGroup> ranks;
  if (o.model.expert_ranks > 1) {
    std::fprintf(stderr, "measure: expert parallelism over %d ranks (processes%s)%s\n", o.model.expert_ranks,
                 o.backend == "cuda" ? ", NCCL" : ", a socket group", o.model.attention_tp ? ", attention heads split too" : "");
    for (const auto& mode : o.modes)  // the ranks' traces are checked for at the end: none left from before
      for (int r = 1; r < o.model.expert_ranks; ++r) std::filesystem::remove(rank_trace_file(o.out, mode, r));
    ranks.emplace(g_measure_argv, o.model.expert_ranks, o.backend == "cuda");
    be->set_communicator(&ranks->comm());
  }
  compare::Measurement m;
  try {
    m = measure_rank0(o, cfg, policy, shape, *be);
    if (ranks) ranks->finish();  // the final barrier, then every rank's exit: all well, or no measurement
  } catch (const std::exception& e) {
    // Rank 0 failing stops the others (they would wait in their next collective); how they ended.
    if (ranks)
      if (const std::string why = ranks->stop_after_failure(); !why.empty()) fail(e.what(), why);
    throw;
  }
  if (ranks) {
    const std::filesystem::path folder = std::filesystem::path(o.out).parent_path();
    for (const auto& w : m.traced)
      for (const auto& f : w.rank_traces)
        SL_CHECK(std::filesystem::exists(folder / f), "measure: a rank ended well but its trace ", (folder / f).string(),
                 " is missing");
  }
  out.write(compare::to_json(m).dump(1) + "\n");
  out.commit();
  std::fprintf(stderr, "measure: wrote %s\n", o.out.c_str());
}

}  // namespace

void set_measure_argv(int argc, char** argv) {
  g_measure_argc = argc;
  g_measure_argv = argv;
}

void add_measure_command(CLI::App& app) {
  auto o = std::make_shared<MeasureOptions>();
  CLI::App* cmd = app.add_subcommand(
      "measure", "One process's timed decode steps under one stream policy, as JSON (the child process of compare and "
                 "sweep; needs a GPU)");
  add_model_options(cmd, o->model);
  CLI::Option* backend_opt =
      cmd->add_option("--backend", o->backend, "cuda, or cpu (the fp32 reference: eager only, for tests without a GPU)")
          ->check(CLI::IsMember({"cpu", "cuda"}))
          ->capture_default_str();
  cmd->add_option("--kernel-variants", o->kernel_variants, kKernelVariantsHelp)->check(kernel_variants_error);
  cmd->add_option("--out", o->out, "the measurement JSON to write (traces go beside it with --trace)")->required();
  cmd->add_option("--modes", o->modes, "eager and/or graph")->delimiter(',')->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed decode steps per mode")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed decode steps per mode before them")->capture_default_str();
  cmd->add_flag("--trace", o->trace,
                "trace one window per mode with CUPTI (Kineto JSON beside --out, and SQLite for eager), then time "
                "the same steps untraced (the tracing on/off ratio)");
  cmd->add_flag("--allow-invalid-records", o->allow_invalid_records, "keep a trace with dropped or invalid records");
  cmd->add_option("--gpus", o->gpus, "expert parallelism over N GPUs, one process each over NCCL: --backend cuda "
                                     "--expert-ranks N (rank 0 measures; eager only)")
      ->check(CLI::Range(1, 64))
      ->excludes(cmd->get_option("--expert-ranks"))
      ->excludes(backend_opt);
  cmd->add_option("--rank-of", o->rank_of, "RANK:SOCKET, set by rank 0 in the copies it starts")->group("");
  cmd->callback([o] {
    if (o->gpus > 0) {
      o->backend = "cuda";
      o->model.expert_ranks = o->gpus;
    }
    measure(*o);
  });
}

}  // namespace sl::cli
