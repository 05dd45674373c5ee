// `streamlab analyze TRACE [TRACE...]`: what the streams bought in a traced run. Reads our JSON, a
// PyTorch profiler (Kineto) JSON or our SQLite (detected by content), prints stream overlap, the
// aux hidden fraction, queue waits and suspected false dependencies, launch delays, HTA's temporal
// and idle breakdowns, its communication / computation overlap, kernel statistics and resources;
// per NVTX range with --range. Several traces are the ranks of one multi-GPU job (one file per
// rank, as PyTorch's profiler and HTA keep them): each is analysed on its own and the report
// starts with a table of the ranks side by side.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gzip.h"
#include "core/input_file.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/number_checks.h"
#include "profiler/analysis.h"
#include "profiler/job_ranks.h"
#include "profiler/summary.h"
#include "profiler/trace_io.h"

namespace sl::cli {
namespace {

struct AnalyzeOptions {
  std::vector<std::string> traces;
  std::string range;
  int64_t main_stream = -1;
  bool json = false;
  bool range_by_launch = false;
  bool by_op = false;
  double kernel_wait_us = 30.0;
  int64_t false_dep_epsilon_ns = 2000;
  size_t top = 15;
  bool allow_invalid = false;
};

// One trace's analysis; the trace itself is released once analysed (several ranks' traces need
// not fit in memory together).
struct Analysed {
  std::string path, format;
  int rank = -1, world_size = 0;  // distributedInfo (-1 / 0: not given)
  prof::AnalysisResult result;
  bool gpu_activity = false;
};

Analysed analyse_one(const AnalyzeOptions& o, const std::string& path) {
  Analysed a;
  a.path = path;
  const prof::Trace trace = prof::load_trace(path);
  a.rank = trace.rank;
  a.world_size = trace.world_size;
  prof::AnalysisOptions ao;
  ao.range = o.range;
  if (o.main_stream >= 0) ao.main_stream = uint32_t(o.main_stream);
  ao.range_by_launch = o.range_by_launch;
  ao.by_op = o.by_op;
  ao.kernel_wait_threshold = prof::Ns(o.kernel_wait_us * 1000.0);
  ao.false_dep_epsilon = o.false_dep_epsilon_ns;
  a.result = prof::analyze(trace, ao);
  // A trace of host activity only (or an empty one) analyses as all zeros: say why.
  a.gpu_activity = !trace.kernels.empty() || !trace.memcpys.empty() || !trace.memsets.empty();
  if (!a.gpu_activity)
    std::fprintf(stderr, "streamlab: note: '%s' has no GPU activity (no kernels, copies or sets): every GPU figure "
                 "below is zero\n", path.c_str());
  // A gzipped file is named by what its head shows (JSON or SQLite): telling our JSON from Kineto's
  // would take unpacking it to its end a second time.
  const prof::TraceFormat f = is_stream(path) ? prof::TraceFormat::Unknown : prof::detect_trace_format(path);
  a.format = is_stream(path)      ? std::string("stream")
             : is_gzip_file(path) ? std::string(f == prof::TraceFormat::Sqlite ? "gzipped SQLite" : "gzipped JSON")
                                  : std::string(prof::to_string(f));
  return a;
}

nlohmann::json analysed_json(const Analysed& a) {
  nlohmann::json j = prof::analysis_to_json(a.result);
  j["gpu_activity"] = a.gpu_activity;
  j["trace"] = a.path;
  j["format"] = a.format;
  j["rank"] = a.rank >= 0 ? nlohmann::json(a.rank) : nlohmann::json(nullptr);
  j["world_size"] = a.world_size > 0 ? nlohmann::json(a.world_size) : nlohmann::json(nullptr);
  return j;
}

// The ranks side by side: what a multi-GPU step looks like from each GPU.
std::vector<prof::RankClaim> claims_of(const std::vector<Analysed>& all) {
  std::vector<prof::RankClaim> claims;
  for (const Analysed& a : all) claims.push_back({a.path, a.rank, a.world_size});
  return claims;
}

std::string ranks_table(const std::vector<Analysed>& all) {
  auto us = [](prof::Ns ns) { return double(ns) / 1000.0; };
  std::string out = "ranks: " + std::to_string(all.size()) + " traces";
  // A job's traces given in part: said, so that a table of 2 of 8 ranks is not read as the job.
  const std::vector<int> missing = prof::missing_ranks(claims_of(all));
  if (!missing.empty()) {
    out += " (not given: rank";
    out += missing.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < missing.size(); ++i) out += (i ? ", " : "") + std::to_string(missing[i]);
    int world = 0;
    for (const Analysed& a : all) world = std::max(world, a.world_size);
    out += " of the world of " + std::to_string(world) + ")";
  }
  out += "\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-5s %-6s %8s %12s %12s %9s %12s %13s %10s  %s\n", "rank", "world", "kernels",
                "span us", "busy us", "compute", "NCCL us", "comm overlap", "aux hidden", "trace");
  out += line;
  for (const Analysed& a : all) {
    const prof::AnalysisResult& r = a.result;
    const std::string rank = a.rank >= 0 ? std::to_string(a.rank) : "-";
    const std::string world = a.world_size > 0 ? std::to_string(a.world_size) : "-";
    char comm[32] = "-";
    if (r.comm.comm > 0) std::snprintf(comm, sizeof comm, "%.1f%%", 100.0 * r.comm.fraction);
    std::snprintf(line, sizeof line, "  %-5s %-6s %8llu %12.1f %12.1f %8.1f%% %12.1f %13s %9.1f%%  %s\n",
                  rank.c_str(), world.c_str(), static_cast<unsigned long long>(r.whole.kernels), us(r.whole.span),
                  us(r.whole.busy), r.temporal.compute_pct, us(r.comm.comm), comm, 100.0 * r.whole.aux_hidden_fraction,
                  a.path.c_str());
    out += line;
  }
  return out;
}

// Two traces that claim one rank, or disagree on the world size, are not one job's ranks.
void check_ranks(const std::vector<Analysed>& all) { prof::check_rank_claims(claims_of(all)); }

void run(const AnalyzeOptions& o) {
  std::vector<Analysed> all;
  for (const std::string& path : o.traces) all.push_back(analyse_one(o, path));
  if (all.size() > 1) check_ranks(all);
  if (o.json) {
    if (all.size() == 1) {
      std::cout << analysed_json(all[0]).dump(2) << "\n";
    } else {
      nlohmann::json j;
      j["ranks"] = nlohmann::json::array();
      for (const Analysed& a : all) j["ranks"].push_back(analysed_json(a));
      j["missing_ranks"] = prof::missing_ranks(claims_of(all));
      std::cout << j.dump(2) << "\n";
    }
  } else {
    if (all.size() > 1) std::cout << ranks_table(all);
    for (const Analysed& a : all) {
      if (all.size() > 1) std::cout << "\n";
      std::cout << "trace: " << a.path << " (" << a.format << ")";
      if (a.rank >= 0)
        std::cout << ", rank " << a.rank << (a.world_size > 0 ? " of " + std::to_string(a.world_size) : std::string());
      std::cout << "\n" << prof::analysis_to_text(a.result, o.top);
    }
  }
  std::cout.flush();
  for (const Analysed& a : all) {
    if (a.result.counts.clean()) continue;
    std::string w = prof::record_count_warnings(a.result.counts);
    if (o.allow_invalid) {
      std::fprintf(stderr, "streamlab: warning: '%s' has record problems (allowed by --allow-invalid-records):\n%s",
                   a.path.c_str(), w.c_str());
    } else {
      fail("'", a.path, "' has record problems, so its numbers may be wrong:\n", w,
           "(pass --allow-invalid-records to accept them and exit 0)");
    }
  }
}

}  // namespace

void add_analyze_command(CLI::App& app) {
  auto o = std::make_shared<AnalyzeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Analyse a trace: stream overlap, aux hidden fraction, queue waits and suspected false dependencies, launch "
      "delays, HTA temporal / idle breakdowns and communication / computation overlap, kernel statistics, resources; "
      "several traces: the ranks of one job side by side. Exits non-zero when the trace has "
      "dropped, zero-timestamp or end<start records, or records the loader rejected (a field outside the trace "
      "model's range, a GPU op without a duration, a repeated correlation id), unless --allow-invalid-records is given.");
  cmd->add_option("TRACE", o->traces,
                  "trace file: streamlab JSON, PyTorch profiler / Kineto JSON, or streamlab SQLite (detected by "
                  "content); several: the ranks of one multi-GPU job, one file each (distributedInfo's rank), "
                  "reported side by side, with --json as {\"ranks\": [...]}")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--range", o->range,
                  "also break the analysis down by instances of this NVTX range (in streamlab's traces e.g. decode, "
                  "L3.c128a or the prefix \"L*\"; in PyTorch's \"ProfilerStep*\"; \"domain:name\" works too; an "
                  "unknown name lists the names present); a kernel belongs to an instance when it starts inside it on "
                  "the same process");
  cmd->add_flag("--by-op", o->by_op,
                "also list kernel time by operation: each kernel goes to the innermost NVTX push/pop range around "
                "its launch call (streamlab names every model op that way; kernels of a CUDA-graph launch go to the "
                "range around the graph launch), with the host time of those ranges (the CPU cost of enqueuing each op)");
  cmd->add_flag("--range-by-launch", o->range_by_launch,
                "assign kernels to --range instances by the start of their launch call (same thread) instead of the "
                "kernel start");
  cmd->add_option("--main-stream", o->main_stream,
                  "CUPTI stream id of the main (current) stream; other streams count as aux streams (default: the "
                  "stream with the most kernel time)")
      ->check(CLI::Range(int64_t(0), int64_t(UINT32_MAX)));
  cmd->add_flag("--json", o->json, "print the full result as JSON (times in ns) instead of the text report");
  cmd->add_option("--kernel-wait-us", o->kernel_wait_us,
                  "HTA idle breakdown: gaps under this many microseconds are 'kernel wait'")
      ->check(finite_in(0, 1e9))
      ->capture_default_str();
  cmd->add_option("--false-dep-epsilon-ns", o->false_dep_epsilon_ns,
                  "a queue wait ending within this many ns of another stream's kernel end is a suspected false dependency")
      ->check(CLI::Range(int64_t(0), int64_t(1'000'000'000'000)))
      ->capture_default_str();
  cmd->add_option("--top", o->top, "kernel names listed in the text report")
      ->check(CLI::Range(size_t(0), size_t(1'000'000)))
      ->capture_default_str();
  cmd->add_flag("--allow-invalid-records", o->allow_invalid,
                "exit 0 even when the trace reports dropped / zero-timestamp / end<start records or records the "
                "loader rejected (the rest of the trace is analysed)");
  cmd->callback([o] { run(*o); });
}

}  // namespace sl::cli
