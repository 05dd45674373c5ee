#include "profiler/trace_profile.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "profiler/gpu_ops.h"

namespace sl::prof {

Ns TraceProfile::mean_step_latency() const {
  if (paths.empty()) return 0;
  Ns sum = 0;
  for (const auto& p : paths) sum += p.latency();
  return sum / Ns(paths.size());
}

std::string role_group(const std::string& path, const std::string& step_range, const GroupOptions& o) {
  const std::vector<std::string_view> el = path_elements(path);
  size_t below = 1;  // without a step range the outermost element is the step
  if (!step_range.empty()) {
    const std::string_view step = strip_instance_number(step_range);
    auto it = std::find(el.begin(), el.end(), step);
    below = it == el.end() ? 0 : size_t(it - el.begin()) + 1;
  }
  std::string_view pick;
  auto has = [](std::string_view s, auto pred) { return std::any_of(s.begin(), s.end(), pred); };
  if (o.depth >= 0) {
    if (below + size_t(o.depth) < el.size()) pick = el[below + size_t(o.depth)];
  } else {
    for (size_t i = below; i < el.size() && pick.empty(); ++i)
      if (has(el[i], [](char c) { return c == '.'; })) pick = el[i];
    for (size_t i = below; i < el.size() && pick.empty(); ++i)
      if (has(el[i], [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) pick = el[i];
  }
  if (pick.empty()) return "(none)";
  // Without instance numbers: the digits that end each '.'-separated part ("L3" -> "L"),
  // not those inside one ("c4a": part of a name, the same in every instance).
  std::string g;
  for (size_t i = 0; i < pick.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(pick[i]));
    size_t j = i;
    while (j < pick.size() && std::isdigit(static_cast<unsigned char>(pick[j]))) ++j;
    if (digit && (j == pick.size() || pick[j] == '.')) {
      i = j - 1;
      continue;
    }
    g += pick[i];
  }
  return g;
}

namespace {

void index_streams(const GpuOps& ops, uint32_t main_stream, TraceProfile& p) {
  p.streams.resize(ops.streams());
  for (uint32_t s = 0; s < ops.streams(); ++s) {
    ProfileStream& x = p.streams[s];
    x.pid = ops.stream_pid(s);
    x.id = ops.stream_id(s);
    x.label = ops.trace().stream_label(x.id);
    x.is_main = x.id == main_stream;
  }
  p.op_stream.resize(ops.size());
  for (OpId op = 0; op < ops.size(); ++op) p.op_stream[op] = ops.stream_index(op);
}

// Statistics per role of (op, duration) pairs: one sort by (role, duration).
std::vector<RoleStats> stats_by_role(const TraceProfile& p, std::vector<std::pair<OpId, Ns>> durs) {
  const auto role = [&](OpId op) { return p.roles.ops[op].role; };
  std::sort(durs.begin(), durs.end(), [&](const auto& a, const auto& b) {
    return role(a.first) != role(b.first) ? role(a.first) < role(b.first) : a.second < b.second;
  });
  std::vector<RoleStats> out;
  for (size_t i = 0; i < durs.size();) {
    size_t j = i;
    while (j < durs.size() && role(durs[j].first) == role(durs[i].first)) ++j;
    const uint32_t r = role(durs[i].first);
    RoleStats s;
    s.key = p.roles.key(r);
    s.path = p.roles.path(r);
    s.name = p.roles.name(r);
    s.ordinal = p.roles.roles[r].ordinal;
    s.count = j - i;
    const size_t mid = i + (j - i) / 2;
    s.median = (j - i) % 2 ? double(durs[mid].second) : (double(durs[mid - 1].second) + double(durs[mid].second)) / 2;
    for (size_t k = i; k < j; ++k) {
      s.total += durs[k].second;
      s.streams.push_back(p.streams[p.op_stream[durs[k].first]].label);
    }
    std::sort(s.streams.begin(), s.streams.end());
    s.streams.erase(std::unique(s.streams.begin(), s.streams.end()), s.streams.end());
    out.push_back(std::move(s));
    i = j;
  }
  std::sort(out.begin(), out.end(), [](const RoleStats& a, const RoleStats& b) {
    return a.total != b.total ? a.total > b.total : a.key < b.key;
  });
  return out;
}

// Streams busy and pair overlap: one sweep over kernel starts and ends (ends first at equal
// times, so touching kernels do not overlap).
void sweep_streams(const GpuOps& ops, TraceProfile& p) {
  std::map<std::string, uint32_t> label_index;
  for (const auto& s : p.streams) label_index.emplace(s.label, 0);
  for (auto& [label, i] : label_index) i = uint32_t(p.overlap.labels.size()), p.overlap.labels.push_back(label);
  std::vector<uint32_t> label_of(p.streams.size());
  for (size_t s = 0; s < p.streams.size(); ++s) label_of[s] = label_index[p.streams[s].label];
  const size_t nl = p.overlap.labels.size();
  p.overlap.time.assign(nl * nl, 0);
  struct Edge {
    Ns t;
    int delta;
    uint32_t stream;
  };
  std::vector<Edge> edges;
  for (OpId op = 0; op < ops.size() && ops.kind(op) == OpKind::Kernel; ++op) {
    edges.push_back({ops.start(op), +1, ops.stream_index(op)});
    edges.push_back({ops.end(op), -1, ops.stream_index(op)});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t != b.t ? a.t < b.t : a.delta < b.delta; });
  std::vector<uint32_t> running(p.streams.size(), 0), label_running(nl, 0);
  std::vector<uint32_t> active;  // labels with a kernel running
  size_t busy_streams = 0;
  p.streams_busy.assign(1, 0);
  Ns now = edges.empty() ? 0 : edges.front().t;
  for (const Edge& e : edges) {
    if (const Ns dt = e.t - now; dt > 0) {
      if (busy_streams >= p.streams_busy.size()) p.streams_busy.resize(busy_streams + 1, 0);
      p.streams_busy[busy_streams] += dt;
      for (uint32_t x : active)
        for (uint32_t y : active) p.overlap.time[x * nl + y] += dt;
      now = e.t;
    }
    const uint32_t l = label_of[e.stream];
    if (e.delta > 0) {
      if (running[e.stream]++ == 0) busy_streams++;
      if (label_running[l]++ == 0) active.push_back(l);
    } else {
      if (--running[e.stream] == 0) busy_streams--;
      if (--label_running[l] == 0) active.erase(std::find(active.begin(), active.end(), l));
    }
  }
}

// Main-stream busy time before any instant: merged main-stream kernel intervals with prefix sums.
class MainCoverage {
 public:
  MainCoverage(const GpuOps& ops, const TraceProfile& p) {
    for (OpId op = 0; op < ops.size() && ops.kind(op) == OpKind::Kernel; ++op) {  // by start
      if (!p.streams[p.op_stream[op]].is_main) continue;
      if (!iv_.empty() && ops.start(op) <= iv_.back().second) iv_.back().second = std::max(iv_.back().second, ops.end(op));
      else iv_.push_back({ops.start(op), ops.end(op)});
    }
    before_.resize(iv_.size() + 1, 0);
    for (size_t i = 0; i < iv_.size(); ++i) before_[i + 1] = before_[i] + iv_[i].second - iv_[i].first;
  }
  Ns covered(Ns from, Ns to) const { return upto(to) - upto(from); }

 private:
  Ns upto(Ns x) const {  // main busy time in (-inf, x)
    auto it = std::upper_bound(iv_.begin(), iv_.end(), x, [](Ns v, const auto& i) { return v < i.first; });
    const size_t i = size_t(it - iv_.begin());
    if (i == 0) return 0;
    return before_[i - 1] + std::min(x, iv_[i - 1].second) - iv_[i - 1].first;
  }
  std::vector<std::pair<Ns, Ns>> iv_;
  std::vector<Ns> before_;
};

void hidden_by_group(const GpuOps& ops, TraceProfile& p) {
  const MainCoverage main(ops, p);
  std::unordered_map<uint32_t, std::string> group_of_path;  // path id -> group
  std::map<std::string, GroupHidden> by;
  for (OpId op = 0; op < ops.size() && ops.kind(op) == OpKind::Kernel; ++op) {
    const uint32_t path = p.roles.roles[p.roles.ops[op].role].path;
    auto it = group_of_path.find(path);
    if (it == group_of_path.end())
      it = group_of_path.emplace(path, role_group(p.roles.strings.str(path), p.options.roles.step_range, p.options.groups)).first;
    GroupHidden& g = by[it->second];
    g.kernels++;
    if (p.streams[p.op_stream[op]].is_main) continue;
    g.aux_kernels++;
    g.aux_time += ops.end(op) - ops.start(op);
    g.hidden += main.covered(ops.start(op), ops.end(op));
  }
  for (auto& [name, g] : by) {
    g.group = name;
    g.fraction = g.aux_time > 0 ? double(g.hidden) / double(g.aux_time) : 0.0;
    p.aux_hidden.push_back(std::move(g));
  }
}

}  // namespace

TraceProfile profile_trace(const Trace& t, const ProfileOptions& opts) {
  TraceProfile p;
  p.options = opts;
  p.analysis = analyze(t, opts.analysis);
  const GpuOps ops(t);
  p.roles = compute_roles(ops, opts.roles);
  p.waits = attribute_waits(ops, opts.waits);
  p.paths = critical_paths(ops, p.roles, p.waits);
  p.path_roles = path_time_by_role(p.paths, p.roles);
  index_streams(ops, p.analysis.main_stream, p);
  std::vector<std::pair<OpId, Ns>> durs(ops.size());
  for (OpId op = 0; op < ops.size(); ++op) durs[op] = {op, ops.end(op) - ops.start(op)};
  p.role_stats = stats_by_role(p, std::move(durs));
  sweep_streams(ops, p);
  hidden_by_group(ops, p);
  return p;
}

std::vector<RoleStats> role_stats_in_window(const Trace& t, const TraceProfile& p, Ns from, Ns to) {
  SL_CHECK(p.roles.ops.size() == t.kernels.size() + t.memcpys.size() + t.memsets.size(),
           "role_stats_in_window: the profile holds ", p.roles.ops.size(), " GPU ops, the trace ",
           t.kernels.size() + t.memcpys.size() + t.memsets.size(), ": not the trace it was computed from");
  std::vector<std::pair<OpId, Ns>> durs;
  // GpuOps numbering: kernels, then memcpys, then memsets; each vector sorted by start.
  auto take = [&](const auto& v, OpId first) {
    auto lo = std::lower_bound(v.begin(), v.end(), from, [](const auto& x, Ns f) { return x.start < f; });
    for (auto it = lo; it != v.end() && it->start < to; ++it)
      durs.push_back({first + OpId(it - v.begin()), std::max<Ns>(0, it->end - it->start)});
  };
  take(t.kernels, 0);
  take(t.memcpys, OpId(t.kernels.size()));
  take(t.memsets, OpId(t.kernels.size() + t.memcpys.size()));
  return stats_by_role(p, std::move(durs));
}

}  // namespace sl::prof
