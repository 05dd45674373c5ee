#include "profiler/kernel_roles.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace sl::prof {

std::string_view strip_instance_number(std::string_view n) {
  const size_t hash = n.rfind('#');
  if (hash == std::string_view::npos || hash + 1 == n.size()) return n;
  for (size_t i = hash + 1; i < n.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(n[i]))) return n;
  return n.substr(0, hash);
}

std::string role_key(std::string_view path, std::string_view name, uint32_t ordinal) {
  std::string k;
  k.reserve(path.size() + name.size() + 16);
  k.append(path).append(" :: ").append(name).append(" #").append(std::to_string(ordinal));
  return k;
}

std::vector<std::string_view> path_elements(std::string_view path) {
  std::vector<std::string_view> out;
  size_t from = 0;
  while (from <= path.size()) {
    const size_t slash = path.find('/', from);
    const size_t to = slash == std::string_view::npos ? path.size() : slash;
    out.push_back(path.substr(from, to - from));
    if (slash == std::string_view::npos) break;
    from = slash + 1;
  }
  return out;
}

std::string KernelRoles::key(uint32_t role) const {
  return role_key(path(role), name(role), roles[role].ordinal);
}

namespace {

// Range names without instance numbers, interned into the roles' table once per trace name.
class RangeNames {
 public:
  RangeNames(const Trace& t, StringTable& out) : t_(t), out_(out), ids_(t.strings.size(), kNoId) {}
  uint32_t operator()(StrId name) {
    uint32_t& id = ids_[name];
    if (id == kNoId) id = out_.intern(strip_instance_number(t_.str(name)));
    return id;
  }

 private:
  const Trace& t_;
  StringTable& out_;
  std::vector<uint32_t> ids_;
};

// Role paths: the path of a range is its parent's path + "/" + its name, interned once per
// (parent path, name) pair.
class PathTable {
 public:
  explicit PathTable(StringTable& s) : s_(s) {}
  uint32_t child(uint32_t parent_path, uint32_t name) {
    const uint64_t key = (uint64_t(parent_path) << 32) | name;
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const uint32_t id = parent_path == kNoId ? name : s_.intern(s_.str(parent_path) + "/" + s_.str(name));
    cache_.emplace(key, id);
    return id;
  }

 private:
  StringTable& s_;
  std::unordered_map<uint64_t, uint32_t> cache_;
};

bool is_push_pop(const NvtxRange& r) { return r.kind == NvtxKind::PushPop; }
uint64_t thread_key(uint32_t pid, uint32_t tid) { return (uint64_t(pid) << 32) | tid; }

// The step instances (ranges of the step name, or outermost ranges), in time order; fills
// `step_of_range` for them.
std::vector<StepInstance> find_steps(const Trace& t, const RoleOptions& o, RangeNames& names, StringTable& strings,
                                     std::vector<uint32_t>& step_of_range) {
  const uint32_t step_name = o.step_range.empty() ? kNoId : strings.intern(strip_instance_number(o.step_range));
  std::vector<StepInstance> steps;
  for (uint32_t i = 0; i < t.nvtx.size(); ++i) {  // sorted by start: time order
    const NvtxRange& r = t.nvtx[i];
    if (!is_push_pop(r)) continue;
    if (step_name == kNoId ? r.depth != 0 : names(r.name) != step_name) continue;
    step_of_range[i] = uint32_t(steps.size());
    steps.push_back({r.start, r.end, i, r.pid, r.tid});
  }
  return steps;
}

// Where each op was launched: the innermost range instance open around its launch (kNoId when
// none), by one stack sweep per thread over the thread's ranges and the launch times asked on
// it. Fills the path and step of every range the sweep opens.
struct Placement {
  std::vector<uint32_t> inst;           // per op: index into Trace::nvtx, or kNoId
  std::vector<uint32_t> range_path;     // per range: path id (kNoId until opened)
  std::vector<uint32_t> range_step;     // per range: step index
};

struct Query {
  Ns t;
  OpId op;
  bool by_queued;
};

void sweep_thread(const Trace& t, const std::vector<uint32_t>& ranges, std::vector<Query>& queries,
                  RangeNames& names, PathTable& paths, Placement& p) {
  std::stable_sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) { return a.t < b.t; });
  std::vector<uint32_t> stack;
  size_t next = 0;
  for (const Query& q : queries) {
    while (next < ranges.size() && t.nvtx[ranges[next]].start <= q.t) {
      const uint32_t r = ranges[next++];
      while (!stack.empty() && t.nvtx[stack.back()].end <= t.nvtx[r].start) stack.pop_back();
      const uint32_t parent = stack.empty() ? kNoId : stack.back();
      p.range_path[r] = paths.child(parent == kNoId ? kNoId : p.range_path[parent], names(t.nvtx[r].name));
      if (p.range_step[r] == kNoStep && parent != kNoId) p.range_step[r] = p.range_step[parent];
      stack.push_back(r);
    }
    while (!stack.empty() && t.nvtx[stack.back()].end <= q.t) stack.pop_back();
    const uint32_t inner = stack.empty() ? kNoId : stack.back();
    uint32_t& inst = p.inst[q.op];
    if (!q.by_queued) {
      inst = inner;
    } else if (inner != kNoId && (inst == kNoId || t.nvtx[inner].start > t.nvtx[inst].start)) {
      inst = inner;  // of all threads' innermost ranges, the most recently opened
    }
  }
}

Placement place_ops(const GpuOps& ops, RangeNames& names, PathTable& paths, std::vector<uint32_t> range_step) {
  const Trace& t = ops.trace();
  Placement p;
  p.inst.assign(ops.size(), kNoId);
  p.range_path.assign(t.nvtx.size(), kNoId);
  p.range_step = std::move(range_step);
  std::unordered_map<uint64_t, std::vector<uint32_t>> ranges;  // per thread, by start
  for (uint32_t i = 0; i < t.nvtx.size(); ++i)
    if (is_push_pop(t.nvtx[i])) ranges[thread_key(t.nvtx[i].pid, t.nvtx[i].tid)].push_back(i);
  std::unordered_map<uint64_t, std::vector<Query>> by_thread;
  std::unordered_map<uint32_t, std::vector<Query>> queued_by_pid;
  for (OpId op = 0; op < ops.size(); ++op) {
    const uint32_t a = ops.launch(op);
    if (a != kNoId) {
      const ApiCall& call = t.api_calls[a];
      if (ranges.count(thread_key(call.pid, call.tid))) by_thread[thread_key(call.pid, call.tid)].push_back({call.start, op, false});
    } else if (ops.launch_time(op) != kNoTime) {
      queued_by_pid[ops.pid(op)].push_back({ops.launch_time(op), op, true});
    }
  }
  for (auto& [key, list] : ranges) {
    std::vector<Query> queries = std::move(by_thread[key]);
    auto q = queued_by_pid.find(uint32_t(key >> 32));
    if (q != queued_by_pid.end()) queries.insert(queries.end(), q->second.begin(), q->second.end());
    sweep_thread(t, list, queries, names, paths, p);
  }
  return p;
}

// Per op: path id and name id (in the roles' table), then ordinals by one sort of the ops by
// (range instance, path, name, launch time, start), then role ids.
struct RoleKeyHash {
  size_t operator()(const Role& r) const {
    return std::hash<uint64_t>()((uint64_t(r.path) << 32) | r.name) ^ (size_t(r.ordinal) * 0x9E3779B97F4A7C15ull);
  }
};
struct RoleKeyEq {
  bool operator()(const Role& a, const Role& b) const {
    return a.path == b.path && a.name == b.name && a.ordinal == b.ordinal;
  }
};

std::vector<uint32_t> op_names(const GpuOps& ops, StringTable& strings) {
  const Trace& t = ops.trace();
  std::vector<uint32_t> by_trace_name(t.strings.size(), kNoId);
  std::vector<uint32_t> name(ops.size());
  for (OpId op = 0; op < ops.size(); ++op) {
    if (ops.kind(op) == OpKind::Kernel) {
      uint32_t& id = by_trace_name[t.kernels[op].name];
      if (id == kNoId) id = strings.intern(t.str(t.kernels[op].name));
      name[op] = id;
    } else {
      name[op] = strings.intern(ops.name(op));
    }
  }
  return name;
}

void assign_roles(const GpuOps& ops, const Placement& p, KernelRoles& out) {
  const size_t n = ops.size();
  const uint32_t no_range = out.strings.intern(kNoRangePath);
  const uint32_t no_launch = out.strings.intern(kNoLaunchPath);
  std::vector<uint32_t> name = op_names(ops, out.strings);
  std::vector<uint32_t> path(n);
  std::vector<Ns> launched(n);
  for (OpId op = 0; op < n; ++op) {
    launched[op] = ops.launch_time(op);
    const uint32_t inst = p.inst[op];
    path[op] = inst != kNoId ? p.range_path[inst] : launched[op] != kNoTime ? no_range : no_launch;
    if (inst != kNoId) (ops.launch(op) != kNoId ? out.placed_by_launch : out.placed_by_queued)++;
    else (launched[op] != kNoTime ? out.without_range : out.without_launch)++;
  }
  std::vector<OpId> order(n);
  std::iota(order.begin(), order.end(), OpId(0));
  std::sort(order.begin(), order.end(), [&](OpId a, OpId b) {
    if (p.inst[a] != p.inst[b]) return p.inst[a] < p.inst[b];
    if (path[a] != path[b]) return path[a] < path[b];
    if (name[a] != name[b]) return name[a] < name[b];
    if (launched[a] != launched[b]) return launched[a] < launched[b];
    if (ops.start(a) != ops.start(b)) return ops.start(a) < ops.start(b);
    return a < b;
  });
  std::unordered_map<Role, uint32_t, RoleKeyHash, RoleKeyEq> ids;
  out.ops.assign(n, OpRole{});
  uint32_t ordinal = 0;
  for (size_t i = 0; i < n; ++i) {
    const OpId op = order[i];
    const bool same_group = i > 0 && p.inst[order[i - 1]] == p.inst[op] && path[order[i - 1]] == path[op] &&
                            name[order[i - 1]] == name[op];
    // Outside every range there is no instance to count in: one role per name (ordinal 0).
    ordinal = same_group && p.inst[op] != kNoId ? ordinal + 1 : 0;
    const Role r{path[op], name[op], ordinal};
    auto [it, fresh] = ids.try_emplace(r, uint32_t(out.roles.size()));
    if (fresh) out.roles.push_back(r);
    out.ops[op].role = it->second;
    out.ops[op].step = p.inst[op] != kNoId ? p.range_step[p.inst[op]] : kNoStep;
  }
}

}  // namespace

KernelRoles compute_roles(const GpuOps& ops, const RoleOptions& opts) {
  const Trace& t = ops.trace();
  KernelRoles out;
  out.options = opts;
  RangeNames names(t, out.strings);
  PathTable paths(out.strings);
  std::vector<uint32_t> range_step(t.nvtx.size(), kNoStep);
  out.steps = find_steps(t, opts, names, out.strings, range_step);
  const Placement p = place_ops(ops, names, paths, std::move(range_step));
  assign_roles(ops, p, out);
  return out;
}

RoleMatch match_roles(const KernelRoles& a, const KernelRoles& b) {
  std::unordered_map<std::string, uint32_t> a_role;
  for (uint32_t r = 0; r < a.roles.size(); ++r) a_role.emplace(a.key(r), r);
  std::vector<uint32_t> b_to_a(b.roles.size(), kNoId);
  for (uint32_t r = 0; r < b.roles.size(); ++r) {
    auto it = a_role.find(b.key(r));
    if (it != a_role.end()) b_to_a[r] = it->second;
  }
  // Both sides sorted by (step, role in a's numbering, op id): occurrences pair up in order.
  auto sorted = [](size_t n, auto role_of, auto step_of) {
    std::vector<OpId> v(n);
    std::iota(v.begin(), v.end(), OpId(0));
    std::sort(v.begin(), v.end(), [&](OpId x, OpId y) {
      if (step_of(x) != step_of(y)) return step_of(x) < step_of(y);
      if (role_of(x) != role_of(y)) return role_of(x) < role_of(y);
      return x < y;
    });
    return v;
  };
  const std::vector<OpId> va = sorted(a.ops.size(), [&](OpId o) { return a.ops[o].role; }, [&](OpId o) { return a.ops[o].step; });
  const std::vector<OpId> vb = sorted(b.ops.size(), [&](OpId o) { return b_to_a[b.ops[o].role]; }, [&](OpId o) { return b.ops[o].step; });
  RoleMatch m;
  size_t i = 0, j = 0;
  auto key_a = [&](OpId o) { return std::make_pair(a.ops[o].step, a.ops[o].role); };
  auto key_b = [&](OpId o) { return std::make_pair(b.ops[o].step, b_to_a[b.ops[o].role]); };
  while (i < va.size() || j < vb.size()) {
    if (j < vb.size() && b_to_a[b.ops[vb[j]].role] == kNoId) {
      m.only_b.push_back(vb[j++]);
    } else if (j == vb.size() || (i < va.size() && key_a(va[i]) < key_b(vb[j]))) {
      m.only_a.push_back(va[i++]);
    } else if (i == va.size() || key_b(vb[j]) < key_a(va[i])) {
      m.only_b.push_back(vb[j++]);
    } else {
      m.pairs.push_back({va[i++], vb[j++]});
    }
  }
  std::sort(m.pairs.begin(), m.pairs.end());
  std::sort(m.only_a.begin(), m.only_a.end());
  std::sort(m.only_b.begin(), m.only_b.end());
  return m;
}

}  // namespace sl::prof
