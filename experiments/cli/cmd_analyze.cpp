// `streamlab analyze TRACE`: what the streams bought in a traced run. Reads our JSON, a PyTorch
// profiler (Kineto) JSON or our SQLite (detected by content), prints stream overlap, the aux
// hidden fraction, queue waits and suspected false dependencies, launch delays, HTA's temporal
// and idle breakdowns, kernel statistics and resources; per NVTX range with --range.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/input_file.h"
#include "experiments/cli/commands.h"
#include "profiler/analysis.h"
#include "profiler/summary.h"
#include "profiler/trace_io.h"

namespace sl::cli {
namespace {

struct AnalyzeOptions {
  std::string trace;
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

void run(const AnalyzeOptions& o) {
  prof::Trace trace = prof::load_trace(o.trace);
  prof::AnalysisOptions ao;
  ao.range = o.range;
  if (o.main_stream >= 0) ao.main_stream = uint32_t(o.main_stream);
  ao.range_by_launch = o.range_by_launch;
  ao.by_op = o.by_op;
  ao.kernel_wait_threshold = prof::Ns(o.kernel_wait_us * 1000.0);
  ao.false_dep_epsilon = o.false_dep_epsilon_ns;
  prof::AnalysisResult r = prof::analyze(trace, ao);
  // A trace of host activity only (or an empty one) analyses as all zeros: say why.
  const bool gpu_activity = !trace.kernels.empty() || !trace.memcpys.empty() || !trace.memsets.empty();
  if (!gpu_activity)
    std::fprintf(stderr, "streamlab: note: '%s' has no GPU activity (no kernels, copies or sets): every GPU figure "
                 "below is zero\n", o.trace.c_str());
  const std::string format =
      is_stream(o.trace) ? std::string("stream") : prof::to_string(prof::detect_trace_format(o.trace));
  if (o.json) {
    nlohmann::json j = prof::analysis_to_json(r);
    j["gpu_activity"] = gpu_activity;
    j["trace"] = o.trace;
    j["format"] = format;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "trace: " << o.trace << " (" << format << ")\n";
    std::cout << prof::analysis_to_text(r, o.top);
  }
  std::cout.flush();
  if (!r.counts.clean()) {
    std::string w = prof::record_count_warnings(r.counts);
    if (o.allow_invalid) {
      std::fprintf(stderr, "streamlab: warning: the trace has record problems (allowed by --allow-invalid-records):\n%s",
                   w.c_str());
    } else {
      fail("the trace has record problems, so its numbers may be wrong:\n", w,
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
      "delays, HTA temporal / idle breakdowns, kernel statistics, resources. Exits non-zero when the trace has "
      "dropped, zero-timestamp or end<start records, or records the loader rejected (a field outside the trace "
      "model's range, a GPU op without a duration, a repeated correlation id), unless --allow-invalid-records is given.");
  cmd->add_option("TRACE", o->trace,
                  "trace file: streamlab JSON, PyTorch profiler / Kineto JSON, or streamlab SQLite (detected by content)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--range", o->range,
                  "also break the analysis down by instances of this NVTX range (e.g. step, L3; \"domain:name\" and a "
                  "prefix like \"ProfilerStep*\" work too); a kernel belongs to an instance when it starts inside it on "
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
                  "stream with the most kernel time)");
  cmd->add_flag("--json", o->json, "print the full result as JSON (times in ns) instead of the text report");
  cmd->add_option("--kernel-wait-us", o->kernel_wait_us,
                  "HTA idle breakdown: gaps under this many microseconds are 'kernel wait'")
      ->capture_default_str();
  cmd->add_option("--false-dep-epsilon-ns", o->false_dep_epsilon_ns,
                  "a queue wait ending within this many ns of another stream's kernel end is a suspected false dependency")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "kernel names listed in the text report")->capture_default_str();
  cmd->add_flag("--allow-invalid-records", o->allow_invalid,
                "exit 0 even when the trace reports dropped / zero-timestamp / end<start records or records the "
                "loader rejected (the rest of the trace is analysed)");
  cmd->callback([o] { run(*o); });
}

}  // namespace sl::cli
