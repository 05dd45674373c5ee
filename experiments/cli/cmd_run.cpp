// `streamlab run`: build the model on a backend, prefill a prompt batch, then decode steps
// with MTP drafts (with --verify on, steps that verify them: docs/speculative.md); print
// per-step timing, tokens, accepted drafts and a checksum of the logits, and the decode's
// committed tokens per second.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/communicator.h"
#include "core/error.h"
#include "core/npy.h"
#include "core/rng.h"
#include "experiments/cli/backend_choice.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/model_options.h"
#include "experiments/cli/phase_ticker.h"
#include "experiments/cli/stream_report.h"
#include "model/check_backend.h"
#include "model/kv_cache.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/expert_parallel.h"
#include "core/socket_group.h"
#include "experiments/cli/rank_processes.h"
#include "model/weights.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/summary.h"
#if STREAMLAB_HAVE_CUDA
#include <unistd.h>

#include "profiler/cupti/cupti_session.h"
#endif

namespace sl::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  SpeculativeOptions spec;
  std::string backend = "cpu";
  std::string kernel_variants;  // --kernel-variants (model/kernel_variants.h)
  int steps = 4;
  std::string checkpoint, tokens_file, dump_logits, dump_decode_logits, save_checkpoint;
  std::string save_dtype = "bf16";
  bool json = false;
  bool graph = false;
  // Tracing (CUPTI, cuda backend): decode steps after the first `warmup` are the window.
  std::string trace_json, trace_sqlite;
  int warmup = 1;
  bool allow_invalid_records = false;
  bool no_latency_timestamps = false;
  bool no_op_ranges = false;
  std::string plant;  // a fault planted on purpose (check-races' faults, run for real)
  bool allow_nonfinite_logits = false;
  // Op-by-op comparison with the CPU reference on identical inputs (model/check_backend.h).
  bool check_against_cpu = false;
  double check_tolerance = 2e-2;
  bool check_print_ops = false;
  // Expert parallelism: model.expert_ranks, expert_scheme and attention_tp (ModelOptions) say
  // the split; rank_launch how its ranks run.
  // threads: ranks 1 .. N-1 as threads of this process (an in-process group); processes: as
  // copies of this process (experiments/cli/rank_processes.h) joined through a socket group.
  std::string rank_launch = "threads";
  std::string rank_of;  // set only in a copy that rank 0 started: "R:SOCKET"
  int gpus = 0;         // --gpus N: --backend cuda --expert-ranks N --rank-launch processes
  bool tracing() const { return !trace_json.empty() || !trace_sqlite.empty(); }
};

char** g_argv = nullptr;  // set by main (set_process_argv), for the NVTX re-exec

// --check-against-cpu: prints the per-op report on stderr (stdout may be --json) and returns
// the error to end the run with (non-zero exit) when any output failed, else "".
std::string report_check(const Backend& check, double tolerance) {
  const auto& recs = check_records(check);
  print_check_report(stderr, recs, tolerance, 20);
  const CheckSummary s = summarize_checks(recs);
  if (!s.failures) return "";
  std::ostringstream os;
  os << "--check-against-cpu: " << s.failures << " op outputs disagree with the CPU reference (tolerance "
     << tolerance << "); first: " << s.first_failure->describe();
  return os.str();
}

double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

// The prompt: from a .npy of token ids ([T0] for every sequence, or [B, T0]), or
// deterministic pseudo-random ids from the seed.
std::vector<int32_t> prompt_tokens(const RunOptions& o, ModelConfig& cfg) {
  const int B = cfg.batch;
  std::vector<int32_t> out;
  if (!o.tokens_file.empty()) {
    std::vector<int64_t> shape;
    std::vector<int64_t> ids = read_npy_int64(o.tokens_file, &shape);
    int64_t T0 = 0;
    if (shape.size() == 1) {
      T0 = shape[0];
      for (int b = 0; b < B; ++b) out.insert(out.end(), ids.begin(), ids.end());
    } else if (shape.size() == 2 && shape[0] == B) {
      T0 = shape[1];
      out.assign(ids.begin(), ids.end());
    } else {
      fail(o.tokens_file, ": expected token ids of shape [T] or [batch=", B, ", T]");
    }
    SL_CHECK(T0 >= 1, o.tokens_file, ": the prompt is empty");
    for (int64_t id : ids)
      SL_CHECK(id >= 0 && id < cfg.vocab_size, o.tokens_file, ": token id ", id, " outside the vocabulary [0, ",
               cfg.vocab_size, ")");
    // The prompt's length is the context: a --context that says otherwise was ignored silently.
    SL_CHECK(!o.model.context || *o.model.context == T0, "--context ", o.model.context.value_or(0), " disagrees with ",
             o.tokens_file, ", a prompt of ", T0, " tokens per sequence (the prompt sets the context: leave --context out)");
    cfg.context_length = int(T0);
    return out;
  }
  return seeded_prompt(cfg);
}

std::string tokens_str(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// The config the run uses: named, a file, or a checkpoint's config.json (then named after the
// checkpoint's folder), with the command line's overrides; the decode steps must fit its positions.
ModelConfig config_for_run(const RunOptions& o) {
  const std::string cfg_path = o.checkpoint.empty() ? "" : (std::filesystem::path(o.checkpoint) / "config.json").string();
  if (!o.checkpoint.empty())
    SL_CHECK(std::filesystem::exists(cfg_path), "--checkpoint ", o.checkpoint, ": no config.json in that directory");
  ModelConfig cfg = resolve_config(o.model, cfg_path);
  if (!o.checkpoint.empty()) {
    auto dir = std::filesystem::path(o.checkpoint).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "ckpt/"
    cfg.name = dir.filename().string();
  }
  SL_CHECK(o.steps >= 0, "--steps must be >= 0");
  // Every decode step takes at least one position per sequence (1 + k when verifying): the steps
  // must fit the config's positions, checked here in 64 bits before any shape is computed.
  const int64_t per_step = o.spec.on() ? 1 + int64_t(cfg.draft_steps) : 1;
  SL_CHECK(int64_t(cfg.context_length) + int64_t(o.steps) * per_step + 2 * int64_t(cfg.draft_steps) + 2 <=
               int64_t(cfg.max_position_embeddings),
           "--steps ", o.steps, " after a context of ", cfg.context_length, " tokens needs more positions than the "
           "config's max_position_embeddings (", cfg.max_position_embeddings, ")");
  return cfg;
}

// --trace / --sqlite: the CUPTI session around the decode steps after the warm-up. The one place
// of `run` that depends on a CUDA build: without one, asking for a trace is an error.
// Where rank r of a split run writes its trace: rank 0 the path given, rank r > 0 the path with
// ".rank<r>" before its extension ("t.json" -> "t.rank1.json", "t.json.gz" -> "t.rank1.json.gz").
std::string rank_trace_path(const std::string& path, int rank) {
  if (rank == 0 || path.empty()) return path;
  const size_t slash = path.find_last_of('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find('.', name + 1);  // the first dot of the file name (not a leading one)
  if (dot == std::string::npos) dot = path.size();
  return path.substr(0, dot) + ".rank" + std::to_string(rank) + path.substr(dot);
}

class RunTracer {
 public:
  // rank / world: a split run's (each rank traces its own GPU into its own files, distributedInfo
  // saying which rank of how many).
  explicit RunTracer(const RunOptions& o, int rank = 0, int world = 1) : o_(o), rank_(rank), world_(world) {
#if STREAMLAB_HAVE_CUDA
    if (!o.tracing()) return;
    SL_CHECK(o.backend == "cuda", "--trace/--sqlite trace CUDA work: use --backend cuda");
    SL_CHECK(o.warmup >= 0 && o.warmup < o.steps, "--trace needs --steps greater than --warmup-steps (", o.warmup,
             "): the decode steps after the warm-up are the traced window");
    prof::CuptiSession::reexec_with_nvtx_injection(g_argv, "streamlab");
    prof::SessionOptions so;
    so.latency_timestamps = !o.no_latency_timestamps;
    const prof::SessionState st = prof::CuptiSession::instance().start(so);
    if (st == prof::SessionState::NvtxOnly)
      std::fprintf(stderr, "streamlab: %s\n", prof::CuptiSession::instance().message().c_str());
#else
    SL_CHECK(!o.tracing(), "--trace/--sqlite need a build with CUDA (CUPTI)");
#endif
  }
  // Before decode step s (1-based): the traced window opens after the warm-up steps.
  void before_step(int s) {
#if STREAMLAB_HAVE_CUDA
    if (tracing() && s == o_.warmup + 1) prof::CuptiSession::instance().begin_window();
#else
    (void)s;
#endif
  }
  // After the last step: the window's trace written where asked; dropped or invalid records fail
  // the run unless --allow-invalid-records.
  void finish(FILE* info) {
#if STREAMLAB_HAVE_CUDA
    if (!tracing()) return;
    prof::Trace trace = prof::CuptiSession::instance().end_window();
    prof::CuptiSession::instance().stop();
    if (world_ > 1) {
      trace.rank = rank_;
      trace.world_size = world_;
    }
    const std::string json = rank_trace_path(o_.trace_json, rank_), sqlite = rank_trace_path(o_.trace_sqlite, rank_);
    if (!json.empty()) {
      prof::write_kineto_json_file(trace, json);
      std::fprintf(info, "trace (Kineto JSON) written to %s\n", json.c_str());
    }
    if (!sqlite.empty()) {
      prof::write_nsys_sqlite(trace, sqlite);
      std::fprintf(info, "trace (nsys-layout SQLite) written to %s\n", sqlite.c_str());
    }
    const std::string warn = prof::record_count_warnings(trace.counts);
    if (!warn.empty()) {
      std::fprintf(stderr, "streamlab: %s\n", warn.c_str());
      SL_CHECK(o_.allow_invalid_records || trace.counts.clean(),
               "the trace has dropped or invalid records (see above); rerun with --allow-invalid-records to keep it");
    }
#else
    (void)info;
#endif
  }

 private:
#if STREAMLAB_HAVE_CUDA
  bool tracing() const {
    return o_.tracing() && prof::CuptiSession::instance().state() == prof::SessionState::Tracing;
  }
#endif
  const RunOptions& o_;
  int rank_, world_;
};

// The backend the model runs on. With --check-against-cpu, a wrapper over (CPU reference, chosen
// backend) that compares every op; `ref` and `dut` own the two and must outlive the wrapper.
struct RunBackend {
  KernelVariants variants;  // --kernel-variants, as the CUDA backend was given them
  std::unique_ptr<Backend> ref, dut, be;
};
RunBackend make_run_backend(const RunOptions& o) {
  RunBackend b;
  b.variants = KernelVariants::parse(o.kernel_variants);
  b.be = make_backend(o.backend, b.variants);
  if (!o.check_against_cpu) return b;
  SL_CHECK(!o.graph, "--check-against-cpu compares every op on the host: it cannot run with --graph");
  SL_CHECK(!o.tracing(), "--check-against-cpu downloads every op's outputs: a trace of it measures nothing; drop "
                         "--trace/--sqlite");
  SL_CHECK(o.check_tolerance > 0, "--check-tolerance must be > 0");
  CheckOptions co;
  co.tolerance = o.check_tolerance;
  co.print = o.check_print_ops ? CheckOptions::Print::All : CheckOptions::Print::None;
  co.log = stderr;
  b.dut = std::move(b.be);
  b.ref = make_cpu_backend();
  b.be = make_check_backend(*b.ref, *b.dut, co);
  return b;
}

// The weights: seeded random, or loaded from --checkpoint; then saved when --save-checkpoint.
void prepare_weights(DeepSeekV4& model, Backend& be, const ModelConfig& cfg, const RunOptions& o, FILE* info) {
  if (o.checkpoint.empty()) {
    std::fprintf(info, "initialising weights from seed %llu\n", cfg.seed);
    PhaseTicker t(info, "initialising weights");
    model.init_random(cfg.seed);
  } else {
    std::fprintf(info, "loading %s\n", o.checkpoint.c_str());
    PhaseTicker t(info, "loading the checkpoint");
    model.load(o.checkpoint);
  }
  if (!o.save_checkpoint.empty()) {
    std::fprintf(info, "saving checkpoint to %s (%s)\n", o.save_checkpoint.c_str(), o.save_dtype.c_str());
    PhaseTicker t(info, "saving the checkpoint");
    save_checkpoint(be, cfg, model.weights(), o.save_checkpoint, o.save_dtype == "f32" ? DType::F32 : DType::BF16);
  }
}

// One row per step: a text line on stdout, or a JSON object kept for --json; counts the steps whose
// logits were not finite (the run then fails at the end).
class StepReporter {
 public:
  explicit StepReporter(bool json) : json_(json) {
    if (!json_) std::printf("%-4s %-8s %7s %10s\n", "step", "kind", "tokens", "ms");
  }
  void report(int idx, const char* kind, int tokens, double ms, const StepOutput& out) {
    // Spread of the logits: finite and clearly non-zero means the activations stayed healthy
    // through every layer.
    double sum = 0, sq = 0;
    size_t bad = 0;
    for (float v : out.last_logits) {
      if (!std::isfinite(v)) ++bad;
      sum += v;
      sq += double(v) * v;
    }
    if (bad) ++nonfinite_steps_;
    const double n = double(std::max<size_t>(out.last_logits.size(), 1));
    const double std_dev = std::sqrt(std::max(0.0, sq / n - (sum / n) * (sum / n)));
    nlohmann::json j{{"step", idx}, {"kind", kind}, {"tokens", tokens}, {"ms", ms}, {"sampled", out.sampled},
                     {"drafts", out.drafts}, {"logits_checksum", out.logits_checksum}, {"logits_std", std_dev},
                     {"logits_nonfinite", bad}};
    // A verifying step: drafts accepted per sequence, and the tokens it committed (a + 1 each).
    std::string accepted_text;
    if (!out.accepted.empty()) {
      int committed = 0;
      for (int32_t a : out.accepted) committed += a + 1;
      j["accepted"] = out.accepted;
      j["committed"] = committed;
      accepted_text = "  accepted " + tokens_str(out.accepted);
    }
    steps_.push_back(j);
    if (json_) return;
    std::string drafts = "[";
    for (size_t s = 0; s < out.drafts.size(); ++s) drafts += (s ? "," : "") + tokens_str(out.drafts[s]);
    drafts += "]";
    std::printf("%-4d %-8s %7d %10.3f  sampled %s%s  drafts %s  logits checksum %.6e std %.3g%s\n", idx, kind, tokens,
                ms, tokens_str(out.sampled).c_str(), accepted_text.c_str(), drafts.c_str(), out.logits_checksum,
                std_dev, bad ? "  NON-FINITE LOGITS" : "");
    std::fflush(stdout);
  }
  const nlohmann::json& steps() const { return steps_; }
  size_t nonfinite_steps() const { return nonfinite_steps_; }

 private:
  bool json_;
  nlohmann::json steps_ = nlohmann::json::array();
  size_t nonfinite_steps_ = 0;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Progress on long prompts (several chunks, or past a few seconds), on the info stream (stderr
// under --json), at most one line a second.
void report_prefill_progress(DeepSeekV4& model, FILE* info) {
  const auto start = Clock::now();
  auto last = start;
  model.set_prefill_progress([info, start, last](int done, int total) mutable {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - start).count();
    if (done >= total || std::chrono::duration<double>(now - last).count() < 1.0) return;
    last = now;
    std::fprintf(info, "prefill: %d of %d tokens per sequence enqueued (%.1f s)\n", done, total, since);
    std::fflush(info);
  });
}

// The prefill, timed and reported as step 0; its logits dumped when --dump-logits.
void run_prefill(DeepSeekV4& model, const ModelConfig& cfg, const std::vector<int32_t>& prompt, const RunOptions& o,
                 StepReporter& rep, FILE* info) {
  report_prefill_progress(model, info);
  const auto t0 = Clock::now();
  std::optional<PhaseTicker> ticker(std::in_place, info,
                                    "prefill of " + std::to_string(cfg.context_length) + " tokens per sequence");
  StepOutput pre = model.prefill(prompt, cfg.context_length);
  ticker.reset();
  rep.report(0, "prefill", cfg.batch * cfg.context_length, ms_since(t0), pre);
  if (o.dump_logits.empty()) return;
  write_npy(o.dump_logits, DType::F32, {int64_t(cfg.batch) * cfg.context_length, cfg.vocab_size},
            pre.all_logits.data());
  std::fprintf(info, "prefill logits [%d, %d] written to %s\n", cfg.batch * cfg.context_length, cfg.vocab_size,
               o.dump_logits.c_str());
}

// A CUDA graph's capture, described once (the step that captured it).
void print_graph_captured(const DeepSeekV4& model, FILE* info) {
  const auto& g = model.graph_stats();
  std::fprintf(info, "graph captured (scope %s): capture %.3f ms, instantiate %.3f ms, %zu nodes, %zu edges\n",
               graph_scope_name(model.graph_scope()), g.capture_ms, g.instantiate_ms, g.nodes, g.edges);
  if (model.graphs().size() > 1 && model.graphs().size() <= 4)
    for (const auto& p : model.graphs())
      std::fprintf(info, "  graph %-9s %zu nodes, %zu edges\n", p.name.c_str(), p.stats.nodes, p.stats.edges);
  else if (model.graphs().size() > 4)
    std::fprintf(info, "  in %zu graphs (per graph in --json)\n", model.graphs().size());
}

// Decode totals: tokens committed (a + 1 per sequence and verifying step, else 1), drafts
// accepted, and the steps' wall time (a graph's capture step included).
struct DecodeTotals {
  int64_t committed = 0, accepted = 0;
  double ms = 0;
};

// The decode steps (eager, or captured once then replayed with --graph), each reported; the
// logits of every step dumped when --dump-decode-logits.
DecodeTotals run_decode(DeepSeekV4& model, const ModelConfig& cfg, const RunShape& shape, const RunOptions& o,
                        RunTracer& tracer, StepReporter& rep, FILE* info) {
  DecodeTotals tot;
  std::vector<float> decode_logits;  // [steps * batch, vocab] for --dump-decode-logits
  for (int s = 1; s <= o.steps; ++s) {
    tracer.before_step(s);
    const auto t0 = Clock::now();
    const bool capturing = o.graph && !model.graph_captured();
    StepOutput out = o.graph ? model.decode_step_graph() : model.decode_step();
    const double ms = ms_since(t0);
    if (capturing) print_graph_captured(model, info);
    tot.ms += ms;
    if (shape.verify) {
      for (int32_t a : out.accepted) tot.committed += a + 1, tot.accepted += a;
    } else {
      tot.committed += cfg.batch;
    }
    const int rows = shape.verify ? cfg.batch * (1 + cfg.draft_steps) : cfg.batch;  // the target's tokens
    rep.report(s, capturing ? "capture" : o.graph ? "replay" : "decode", rows, ms, out);
    if (!o.dump_decode_logits.empty())
      decode_logits.insert(decode_logits.end(), out.last_logits.begin(), out.last_logits.end());
  }
  if (!o.dump_decode_logits.empty()) {
    write_npy(o.dump_decode_logits, DType::F32, {int64_t(o.steps) * cfg.batch, cfg.vocab_size}, decode_logits.data());
    std::fprintf(info, "decode logits [%d, %d] written to %s\n", o.steps * cfg.batch, cfg.vocab_size,
                 o.dump_decode_logits.c_str());
  }
  return tot;
}

// Everything `run --json` prints: the set-up, every step, decode totals, graphs and memory.
nlohmann::json run_json(const DeepSeekV4& model, const RunBackend& backend, const ModelConfig& cfg, const StreamPolicy& policy,
                        const RunShape& shape, AcceptRule accept, const RunOptions& o, const StepReporter& rep,
                        const nlohmann::json& decode_summary, int alias_from) {
  const Backend& be = *backend.be;
  const MemoryStats mem = be.memory();
  nlohmann::json graph(nullptr);
  if (o.graph) {
    const auto& g = model.graph_stats();
    nlohmann::json graphs = nlohmann::json::array();
    for (const auto& p : model.graphs())
      graphs.push_back({{"name", p.name}, {"nodes", p.stats.nodes}, {"edges", p.stats.edges}});
    graph = {{"capture_ms", g.capture_ms}, {"instantiate_ms", g.instantiate_ms}, {"nodes", g.nodes},
             {"edges", g.edges}, {"scope", graph_scope_name(model.graph_scope())}, {"graphs", graphs}};
  }
  return {{"config", cfg.name},
          {"backend", be.name()},
          {"kernel_variants", o.backend == "cuda" ? nlohmann::json(backend.variants.str()) : nlohmann::json(nullptr)},
          {"policy", policy.str()},
          {"batch", cfg.batch},
          {"context", cfg.context_length},
          {"draft_steps", cfg.draft_steps},
          {"weights", weight_format_name(shape.weights)},
          {"expert_ranks", shape.expert_world},
          {"rank_launch", shape.expert_world > 1 ? nlohmann::json(o.rank_launch) : nlohmann::json(nullptr)},
          {"attention_tp", shape.attention_tp},
          {"expert_scheme", shape.expert_world > 1 ? nlohmann::json(shape.expert_all_to_all ? "all-to-all" : "all-gather")
                                                   : nlohmann::json(nullptr)},
          {"kv_cache", shape.kv_fp8 ? "fp8" : "bf16"},
          // Where the FP8 caches' values live: "packed" (vLLM's bytes) or "emulated" (act dtype).
          {"kv_cache_storage", shape.kv_fp8 ? nlohmann::json(model.kv_packed() ? "packed" : "emulated")
                                            : nlohmann::json(nullptr)},
          {"verify", shape.verify},
          {"accept", shape.verify ? nlohmann::json(accept_rule_str(accept)) : nlohmann::json(nullptr)},
          {"decode", decode_summary},
          {"mtp_layers", cfg.num_nextn_predict_layers},
          {"mtp_compress_ratio", cfg.mtp_compress_ratio},
          {"stream_source", stream_source_name(policy.source)},
          {"placement", placement_name(policy.placement)},
          {"aux_streams", model.created_streams().size()},
          {"stream_plan", stream_plan_json(model.stream_plan(), policy, alias_from)},
          {"stream_setup_ms", model.stream_setup_ms()},
          {"steps", rep.steps()},
          {"graph", graph},
          {"memory",
           {{"weights_bytes", mem.weights_bytes},
            {"activations_bytes", mem.activations_bytes},
            {"peak_bytes", mem.peak_bytes},
            {"library_bytes", mem.library_bytes},
            {"cublas_handles", mem.blas_handles},
            {"cublas_workspaces", mem.blas_workspaces},
            {"cuda_streams_created", mem.streams_created}}}};
}

// The text summary after the step rows: decode throughput, memory, cuBLAS's share.
void print_run_summary(const Backend& be, const ModelConfig& cfg, const RunShape& shape, const RunOptions& o,
                       const DecodeTotals& tot, double tokens_per_s, double mean_accepted) {
  if (o.steps > 0) {
    std::printf("decode: %lld tokens committed in %d steps, %.3f ms, %.1f tokens/s", (long long)tot.committed, o.steps,
                tot.ms, tokens_per_s);
    if (shape.verify) std::printf(", %.3f drafts accepted per sequence and step (of %d)", mean_accepted, cfg.draft_steps);
    std::printf("\n");
  }
  const MemoryStats mem = be.memory();
  std::printf("memory: weights %.1f MiB, activations + caches %.1f MiB, peak %.1f MiB, libraries %.1f MiB\n",
              mib(mem.weights_bytes), mib(mem.activations_bytes), mib(mem.peak_bytes), mib(mem.library_bytes));
  if (mem.blas_handles) std::printf("cuBLAS: %zu handles, %zu workspaces\n", mem.blas_handles, mem.blas_workspaces);
}

// --expert-ranks N: what a run over N ranks may combine. The other ranks repeat rank 0's calls
// (prefill, then each decode step) and meet it in every MoE layer's all-reduce, so anything
// rank 0 alone would do to the model (graphs, tracing, the op-by-op check, faults) is refused.
void check_expert_ranks(const RunOptions& o) {
  check_split_options(o.model);
  if (o.model.expert_ranks == 1) return;
  const char* opt = "--expert-ranks";
  SL_CHECK(o.backend != "cuda" || o.rank_launch == "processes", opt, " ", o.model.expert_ranks, " on the CUDA backend runs "
           "one process per GPU over NCCL: add --rank-launch processes (or use --gpus ", o.model.expert_ranks, ")");
  SL_CHECK(o.backend != "cuda" || o.model.expert_scheme != "all-to-all", opt, " with --expert-scheme all-to-all runs on the "
           "CPU backend only (the CUDA backend has no all-to-all exchange yet): use --expert-scheme all-gather");
  SL_CHECK(!o.graph, opt, " cannot run with --graph: ",
           o.backend == "cuda" ? "CUDA-graph capture of a model split over GPUs (each rank's NCCL all-reduce inside "
                                 "its graph) is not supported yet; run the split model eagerly"
                               : "the CPU backend has no graphs");
  SL_CHECK(!o.tracing() || o.backend == "cuda", opt, " cannot run with --trace / --sqlite on the CPU backend (CUPTI "
           "traces the CUDA backend; with --gpus N each rank traces its own GPU)");
  SL_CHECK(!o.check_against_cpu, opt, " cannot run with --check-against-cpu");
  SL_CHECK(o.plant.empty(), opt, " cannot run with --plant");
  SL_CHECK(o.save_checkpoint.empty(), opt, " cannot run with --save-checkpoint: each rank holds only its share of the "
           "routed experts");
  SL_CHECK(o.model.expert_scheme != "all-to-all" || o.model.weights == "bf16", opt, " with --expert-scheme all-to-all runs "
           "bf16 weights only (the exchange sends rows to experts held in bf16): use --weights bf16 or --expert-scheme "
           "all-gather");
}

// The all-to-all scheme gives each rank batch / N whole sequences, in order: rank r the
// sequences [r * B / N, (r + 1) * B / N) of the prompt. `cfg` becomes one rank's (its batch).
std::vector<std::vector<int32_t>> split_sequences(ModelConfig& cfg, const std::vector<int32_t>& prompt, int ranks) {
  SL_CHECK(cfg.batch % ranks == 0, "--expert-scheme all-to-all over ", ranks, " ranks gives each rank whole sequences: "
           "the batch (", cfg.batch, ") must be a multiple of ", ranks);
  const size_t per = size_t(cfg.batch / ranks) * size_t(cfg.context_length);
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < ranks; ++r) out.emplace_back(prompt.begin() + long(r * per), prompt.begin() + long((r + 1) * per));
  cfg.batch /= ranks;
  return out;
}

// What every rank of a run computes from the options alike: the config, each rank's prompt, the
// policy and the shape (rank 0's; a rank sets its own expert_rank).
struct RunSetup {
  ModelConfig cfg;
  std::vector<std::vector<int32_t>> rank_prompts;  // all of it under all-gather, its own sequences under all-to-all
  int full_batch = 0;                              // before an all-to-all split
  bool all_to_all = false;
  StreamPolicy policy;
  AcceptRule accept;
  RunShape shape;
};

RunSetup setup_run(const RunOptions& o) {
  RunSetup u;
  u.cfg = config_for_run(o);
  std::vector<int32_t> prompt = prompt_tokens(o, u.cfg);
  validate(u.cfg);
  u.full_batch = u.cfg.batch;
  u.rank_prompts.assign(size_t(o.model.expert_ranks), prompt);
  u.all_to_all = o.model.expert_ranks > 1 && o.model.expert_scheme == "all-to-all";
  if (u.all_to_all) u.rank_prompts = split_sequences(u.cfg, prompt, o.model.expert_ranks);
  u.policy = resolve_policy(o.model);
  u.accept = resolve_accept_rule(o.spec);
  u.shape = run_shape(u.cfg, o.model, o.steps, !o.dump_logits.empty(), o.spec.on());  // the split too
  if (o.model.expert_ranks > 1) partition_experts(u.cfg.n_routed_experts, o.model.expert_ranks, 0);  // an uneven split: said now
  return u;
}

// Rank r > 0 of a split run: builds the model with its share of the experts and repeats rank 0's
// calls (prefill, then each decode step), meeting it in every MoE layer's collective.
// On the CUDA backend rank r runs on GPU r and sums over NCCL (the group made over `comm`).
void run_other_rank(const RunOptions& o, const RunSetup& u, int r, Communicator& comm, RunTracer* tracer = nullptr) {
  const bool gpu = o.backend == "cuda";
  std::unique_ptr<Backend> be = make_backend(o.backend, KernelVariants::parse(o.kernel_variants), gpu ? r : 0);
  std::unique_ptr<Communicator> gpu_group = gpu ? make_gpu_group(comm) : nullptr;
  Communicator& group = gpu ? *gpu_group : comm;
  try {
    be->set_communicator(&group);
    RunShape s = u.shape;
    s.expert_rank = r;
    DeepSeekV4 m(*be, u.cfg, u.policy, s);
    m.set_accept_rule(u.accept);
    if (!o.checkpoint.empty())
      m.load(o.checkpoint);
    else
      m.init_random(u.cfg.seed);
    m.prefill(u.rank_prompts[size_t(r)], u.cfg.context_length);
    for (int i = 1; i <= o.steps; ++i) {
      if (tracer) tracer->before_step(i);
      m.decode_step();
    }
    be->synchronize();
    if (tracer) tracer->finish(stdout);
    group.finish();  // with every rank: no normal exit may look like a failure to a rank still watching
  } catch (const std::exception& e) {
    // Before the NCCL group is destroyed: a destroy would wait for collectives a failed peer never joins.
    group.abort(std::string("expert rank ") + std::to_string(r) + ": " + e.what());
    throw;
  }
}

// A copy that rank 0 started (--rank-of): joins the group, runs its rank, and leaves its output
// in its log; a failure aborts the group so that rank 0 stops too.
void run_started_rank(const RunOptions& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the log is read by rank 0 if this rank fails or is killed
  const RankOf me = parse_rank_of(o.rank_of);
  SL_CHECK(me.rank < o.model.expert_ranks, "--rank-of ", o.rank_of, ": rank ", me.rank, " of ", o.model.expert_ranks);
  const RunSetup u = setup_run(o);
  RunTracer tracer(o, me.rank, o.model.expert_ranks);  // each rank traces its own GPU
  std::unique_ptr<Communicator> comm = join_socket_group(me.socket, me.rank, o.model.expert_ranks);
  std::printf("expert rank %d of %d: joined\n", me.rank, o.model.expert_ranks);
  try {
    run_other_rank(o, u, me.rank, *comm, &tracer);
  } catch (const std::exception& e) {
    comm->abort(std::string("expert rank ") + std::to_string(me.rank) + ": " + e.what());
    throw;
  }
  std::printf("expert rank %d of %d: done\n", me.rank, o.model.expert_ranks);
}

// Ranks 1 .. N-1 of an --expert-ranks run as threads: a failure aborts the group (rank 0's next
// collective then fails with the reason instead of waiting).
class OtherRanks {
 public:
  OtherRanks(const RunOptions& o, const RunSetup& u, std::vector<std::unique_ptr<Communicator>>& group) {
    errors_.resize(group.size());
    for (int r = 1; r < int(group.size()); ++r)
      threads_.emplace_back([this, &o, &u, &group, r] {
        Communicator& comm = *group[size_t(r)];
        try {
          run_other_rank(o, u, r, comm);
        } catch (const std::exception& e) {
          errors_[size_t(r)] = "expert rank " + std::to_string(r) + ": " + e.what();
          comm.abort(errors_[size_t(r)]);
        }
      });
  }
  // Waits for every rank; the first failure of any (also one after rank 0's last all-reduce,
  // which rank 0 would not have seen) fails the run.
  void finish() {
    join();
    for (const std::string& e : errors_)
      if (!e.empty()) fail(e);
  }
  ~OtherRanks() { join(); }

 private:
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::vector<std::string> errors_;  // by rank
  std::vector<std::thread> threads_;
};

// Rank 0 (the process the user started): the run, and the report.
void run_rank0(const RunOptions& o, std::optional<RankGroup>& processes) {
  const RunSetup setup = setup_run(o);
  const ModelConfig& cfg = setup.cfg;
  const std::vector<int32_t>& prompt = setup.rank_prompts[0];
  const StreamPolicy& policy = setup.policy;
  const AcceptRule& accept = setup.accept;
  const RunShape& shape = setup.shape;
  const bool all_to_all = setup.all_to_all;
  FILE* info = o.json ? stderr : stdout;  // keep stdout parseable under --json

  RunTracer tracer(o, 0, o.rank_launch == "processes" ? o.model.expert_ranks : 1);
  RunBackend backend = make_run_backend(o);
  Backend& be = *backend.be;
  std::fprintf(info, "streamlab run: config %s (%d layers + %d MTP), backend %s, policy %s, batch %d, context %d, "
               "draft steps %d, decode steps %d\n",
               cfg.name.c_str(), cfg.num_hidden_layers, cfg.num_nextn_predict_layers, be.name().c_str(),
               policy.str().c_str(), cfg.batch, cfg.context_length, cfg.draft_steps, o.steps);
  if (shape.verify)
    std::fprintf(info, "decode steps verify the drafts: %d tokens per sequence, accept %s\n", 1 + cfg.draft_steps,
                 accept_rule_str(accept).c_str());
  // Each rank of a split model holds its share: said per rank.
  const double held_mib = mib(weight_bytes(cfg, be.weight_dtype(), shape.weights, rank_share(cfg, shape)));
  const std::string per_rank = shape.expert_world > 1 ? " per rank" : "";
  if (is_native(shape.weights))
    std::fprintf(info, "weights: %.1f MiB%s %s (FP8 projections and shared expert, MXFP4 routed experts%s, the rest "
                 "%s) (allocating)\n", held_mib, per_rank.c_str(), weight_format_name(shape.weights),
                 shape.weights == WeightFormat::NativeW4A8 ? " fed FP8 activations" : "", dtype_name(be.weight_dtype()));
  else
    std::fprintf(info, "weights: %.1f MiB%s in %s (allocating)\n", held_mib, per_rank.c_str(),
                 dtype_name(be.weight_dtype()));
  if (shape.kv_fp8 && be.packed_kv_caches())
    std::fprintf(info, "KV caches: fp8, packed as vLLM stores them (%zu-byte entries: e4m3 nope dims with a scale "
                 "per 64, bf16 rope dims; %zu-byte indexer keys with one scale each; indexer query one scale per head)\n",
                 kv_entry_bytes(cfg, be.act_dtype(), true), indexer_key_bytes(cfg, be.act_dtype(), true));
  else if (shape.kv_fp8)
    std::fprintf(info, "KV caches: fp8 values, emulated (e4m3 nope dims with a scale per 64, indexer keys one scale "
                 "per key, indexer query one per head; held in %s: on the %s backend fp8-kv=packed packs them)\n",
                 dtype_name(be.act_dtype()), be.name().c_str());
  std::fflush(info);

  check_memory_fits(be, cfg, shape, "run");
  std::vector<std::unique_ptr<Communicator>> group;  // the ranks as threads: an in-process group
  std::optional<OtherRanks> others;
  if (o.model.expert_ranks > 1) {
    const ExpertPartition p = partition_experts(cfg.n_routed_experts, o.model.expert_ranks, 0);
    const bool as_processes = o.rank_launch == "processes";
    std::fprintf(info, "expert parallelism: %d ranks %s, %lld routed experts each per MoE layer, %s scheme",
                 o.model.expert_ranks, as_processes ? "as processes (a socket group)" : "in this process",
                 static_cast<long long>(p.per_rank()), o.model.expert_scheme.c_str());
    if (all_to_all)
      std::fprintf(info, ": each rank holds %d of the %d sequences; rank 0 reports its own\n", cfg.batch,
                   setup.full_batch);
    else
      std::fprintf(info, "; rank 0 reports\n");
    if (shape.attention_tp)
      std::fprintf(info, "tensor parallelism: the attention's %d heads and %d output groups split over the %d ranks "
                   "(%lld and %lld each), wo_b's shares summed by an all-reduce on the main stream\n",
                   cfg.num_attention_heads, cfg.o_groups, o.model.expert_ranks,
                   static_cast<long long>(shape.heads_per_rank(cfg)), static_cast<long long>(shape.groups_per_rank(cfg)));
    std::fflush(info);
    if (as_processes) {
      // The ranks' trace files are checked for after the run: none may be left from an earlier one.
      for (int r = 1; r < o.model.expert_ranks; ++r)
        for (const std::string& p : {rank_trace_path(o.trace_json, r), rank_trace_path(o.trace_sqlite, r)})
          if (!p.empty()) std::filesystem::remove(p);
      processes.emplace(g_argv, o.model.expert_ranks, o.backend == "cuda");
      if (const std::string nccl = processes->gpu_description(); !nccl.empty())
        std::fprintf(info, "GPU group: %d ranks on GPUs 0..%d, %s\n", o.model.expert_ranks, o.model.expert_ranks - 1,
                     nccl.c_str());
    } else {
      group = make_fake_group(o.model.expert_ranks);
      others.emplace(o, setup, group);
    }
  }
  Communicator* comm = processes ? &processes->comm() : group.empty() ? nullptr : group[0].get();
  be.set_communicator(comm);
  // Rank 0 failing stops the other ranks (they would wait for it in their next all-reduce).
  AbortOnThrow abort_on_throw(comm, "expert rank 0 failed");
  std::optional<PhaseTicker> ticker(std::in_place, info, "allocating weights, caches and activations");
  DeepSeekV4 model(be, cfg, policy, shape);
  ticker.reset();
  model.set_graph_scope(parse_graph_scope(o.model.graph_scope));
  model.ops().set_op_ranges(!o.no_op_ranges);
  model.plant_fault(o.plant);
  if (!o.plant.empty()) std::fprintf(info, "planted fault: %s (results may be wrong on purpose)\n", o.plant.c_str());
  model.set_accept_rule(accept);
  prepare_weights(model, be, cfg, o, info);
  const int alias_from = first_aliasing_mtp_layers(policy, cfg);
  print_stream_plan(info, model.stream_plan(), policy, alias_from, false);
  std::fprintf(info, "stream setup: %.2f ms (host)\n", model.stream_setup_ms());
  std::fflush(info);

  StepReporter rep(o.json);
  run_prefill(model, cfg, prompt, o, rep, info);
  const DecodeTotals tot = run_decode(model, cfg, shape, o, tracer, rep, info);
  if (!o.plant.empty() && model.planted_sites() == 0)
    std::fprintf(stderr, "streamlab: warning: --plant %s changed nothing: policy %s has no aux stream fork or join "
                 "for it here (this run is a clean one)\n", o.plant.c_str(), policy.str().c_str());
  tracer.finish(info);
  if (others) {
    group[0]->finish();  // the ranks' final barrier
    others->finish();
  }
  if (processes) {
    processes->finish();  // the final barrier, then every rank's exit
    // Each rank traced its own GPU into its own files (distributedInfo names the rank): read
    // them together with `streamlab analyze` (one table per rank) or HTA.
    for (int r = 1; r < o.model.expert_ranks && o.tracing(); ++r)
      for (const std::string& p : {rank_trace_path(o.trace_json, r), rank_trace_path(o.trace_sqlite, r)}) {
        if (p.empty()) continue;
        SL_CHECK(std::filesystem::exists(p), "rank ", r, " ended well but its trace ", p, " is missing");
        std::fprintf(info, "rank %d's trace written to %s\n", r, p.c_str());
      }
  }

  const std::string check_error = o.check_against_cpu ? report_check(be, o.check_tolerance) : "";
  // Drafts accepted per sequence and step (verifying steps), and committed tokens per second of
  // decode time: what speculative decoding is for.
  const double mean_accepted = o.steps > 0 ? double(tot.accepted) / (double(o.steps) * cfg.batch) : 0.0;
  const double tokens_per_s = tot.ms > 0 ? double(tot.committed) / (tot.ms / 1000.0) : 0.0;
  nlohmann::json decode_summary{
      {"steps", o.steps}, {"committed_tokens", tot.committed}, {"decode_ms", tot.ms}, {"tokens_per_s", tokens_per_s}};
  if (shape.verify) decode_summary["mean_accepted"] = mean_accepted;
  if (o.json)
    std::printf("%s\n",
                run_json(model, backend, cfg, policy, shape, accept, o, rep, decode_summary, alias_from).dump(2).c_str());
  else
    print_run_summary(be, cfg, shape, o, tot, tokens_per_s, mean_accepted);
  if (!check_error.empty()) fail(check_error);
  SL_CHECK(rep.nonfinite_steps() == 0 || o.allow_nonfinite_logits, rep.nonfinite_steps(),
           " steps produced non-finite logits (NaN or Inf): the results are not usable "
           "(--allow-nonfinite-logits to finish with status 0 anyway)");
}


void run(const RunOptions& o) {
  check_expert_ranks(o);
  if (!o.rank_of.empty()) return run_started_rank(o);
  std::optional<RankGroup> processes;
  try {
    run_rank0(o, processes);
  } catch (const std::exception& e) {
    // Say how the other ranks ended (the one that was killed or failed first is usually why rank
    // 0 failed).
    if (processes)
      if (const std::string ranks = processes->stop_after_failure(); !ranks.empty()) fail(e.what(), ranks);
    throw;
  }
}
}  // namespace

void set_process_argv(char** argv) { g_argv = argv; }

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run the model: prefill a prompt batch, then decode steps with MTP drafts");
  add_model_options(cmd, o->model);
  add_speculative_options(cmd, o->spec);
  CLI::Option* backend_opt = cmd->add_option("--backend", o->backend, "cpu (fp32 reference) or cuda (H200, bf16)")
                                 ->check(CLI::IsMember({"cpu", "cuda"}))
                                 ->capture_default_str();
  cmd->add_option("--kernel-variants", o->kernel_variants, kKernelVariantsHelp)->check(kernel_variants_error);
  cmd->add_option("--steps", o->steps, "decode steps after the prefill")->capture_default_str();
  CLI::Option* launch_opt =
      cmd->add_option("--rank-launch", o->rank_launch,
                      "how --expert-ranks starts ranks 1 .. N-1: threads (of this process; CPU backend) or processes "
                      "(copies of this command, joined through a Unix-domain socket, rank r on GPU r over NCCL on the "
                      "CUDA backend; each writes a log, shown if it fails)")
          ->check(CLI::IsMember({"threads", "processes"}))
          ->capture_default_str();
  cmd->add_option("--gpus", o->gpus,
                  "expert parallelism over N GPUs: the same as --backend cuda --expert-ranks N --rank-launch "
                  "processes (NCCL: libnccl.so.2 on the library path, or STREAMLAB_NCCL_LIBRARY)")
      ->check(CLI::Range(1, 64))
      ->excludes(backend_opt)
      ->excludes(cmd->get_option("--expert-ranks"))
      ->excludes(launch_opt);
  cmd->add_option("--rank-of", o->rank_of, "RANK:SOCKET, set by rank 0 in the copies it starts")->group("");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "load weights from a DeepSeek-layout directory (config.json + *.safetensors); the config then "
                  "comes from DIR/config.json");
  cmd->add_option("--tokens", o->tokens_file, "prompt token ids from a .npy file ([T] or [batch, T], int32/int64)");
  cmd->add_option("--dump-logits", o->dump_logits, "write the prefill logits [batch*T, vocab] as float32 .npy");
  cmd->add_option("--dump-decode-logits", o->dump_decode_logits,
                  "write each decode step's logits [steps*batch, vocab] (step-major) as float32 .npy");
  cmd->add_option("--save-checkpoint", o->save_checkpoint, "save the weights in DeepSeek's layout to this directory");
  cmd->add_option("--save-dtype", o->save_dtype, "dtype of saved float tensors: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd->add_flag("--graph", o->graph,
                "decode steps through a CUDA graph: captured once (first decode step), then replayed (cuda backend)");
  cmd->add_option("--trace", o->trace_json,
                  "trace the decode steps after the warm-up with CUPTI; write Kineto JSON (Perfetto, HTA) here");
  cmd->add_option("--sqlite", o->trace_sqlite, "also (or only) write the trace as nsys-layout SQLite (nsys stats)");
  cmd->add_option("--warmup-steps", o->warmup, "decode steps before the traced window")->capture_default_str();
  cmd->add_flag("--no-latency-timestamps", o->no_latency_timestamps,
                "trace without CUPTI latency timestamps (kernel queued / submitted): measured on the H200 they are most "
                "of the tracing overhead (flash-6l batch 8, eager: on/off 1.065 with them, 0.999 without); queue "
                "waits are then taken from the launch call's end");
  cmd->add_flag("--allow-nonfinite-logits", o->allow_nonfinite_logits,
                "finish with status 0 even when logits are NaN or Inf (they are reported either way)");
  cmd->add_option("--plant", o->plant,
                  "run with a fault planted on purpose (see check-races --help): missing-join, rerecord, mtp-missing-join, "
                  "mtp-early-fork")
      ->check(CLI::IsMember(DeepSeekV4::fault_names()));
  cmd->add_flag("--no-op-ranges", o->no_op_ranges,
                "no NVTX range per op (step, layer and phase ranges stay): fewer NVTX records while tracing");
  cmd->add_flag("--allow-invalid-records", o->allow_invalid_records,
                "keep a trace with dropped or invalid records (exit 0)");
  CLI::Option* check_flag = cmd->add_flag("--check-against-cpu", o->check_against_cpu,
                "run every op on the CPU reference too, on identical inputs, and compare its outputs (per-op "
                "report on stderr, exit 1 when any output exceeds --check-tolerance); tiny configs: the CPU "
                "reference holds a full fp32 copy of the model");
  cmd->add_option("--check-tolerance", o->check_tolerance,
                  "relative error sqrt(sum (d-r)^2 / sum r^2) allowed per float output with --check-against-cpu")
      ->capture_default_str()
      ->needs(check_flag);
  cmd->add_flag("--check-print-ops", o->check_print_ops, "with --check-against-cpu: print every op's comparison")
      ->needs(check_flag);
  cmd->add_flag("--json", o->json, "print the result as JSON on stdout (progress goes to stderr)");
  cmd->callback([o] {
    if (o->gpus > 0) {
      o->backend = "cuda";
      o->model.expert_ranks = o->gpus;
      o->rank_launch = "processes";
    }
    run(*o);
  });
}

}  // namespace sl::cli
