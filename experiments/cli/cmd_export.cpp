// `streamlab export TRACE --to kineto|sqlite|csv OUT`: convert a trace (our JSON, a PyTorch
// profiler / Kineto JSON or our SQLite, detected by content) to
//   kineto  a Kineto-style Chrome trace JSON (Perfetto UI, Holistic Trace Analysis),
//   sqlite  SQLite in the Nsight Systems export layout (nsys stats / nsys analyze, SQL),
//   csv     a directory of CSV tables: summary, streams, kernel_stats, gpu_ops (+ ranges).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "experiments/cli/commands.h"
#include "profiler/analysis.h"
#include "profiler/kineto_json.h"
#include "profiler/kineto_validate.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/summary.h"
#include "profiler/trace_io.h"

namespace sl::cli {
namespace {

struct ExportOptions {
  std::string trace;
  std::string to;
  std::string out;
  std::string range;
  int64_t main_stream = -1;
  int rank = -1;
  int world_size = 0;
  bool no_flows = false, no_sync = false, no_annotations = false, validate = false;
};

void run(const ExportOptions& o) {
  prof::Trace trace = prof::load_trace(o.trace);
  if (o.to == "kineto") {
    const int rank = o.rank >= 0 ? o.rank : std::max(trace.rank, 0);
    const int world = o.world_size > 0 ? o.world_size : trace.world_size;
    if (world > 0 && rank >= world)
      fail("--rank ", rank, " is outside world size ", world,
           o.world_size > 0 ? std::string(" (--world-size)") : " (the trace's distributedInfo)");
    prof::KinetoOptions ko;
    ko.rank = o.rank;
    ko.world_size = o.world_size;
    ko.flows = !o.no_flows;
    ko.syncs = !o.no_sync;
    ko.gpu_annotations = !o.no_annotations;
    size_t n = prof::write_kineto_json_file(trace, o.out, ko);
    std::fprintf(stderr, "streamlab: wrote %zu trace events (%zu trace-model events) to %s\n", n, trace.event_count(),
                 o.out.c_str());
    if (o.validate) {
      prof::KinetoValidation v = prof::validate_kineto_file(o.out);
      if (!v.ok()) fail("'", o.out, "' breaks the Kineto layout rules:\n", v.report());
      std::fprintf(stderr, "streamlab: %s\n", v.report().c_str());
    }
  } else if (o.to == "sqlite") {
    prof::write_nsys_sqlite(trace, o.out);
    std::fprintf(stderr, "streamlab: wrote %zu events to %s (Nsight Systems export layout)\n", trace.event_count(),
                 o.out.c_str());
  } else if (o.to == "csv") {
    prof::AnalysisOptions ao;
    ao.range = o.range;
    if (o.main_stream >= 0) ao.main_stream = uint32_t(o.main_stream);
    prof::AnalysisResult r = prof::analyze(trace, ao);
    std::vector<std::string> removed;
    for (const auto& f : prof::write_csv_dir(trace, r, o.out, &removed)) std::fprintf(stderr, "streamlab: wrote %s\n", f.c_str());
    for (const auto& f : removed)
      std::fprintf(stderr, "streamlab: removed %s (an earlier export's table; this one has no --range)\n", f.c_str());
  } else {
    fail("--to ", o.to, ": expected kineto, sqlite or csv");
  }
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Convert a trace: --to kineto (Chrome trace JSON for Perfetto / HTA), sqlite (Nsight Systems export "
                "layout for nsys stats / nsys analyze), csv (a directory of analysis tables)");
  cmd->add_option("TRACE", o->trace,
                  "trace file: streamlab JSON, PyTorch profiler / Kineto JSON, or streamlab SQLite (detected by content)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--to", o->to, "output format: kineto, sqlite or csv")
      ->required()
      ->check(CLI::IsMember({"kineto", "sqlite", "csv"}));
  cmd->add_option("OUT", o->out, "output file (kineto, sqlite; replaced if present) or directory (csv)")->required();
  cmd->add_option("--range", o->range, "csv: also write ranges.csv for instances of this NVTX range");
  cmd->add_option("--main-stream", o->main_stream, "csv: CUPTI stream id of the main stream (default: most kernel time)")
      ->check(CLI::Range(int64_t(0), int64_t(UINT32_MAX)));  // as analyze: -1 was ignored, 2^32 + 13 read as 13
  cmd->add_option("--rank", o->rank,
                  "kineto: distributedInfo.rank (HTA keys traces by rank; default: the trace's own, else 0)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--world-size", o->world_size,
                  "kineto: distributedInfo.world_size (default: the trace's own; left out when unknown)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--no-flows", o->no_flows, "kineto: leave out the ac2g launch -> GPU op flow arrows");
  cmd->add_flag("--no-sync", o->no_sync, "kineto: leave out cuda_sync slices");
  cmd->add_flag("--no-gpu-annotations", o->no_annotations,
                "kineto: leave out gpu_user_annotation (NVTX ranges projected onto the GPU streams)");
  cmd->add_flag("--validate", o->validate, "kineto: check the written file against the layout rules (slower)");
  // An option of one format given with another would be ignored without a word (an HTA user's
  // --rank on an SQLite export): refused instead, naming the format it belongs to.
  const std::vector<std::pair<std::string, std::string>> owner = {
      {"--range", "csv"},         {"--main-stream", "csv"}, {"--rank", "kineto"},
      {"--world-size", "kineto"}, {"--no-flows", "kineto"}, {"--no-sync", "kineto"},
      {"--no-gpu-annotations", "kineto"}, {"--validate", "kineto"}};
  cmd->callback([o, cmd, owner] {
    for (const auto& [name, format] : owner)
      if (cmd->count(name) > 0 && o->to != format)
        fail(name, " applies to --to ", format, " only; this export is --to ", o->to);
    run(*o);
  });
}

}  // namespace sl::cli
