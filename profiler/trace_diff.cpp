#include "profiler/trace_diff.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace sl::prof {

namespace {

Ns abs_ns(Ns v) { return v < 0 ? -v : v; }

// Stream placement of paired ops: does an op of A and its pair in B run "in the same place"?
class StreamCorrespondence {
 public:
  StreamCorrespondence(const TraceProfile& a, const TraceProfile& b, const RoleMatch& m) : a_(a), b_(b) {
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> count;
    for (auto [x, y] : m.pairs) count[{a.op_stream[x], b.op_stream[y]}]++;
    std::vector<uint64_t> best(a.streams.size(), 0);
    major_.assign(a.streams.size(), kNoId);
    for (auto& [k, n] : count)
      if (n > best[k.first]) best[k.first] = n, major_[k.first] = k.second;
  }
  bool same_place(OpId x, OpId y) const {
    const ProfileStream& sa = a_.streams[a_.op_stream[x]];
    const ProfileStream& sb = b_.streams[b_.op_stream[y]];
    if (sa.named() && sb.named()) return stream_role(sa.label) == stream_role(sb.label);
    return major_[a_.op_stream[x]] == b_.op_stream[y];
  }

 private:
  const TraceProfile& a_;
  const TraceProfile& b_;
  std::vector<uint32_t> major_;  // per stream of A: the stream of B most of its paired ops ran on
};

void diff_roles(const TraceProfile& a, const TraceProfile& b, TraceDiff& d) {
  std::unordered_map<std::string, const RoleStats*> in_b;
  for (const RoleStats& s : b.role_stats) in_b.emplace(s.key, &s);
  for (const RoleStats& s : a.role_stats) {
    auto it = in_b.find(s.key);
    if (it == in_b.end()) {
      d.only_a.push_back(s);
      continue;
    }
    const RoleStats& t = *it->second;
    RoleDiff r;
    r.key = s.key;
    r.count_a = s.count, r.count_b = t.count;
    r.median_a = s.median, r.median_b = t.median;
    r.total_a = s.total, r.total_b = t.total;
    r.streams_a = s.streams, r.streams_b = t.streams;
    d.roles.push_back(std::move(r));
  }
  std::unordered_set<std::string> in_a;
  for (const RoleStats& s : a.role_stats) in_a.insert(s.key);
  for (const RoleStats& s : b.role_stats)
    if (!in_a.count(s.key)) d.only_b.push_back(s);
  auto by_key = [](const auto& x, const auto& y) { return x.key < y.key; };
  std::sort(d.roles.begin(), d.roles.end(), by_key);
  std::sort(d.only_a.begin(), d.only_a.end(), by_key);
  std::sort(d.only_b.begin(), d.only_b.end(), by_key);
}

// Paired ops that ran elsewhere in B, per role row.
void mark_moved_ops(const TraceProfile& a, const TraceProfile& b, TraceDiff& d) {
  const RoleMatch m = match_roles(a.roles, b.roles);
  d.ops_paired = m.pairs.size();
  d.ops_only_a = m.only_a.size();
  d.ops_only_b = m.only_b.size();
  std::unordered_map<std::string, size_t> row;
  for (size_t i = 0; i < d.roles.size(); ++i) row.emplace(d.roles[i].key, i);
  std::vector<size_t> row_of_role(a.roles.roles.size(), SIZE_MAX);
  for (uint32_t r = 0; r < a.roles.roles.size(); ++r) {
    auto it = row.find(a.roles.key(r));
    if (it != row.end()) row_of_role[r] = it->second;
  }
  const StreamCorrespondence place(a, b, m);
  for (auto [x, y] : m.pairs) {
    const size_t i = row_of_role[a.roles.ops[x].role];
    if (i != SIZE_MAX && !place.same_place(x, y)) d.roles[i].ops_moved++;
  }
  for (auto& r : d.roles) r.changed_stream = r.ops_moved > 0;
}

void rank_rows(TraceDiff& d) {
  std::vector<size_t> idx(d.roles.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    const Ns dx = abs_ns(d.roles[x].delta()), dy = abs_ns(d.roles[y].delta());
    return dx != dy ? dx > dy : d.roles[x].key < d.roles[y].key;
  });
  idx.resize(std::min(idx.size(), d.options.top));
  d.most_changed = idx;
  for (size_t i = 0; i < d.roles.size(); ++i)
    if (d.roles[i].changed_stream) d.changed_stream.push_back(i);
  auto weight = [&](size_t i) { return std::max(d.roles[i].total_a, d.roles[i].total_b); };
  std::sort(d.changed_stream.begin(), d.changed_stream.end(), [&](size_t x, size_t y) {
    return weight(x) != weight(y) ? weight(x) > weight(y) : d.roles[x].key < d.roles[y].key;
  });
}

void diff_paths(const TraceProfile& a, const TraceProfile& b, TraceDiff& d) {
  PathDiff& p = d.path;
  p.steps_a = a.paths.size(), p.steps_b = b.paths.size();
  p.mean_latency_a = a.mean_step_latency(), p.mean_latency_b = b.mean_step_latency();
  for (const auto& s : a.paths)
    for (size_t k = 0; k < kSegmentKinds; ++k) p.by_kind_a[k] += s.by_kind[k];
  for (const auto& s : b.paths)
    for (size_t k = 0; k < kSegmentKinds; ++k) p.by_kind_b[k] += s.by_kind[k];
  std::map<std::string, PathRoleDiff> by;
  for (const auto& r : a.path_roles) {
    PathRoleDiff& x = by[a.roles.key(r.role)];
    x.time_a = r.total(), x.steps_a = r.steps;
  }
  for (const auto& r : b.path_roles) {
    PathRoleDiff& x = by[b.roles.key(r.role)];
    x.time_b = r.total(), x.steps_b = r.steps;
  }
  for (auto& [key, x] : by) {
    x.key = key;
    if (x.steps_a == 0) p.joined.push_back(x);
    else if (x.steps_b == 0) p.left.push_back(x);
    else if (x.delta() != 0) p.changed.push_back(x);
  }
  auto order = [](auto time) {
    return [time](const PathRoleDiff& x, const PathRoleDiff& y) {
      return time(x) != time(y) ? time(x) > time(y) : x.key < y.key;
    };
  };
  std::sort(p.joined.begin(), p.joined.end(), order([](const PathRoleDiff& x) { return x.time_b; }));
  std::sort(p.left.begin(), p.left.end(), order([](const PathRoleDiff& x) { return x.time_a; }));
  std::sort(p.changed.begin(), p.changed.end(), order([](const PathRoleDiff& x) { return abs_ns(x.delta()); }));
  if (p.changed.size() > d.options.top) p.changed.resize(d.options.top);
}

void diff_groups(const TraceProfile& a, const TraceProfile& b, TraceDiff& d) {
  std::map<std::string, GroupHiddenDiff> by;
  for (const auto& g : a.aux_hidden) by[g.group].a = g;
  for (const auto& g : b.aux_hidden) by[g.group].b = g;
  for (auto& [name, g] : by) {
    g.group = name;
    g.a.group = g.b.group = name;
    d.aux_hidden.push_back(std::move(g));
  }
}

// The overlap matrix folded by stream role: (role x, role y) -> time, x <= y.
std::map<std::pair<std::string, std::string>, Ns> by_stream_role(const StreamOverlap& o) {
  std::map<std::pair<std::string, std::string>, Ns> out;
  const size_t n = o.labels.size();
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      if (o.at(i, j) == 0) continue;
      std::string x = stream_role(o.labels[i]), y = stream_role(o.labels[j]);
      if (y < x) std::swap(x, y);
      out[{x, y}] += o.at(i, j);
    }
  return out;
}

void diff_overlap(const TraceProfile& a, const TraceProfile& b, TraceDiff& d) {
  std::map<std::pair<std::string, std::string>, StreamRoleOverlap> by;
  for (auto& [k, t] : by_stream_role(a.overlap)) by[k].a = t;
  for (auto& [k, t] : by_stream_role(b.overlap)) by[k].b = t;
  for (auto& [k, o] : by) {
    o.x = k.first, o.y = k.second;
    d.stream_role_overlap.push_back(o);
  }
}

}  // namespace

TraceDiff diff_profiles(const TraceProfile& a, const TraceProfile& b, const DiffOptions& opts) {
  TraceDiff d;
  d.options = opts;
  diff_roles(a, b, d);
  mark_moved_ops(a, b, d);
  rank_rows(d);
  d.waits_a = a.waits.total, d.waits_b = b.waits.total;
  d.wait_sources_a = a.waits.sources, d.wait_sources_b = b.waits.sources;
  diff_paths(a, b, d);
  d.resources_a = a.analysis.resources, d.resources_b = b.analysis.resources;
  d.streams_busy_a = a.streams_busy, d.streams_busy_b = b.streams_busy;
  diff_groups(a, b, d);
  diff_overlap(a, b, d);
  return d;
}

}  // namespace sl::prof
