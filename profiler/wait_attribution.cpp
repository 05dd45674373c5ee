#include "profiler/wait_attribution.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "profiler/api_calls.h"

namespace sl::prof {

const char* to_string(RestKind k) {
  switch (k) {
    case RestKind::LaunchGap: return "launch_gap";
    case RestKind::Unrelated: return "unrelated";
    case RestKind::InGraph: return "in_graph";
  }
  return "?";
}

const char* to_string(WaitCause c) {
  switch (c) {
    case WaitCause::Host: return "host";
    case WaitCause::OwnStream: return "own_stream";
    case WaitCause::Event: return "event";
    case WaitCause::Unrelated: return "unrelated";
    case WaitCause::GraphEdge: return "graph_edge";
  }
  return "?";
}

void WaitTotals::add(const OpWait& w, bool graph) {
  if (w.flags & kWaitStartedEarly) started_before_launch_end++;
  if (w.flags & kWaitNoLaunch) without_launch++;
  if (!(w.flags & kWaitAttributed)) return;
  kernels++;
  if (graph) graph_kernels++;
  if (w.flags & kWaitInferredEvent) inferred_event_waits++;
  launch_to_start += w.launch_to_start();
  own_stream += w.own_stream;
  event += w.event;
  unrelated += w.part(RestKind::Unrelated);
  launch_gap += w.part(RestKind::LaunchGap);
  in_graph += w.part(RestKind::InGraph);
}

namespace {

// Per op: the op of its stream, among those that started before it, that ended last.
std::vector<OpId> own_stream_predecessors(const GpuOps& ops) {
  std::vector<OpId> pred(ops.size(), kNoOp);
  for (uint32_t s = 0; s < ops.streams(); ++s) {
    OpId latest = kNoOp;
    for (OpId op : ops.stream_ops(s)) {
      pred[op] = latest;
      if (latest == kNoOp || ops.end(op) > ops.end(latest)) latest = op;
    }
  }
  return pred;
}

// Each stream's ops in launch (program) order: by correlation id, then start.
class LaunchOrder {
 public:
  explicit LaunchOrder(const GpuOps& ops) : ops_(ops), order_(ops.streams()), place_(ops.size()) {
    for (uint32_t s = 0; s < ops.streams(); ++s) {
      order_[s] = ops.stream_ops(s);
      std::stable_sort(order_[s].begin(), order_[s].end(),
                       [&](OpId a, OpId b) { return ops.correlation(a) < ops.correlation(b); });
      for (uint32_t i = 0; i < order_[s].size(); ++i) place_[order_[s][i]] = i;
    }
  }
  // The first op launched on stream s after the call with correlation `corr`, or kNoOp.
  OpId first_after(uint32_t s, uint32_t corr) const {
    const auto& v = order_[s];
    auto it = std::upper_bound(v.begin(), v.end(), corr, [&](uint32_t c, OpId op) { return c < ops_.correlation(op); });
    return it == v.end() ? kNoOp : *it;
  }
  // The last op launched on stream s before the call with correlation `corr` (of several sharing
  // one launch, a graph's, the one that ended last), or kNoOp.
  OpId last_before(uint32_t s, uint32_t corr) const {
    const auto& v = order_[s];
    auto it = std::lower_bound(v.begin(), v.end(), corr, [&](OpId op, uint32_t c) { return ops_.correlation(op) < c; });
    if (it == v.begin()) return kNoOp;
    const uint32_t launch = ops_.correlation(*(it - 1));
    OpId best = kNoOp;
    for (auto j = it; j != v.begin() && ops_.correlation(*(j - 1)) == launch;) {
      --j;
      if (best == kNoOp || ops_.end(*j) > ops_.end(best)) best = *j;
    }
    return best;
  }
  // The op launched on op's stream just before it, or kNoOp.
  OpId previous(OpId op) const {
    const uint32_t i = place_[op];
    return i == 0 ? kNoOp : order_[ops_.stream_index(op)][i - 1];
  }

 private:
  const GpuOps& ops_;
  std::vector<std::vector<OpId>> order_;
  std::vector<uint32_t> place_;  // per op: position in its stream's launch order
};

// The event waits that apply to ops: per op the producer that ended last, and every stream
// an op's waits link it to (for telling event waits from false dependencies).
struct EventLinks {
  std::vector<OpId> producer;                       // per op
  std::vector<std::pair<OpId, uint32_t>> streams;   // (waiting op, recording stream index), sorted
  bool linked(OpId op, uint32_t stream_index) const {
    return std::binary_search(streams.begin(), streams.end(), std::make_pair(op, stream_index));
  }
};

// Source (b): the latest record of an event made before a wait, by (pid, event).
class EventRecords {
 public:
  explicit EventRecords(const Trace& t) {
    for (const auto& e : t.cuda_events) by_event_[(uint64_t(e.pid) << 32) | e.event].push_back(&e);
    for (auto& [_, v] : by_event_)
      std::sort(v.begin(), v.end(), [](auto a, auto b) { return a->correlation < b->correlation; });
  }
  const CudaEventRecord* latest_before(uint32_t pid, uint32_t event, uint32_t corr) const {
    auto it = by_event_.find((uint64_t(pid) << 32) | event);
    if (it == by_event_.end()) return nullptr;
    const auto& v = it->second;
    if (corr == 0) return v.back();
    auto j = std::lower_bound(v.begin(), v.end(), corr, [](auto r, uint32_t c) { return r->correlation < c; });
    return j == v.begin() ? nullptr : *(j - 1);
  }

 private:
  std::unordered_map<uint64_t, std::vector<const CudaEventRecord*>> by_event_;
};

EventLinks resolve_event_waits(const GpuOps& ops, const LaunchOrder& order, EventWaitSources& src) {
  const Trace& t = ops.trace();
  EventLinks links;
  links.producer.assign(ops.size(), kNoOp);
  const EventRecords records(t);
  for (const Sync& s : t.syncs) {
    if (s.type != SyncType::StreamWaitEvent || s.stream == kNoStream) continue;
    src.waits++;
    uint32_t rec_stream = kNoStream, rec_corr = 0;
    if (s.event_stream != kNoStream) {  // (a); without the record call, the wait call bounds it
      rec_stream = s.event_stream;
      rec_corr = s.event_record_correlation ? s.event_record_correlation : s.correlation;
      src.from_sync_fields++;
    } else if (const CudaEventRecord* r = s.event == kNoId ? nullptr : records.latest_before(s.pid, s.event, s.correlation)) {
      rec_stream = r->stream;  // (b)
      rec_corr = r->correlation;
      src.from_event_records++;
    } else {
      src.unresolved++;
      continue;
    }
    const uint32_t waiting = ops.find_stream(s.pid, s.stream);
    const OpId target = waiting == kNoId ? kNoOp : order.first_after(waiting, s.correlation);
    if (target == kNoOp) {
      src.not_applied++;
      continue;
    }
    const uint32_t recording = ops.find_stream(s.pid, rec_stream);
    const OpId producer = recording == kNoId ? kNoOp : order.last_before(recording, rec_corr);
    if (producer == kNoOp) src.no_producer++;
    if (recording != kNoId) links.streams.push_back({target, recording});
    OpId& p = links.producer[target];
    if (producer != kNoOp && (p == kNoOp || ops.end(producer) > ops.end(p))) p = producer;
  }
  std::sort(links.streams.begin(), links.streams.end());
  return links;
}

// Source (c)'s evidence: cudaStreamWaitEvent calls per thread, by start.
class WaitCalls {
 public:
  explicit WaitCalls(const Trace& t) {
    std::vector<int8_t> is_wait(t.strings.size(), -1);
    for (const ApiCall& a : t.api_calls) {
      int8_t& w = is_wait[a.name];
      if (w < 0) w = api_role(t.str(a.name)) == ApiRole::StreamWaitEvent ? 1 : 0;
      if (w == 1) by_thread_[(uint64_t(a.pid) << 32) | a.tid].push_back(a.start), count_++;
    }
  }
  // True when the thread made a wait call starting in (from, to); from == kNoTime: any before `to`.
  bool between(uint32_t pid, uint32_t tid, Ns from, Ns to) const {
    auto it = by_thread_.find((uint64_t(pid) << 32) | tid);
    if (it == by_thread_.end()) return false;
    auto j = std::upper_bound(it->second.begin(), it->second.end(), from);
    return j != it->second.end() && *j < to;
  }
  uint64_t count() const { return count_; }

 private:
  std::unordered_map<uint64_t, std::vector<Ns>> by_thread_;  // api_calls are sorted by start
  uint64_t count_ = 0;
};

// Kernels by end time, for "which kernel of another stream ended just before this one started".
class KernelEnds {
 public:
  explicit KernelEnds(const GpuOps& ops) : ops_(ops) {
    for (OpId op = 0; op < ops.size() && ops.kind(op) == OpKind::Kernel; ++op) by_end_.push_back(op);
    std::sort(by_end_.begin(), by_end_.end(), [&](OpId a, OpId b) { return ops.end(a) < ops.end(b); });
  }
  // The kernel that ended last in [start - epsilon, start] on another stream, not of the same
  // launch, and not on a stream the op's waits link it to; kNoOp when none.
  OpId blocker(OpId op, Ns epsilon, const EventLinks& links) const {
    const Ns start = ops_.start(op);
    auto it = std::upper_bound(by_end_.begin(), by_end_.end(), start, [&](Ns s, OpId k) { return s < ops_.end(k); });
    while (it != by_end_.begin()) {
      const OpId k = *--it;
      if (ops_.end(k) < start - epsilon) break;
      if (ops_.stream_index(k) == ops_.stream_index(op)) continue;
      if (ops_.correlation(k) != 0 && ops_.correlation(k) == ops_.correlation(op) && ops_.pid(k) == ops_.pid(op)) continue;
      if (links.linked(op, ops_.stream_index(k))) continue;
      return k;
    }
    return kNoOp;
  }

 private:
  const GpuOps& ops_;
  std::vector<OpId> by_end_;
};

// The nodes of each graph launch (pid, correlation) by end, for the node of the same launch
// that ended last before another started.
class GraphNodes {
 public:
  explicit GraphNodes(const GpuOps& ops) : ops_(ops) {
    for (OpId op = 0; op < ops.size(); ++op)
      if (ops.in_graph(op)) nodes_.push_back(op);
    std::sort(nodes_.begin(), nodes_.end(), [&](OpId a, OpId b) { return key(a) < key(b); });
  }
  OpId latest_before(OpId op) const {
    const auto k = std::make_tuple(ops_.pid(op), ops_.correlation(op), ops_.start(op));
    auto it = std::upper_bound(nodes_.begin(), nodes_.end(), k, [&](const auto& x, OpId n) { return x < key(n); });
    while (it != nodes_.begin()) {
      const OpId n = *--it;
      if (ops_.pid(n) != ops_.pid(op) || ops_.correlation(n) != ops_.correlation(op)) break;
      if (n != op) return n;
    }
    return kNoOp;
  }

 private:
  std::tuple<uint32_t, uint32_t, Ns> key(OpId op) const { return {ops_.pid(op), ops_.correlation(op), ops_.end(op)}; }
  const GpuOps& ops_;
  std::vector<OpId> nodes_;
};

// Everything attribute_one needs, built once.
struct WaitContext {
  const GpuOps& ops;
  const WaitOptions& opts;
  const std::vector<OpId>& pred;
  const LaunchOrder& order;
  const EventLinks& links;
  const WaitCalls& wait_calls;
  const KernelEnds& ends;
  const GraphNodes& graph;
  bool infer_from_api;
};

// The rest of a non-graph op: unrelated when another stream's kernel ended just before and no
// event links them; with source (c), an inferred event wait when a wait call came in between.
void classify_rest(const WaitContext& c, OpId op, Ns start, OpWait& w) {
  if (w.rest <= c.opts.epsilon) return;
  const OpId b = c.ends.blocker(op, c.opts.epsilon, c.links);
  if (b == kNoOp) return;
  if (c.infer_from_api) {
    const ApiCall& call = c.ops.trace().api_calls[c.ops.launch(op)];
    const OpId prev = c.order.previous(op);
    const Ns from = prev != kNoOp && c.ops.launch(prev) != kNoId ? c.ops.trace().api_calls[c.ops.launch(prev)].start : kNoTime;
    if (c.wait_calls.between(call.pid, call.tid, from, call.start)) {
      const Ns ready = std::max(c.ops.end(b), start - w.rest);
      w.event += ready - (start - w.rest);
      w.rest = start - ready;
      w.cause = WaitCause::Event;
      w.bound_by = b;
      w.flags |= kWaitInferredEvent;
      return;
    }
  }
  w.rest_kind = RestKind::Unrelated;
  w.cause = WaitCause::Unrelated;
  w.bound_by = b;
}

OpWait attribute_one(const WaitContext& c, OpId op) {
  OpWait w;
  const uint32_t a = c.ops.launch(op);
  if (a == kNoId) {
    w.flags = kWaitNoLaunch;
    return w;
  }
  const Ns launch_end = c.ops.trace().api_calls[a].end, start = c.ops.start(op);
  if (start < launch_end) {
    w.flags = kWaitStartedEarly;
    return w;
  }
  w.flags = kWaitAttributed;
  const OpId pred = c.pred[op], prod = c.links.producer[op];
  const Ns t1 = pred == kNoOp ? launch_end : std::clamp(c.ops.end(pred), launch_end, start);
  const Ns t2 = prod == kNoOp ? t1 : std::clamp(c.ops.end(prod), t1, start);
  w.own_stream = t1 - launch_end;
  w.event = t2 - t1;
  w.rest = start - t2;
  if (w.event > 0) w.cause = WaitCause::Event, w.bound_by = prod;
  else if (w.own_stream > 0) w.cause = WaitCause::OwnStream, w.bound_by = pred;
  if (c.ops.in_graph(op)) {
    w.rest_kind = RestKind::InGraph;
    const OpId edge = w.rest > 0 ? c.graph.latest_before(op) : kNoOp;
    if (edge != kNoOp && c.ops.end(edge) > t2) w.cause = WaitCause::GraphEdge, w.bound_by = edge;
    return w;
  }
  classify_rest(c, op, start, w);
  return w;
}

void sum_totals(const GpuOps& ops, WaitAttribution& r) {
  r.streams.resize(ops.streams());
  for (uint32_t s = 0; s < ops.streams(); ++s) {
    r.streams[s].pid = ops.stream_pid(s);
    r.streams[s].stream = ops.stream_id(s);
    r.streams[s].label = ops.trace().stream_label(ops.stream_id(s));
  }
  for (OpId op = 0; op < ops.size() && ops.kind(op) == OpKind::Kernel; ++op) {
    r.total.add(r.ops[op], ops.in_graph(op));
    r.streams[ops.stream_index(op)].totals.add(r.ops[op], ops.in_graph(op));
  }
  std::sort(r.streams.begin(), r.streams.end(), [](const StreamWaitTotals& a, const StreamWaitTotals& b) {
    return std::make_pair(a.pid, a.stream) < std::make_pair(b.pid, b.stream);
  });
}

}  // namespace

WaitAttribution attribute_waits(const GpuOps& ops, const WaitOptions& opts) {
  WaitAttribution r;
  r.options = opts;
  const std::vector<OpId> pred = own_stream_predecessors(ops);
  const LaunchOrder order(ops);
  const EventLinks links = resolve_event_waits(ops, order, r.sources);
  const WaitCalls wait_calls(ops.trace());
  r.sources.api_wait_calls = wait_calls.count();
  r.sources.inferred_from_api = r.sources.waits == 0 && wait_calls.count() > 0;
  const KernelEnds ends(ops);
  const GraphNodes graph(ops);
  const WaitContext c{ops, opts, pred, order, links, wait_calls, ends, graph, r.sources.inferred_from_api};
  r.ops.resize(ops.size());
  for (OpId op = 0; op < ops.size(); ++op) r.ops[op] = attribute_one(c, op);
  sum_totals(ops, r);
  return r;
}

}  // namespace sl::prof
