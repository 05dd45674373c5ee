#include "profiler/profile_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "profiler/summary.h"

namespace sl::prof {

namespace {

using json = nlohmann::json;

// ---- shared pieces

std::string us(Ns ns) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << double(ns) / 1000.0;
  return os.str();
}

std::string pct(Ns part, Ns whole) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << (whole > 0 ? 100.0 * double(part) / double(whole) : 0.0) << "%";
  return os.str();
}

std::string frac(double f) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << 100.0 * f << "%";
  return os.str();
}

std::string signed_us(Ns ns) {
  std::string s = us(ns);
  if (ns > 0) s.insert(s.begin(), '+');
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

std::string cut(const std::string& s, size_t n) { return s.size() > n ? s.substr(0, n - 3) + "..." : s; }

json totals_json(const WaitTotals& w) {
  return json{{"kernels", w.kernels},
              {"started_before_launch_end", w.started_before_launch_end},
              {"without_launch", w.without_launch},
              {"inferred_event_waits", w.inferred_event_waits},
              {"graph_kernels", w.graph_kernels},
              {"launch_to_start_ns", w.launch_to_start},
              {"own_stream_ns", w.own_stream},
              {"event_ns", w.event},
              {"unrelated_ns", w.unrelated},
              {"launch_gap_ns", w.launch_gap},
              {"in_graph_ns", w.in_graph}};
}

json sources_json(const EventWaitSources& s) {
  return json{{"waits", s.waits},
              {"from_sync_fields", s.from_sync_fields},
              {"from_event_records", s.from_event_records},
              {"unresolved", s.unresolved},
              {"no_producer", s.no_producer},
              {"not_applied", s.not_applied},
              {"api_wait_calls", s.api_wait_calls},
              {"inferred_from_api", s.inferred_from_api}};
}

json by_kind_json(const std::array<Ns, kSegmentKinds>& k) {
  json j = json::object();
  for (size_t i = 0; i < kSegmentKinds; ++i) j[std::string(to_string(SegmentKind(i))) + "_ns"] = k[i];
  return j;
}

json role_stats_json(const RoleStats& s) {
  return json{{"key", s.key},     {"path", s.path},          {"name", s.name},        {"ordinal", s.ordinal},
              {"count", s.count}, {"median_ns", s.median},   {"total_ns", s.total},   {"streams", s.streams}};
}

json group_json(const GroupHidden& g) {
  return json{{"group", g.group},       {"kernels", g.kernels},   {"aux_kernels", g.aux_kernels},
              {"aux_time_ns", g.aux_time}, {"hidden_ns", g.hidden}, {"fraction", g.fraction}};
}

// ---- profile JSON

json segments_json(const TraceProfile& p, const StepCriticalPath* s) {
  if (!s) return nullptr;
  json seg = json::array();
  for (const PathSegment& x : s->segments)
    seg.push_back({{"start_ns", x.start},
                   {"end_ns", x.end},
                   {"kind", to_string(x.kind)},
                   {"cause", x.kind == SegmentKind::HandoffWait ? json(to_string(x.cause)) : json(nullptr)},
                   {"role", x.op == kNoOp ? json(nullptr) : json(p.roles.key(p.roles.ops[x.op].role))}});
  return json{{"step", s->step}, {"start_ns", s->start}, {"end_ns", s->end}, {"latency_ns", s->latency()},
              {"segments", seg}};
}

json paths_json(const TraceProfile& p) {
  std::array<Ns, kSegmentKinds> sum{};
  json steps = json::array();
  for (const auto& s : p.paths) {
    for (size_t k = 0; k < kSegmentKinds; ++k) sum[k] += s.by_kind[k];
    steps.push_back({{"step", s.step}, {"start_ns", s.start}, {"end_ns", s.end}, {"latency_ns", s.latency()},
                     {"by_kind_ns", by_kind_json(s.by_kind)}});
  }
  json roles = json::array();
  for (const auto& r : p.path_roles)
    roles.push_back({{"key", p.roles.key(r.role)}, {"steps", r.steps}, {"kernel_ns", r.kernel}, {"wait_ns", r.wait}});
  return json{{"steps", p.paths.size()},
              {"mean_latency_ns", p.mean_step_latency()},
              {"by_kind_ns", by_kind_json(sum)},
              {"per_step", steps},
              {"roles", roles},
              {"typical_step", segments_json(p, typical_step(p.paths))},
              {"slowest_step", segments_json(p, slowest_step(p.paths))}};
}

json waits_json(const TraceProfile& p) {
  json streams = json::array();
  for (const auto& s : p.waits.streams) {
    json j = totals_json(s.totals);
    j["pid"] = s.pid, j["stream"] = s.stream, j["label"] = s.label;
    streams.push_back(j);
  }
  return json{{"epsilon_ns", p.waits.options.epsilon},
              {"total", totals_json(p.waits.total)},
              {"streams", streams},
              {"sources", sources_json(p.waits.sources)}};
}

json overlap_json(const StreamOverlap& o) {
  json rows = json::array();
  for (size_t i = 0; i < o.labels.size(); ++i) {
    json row = json::array();
    for (size_t j = 0; j < o.labels.size(); ++j) row.push_back(o.at(i, j));
    rows.push_back(row);
  }
  return json{{"labels", o.labels}, {"ns", rows}};
}

// ---- text helpers

void text_waits(std::ostream& o, const WaitTotals& w, const std::string& indent) {
  const Ns all = w.launch_to_start;
  o << indent << "launch-to-start " << us(all) << " us over " << w.kernels << " kernels: own stream " << us(w.own_stream)
    << " (" << pct(w.own_stream, all) << "), event " << us(w.event) << " (" << pct(w.event, all) << "), unrelated "
    << us(w.unrelated) << " (" << pct(w.unrelated, all) << "), launch gap " << us(w.launch_gap) << " ("
    << pct(w.launch_gap, all) << "), inside graphs " << us(w.in_graph) << " (" << pct(w.in_graph, all) << ")\n";
  if (w.started_before_launch_end || w.without_launch || w.inferred_event_waits)
    o << indent << "(" << w.started_before_launch_end << " kernels started before their launch call ended, "
      << w.without_launch << " without a launch call: zeros; " << w.inferred_event_waits
      << " event waits inferred from cudaStreamWaitEvent calls)\n";
}

std::string sources_text(const EventWaitSources& s) {
  std::ostringstream o;
  o << s.waits << " stream waits: " << s.from_sync_fields << " with their recording stream, " << s.from_event_records
    << " through CUDA event records, " << s.unresolved << " unresolved, " << s.not_applied << " before no op";
  if (s.inferred_from_api) o << "; inferring from " << s.api_wait_calls << " cudaStreamWaitEvent calls";
  return o.str();
}

void text_path(std::ostream& o, const TraceProfile& p, size_t top) {
  std::array<Ns, kSegmentKinds> sum{};
  for (const auto& s : p.paths)
    for (size_t k = 0; k < kSegmentKinds; ++k) sum[k] += s.by_kind[k];
  const Ns n = std::max<Ns>(1, Ns(p.paths.size()));
  o << "\ncritical path (" << p.paths.size() << " steps, mean latency " << us(p.mean_step_latency()) << " us)\n  per step:";
  for (size_t k = 0; k < kSegmentKinds; ++k) o << "  " << to_string(SegmentKind(k)) << " " << us(sum[k] / n) << " us";
  o << "\n  " << std::setw(14) << "on path us" << std::setw(12) << "wait us" << std::setw(7) << "steps" << "  role\n";
  for (size_t i = 0; i < p.path_roles.size() && i < top; ++i) {
    const auto& r = p.path_roles[i];
    o << "  " << std::setw(14) << us(r.total()) << std::setw(12) << us(r.wait) << std::setw(7) << r.steps << "  "
      << cut(p.roles.key(r.role), 110) << "\n";
  }
}

void text_roles(std::ostream& o, const std::vector<RoleStats>& roles, size_t top) {
  o << "  " << std::setw(8) << "count" << std::setw(12) << "median us" << std::setw(14) << "total us" << "  streams  role\n";
  for (size_t i = 0; i < roles.size() && i < top; ++i) {
    const auto& r = roles[i];
    o << "  " << std::setw(8) << r.count << std::setw(12) << us(Ns(r.median)) << std::setw(14) << us(r.total) << "  "
      << joined(r.streams) << "  " << cut(r.key, 110) << "\n";
  }
  if (roles.size() > top) o << "  ... " << roles.size() - top << " more roles\n";
}

void text_overlap(std::ostream& o, const StreamOverlap& m, size_t top) {
  struct Pair {
    Ns t;
    size_t i, j;
  };
  std::vector<Pair> pairs;
  for (size_t i = 0; i < m.labels.size(); ++i)
    for (size_t j = i + 1; j < m.labels.size(); ++j)
      if (m.at(i, j) > 0) pairs.push_back({m.at(i, j), i, j});
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.t > b.t; });
  o << "\nstream pairs running kernels together\n";
  for (size_t k = 0; k < pairs.size() && k < top; ++k)
    o << "  " << std::setw(14) << us(pairs[k].t) << " us  " << m.labels[pairs[k].i] << " + " << m.labels[pairs[k].j] << "\n";
  if (pairs.empty()) o << "  (none)\n";
}

void text_groups(std::ostream& o, const std::vector<GroupHidden>& groups) {
  o << "\naux hidden under main-stream kernels, per group\n";
  for (const auto& g : groups)
    o << "  " << std::left << std::setw(24) << g.group << std::right << std::setw(8) << g.aux_kernels << " aux kernels "
      << std::setw(12) << us(g.aux_time) << " us, hidden " << frac(g.fraction) << "\n";
}

void text_busy(std::ostream& o, const std::vector<Ns>& busy) {
  o << "\nstreams busy (time at exactly k streams running kernels):";
  for (size_t k = 0; k < busy.size(); ++k) o << "  " << k << ": " << us(busy[k]) << " us";
  o << "\n";
}

void text_resources(std::ostream& o, const ResourceSummary& r) {
  o << "\nresources: streams " << r.streams << ", CUDA event records " << r.cuda_event_records << ", stream waits "
    << r.stream_waits << ", host syncs " << r.host_syncs << "\n  API calls: " << api_counts_text(r.api) << "\n";
}


// ---- diff

json role_diff_json(const RoleDiff& r) {
  return json{{"key", r.key},
              {"count_a", r.count_a},
              {"count_b", r.count_b},
              {"median_a_ns", r.median_a},
              {"median_b_ns", r.median_b},
              {"total_a_ns", r.total_a},
              {"total_b_ns", r.total_b},
              {"delta_ns", r.delta()},
              {"streams_a", r.streams_a},
              {"streams_b", r.streams_b},
              {"ops_moved", r.ops_moved},
              {"changed_stream", r.changed_stream}};
}

json path_roles_json(const std::vector<PathRoleDiff>& v) {
  json out = json::array();
  for (const auto& x : v)
    out.push_back({{"key", x.key}, {"time_a_ns", x.time_a}, {"time_b_ns", x.time_b}, {"delta_ns", x.delta()},
                   {"steps_a", x.steps_a}, {"steps_b", x.steps_b}});
  return out;
}

json resources_json(const ResourceSummary& r) {
  return json{{"streams", r.streams},
              {"cuda_event_records", r.cuda_event_records},
              {"distinct_cuda_events", r.distinct_cuda_events},
              {"stream_waits", r.stream_waits},
              {"host_syncs", r.host_syncs},
              {"max_streams_alive", r.max_streams_alive},
              {"peak_allocated_bytes", r.peak_allocated_bytes},
              {"api_calls", api_counts_json(r.api)}};
}

void text_role_rows(std::ostream& o, const TraceDiff& d, const std::vector<size_t>& rows, size_t top) {
  o << "  " << std::setw(11) << "count A/B" << std::setw(22) << "median us A/B" << std::setw(26) << "total us A/B"
    << std::setw(13) << "delta us" << "  streams A -> B  role\n";
  for (size_t k = 0; k < rows.size() && k < top; ++k) {
    const RoleDiff& r = d.roles[rows[k]];
    o << "  " << std::setw(11) << (std::to_string(r.count_a) + "/" + std::to_string(r.count_b)) << std::setw(22)
      << (us(Ns(r.median_a)) + "/" + us(Ns(r.median_b))) << std::setw(26) << (us(r.total_a) + "/" + us(r.total_b))
      << std::setw(13) << signed_us(r.delta()) << "  " << joined(r.streams_a) << " -> " << joined(r.streams_b)
      << (r.changed_stream ? " (moved)" : "") << "  " << cut(r.key, 100) << "\n";
  }
  if (rows.empty()) o << "  (none)\n";
}

void text_only(std::ostream& o, const std::string& side, const std::vector<RoleStats>& v, size_t top) {
  o << "\nroles only in " << side << " (" << v.size() << ")\n";
  for (size_t i = 0; i < v.size() && i < top; ++i)
    o << "  " << std::setw(8) << v[i].count << std::setw(14) << us(v[i].total) << " us  " << cut(v[i].key, 110) << "\n";
  if (v.size() > top) o << "  ...\n";
}

void text_wait_diff(std::ostream& o, const TraceDiff& d) {
  const WaitTotals &a = d.waits_a, &b = d.waits_b;
  o << "\nwaits (launch-to-start split, us)        " << std::setw(14) << d.options.label_a << std::setw(14)
    << d.options.label_b << "\n";
  auto row = [&](const char* name, Ns x, Ns y) {
    o << "  " << std::left << std::setw(38) << name << std::right << std::setw(14) << us(x) << std::setw(14) << us(y)
      << std::setw(14) << signed_us(y - x) << "\n";
  };
  row("launch to start", a.launch_to_start, b.launch_to_start);
  row("own stream", a.own_stream, b.own_stream);
  row("cross-stream event", a.event, b.event);
  row("unrelated (suspected false dependency)", a.unrelated, b.unrelated);
  row("host launch gap", a.launch_gap, b.launch_gap);
  row("inside graphs", a.in_graph, b.in_graph);
  o << "  kernels " << a.kernels << " / " << b.kernels << ", inferred event waits " << a.inferred_event_waits << " / "
    << b.inferred_event_waits << "\n  " << d.options.label_a << ": " << sources_text(d.wait_sources_a) << "\n  "
    << d.options.label_b << ": " << sources_text(d.wait_sources_b) << "\n";
}

void text_path_roles(std::ostream& o, const char* title, const std::vector<PathRoleDiff>& v, size_t top) {
  o << "  " << title << " (" << v.size() << ")\n";
  for (size_t i = 0; i < v.size() && i < top; ++i)
    o << "    " << std::setw(12) << us(v[i].time_a) << std::setw(12) << us(v[i].time_b) << std::setw(13)
      << signed_us(v[i].delta()) << "  " << cut(v[i].key, 100) << "\n";
}

void text_path_diff(std::ostream& o, const TraceDiff& d, size_t top) {
  const PathDiff& p = d.path;
  o << "\ncritical path: " << p.steps_a << " / " << p.steps_b << " steps, mean latency " << us(p.mean_latency_a)
    << " / " << us(p.mean_latency_b) << " us (" << signed_us(p.mean_latency_b - p.mean_latency_a) << ")\n  per step:";
  const Ns na = std::max<Ns>(1, Ns(p.steps_a)), nb = std::max<Ns>(1, Ns(p.steps_b));
  for (size_t k = 0; k < kSegmentKinds; ++k)
    o << "  " << to_string(SegmentKind(k)) << " " << us(p.by_kind_a[k] / na) << "/" << us(p.by_kind_b[k] / nb);
  o << " us\n  (time on the paths, us: " << d.options.label_a << ", " << d.options.label_b << ", delta)\n";
  text_path_roles(o, "roles joining the path", p.joined, top);
  text_path_roles(o, "roles leaving the path", p.left, top);
  text_path_roles(o, "roles whose time on the path changed", p.changed, top);
}

void text_resource_diff(std::ostream& o, const TraceDiff& d) {
  const ResourceSummary &a = d.resources_a, &b = d.resources_b;
  auto row = [&](const char* name, uint64_t x, uint64_t y) {
    o << "  " << std::left << std::setw(30) << name << std::right << std::setw(12) << x << std::setw(12) << y << "\n";
  };
  o << "\nresources" << std::string(23, ' ') << std::setw(12) << d.options.label_a << std::setw(12) << d.options.label_b << "\n";
  row("streams", a.streams, b.streams);
  row("stream creates (API)", a.api.stream_creates, b.api.stream_creates);
  row("event creates (API)", a.api.event_creates, b.api.event_creates);
  row("event records (API)", a.api.event_records, b.api.event_records);
  row("stream waits (API)", a.api.stream_wait_events, b.api.stream_wait_events);
  row("CUDA event records", a.cuda_event_records, b.cuda_event_records);
  row("stream-wait-event records", a.stream_waits, b.stream_waits);
  row("stream / event / device syncs", a.api.stream_syncs + a.api.event_syncs + a.api.device_syncs,
      b.api.stream_syncs + b.api.event_syncs + b.api.device_syncs);
  row("peak allocated bytes", a.peak_allocated_bytes, b.peak_allocated_bytes);
}

void text_side_by_side(std::ostream& o, const TraceDiff& d) {
  o << "\nstreams busy (us at exactly k streams running kernels)\n";
  const size_t n = std::max(d.streams_busy_a.size(), d.streams_busy_b.size());
  for (size_t k = 0; k < n; ++k)
    o << "  " << std::setw(3) << k << std::setw(14) << us(k < d.streams_busy_a.size() ? d.streams_busy_a[k] : 0)
      << std::setw(14) << us(k < d.streams_busy_b.size() ? d.streams_busy_b[k] : 0) << "\n";
  o << "\naux hidden per group (aux us, hidden)\n";
  for (const auto& g : d.aux_hidden)
    o << "  " << std::left << std::setw(24) << g.group << std::right << std::setw(14) << us(g.a.aux_time) << std::setw(8)
      << frac(g.a.fraction) << std::setw(14) << us(g.b.aux_time) << std::setw(8) << frac(g.b.fraction) << "\n";
  o << "\nstream roles running kernels together (us)\n";
  for (const auto& x : d.stream_role_overlap)
    o << "  " << std::left << std::setw(36) << (x.x + " + " + x.y) << std::right << std::setw(14) << us(x.a)
      << std::setw(14) << us(x.b) << "\n";
}

}  // namespace

const StepCriticalPath* typical_step(const std::vector<StepCriticalPath>& paths) {
  if (paths.empty()) return nullptr;
  std::vector<const StepCriticalPath*> v;
  for (const auto& p : paths) v.push_back(&p);
  std::sort(v.begin(), v.end(), [](auto a, auto b) { return a->latency() != b->latency() ? a->latency() < b->latency() : a->step < b->step; });
  return v[(v.size() - 1) / 2];
}

const StepCriticalPath* slowest_step(const std::vector<StepCriticalPath>& paths) {
  const StepCriticalPath* s = nullptr;
  for (const auto& p : paths)
    if (!s || p.latency() > s->latency()) s = &p;
  return s;
}

json profile_to_json(const TraceProfile& p) {
  json roles = json::array();
  for (const auto& r : p.role_stats) roles.push_back(role_stats_json(r));
  json streams = json::array();
  for (const auto& s : p.streams)
    streams.push_back({{"pid", s.pid}, {"stream", s.id}, {"label", s.label}, {"is_main", s.is_main}});
  json groups = json::array();
  for (const auto& g : p.aux_hidden) groups.push_back(group_json(g));
  const KernelRoles& k = p.roles;
  return json{{"options", {{"step_range", p.options.roles.step_range}, {"group_depth", p.options.groups.depth}}},
              {"analysis", analysis_to_json(p.analysis)},
              {"placement", {{"roles", k.roles.size()},
                             {"steps", k.steps.size()},
                             {"placed_by_launch", k.placed_by_launch},
                             {"placed_by_queued", k.placed_by_queued},
                             {"without_range", k.without_range},
                             {"without_launch", k.without_launch}}},
              {"role_stats", roles},
              {"waits", waits_json(p)},
              {"critical_path", paths_json(p)},
              {"streams", streams},
              {"streams_busy_ns", p.streams_busy},
              {"stream_overlap", overlap_json(p.overlap)},
              {"aux_hidden", groups}};
}

std::string profile_to_text(const TraceProfile& p, size_t top) {
  std::ostringstream o;
  const std::string warn = record_count_warnings(p.analysis.counts);
  if (!warn.empty()) o << "WARNING: record problems in this trace (results may be wrong):\n" << warn << "\n";
  o << "GPU ops: " << p.roles.ops.size() << ", roles: " << p.roles.roles.size() << ", steps: " << p.roles.steps.size()
    << (p.options.roles.step_range.empty() ? " (outermost ranges)" : " (\"" + p.options.roles.step_range + "\")")
    << ", placed by launch " << p.roles.placed_by_launch << ", by queued " << p.roles.placed_by_queued
    << ", outside ranges " << p.roles.without_range << ", without launch " << p.roles.without_launch << "\n";
  o << "\nwaits (kernel start - launch call end, split)\n";
  text_waits(o, p.waits.total, "  ");
  o << "  " << sources_text(p.waits.sources) << "\n";
  for (const auto& s : p.waits.streams) {
    o << "  stream " << s.stream << (s.label != "stream " + std::to_string(s.stream) ? " " + s.label : "") << ":\n";
    text_waits(o, s.totals, "    ");
  }
  text_path(o, p, top);
  o << "\nroles by total time\n";
  text_roles(o, p.role_stats, top);
  text_busy(o, p.streams_busy);
  text_overlap(o, p.overlap, top);
  text_groups(o, p.aux_hidden);
  text_resources(o, p.analysis.resources);
  return o.str();
}

json diff_to_json(const TraceDiff& d) {
  json roles = json::array(), only_a = json::array(), only_b = json::array(), groups = json::array(), pairs = json::array();
  for (const auto& r : d.roles) roles.push_back(role_diff_json(r));
  for (const auto& r : d.only_a) only_a.push_back(role_stats_json(r));
  for (const auto& r : d.only_b) only_b.push_back(role_stats_json(r));
  json most = json::array(), moved = json::array();
  for (size_t i : d.most_changed) most.push_back(d.roles[i].key);
  for (size_t i : d.changed_stream) moved.push_back(d.roles[i].key);
  for (const auto& g : d.aux_hidden) groups.push_back({{"group", g.group}, {"a", group_json(g.a)}, {"b", group_json(g.b)}});
  for (const auto& x : d.stream_role_overlap) pairs.push_back({{"x", x.x}, {"y", x.y}, {"a_ns", x.a}, {"b_ns", x.b}});
  const PathDiff& p = d.path;
  return json{{"labels", {d.options.label_a, d.options.label_b}},
              {"ops", {{"paired", d.ops_paired}, {"only_a", d.ops_only_a}, {"only_b", d.ops_only_b}}},
              {"roles", roles},
              {"only_a", only_a},
              {"only_b", only_b},
              {"most_changed", most},
              {"changed_stream", moved},
              {"waits", {{"a", totals_json(d.waits_a)}, {"b", totals_json(d.waits_b)},
                         {"sources_a", sources_json(d.wait_sources_a)}, {"sources_b", sources_json(d.wait_sources_b)}}},
              {"critical_path", {{"steps_a", p.steps_a}, {"steps_b", p.steps_b},
                                 {"mean_latency_a_ns", p.mean_latency_a}, {"mean_latency_b_ns", p.mean_latency_b},
                                 {"by_kind_a_ns", by_kind_json(p.by_kind_a)}, {"by_kind_b_ns", by_kind_json(p.by_kind_b)},
                                 {"joined", path_roles_json(p.joined)}, {"left", path_roles_json(p.left)},
                                 {"changed", path_roles_json(p.changed)}}},
              {"resources", {{"a", resources_json(d.resources_a)}, {"b", resources_json(d.resources_b)}}},
              {"streams_busy_ns", {{"a", d.streams_busy_a}, {"b", d.streams_busy_b}}},
              {"aux_hidden", groups},
              {"stream_role_overlap", pairs}};
}

std::string diff_to_text(const TraceDiff& d, size_t top) {
  std::ostringstream o;
  o << d.options.label_a << " vs " << d.options.label_b << ": " << d.roles.size() << " roles in both, "
    << d.only_a.size() << " only in " << d.options.label_a << ", " << d.only_b.size() << " only in "
    << d.options.label_b << "; GPU ops paired " << d.ops_paired << ", unpaired " << d.ops_only_a << " / "
    << d.ops_only_b << "\n";
  o << "\nroles whose time changed most\n";
  text_role_rows(o, d, d.most_changed, top);
  o << "\nroles that changed stream (" << d.changed_stream.size() << ")\n";
  text_role_rows(o, d, d.changed_stream, top);
  text_only(o, d.options.label_a, d.only_a, top);
  text_only(o, d.options.label_b, d.only_b, top);
  text_wait_diff(o, d);
  text_path_diff(o, d, top);
  text_resource_diff(o, d);
  text_side_by_side(o, d);
  return o.str();
}

}  // namespace sl::prof
