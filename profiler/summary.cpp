#include "profiler/summary.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sl::prof {

namespace {

using json = nlohmann::json;

json time_or_null(Ns v) { return v == kNoTime ? json(nullptr) : json(v); }

json stats_json(const DurationStats& s) {
  return json{{"count", s.count}, {"total_ns", s.total}, {"min_ns", s.min},   {"max_ns", s.max},
              {"mean_ns", s.mean}, {"median_ns", s.median}, {"p90_ns", s.p90}, {"p99_ns", s.p99}};
}

json scope_json(const ScopeMetrics& m) {
  return json{{"first_start_ns", time_or_null(m.first_start)},
              {"last_end_ns", time_or_null(m.last_end)},
              {"span_ns", m.span},
              {"kernels", m.kernels},
              {"kernel_time_ns", m.kernel_time},
              {"busy_ns", m.busy},
              {"overlap_ns", m.overlap},
              {"overlap_fraction", m.overlap_fraction},
              {"stream_overlap_ns", m.stream_overlap},
              {"stream_overlap_fraction", m.stream_overlap_fraction},
              {"concurrency_ns", m.concurrency},
              {"aux_time_ns", m.aux_time},
              {"aux_hidden_ns", m.aux_hidden},
              {"aux_hidden_fraction", m.aux_hidden_fraction}};
}

json counts_json(const RecordCounts& c) {
  json j = json::object();
  for (const RecordCountField& f : kRecordCountFields) j[f.name] = c.*f.member;
  json issues = json::array();
  for (const LoadIssue& i : c.load_issues)
    issues.push_back({{"what", i.what}, {"records", i.records}, {"first", i.first}, {"first_value", i.first_value}});
  j["load_issues"] = issues;
  j["clean"] = c.clean();
  return j;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

std::string us(Ns ns) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << double(ns) / 1000.0;
  return os.str();
}

std::string pct(double f) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << 100.0 * f << "%";
  return os.str();
}

std::string fmt_time(Ns v) { return v == kNoTime ? "" : std::to_string(v); }

}  // namespace

json api_counts_json(const ApiCallCounts& c) {
  return json{{"kernel_launches", c.kernel_launches}, {"graph_launches", c.graph_launches},
              {"memory_ops", c.memory_ops},           {"stream_creates", c.stream_creates},
              {"stream_destroys", c.stream_destroys}, {"event_creates", c.event_creates},
              {"event_destroys", c.event_destroys},   {"event_records", c.event_records},
              {"stream_wait_events", c.stream_wait_events}, {"stream_syncs", c.stream_syncs},
              {"event_syncs", c.event_syncs},         {"device_syncs", c.device_syncs}};
}

std::string api_counts_text(const ApiCallCounts& c) {
  std::ostringstream o;
  o << "stream creates " << c.stream_creates << ", destroys " << c.stream_destroys << "; event creates "
    << c.event_creates << ", records " << c.event_records << ", stream waits " << c.stream_wait_events
    << "; syncs: stream " << c.stream_syncs << ", event " << c.event_syncs << ", device " << c.device_syncs
    << "; launches " << c.kernel_launches << " (graphs " << c.graph_launches << "), memcpy/memset " << c.memory_ops;
  return o.str();
}

std::string record_count_warnings(const RecordCounts& c) {
  std::string w;
  if (c.dropped) w += "  " + std::to_string(c.dropped) + " records dropped by CUPTI (buffers full): the trace is incomplete\n";
  if (c.zero_timestamps) w += "  " + std::to_string(c.zero_timestamps) + " records with a zero timestamp\n";
  if (c.end_before_start) w += "  " + std::to_string(c.end_before_start) + " records with end < start\n";
  if (c.invalid_records) w += "  " + std::to_string(c.invalid_records) + " malformed records\n";
  if (c.rejected_on_load) {
    w += "  " + std::to_string(c.rejected_on_load) + " records the loader dropped or could not read unambiguously:\n";
    for (const LoadIssue& i : c.load_issues)
      w += "    " + std::to_string(i.records) + " x " + i.what + " (the first: " +
           (i.first == kNoIndex ? i.first_value
                                : "#" + std::to_string(i.first) + (i.first_value.empty() ? "" : ", value " + i.first_value)) +
           ")\n";
  }
  return w;
}

json analysis_to_json(const AnalysisResult& r) {
  json j;
  j["events"] = r.events;
  j["record_counts"] = counts_json(r.counts);
  j["options"] = {{"range", r.options.range},
                  {"main_stream", r.options.main_stream ? json(*r.options.main_stream) : json(nullptr)},
                  {"kernel_wait_threshold_ns", r.options.kernel_wait_threshold},
                  {"false_dep_epsilon_ns", r.options.false_dep_epsilon},
                  {"range_by_launch", r.options.range_by_launch}};
  j["main_stream"] = r.main_stream == kNoStream ? json(nullptr) : json(r.main_stream);
  j["whole"] = scope_json(r.whole);
  j["temporal_breakdown"] = {{"span_ns", r.temporal.span},         {"idle_ns", r.temporal.idle},
                             {"compute_ns", r.temporal.compute},   {"non_compute_ns", r.temporal.non_compute},
                             {"idle_pct", r.temporal.idle_pct},    {"compute_pct", r.temporal.compute_pct},
                             {"non_compute_pct", r.temporal.non_compute_pct}};
  j["comm_comp_overlap"] = {{"comm_kernels", r.comm.comm_kernels},
                            {"comm_ns", r.comm.comm},
                            {"overlapped_ns", r.comm.overlapped},
                            {"fraction", r.comm.comm > 0 ? json(r.comm.fraction) : json(nullptr)}};
  j["queue_wait"] = stats_json(r.queue_wait);
  j["launch_delay"] = stats_json(r.launch_delay);
  j["kernels_without_launch"] = r.kernels_without_launch;
  j["graph_kernels"] = r.graph_kernels;
  j["suspected_false_dependencies"] = r.suspected_false_deps;
  json fd = json::array();
  for (const auto& f : r.false_deps)
    fd.push_back({{"kernel_index", f.kernel},
                  {"blocker_index", f.blocker},
                  {"stream", f.stream},
                  {"blocker_stream", f.blocker_stream},
                  {"wait_ns", f.wait},
                  {"gap_ns", f.gap}});
  j["false_dependency_examples"] = fd;
  json streams = json::array();
  for (const auto& s : r.streams)
    streams.push_back({{"stream", s.stream},
                       {"label", s.label},
                       {"priority", s.priority},
                       {"is_main", s.is_main},
                       {"kernels", s.kernels},
                       {"memcpys", s.memcpys},
                       {"memsets", s.memsets},
                       {"kernel_time_ns", s.kernel_time},
                       {"busy_ns", s.busy},
                       {"overlapped_ns", s.overlapped},
                       {"overlap_fraction", s.overlap_fraction},
                       {"first_start_ns", time_or_null(s.first_start)},
                       {"last_end_ns", time_or_null(s.last_end)},
                       {"idle_host_wait_ns", s.idle_host_wait},
                       {"idle_kernel_wait_ns", s.idle_kernel_wait},
                       {"idle_other_ns", s.idle_other},
                       {"queue_wait", stats_json(s.queue_wait)},
                       {"launch_delay", stats_json(s.launch_delay)},
                       {"suspected_false_dependencies", s.suspected_false_deps}});
  j["streams"] = streams;
  json ks = json::array();
  for (const auto& k : r.kernel_stats)
    ks.push_back({{"name", k.name},
                  {"count", k.count},
                  {"total_ns", k.total},
                  {"own_ns", k.own},
                  {"min_ns", k.min},
                  {"max_ns", k.max},
                  {"mean_ns", k.mean},
                  {"median_ns", k.median}});
  j["kernel_stats"] = ks;
  if (r.options.by_op) {
    json os = json::array();
    for (const auto& o : r.op_stats)
      os.push_back({{"name", o.name}, {"kernels", o.kernels}, {"total_ns", o.total}, {"ranges", o.ranges},
                    {"host_ns", o.host}});
    j["op_stats"] = os;
  }
  if (r.range) {
    json inst = json::array();
    for (const auto& i : r.range->per_instance) {
      json x = scope_json(i.metrics);
      x["index"] = i.index;
      x["name"] = i.name;
      x["range_start_ns"] = i.start;
      x["range_end_ns"] = i.end;
      x["pid"] = i.pid;
      x["tid"] = i.tid;
      x["depth"] = i.depth;
      inst.push_back(x);
    }
    j["range"] = {{"name", r.range->name}, {"instances", r.range->instances}, {"total", scope_json(r.range->total)},
                  {"per_instance", inst}};
  } else {
    j["range"] = nullptr;
  }
  const auto& rs = r.resources;
  json alive = json::array();
  for (const auto& [t, n] : rs.streams_alive) alive.push_back(json::array({t, n}));
  j["resources"] = {{"streams", rs.streams},
                    {"streams_created", rs.streams_created},
                    {"streams_destroyed", rs.streams_destroyed},
                    {"max_streams_alive", rs.max_streams_alive},
                    {"streams_alive", alive},
                    {"contexts", rs.contexts},
                    {"cuda_event_records", rs.cuda_event_records},
                    {"distinct_cuda_events", rs.distinct_cuda_events},
                    {"syncs", rs.syncs},
                    {"stream_waits", rs.stream_waits},
                    {"host_syncs", rs.host_syncs},
                    {"allocations", rs.allocations},
                    {"frees", rs.frees},
                    {"peak_allocated_bytes", rs.peak_allocated_bytes},
                    {"peak_allocated_at_ns", time_or_null(rs.peak_allocated_at)},
                    {"allocated_at_end_bytes", rs.allocated_at_end},
                    {"cupti_overhead_ns", rs.cupti_overhead},
                    {"api_calls", api_counts_json(rs.api)}};
  return j;
}

std::string analysis_to_text(const AnalysisResult& r, size_t top) {
  std::ostringstream o;
  std::string warn = record_count_warnings(r.counts);
  if (!warn.empty()) o << "WARNING: record problems in this trace (results may be wrong):\n" << warn << "\n";
  o << "events: " << r.events << "   kernels: " << r.whole.kernels << "   main stream: "
    << (r.main_stream == kNoStream ? std::string("-") : std::to_string(r.main_stream))
    << (r.options.main_stream ? "" : " (most kernel time)") << "\n";
  auto scope = [&](const ScopeMetrics& m, const std::string& indent) {
    o << indent << "span " << us(m.span) << " us, busy " << us(m.busy) << " us, overlap " << us(m.overlap)
      << " us = " << pct(m.overlap_fraction) << " of busy";
    if (m.stream_overlap != m.overlap)
      o << " (across streams " << us(m.stream_overlap) << " us = " << pct(m.stream_overlap_fraction)
        << "; the rest is kernels of one stream overlapping, e.g. under PDL)";
    o << "\n";
    o << indent << "aux kernels " << us(m.aux_time) << " us, hidden under main-stream kernels " << us(m.aux_hidden)
      << " us = " << pct(m.aux_hidden_fraction) << "\n";
    o << indent << "concurrency (time at exactly k kernels):";
    for (size_t k = 0; k < m.concurrency.size(); ++k)
      o << "  " << k << ": " << us(m.concurrency[k]) << " us";
    o << "\n";
  };
  o << "\nwhole trace\n";
  scope(r.whole, "  ");
  o << "  HTA temporal breakdown over GPU ops: span " << us(r.temporal.span) << " us, idle " << us(r.temporal.idle)
    << " us (" << std::fixed << std::setprecision(1) << r.temporal.idle_pct << "%), compute " << us(r.temporal.compute)
    << " us (" << r.temporal.compute_pct << "%), non-compute " << us(r.temporal.non_compute) << " us ("
    << r.temporal.non_compute_pct << "%)\n";
  if (r.comm.comm_kernels > 0)
    o << "  HTA communication / computation overlap: " << r.comm.comm_kernels << " NCCL kernels over "
      << us(r.comm.comm) << " us, " << us(r.comm.overlapped) << " us of it under computation kernels = "
      << pct(r.comm.fraction) << "\n";
  o << "  launch delay (kernel start - launch call end): n " << r.launch_delay.count << ", median "
    << us(Ns(r.launch_delay.median)) << " us, p99 " << us(Ns(r.launch_delay.p99)) << " us, max " << us(r.launch_delay.max)
    << " us" << (r.kernels_without_launch ? "; " + std::to_string(r.kernels_without_launch) + " kernels without a launch call" : "")
    << "\n";
  o << "  queue wait (start - max(ready, previous kernel end)): total " << us(r.queue_wait.total) << " us, median "
    << us(Ns(r.queue_wait.median)) << " us, p99 " << us(Ns(r.queue_wait.p99)) << " us, max " << us(r.queue_wait.max)
    << " us\n";
  o << "  suspected false dependencies: " << r.suspected_false_deps
    << (r.graph_kernels ? " (graph kernels excluded: " + std::to_string(r.graph_kernels) + ")" : "") << "\n";

  o << "\nstreams\n";
  o << "  " << std::left << std::setw(26) << "stream" << std::right << std::setw(5) << "prio" << std::setw(9) << "kernels"
    << std::setw(14) << "busy us" << std::setw(10) << "overlap" << std::setw(13) << "host wait" << std::setw(13)
    << "kernel wait" << std::setw(13) << "other idle" << std::setw(13) << "q-wait p50" << std::setw(8) << "false" << "\n";
  for (const auto& s : r.streams) {
    std::string name = std::to_string(s.stream) + (s.label != "stream " + std::to_string(s.stream) ? " " + s.label : "") +
                       (s.is_main ? " *" : "");
    o << "  " << std::left << std::setw(26) << name.substr(0, 25) << std::right << std::setw(5) << s.priority
      << std::setw(9) << s.kernels << std::setw(14) << us(s.busy) << std::setw(10) << pct(s.overlap_fraction)
      << std::setw(13) << us(s.idle_host_wait) << std::setw(13) << us(s.idle_kernel_wait) << std::setw(13)
      << us(s.idle_other) << std::setw(13) << us(Ns(s.queue_wait.median)) << std::setw(8) << s.suspected_false_deps << "\n";
  }
  if (r.range) {
    const auto& rs = *r.range;
    o << "\nNVTX range \"" << rs.name << "\": " << rs.instances << " instances (sums over instances)\n";
    scope(rs.total, "  ");
    size_t shown = 0;
    for (const auto& i : rs.per_instance) {
      if (shown++ >= 10) {
        o << "  ... " << rs.instances - 10 << " more instances (see --json)\n";
        break;
      }
      o << "  #" << i.index << (i.name != rs.name ? " " + i.name : std::string()) << ": kernels " << i.metrics.kernels << ", busy " << us(i.metrics.busy) << " us, overlap "
        << pct(i.metrics.overlap_fraction) << ", aux hidden " << pct(i.metrics.aux_hidden_fraction) << "\n";
    }
  }
  o << "\nkernels by total time (own us: the time each kernel adds to its stream's busy time, without the\n"
       "  part it spent started early under PDL while the kernel before it ran)\n";
  o << "  " << std::setw(8) << "count" << std::setw(14) << "total us" << std::setw(12) << "own us" << std::setw(12) << "mean us" << std::setw(12)
    << "median us" << std::setw(12) << "min us" << std::setw(12) << "max us" << "  name\n";
  for (size_t i = 0; i < r.kernel_stats.size() && i < top; ++i) {
    const auto& k = r.kernel_stats[i];
    std::string n = k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name;
    o << "  " << std::setw(8) << k.count << std::setw(14) << us(k.total) << std::setw(12) << us(k.own) << std::setw(12) << us(Ns(k.mean))
      << std::setw(12) << us(Ns(k.median)) << std::setw(12) << us(k.min) << std::setw(12) << us(k.max) << "  " << n << "\n";
  }
  if (r.kernel_stats.size() > top) o << "  ... " << r.kernel_stats.size() - top << " more kernel names\n";
  if (r.options.by_op) {
    Ns all = 0;
    for (const auto& x : r.op_stats) all += x.total;
    o << "\nkernel time by operation (innermost NVTX range around the launch call)\n";
    o << "  " << std::setw(8) << "kernels" << std::setw(14) << "total us" << std::setw(8) << "share" << std::setw(10)
      << "ranges" << std::setw(14) << "host us" << "  operation\n";
    for (size_t i = 0; i < r.op_stats.size() && i < top; ++i) {
      const auto& x = r.op_stats[i];
      o << "  " << std::setw(8) << x.kernels << std::setw(14) << us(x.total) << std::setw(8)
        << pct(all > 0 ? double(x.total) / double(all) : 0.0) << std::setw(10) << x.ranges << std::setw(14)
        << us(x.host) << "  " << x.name << "\n";
    }
    o << "  (host us: the ranges' own time on the launching thread, nested ranges included)\n";
    if (r.op_stats.size() > top) o << "  ... " << r.op_stats.size() - top << " more operations\n";
  }
  const auto& rs = r.resources;
  o << "\nresources\n  streams " << rs.streams << " (created " << rs.streams_created << ", destroyed "
    << rs.streams_destroyed << " in the window, at most " << rs.max_streams_alive << " alive), contexts " << rs.contexts
    << "\n  CUDA event records " << rs.cuda_event_records << " (" << rs.distinct_cuda_events << " events), stream waits "
    << rs.stream_waits << ", host syncs " << rs.host_syncs << "\n  API calls: " << api_counts_text(rs.api)
    << "\n  allocations " << rs.allocations << ", frees "
    << rs.frees << ", peak allocated in window " << rs.peak_allocated_bytes << " bytes, CUPTI overhead "
    << us(rs.cupti_overhead) << " us\n";
  return o.str();
}

void write_streams_csv(const AnalysisResult& r, std::ostream& o) {
  o << "stream,label,priority,is_main,kernels,memcpys,memsets,kernel_time_ns,busy_ns,overlapped_ns,overlap_fraction,"
       "first_start_ns,last_end_ns,idle_host_wait_ns,idle_kernel_wait_ns,idle_other_ns,queue_wait_total_ns,"
       "queue_wait_median_ns,queue_wait_max_ns,launch_delay_median_ns,launch_delay_max_ns,suspected_false_deps\n";
  for (const auto& s : r.streams)
    o << s.stream << ',' << csv_field(s.label) << ',' << s.priority << ',' << (s.is_main ? 1 : 0) << ',' << s.kernels << ','
      << s.memcpys << ',' << s.memsets << ',' << s.kernel_time << ',' << s.busy << ',' << s.overlapped << ','
      << s.overlap_fraction << ',' << fmt_time(s.first_start) << ',' << fmt_time(s.last_end) << ',' << s.idle_host_wait
      << ',' << s.idle_kernel_wait << ',' << s.idle_other << ',' << s.queue_wait.total << ',' << s.queue_wait.median << ','
      << s.queue_wait.max << ',' << s.launch_delay.median << ',' << s.launch_delay.max << ',' << s.suspected_false_deps
      << '\n';
}

void write_kernel_stats_csv(const AnalysisResult& r, std::ostream& o) {
  o << "name,count,total_ns,mean_ns,median_ns,min_ns,max_ns\n";
  for (const auto& k : r.kernel_stats)
    o << csv_field(k.name) << ',' << k.count << ',' << k.total << ',' << k.mean << ',' << k.median << ',' << k.min << ','
      << k.max << '\n';
}

void write_ranges_csv(const AnalysisResult& r, std::ostream& o) {
  // `range` is the --range given (a name or a "PREFIX*" pattern), `name` each instance's own.
  o << "range,index,name,range_start_ns,range_end_ns,pid,tid,depth,kernels,span_ns,busy_ns,overlap_ns,overlap_fraction,"
       "aux_time_ns,aux_hidden_ns,aux_hidden_fraction,stream_overlap_ns\n";
  if (!r.range) return;
  for (const auto& i : r.range->per_instance)
    o << csv_field(r.range->name) << ',' << i.index << ',' << csv_field(i.name) << ',' << i.start << ',' << i.end << ',' << i.pid << ',' << i.tid
      << ',' << i.depth << ',' << i.metrics.kernels << ',' << i.metrics.span << ',' << i.metrics.busy << ','
      << i.metrics.overlap << ',' << i.metrics.overlap_fraction << ',' << i.metrics.aux_time << ','
      << i.metrics.aux_hidden << ',' << i.metrics.aux_hidden_fraction << ',' << i.metrics.stream_overlap << '\n';
}

void write_summary_csv(const AnalysisResult& r, std::ostream& o) {
  o << "key,value\n";
  // Flatten the JSON summary's scalar fields.
  std::function<void(const std::string&, const json&)> flat = [&](const std::string& prefix, const json& j) {
    if (j.is_object()) {
      for (auto& [k, v] : j.items())
        if (k != "streams" && k != "kernel_stats" && k != "per_instance" && k != "streams_alive" &&
            k != "false_dependency_examples")
          flat(prefix.empty() ? k : prefix + "." + k, v);
    } else if (j.is_array()) {
      for (size_t i = 0; i < j.size(); ++i) flat(prefix + "." + std::to_string(i), j[i]);
    } else {
      o << csv_field(prefix) << ',' << csv_field(j.is_string() ? j.get<std::string>() : j.dump()) << '\n';
    }
  };
  flat("", analysis_to_json(r));
}

void write_gpu_ops_csv(const Trace& t, std::ostream& o) {
  o << "kind,start_ns,end_ns,duration_ns,device,context,stream,correlation,name,grid_x,grid_y,grid_z,block_x,block_y,"
       "block_z,registers,static_smem,dynamic_smem,bytes,graph_id,graph_node_id\n";
  for (const auto& k : t.kernels)
    o << "kernel," << k.start << ',' << k.end << ',' << (k.end - k.start) << ',' << k.device << ',' << k.context << ','
      << k.stream << ',' << k.correlation << ',' << csv_field(t.str(k.name)) << ',' << k.grid[0] << ',' << k.grid[1] << ','
      << k.grid[2] << ',' << k.block[0] << ',' << k.block[1] << ',' << k.block[2] << ',' << k.registers << ','
      << k.static_smem << ',' << k.dynamic_smem << ",," << k.graph_id << ',' << k.graph_node_id << '\n';
  for (const auto& m : t.memcpys)
    o << "memcpy," << m.start << ',' << m.end << ',' << (m.end - m.start) << ',' << m.device << ',' << m.context << ','
      << m.stream << ',' << m.correlation << ',' << csv_field(memcpy_display_name(m.kind, m.src_kind, m.dst_kind))
      << ",,,,,,,,,," << m.bytes << ",," << m.graph_node_id << '\n';
  for (const auto& m : t.memsets)
    o << "memset," << m.start << ',' << m.end << ',' << (m.end - m.start) << ',' << m.device << ',' << m.context << ','
      << m.stream << ',' << m.correlation << ',' << csv_field(memset_display_name(m.mem_kind)) << ",,,,,,,,,,"
      << m.bytes << ",," << m.graph_node_id << '\n';
}

// Every table is written and synced in a staging folder first, so that a failed write (a full
// disk) leaves the destination as it was. A new folder is that staging folder renamed into place.
// In an existing folder the staging folder lies inside it (the same filesystem) and its tables are
// then renamed over the old ones; an earlier export's ranges.csv that this one does not write is
// removed (reported in *removed), so that the folder's tables all come from one trace.
// The folder's parent must exist: nothing is created behind the user's back.
std::vector<std::string> write_csv_dir(const Trace& t, const AnalysisResult& r, const std::string& dir,
                                       std::vector<std::string>* removed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existing = fs::exists(dir, ec);
  if (existing) {
    SL_CHECK(fs::is_directory(dir, ec), "cannot write the CSV tables to '", dir, "': it exists and is not a folder");
    remove_stale_staging(dir);  // left by an export that was killed
  } else {
    const fs::path parent = fs::path(dir).has_parent_path() ? fs::path(dir).parent_path() : fs::path(".");
    SL_CHECK(fs::is_directory(parent, ec), "cannot write the CSV tables to '", dir, "': its folder '",
             parent.string(), "' does not exist");
  }
  StagedDir staged(existing ? (fs::path(dir) / ".csv-tables").string() : dir);
  std::vector<std::string> names;  // the tables written, in order
  auto one = [&](const std::string& name, auto&& writer) {
    std::ostringstream os;
    writer(os);
    write_file_atomic((fs::path(staged.path()) / name).string(), os.str());
    names.push_back(name);
  };
  try {
    one("summary.csv", [&](std::ostream& o) { write_summary_csv(r, o); });
    one("streams.csv", [&](std::ostream& o) { write_streams_csv(r, o); });
    one("kernel_stats.csv", [&](std::ostream& o) { write_kernel_stats_csv(r, o); });
    one("gpu_ops.csv", [&](std::ostream& o) { write_gpu_ops_csv(t, o); });
    if (r.range) one("ranges.csv", [&](std::ostream& o) { write_ranges_csv(r, o); });
  } catch (const Error& e) {
    fail("the CSV tables were not written to '", dir, "' (", existing ? "its tables are as they were" : "no folder was created",
         "): ", e.what());
  }
  std::vector<std::string> files;
  for (const auto& name : names) files.push_back((fs::path(dir) / name).string());
  if (!existing) {
    staged.commit();
    return files;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string from = (fs::path(staged.path()) / names[i]).string();
    if (::rename(from.c_str(), files[i].c_str()) != 0)
      fail("cannot rename '", from, "' to '", files[i], "': ", std::strerror(errno));
  }
  const fs::path stale = fs::path(dir) / "ranges.csv";
  if (!r.range && fs::is_regular_file(stale, ec)) {
    SL_CHECK(fs::remove(stale, ec) && !ec, "cannot remove the earlier export's '", stale.string(), "': ", ec.message());
    if (removed) removed->push_back(stale.string());
  }
  return files;
}

}  // namespace sl::prof
