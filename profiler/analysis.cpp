#include "profiler/analysis.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "profiler/trace_index.h"

namespace sl::prof {

namespace {

inline Ns eff_end(Ns start, Ns end) { return end < start ? start : end; }

// Dense index for stream ids (CUPTI stream ids are small integers; fall back to a hash map).
class StreamIndex {
 public:
  explicit StreamIndex(const Trace& t) {
    uint32_t max_id = 0;
    for (const auto& s : t.streams)
      if (s.id != kNoStream) max_id = std::max(max_id, s.id);
    dense_ok_ = max_id < (1u << 22);
    if (dense_ok_) table_.assign(size_t(max_id) + 1, -1);
    for (const auto& s : t.streams) add(s.id);
  }
  int add(uint32_t id) {
    int f = find(id);
    if (f >= 0) return f;
    int d = static_cast<int>(ids_.size());
    ids_.push_back(id);
    if (dense_ok_ && id < table_.size())
      table_[id] = d;
    else
      map_[id] = d;
    return d;
  }
  int find(uint32_t id) const {
    if (dense_ok_ && id < table_.size()) return table_[id];
    auto it = map_.find(id);
    return it == map_.end() ? -1 : it->second;
  }
  // Streams are declared by Trace::finalize for every op; unknown ids still get an index.
  int operator()(uint32_t id) {
    int f = find(id);
    return f >= 0 ? f : add(id);
  }
  size_t size() const { return ids_.size(); }
  uint32_t id(int d) const { return ids_[d]; }

 private:
  bool dense_ok_ = true;
  std::vector<int> table_;
  std::unordered_map<uint32_t, int> map_;
  std::vector<uint32_t> ids_;
};

DurationStats stats_of(std::vector<Ns>& v) {
  DurationStats s;
  s.count = v.size();
  if (v.empty()) return s;
  s.min = v[0];
  s.max = v[0];
  long double sum = 0;
  for (Ns x : v) {
    s.total += x;
    sum += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean = double(sum / v.size());
  auto quant = [&](double q) -> double {
    // Nearest-rank on the sorted order; median of an even count = mean of the two middle values.
    size_t n = v.size();
    if (q == 0.5) {
      size_t hi = n / 2;
      std::nth_element(v.begin(), v.begin() + hi, v.end());
      double a = double(v[hi]);
      if (n % 2 == 1) return a;
      Ns lo = *std::max_element(v.begin(), v.begin() + hi);
      return (a + double(lo)) / 2.0;
    }
    size_t k = std::min(n, std::max<size_t>(1, size_t(std::ceil(q * double(n))))) - 1;
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return double(v[k]);
  };
  s.median = quant(0.5);
  s.p90 = quant(0.9);
  s.p99 = quant(0.99);
  return s;
}

// Edges "stream S waited (cudaStreamWaitEvent) on an event last recorded on stream T", keyed by
// (S, T), holding the correlation ids of the waits (program order).
class WaitEdges {
 public:
  explicit WaitEdges(const Trace& t) {
    if (t.syncs.empty() || t.cuda_events.empty()) return;
    // Event records in program order (correlation id).
    std::vector<const CudaEventRecord*> recs;
    recs.reserve(t.cuda_events.size());
    for (const auto& e : t.cuda_events) recs.push_back(&e);
    std::sort(recs.begin(), recs.end(), [](auto a, auto b) { return a->correlation < b->correlation; });
    std::unordered_map<uint64_t, std::vector<const CudaEventRecord*>> by_event;
    for (auto r : recs) by_event[(uint64_t(r->pid) << 32) | r->event].push_back(r);
    for (const auto& s : t.syncs) {
      if (s.type != SyncType::StreamWaitEvent || s.stream == kNoStream) continue;
      auto it = by_event.find((uint64_t(s.pid) << 32) | s.event);
      if (it == by_event.end()) continue;
      const CudaEventRecord* src = nullptr;
      for (auto r : it->second) {
        if (r->correlation <= s.correlation || s.correlation == 0)
          src = r;
        else
          break;
      }
      if (!src) continue;
      edges_[(uint64_t(s.stream) << 32) | src->stream].push_back(s.correlation);
    }
    for (auto& [k, v] : edges_) std::sort(v.begin(), v.end());
  }
  // True when S waited on T with a wait issued in (after_corr, before_corr].
  bool linked(uint32_t s, uint32_t t, uint32_t after_corr, uint32_t before_corr) const {
    auto it = edges_.find((uint64_t(s) << 32) | t);
    if (it == edges_.end()) return false;
    auto lo = std::upper_bound(it->second.begin(), it->second.end(), after_corr);
    return lo != it->second.end() && *lo <= before_corr;
  }
  bool empty() const { return edges_.empty(); }

 private:
  std::unordered_map<uint64_t, std::vector<uint32_t>> edges_;
};

struct HeapEntry {
  Ns end;
  uint32_t idx;
  int sidx;
  Ns h_start;  // value of the main-busy integral when the kernel started (aux kernels)
  bool operator>(const HeapEntry& o) const { return end > o.end; }
};

struct StreamState {
  int active = 0;
  Ns run_start_t = 0;
  Ns run_start_o = 0;
  Ns busy = 0;
  Ns overlapped = 0;
  Ns last_end = kNoTime;       // max end of kernels started so far on this stream
  uint32_t last_corr = 0;      // correlation of the previous kernel launched on this stream
  Ns first_start = kNoTime;
  uint64_t kernels = 0;
  Ns kernel_time = 0;
  std::vector<Ns> queue_waits;
  std::vector<Ns> launch_delays;
  uint64_t false_deps = 0;
};

// Extras computed only for the whole-trace sweep.
struct WholeExtras {
  const LaunchIndex* launches = nullptr;
  const WaitEdges* edges = nullptr;
  std::vector<StreamState>* streams = nullptr;
  Ns epsilon = 0;
  size_t max_listed = 0;
  uint64_t false_deps = 0;
  uint64_t without_launch = 0;
  uint64_t graph_kernels = 0;
  std::vector<FalseDependency> listed;
};

// The sweep over kernel start/end points. `idx(i)` gives the i-th kernel (in start order).
template <class IndexFn>
ScopeMetrics sweep(const Trace& t, size_t n, IndexFn idx, uint32_t main_stream, StreamIndex& sidx,
                   WholeExtras* x) {
  ScopeMetrics m;
  m.concurrency.assign(1, 0);
  if (n == 0) return m;

  std::vector<HeapEntry> heap_store;
  heap_store.reserve(64);
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, std::greater<HeapEntry>> heap(std::greater<HeapEntry>(),
                                                                                         std::move(heap_store));
  struct Recent {
    Ns end;
    uint32_t idx;
    uint32_t stream;
  };
  std::deque<Recent> recent;

  std::vector<StreamState> local;  // per-stream run tracking when no whole-trace state is given
  std::vector<StreamState>& ss = x ? *x->streams : local;
  if (ss.size() < sidx.size()) ss.resize(sidx.size());

  Ns now = t.kernels[idx(0)].start;
  m.first_start = now;
  Ns O = 0;  // integral of [>= 2 kernels running]
  Ns SO = 0;  // integral of [kernels of >= 2 streams running]
  size_t streams_running = 0;
  Ns H = 0;  // integral of [>= 1 main-stream kernel running]
  int main_active = 0;
  size_t count = 0;
  size_t i = 0;

  auto advance = [&](Ns to) {
    Ns dt = to - now;
    if (dt <= 0) return;
    if (count >= m.concurrency.size()) m.concurrency.resize(count + 1, 0);
    m.concurrency[count] += dt;
    if (count >= 2) O += dt;
    if (streams_running >= 2) SO += dt;
    if (main_active > 0) H += dt;
    now = to;
  };

  while (i < n || !heap.empty()) {
    Ns next_start = i < n ? t.kernels[idx(i)].start : std::numeric_limits<Ns>::max();
    if (!heap.empty() && heap.top().end <= next_start) {
      HeapEntry e = heap.top();
      heap.pop();
      advance(e.end);
      --count;
      StreamState& st = ss[e.sidx];
      if (--st.active == 0) {
        --streams_running;
        st.busy += now - st.run_start_t;
        st.overlapped += O - st.run_start_o;
      }
      const Kernel& k = t.kernels[e.idx];
      if (k.stream == main_stream) {
        --main_active;
      } else {
        m.aux_hidden += H - e.h_start;
      }
      if (x) recent.push_back({e.end, e.idx, k.stream});
      continue;
    }
    // A kernel starts.
    uint32_t ki = idx(i++);
    const Kernel& k = t.kernels[ki];
    advance(k.start);
    Ns kend = eff_end(k.start, k.end);
    int sd = sidx(k.stream);
    if (size_t(sd) >= ss.size()) ss.resize(sd + 1);
    StreamState& st = ss[sd];
    m.kernels++;
    m.kernel_time += kend - k.start;
    m.last_end = (m.last_end == kNoTime) ? kend : std::max(m.last_end, kend);
    if (k.stream != main_stream) m.aux_time += kend - k.start;

    if (x) {
      st.kernels++;
      st.kernel_time += kend - k.start;
      if (st.first_start == kNoTime) st.first_start = k.start;
      if (k.graph_id != 0 || k.graph_node_id != 0) x->graph_kernels++;
      // Launch call, launch delay, queue wait.
      uint32_t ai = x->launches->find(k.pid, k.correlation);
      Ns ready = k.submitted;
      if (ai != kNoId) {
        const ApiCall& a = t.api_calls[ai];
        st.launch_delays.push_back(k.start - a.end);
        if (ready == kNoTime) ready = a.end;
      } else {
        x->without_launch++;
      }
      Ns prev_end = st.last_end;
      Ns base = std::max(ready, prev_end);  // kNoTime is the minimum value
      if (base != kNoTime) {
        Ns wait = std::max<Ns>(0, k.start - base);
        st.queue_waits.push_back(wait);
        bool graph = k.graph_id != 0 || k.graph_node_id != 0;
        if (wait > x->epsilon && !graph) {
          while (!recent.empty() && recent.front().end < k.start - x->epsilon) recent.pop_front();
          for (const auto& r : recent) {
            if (r.stream == k.stream || r.end > k.start) continue;
            const Kernel& b = t.kernels[r.idx];
            if (b.correlation == k.correlation && k.correlation != 0) continue;
            if (x->edges && x->edges->linked(k.stream, r.stream, st.last_corr, k.correlation)) continue;
            st.false_deps++;
            x->false_deps++;
            if (x->listed.size() < x->max_listed)
              x->listed.push_back({ki, r.idx, k.stream, r.stream, wait, k.start - r.end});
            break;
          }
        }
      }
      st.last_end = (st.last_end == kNoTime) ? kend : std::max(st.last_end, kend);
      st.last_corr = k.correlation;
    }

    if (st.active++ == 0) {
      ++streams_running;
      st.run_start_t = now;
      st.run_start_o = O;
    }
    if (k.stream == main_stream) ++main_active;
    heap.push({kend, ki, sd, H});
    ++count;
  }

  m.span = m.last_end - m.first_start;
  m.busy = m.span - m.concurrency[0];
  m.overlap = O;
  m.overlap_fraction = m.busy > 0 ? double(m.overlap) / double(m.busy) : 0.0;
  m.stream_overlap = SO;
  m.stream_overlap_fraction = m.busy > 0 ? double(m.stream_overlap) / double(m.busy) : 0.0;
  m.aux_hidden_fraction = m.aux_time > 0 ? double(m.aux_hidden) / double(m.aux_time) : 0.0;
  return m;
}

void add_scope(ScopeMetrics& acc, const ScopeMetrics& m) {
  if (m.kernels == 0) return;
  acc.first_start = (acc.first_start == kNoTime) ? m.first_start : std::min(acc.first_start, m.first_start);
  acc.last_end = (acc.last_end == kNoTime) ? m.last_end : std::max(acc.last_end, m.last_end);
  acc.span += m.span;
  acc.kernels += m.kernels;
  acc.kernel_time += m.kernel_time;
  acc.busy += m.busy;
  acc.overlap += m.overlap;
  acc.stream_overlap += m.stream_overlap;
  if (acc.concurrency.size() < m.concurrency.size()) acc.concurrency.resize(m.concurrency.size(), 0);
  for (size_t i = 0; i < m.concurrency.size(); ++i) acc.concurrency[i] += m.concurrency[i];
  acc.aux_time += m.aux_time;
  acc.aux_hidden += m.aux_hidden;
}

// Walks kernels, memcpys and memsets together in start order.
template <class F>
void for_each_gpu_op(const Trace& t, F&& f) {
  size_t a = 0, b = 0, c = 0;
  const size_t na = t.kernels.size(), nb = t.memcpys.size(), nc = t.memsets.size();
  constexpr Ns inf = std::numeric_limits<Ns>::max();
  while (a < na || b < nb || c < nc) {
    Ns sa = a < na ? t.kernels[a].start : inf;
    Ns sb = b < nb ? t.memcpys[b].start : inf;
    Ns sc = c < nc ? t.memsets[c].start : inf;
    if (sa <= sb && sa <= sc) {
      const auto& k = t.kernels[a++];
      f(0, k.start, eff_end(k.start, k.end), k.stream, k.pid, k.correlation, k.name);
    } else if (sb <= sc) {
      const auto& m = t.memcpys[b++];
      f(1, m.start, eff_end(m.start, m.end), m.stream, m.pid, m.correlation, StrId(0));
    } else {
      const auto& m = t.memsets[c++];
      f(2, m.start, eff_end(m.start, m.end), m.stream, m.pid, m.correlation, StrId(0));
    }
  }
}

}  // namespace

bool hta_is_comm_kernel(std::string_view name) {
  return name.rfind("nccl", 0) == 0 && name.find("Kernel", 4) != std::string_view::npos;
}

bool hta_is_compute_kernel(std::string_view name) {
  // HTA: NCCL_COMPUTE_KERNEL_RE = (^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync), applied with
  // re.match (anchored at the start): non-compute when the name starts with "nccl" and contains
  // "Kernel" after it, contains "Memcpy", starts with "Memset", or contains "Sync".
  if (hta_is_comm_kernel(name)) return false;
  if (name.find("Memcpy") != std::string_view::npos) return false;
  if (name.rfind("Memset", 0) == 0) return false;
  if (name.find("Sync") != std::string_view::npos) return false;
  return true;
}

namespace {

// The main stream: the one given (which must have run kernels), or the stream with the most
// kernel time (ties: the lower id); kNoStream for a trace without kernels.
uint32_t choose_main_stream(const Trace& t, const std::optional<uint32_t>& given) {
  std::unordered_map<uint32_t, Ns> ktime;
  for (const auto& k : t.kernels) ktime[k.stream] += eff_end(k.start, k.end) - k.start;
  if (given) {
    if (!ktime.count(*given)) {
      std::vector<uint32_t> ids;
      for (auto& [id, _] : ktime) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      std::string known;
      for (size_t i = 0; i < ids.size() && i < 20; ++i) known += (i ? ", " : "") + std::to_string(ids[i]);
      fail("--main-stream ", *given, ": no kernel ran on that stream; streams with kernels: ",
           known.empty() ? "(none)" : known);
    }
    return *given;
  }
  uint32_t main = kNoStream;  // none when no kernel ran
  Ns best = -1;
  for (auto& [id, tm] : ktime)
    if (tm > best || (tm == best && id < main)) {
      best = tm;
      main = id;
    }
  return main;
}

// The length of the union of intervals added in start order.
class IntervalUnion {
 public:
  void add(Ns s, Ns e) {
    if (end_ == kNoTime || s > end_) {
      if (end_ != kNoTime) total_ += end_ - start_;
      start_ = s;
      end_ = e;
    } else {
      end_ = std::max(end_, e);
    }
  }
  Ns total() const { return end_ == kNoTime ? total_ : total_ + (end_ - start_); }

 private:
  Ns start_ = 0, end_ = kNoTime, total_ = 0;
};

// The union of intervals added in start order, kept as disjoint intervals (for intersections).
class MergedIntervals {
 public:
  void add(Ns s, Ns e) {
    if (v_.empty() || s > v_.back().second)
      v_.emplace_back(s, e);
    else
      v_.back().second = std::max(v_.back().second, e);
  }
  Ns total() const {
    Ns n = 0;
    for (const auto& [s, e] : v_) n += e - s;
    return n;
  }
  // Length of the intersection of two unions: one merge-like walk over both.
  Ns intersection(const MergedIntervals& o) const {
    Ns n = 0;
    size_t i = 0, j = 0;
    while (i < v_.size() && j < o.v_.size()) {
      const Ns s = std::max(v_[i].first, o.v_[j].first), e = std::min(v_[i].second, o.v_[j].second);
      if (e > s) n += e - s;
      if (v_[i].second < o.v_[j].second) ++i;
      else ++j;
    }
    return n;
  }

 private:
  std::vector<std::pair<Ns, Ns>> v_;
};

struct GpuOpTally {
  TemporalBreakdown temporal;
  CommOverlap comm;
};

// One pass over every GPU op in start order: memcpy / memset counts and HTA's idle breakdown per
// stream (into `sm`, indexed like `sidx`, grown for streams seen only here), and HTA's temporal
// breakdown (idle / compute / non-compute time over the trace's GPU span) and its communication /
// computation overlap.
GpuOpTally tally_gpu_ops(const Trace& t, const LaunchIndex& launches, StreamIndex& sidx,
                                Ns kernel_wait_threshold, std::vector<StreamMetrics>& sm) {
  std::vector<Ns> prev_end(sm.size(), kNoTime);
  Ns first = kNoTime, last = kNoTime;
  IntervalUnion busy;
  MergedIntervals compute, comm;
  uint64_t comm_kernels = 0;
  // Per kernel name: HTA's class (-1 not yet known, 0 other, 1 computation, 2 communication).
  std::vector<int8_t> kind_cache(t.strings.size(), -1);
  for_each_gpu_op(t, [&](int kind, Ns s, Ns e, uint32_t stream, uint32_t pid, uint32_t corr, StrId name) {
    const int d = sidx(stream);
    if (size_t(d) >= sm.size()) {
      sm.resize(d + 1);
      sm[d].stream = stream;
      sm[d].label = t.stream_label(stream);
    }
    if (size_t(d) >= prev_end.size()) prev_end.resize(d + 1, kNoTime);
    if (kind == 1) sm[d].memcpys++;
    if (kind == 2) sm[d].memsets++;
    // HTA's idle breakdown: the gap before an op is host wait when its launch came after the
    // previous op ended, kernel wait when short, other otherwise. Ops of one stream may overlap
    // (under programmatic dependent launch a kernel starts while the one before it finishes): HTA
    // then adds the negative gap to kernel wait (and measures from the previous op's end even when
    // an earlier op still runs); here the gap is measured from the latest end so far and only a
    // positive one is idle, so no idle figure goes below 0. Without overlap the two agree.
    if (prev_end[d] != kNoTime && s > prev_end[d]) {
      const Ns gap = s - prev_end[d];
      const uint32_t ai = launches.find(pid, corr);
      if (ai != kNoId && t.api_calls[ai].start > prev_end[d])
        sm[d].idle_host_wait += gap;
      else if (gap < kernel_wait_threshold)
        sm[d].idle_kernel_wait += gap;
      else
        sm[d].idle_other += gap;
    }
    prev_end[d] = prev_end[d] == kNoTime ? e : std::max(prev_end[d], e);
    first = first == kNoTime ? s : first;
    last = last == kNoTime ? e : std::max(last, e);
    busy.add(s, e);
    if (kind == 0) {
      int8_t& c = kind_cache[name];
      if (c < 0) {
        // HTA's get_kernel_type: communication, then memory (^Memcpy, ^Memset, ^dma), then compute.
        const std::string& n = t.str(name);
        const bool memory = n.rfind("Memcpy", 0) == 0 || n.rfind("Memset", 0) == 0 || n.rfind("dma", 0) == 0;
        c = hta_is_comm_kernel(n) ? 2 : !memory && hta_is_compute_kernel(n) ? 1 : 0;
      }
      if (c == 1) compute.add(s, e);
      if (c == 2) comm.add(s, e), ++comm_kernels;
    }
  });
  GpuOpTally out;
  CommOverlap& co = out.comm;
  co.comm_kernels = comm_kernels;
  co.comm = comm.total();
  co.overlapped = comm.intersection(compute);
  co.fraction = co.comm > 0 ? double(co.overlapped) / double(co.comm) : 0.0;
  TemporalBreakdown& tb = out.temporal;
  if (first == kNoTime) return out;
  tb.span = last - first;
  tb.idle = tb.span - busy.total();
  tb.compute = compute.total();
  tb.non_compute = busy.total() - compute.total();
  if (tb.span > 0) {
    tb.idle_pct = 100.0 * double(tb.idle) / double(tb.span);
    tb.compute_pct = 100.0 * double(tb.compute) / double(tb.span);
    tb.non_compute_pct = 100.0 * double(tb.non_compute) / double(tb.span);
  }
  return out;
}

// The sweep's per-stream state into each stream's metrics, and the queue-wait and launch-delay
// statistics per stream and over all kernels (the samples are released as they are used: on
// big traces they are the largest allocation of the analysis).
void finish_stream_metrics(std::vector<StreamState>& ss, uint32_t main_stream, std::vector<StreamMetrics>& sm,
                           AnalysisResult& r) {
  std::vector<Ns> all_waits, all_delays;
  size_t nw = 0, nd = 0;
  for (const auto& st : ss) {
    nw += st.queue_waits.size();
    nd += st.launch_delays.size();
  }
  all_waits.reserve(nw);
  all_delays.reserve(nd);
  for (size_t d = 0; d < sm.size(); ++d) {
    if (d < ss.size()) {
      StreamState& st = ss[d];
      sm[d].kernels = st.kernels;
      sm[d].kernel_time = st.kernel_time;
      sm[d].busy = st.busy;
      sm[d].overlapped = st.overlapped;
      sm[d].overlap_fraction = st.busy > 0 ? double(st.overlapped) / double(st.busy) : 0.0;
      sm[d].first_start = st.first_start;
      sm[d].last_end = st.last_end;
      sm[d].suspected_false_deps = st.false_deps;
      all_waits.insert(all_waits.end(), st.queue_waits.begin(), st.queue_waits.end());
      all_delays.insert(all_delays.end(), st.launch_delays.begin(), st.launch_delays.end());
      sm[d].queue_wait = stats_of(st.queue_waits);
      sm[d].launch_delay = stats_of(st.launch_delays);
      std::vector<Ns>().swap(st.queue_waits);
      std::vector<Ns>().swap(st.launch_delays);
    }
    sm[d].is_main = sm[d].stream == main_stream;
  }
  r.queue_wait = stats_of(all_waits);
  r.launch_delay = stats_of(all_delays);
}

// Every stream's metrics, sorted by id; streams that exist but ran nothing are reported too (an
// empty aux stream is a finding).
std::vector<StreamMetrics> stream_metrics(const Trace& t, const LaunchIndex& launches, StreamIndex& sidx,
                                          std::vector<StreamState>& ss, const AnalysisOptions& opts,
                                          AnalysisResult& r) {
  std::vector<StreamMetrics> sm(sidx.size());
  for (size_t d = 0; d < sidx.size(); ++d) {
    sm[d].stream = sidx.id(int(d));
    sm[d].label = t.stream_label(sm[d].stream);
    if (const Stream* s = t.find_stream(sm[d].stream)) sm[d].priority = s->priority;
  }
  GpuOpTally tally = tally_gpu_ops(t, launches, sidx, opts.kernel_wait_threshold, sm);
  r.temporal = tally.temporal;
  r.comm = tally.comm;
  finish_stream_metrics(ss, r.main_stream, sm, r);
  std::sort(sm.begin(), sm.end(), [](const StreamMetrics& a, const StreamMetrics& b) { return a.stream < b.stream; });
  return sm;
}

// Each kernel's own time on its stream (KernelNameStats::own): end - max(start, the latest end of
// the kernels that started before it on the same stream of the same process), at least 0. One
// pass: a finalized trace holds its kernels in start order.
std::vector<Ns> own_times(const Trace& t) {
  std::unordered_map<uint64_t, Ns> latest;  // (pid, stream) -> the latest end so far
  std::vector<Ns> own(t.kernels.size(), 0);
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    const Ns end = eff_end(k.start, k.end);
    const auto [it, first] = latest.try_emplace(uint64_t(k.pid) << 32 | k.stream, end);
    const Ns from = first ? k.start : std::max(k.start, it->second);
    own[i] = end > from ? end - from : 0;
    it->second = std::max(it->second, end);
  }
  return own;
}

// Kernel durations by name (a counting sort of durations by name id), sorted by total time.
std::vector<KernelNameStats> kernel_stats_by_name(const Trace& t) {
  const size_t ns = t.strings.size();
  std::vector<uint32_t> off(ns + 1, 0);
  for (const auto& k : t.kernels) off[k.name + 1]++;
  for (size_t i = 0; i < ns; ++i) off[i + 1] += off[i];
  std::vector<Ns> durs(t.kernels.size()), owns(t.kernels.size());
  std::vector<uint32_t> pos(off.begin(), off.end() - 1);
  const std::vector<Ns> own = own_times(t);
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    owns[pos[k.name]] = own[i];
    durs[pos[k.name]++] = eff_end(k.start, k.end) - k.start;
  }
  std::vector<KernelNameStats> out;
  for (size_t name = 0; name < ns; ++name) {
    const uint32_t b = off[name], e = off[name + 1];
    if (b == e) continue;
    KernelNameStats s;
    s.name = t.str(StrId(name));
    s.count = e - b;
    s.min = durs[b];
    s.max = durs[b];
    for (uint32_t i = b; i < e; ++i) {
      s.total += durs[i];
      s.own += owns[i];
      s.min = std::min(s.min, durs[i]);
      s.max = std::max(s.max, durs[i]);
    }
    s.mean = double(s.total) / double(s.count);
    const size_t n = e - b, hi = n / 2;
    std::nth_element(durs.begin() + b, durs.begin() + b + hi, durs.begin() + e);
    double med = double(durs[b + hi]);
    if (n % 2 == 0) med = (med + double(*std::max_element(durs.begin() + b, durs.begin() + b + hi))) / 2.0;
    s.median = med;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const KernelNameStats& a, const KernelNameStats& b) {
    return a.total > b.total || (a.total == b.total && a.name < b.name);
  });
  return out;
}

// Push/pop NVTX ranges per (pid, tid), by start. Properly nested on a thread, so the innermost
// range containing time q is the last one starting at or before q that has not ended.
class ThreadRanges {
 public:
  explicit ThreadRanges(const Trace& t) : t_(t) {
    for (uint32_t i = 0; i < t.nvtx.size(); ++i)
      if (t.nvtx[i].kind == NvtxKind::PushPop) per_thread_[{t.nvtx[i].pid, t.nvtx[i].tid}].push_back(i);
    for (auto& [_, v] : per_thread_)
      std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) { return t.nvtx[a].start < t.nvtx[b].start; });
  }
  // The innermost range of thread (pid, tid) containing host time q, or kNoId.
  uint32_t innermost(uint32_t pid, uint32_t tid, Ns q) const {
    auto it = per_thread_.find({pid, tid});
    return it == per_thread_.end() ? kNoId : innermost_in(it->second, q);
  }
  // The most recently opened range of any thread of `pid` containing q, or kNoId.
  uint32_t innermost_any_thread(uint32_t pid, Ns q) const {
    uint32_t best = kNoId;
    for (auto it = per_thread_.lower_bound({pid, 0}); it != per_thread_.end() && it->first.first == pid; ++it) {
      const uint32_t c = innermost_in(it->second, q);
      if (c != kNoId && (best == kNoId || t_.nvtx[c].start > t_.nvtx[best].start)) best = c;
    }
    return best;
  }

 private:
  uint32_t innermost_in(const std::vector<uint32_t>& v, Ns q) const {
    auto ub = std::upper_bound(v.begin(), v.end(), q, [&](Ns x, uint32_t i) { return x < t_.nvtx[i].start; });
    for (auto j = ub; j != v.begin();) {
      --j;
      if (t_.nvtx[*j].end > q) return *j;
    }
    return kNoId;
  }
  const Trace& t_;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> per_thread_;
};

// Ops with the same name (from several NVTX domains) made one, sorted by total time.
std::vector<OpTimeStats> merge_ops_by_name(std::vector<OpTimeStats> ops) {
  std::sort(ops.begin(), ops.end(), [](const OpTimeStats& a, const OpTimeStats& b) { return a.name < b.name; });
  std::vector<OpTimeStats> merged;
  for (auto& o : ops) {
    if (!merged.empty() && merged.back().name == o.name) {
      merged.back().kernels += o.kernels;
      merged.back().total += o.total;
      merged.back().ranges += o.ranges;
      merged.back().host += o.host;
    } else {
      merged.push_back(std::move(o));
    }
  }
  std::sort(merged.begin(), merged.end(), [](const OpTimeStats& a, const OpTimeStats& b) {
    return a.total > b.total || (a.total == b.total && a.name < b.name);
  });
  return merged;
}

// Kernel time by operation: the innermost push/pop range around each kernel's launch call.
std::vector<OpTimeStats> kernel_time_by_op(const Trace& t, const LaunchIndex& launches) {
  const ThreadRanges ranges(t);
  constexpr int64_t kNoLaunch = -1, kNoRange = -2;
  std::map<int64_t, OpTimeStats> by;           // key: StrId of the range name, or kNo*
  std::map<int64_t, std::set<uint32_t>> seen;  // range instances per key
  for (const auto& k : t.kernels) {
    int64_t key = kNoLaunch;
    uint32_t inst = kNoId;
    const uint32_t ai = launches.find(k.pid, k.correlation);
    if (ai != kNoId) {
      key = kNoRange;
      const ApiCall& a = t.api_calls[ai];
      inst = ranges.innermost(a.pid, a.tid, a.start);
    } else if (k.queued != kNoTime) {
      // No runtime launch record (e.g. libraries such as cuBLAS launch through the driver API,
      // whose records are off by default): the queued latency timestamp is the host time of
      // the launch; the thread is unknown, so the most recently opened containing range of any
      // thread of the process is taken.
      key = kNoRange;
      inst = ranges.innermost_any_thread(k.pid, k.queued);
    }
    if (inst != kNoId) key = int64_t(t.nvtx[inst].name);
    OpTimeStats& o = by[key];
    o.kernels++;
    o.total += eff_end(k.start, k.end) - k.start;
    if (inst != kNoId) seen[key].insert(inst);
  }
  std::vector<OpTimeStats> ops;
  for (auto& [key, o] : by) {
    o.name = key == kNoLaunch ? "(no launch call)" : key == kNoRange ? "(no range)" : t.str(StrId(key));
    o.ranges = seen[key].size();
    for (uint32_t i : seen[key]) o.host += t.nvtx[i].end - t.nvtx[i].start;
    ops.push_back(std::move(o));
  }
  return merge_ops_by_name(std::move(ops));
}

// The NVTX ranges a --range name selects: "name", "domain:name", or "name*" (every range whose
// name starts with "name", e.g. PyTorch's "ProfilerStep#N"). None is an error listing the names
// the trace has.
std::vector<const NvtxRange*> ranges_named(const Trace& t, const std::string& want) {
  std::vector<const NvtxRange*> inst;
  const bool prefix = want.size() > 1 && want.back() == '*';
  const std::string stem = prefix ? want.substr(0, want.size() - 1) : want;
  for (const auto& n : t.nvtx) {
    if (n.kind == NvtxKind::Mark) continue;
    const std::string& nm = t.str(n.name);
    if (prefix ? nm.rfind(stem, 0) == 0 : nm == want) {
      inst.push_back(&n);
      continue;
    }
    if (n.domain != 0) {
      const std::string& dm = t.str(n.domain);
      if (want.size() == dm.size() + 1 + nm.size() && want.compare(0, dm.size(), dm) == 0 && want[dm.size()] == ':' &&
          want.compare(dm.size() + 1, nm.size(), nm) == 0)
        inst.push_back(&n);
    }
  }
  if (!inst.empty()) return inst;
  std::map<std::string, size_t> names;
  for (const auto& n : t.nvtx)
    if (n.kind != NvtxKind::Mark) names[t.str(n.name)]++;
  std::string known;
  size_t i = 0;
  for (auto& [nm, c] : names) {
    if (i++ >= 20) {
      known += ", ...";
      break;
    }
    known += (known.empty() ? "" : ", ") + ("\"" + nm + "\"");
  }
  fail("--range \"", want, "\": no NVTX range of that name in the trace; ranges present: ",
       known.empty() ? "(none: the trace holds no NVTX ranges)" : known);
}

// The kernels of each selected range: those that start inside it (same process), or with
// `by_launch`, those whose launch call starts inside it on the range's own thread.
class RangeMembers {
 public:
  RangeMembers(const Trace& t, const LaunchIndex& launches, bool by_launch)
      : t_(t), launches_(launches), by_launch_(by_launch) {
    if (!by_launch) return;
    by_launch_start_.reserve(t.kernels.size());
    for (uint32_t i = 0; i < t.kernels.size(); ++i) {
      const auto& k = t.kernels[i];
      const uint32_t ai = launches.find(k.pid, k.correlation);
      if (ai != kNoId) by_launch_start_.push_back({t.api_calls[ai].start, i});
    }
    std::sort(by_launch_start_.begin(), by_launch_start_.end());
  }
  // Kernel indices, ascending.
  void of(const NvtxRange& n, std::vector<uint32_t>& members) const {
    members.clear();
    if (by_launch_) {
      auto lo = std::lower_bound(by_launch_start_.begin(), by_launch_start_.end(), std::make_pair(n.start, uint32_t(0)));
      for (auto it = lo; it != by_launch_start_.end() && it->first < n.end; ++it) {
        const auto& k = t_.kernels[it->second];
        if (k.pid != n.pid) continue;
        const uint32_t ai = launches_.find(k.pid, k.correlation);
        if (ai != kNoId && t_.api_calls[ai].tid != n.tid) continue;
        members.push_back(it->second);
      }
      std::sort(members.begin(), members.end());
      return;
    }
    auto lo = std::lower_bound(t_.kernels.begin(), t_.kernels.end(), n.start,
                               [](const Kernel& k, Ns v) { return k.start < v; });
    for (auto it = lo; it != t_.kernels.end() && it->start < n.end; ++it)
      if (it->pid == n.pid) members.push_back(uint32_t(it - t_.kernels.begin()));
  }

 private:
  const Trace& t_;
  const LaunchIndex& launches_;
  bool by_launch_;
  std::vector<std::pair<Ns, uint32_t>> by_launch_start_;
};

// The metrics of each instance of the --range name, and their sum.
RangeSummary range_summary(const Trace& t, const AnalysisOptions& opts, const LaunchIndex& launches,
                           uint32_t main_stream, StreamIndex& sidx) {
  RangeSummary rs;
  rs.name = opts.range;
  rs.total.concurrency.assign(1, 0);
  const RangeMembers members_of(t, launches, opts.range_by_launch);
  std::vector<uint32_t> members;
  uint64_t index = 0;
  for (const NvtxRange* n : ranges_named(t, opts.range)) {
    members_of.of(*n, members);
    RangeInstance ri;
    ri.index = index++;
    ri.name = t.str(n->name);
    ri.start = n->start;
    ri.end = n->end;
    ri.pid = n->pid;
    ri.tid = n->tid;
    ri.depth = n->depth;
    ri.metrics = sweep(t, members.size(), [&](size_t i) { return members[i]; }, main_stream, sidx, nullptr);
    add_scope(rs.total, ri.metrics);
    rs.per_instance.push_back(std::move(ri));
  }
  rs.instances = rs.per_instance.size();
  auto& tot = rs.total;
  tot.overlap_fraction = tot.busy > 0 ? double(tot.overlap) / double(tot.busy) : 0.0;
  tot.stream_overlap_fraction = tot.busy > 0 ? double(tot.stream_overlap) / double(tot.busy) : 0.0;
  tot.aux_hidden_fraction = tot.aux_time > 0 ? double(tot.aux_hidden) / double(tot.aux_time) : 0.0;
  return rs;
}

// The trace's earliest timestamp (its vectors are sorted by start once finalized), or kNoTime.
Ns first_timestamp(const Trace& t) {
  Ns t0 = kNoTime;
  auto front = [&](Ns v) {
    if (v != kNoTime && (t0 == kNoTime || v < t0)) t0 = v;
  };
  if (!t.kernels.empty()) front(t.kernels.front().start);
  if (!t.memcpys.empty()) front(t.memcpys.front().start);
  if (!t.memsets.empty()) front(t.memsets.front().start);
  if (!t.api_calls.empty()) front(t.api_calls.front().start);
  if (!t.syncs.empty()) front(t.syncs.front().start);
  if (!t.nvtx.empty()) front(t.nvtx.front().start);
  if (!t.allocations.empty()) front(t.allocations.front().alloc);
  return t0;
}

// Streams created and destroyed, and how many were alive over time (a stream without a creation
// record existed before the trace began).
void stream_lifetimes(const Trace& t, ResourceSummary& rs) {
  std::vector<std::pair<Ns, int>> ev;  // (time, +1 / -1)
  uint32_t alive_at_start = 0;
  for (const auto& s : t.streams) {
    if (s.created != kNoTime) {
      rs.streams_created++;
      ev.push_back({s.created, +1});
    } else {
      alive_at_start++;
    }
    if (s.destroyed != kNoTime) {
      rs.streams_destroyed++;
      ev.push_back({s.destroyed, -1});
    }
  }
  std::sort(ev.begin(), ev.end(), [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && a.second < b.second); });
  int64_t alive = alive_at_start;
  rs.max_streams_alive = alive_at_start;
  const Ns t0 = first_timestamp(t);
  rs.streams_alive.push_back({t0 == kNoTime ? 0 : t0, uint32_t(alive)});
  for (auto& [tm, d] : ev) {
    alive = std::max<int64_t>(0, alive + d);
    rs.max_streams_alive = std::max<uint64_t>(rs.max_streams_alive, uint64_t(alive));
    if (rs.streams_alive.back().first == tm)
      rs.streams_alive.back().second = uint32_t(alive);
    else
      rs.streams_alive.push_back({tm, uint32_t(alive)});
  }
}

// Device memory allocated through the trace: counts, the peak and when, and what is left at the
// end. An allocation made before the trace began has no known size in it and is left out.
void allocation_peak(const Trace& t, ResourceSummary& rs) {
  std::vector<std::pair<Ns, int64_t>> mem;  // (time, +bytes / -bytes)
  for (const auto& a : t.allocations) {
    if (a.alloc == kNoTime) continue;
    rs.allocations++;
    mem.push_back({a.alloc, int64_t(a.bytes)});
    if (a.free != kNoTime) {
      rs.frees++;
      mem.push_back({a.free, -int64_t(a.bytes)});
    }
  }
  std::sort(mem.begin(), mem.end(), [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && a.second < b.second); });
  int64_t cur = 0;
  for (auto& [tm, d] : mem) {
    cur += d;
    if (cur > int64_t(rs.peak_allocated_bytes)) {
      rs.peak_allocated_bytes = uint64_t(cur);
      rs.peak_allocated_at = tm;
    }
  }
  rs.allocated_at_end = cur > 0 ? uint64_t(cur) : 0;
}

// What the trace used: streams, contexts, CUDA events, synchronisations, memory, CUPTI's own
// overhead and the API calls by kind.
ResourceSummary resource_summary(const Trace& t) {
  ResourceSummary rs;
  rs.streams = t.streams.size();
  rs.contexts = t.contexts.size();
  stream_lifetimes(t, rs);
  rs.cuda_event_records = t.cuda_events.size();
  std::vector<uint64_t> ids;
  ids.reserve(t.cuda_events.size());
  for (const auto& e : t.cuda_events) ids.push_back((uint64_t(e.pid) << 32) | e.event);
  std::sort(ids.begin(), ids.end());
  rs.distinct_cuda_events = uint64_t(std::unique(ids.begin(), ids.end()) - ids.begin());
  rs.syncs = t.syncs.size();
  for (const auto& s : t.syncs) {
    if (s.type == SyncType::StreamWaitEvent)
      rs.stream_waits++;
    else
      rs.host_syncs++;
  }
  allocation_peak(t, rs);
  for (const auto& o : t.overheads) rs.cupti_overhead += eff_end(o.start, o.end) - o.start;
  rs.api = count_api_calls(t);
  return rs;
}

}  // namespace

AnalysisResult analyze(const Trace& t, const AnalysisOptions& opts) {
  AnalysisResult r;
  r.options = opts;
  r.events = t.event_count();
  r.counts = t.counts;

  StreamIndex sidx(t);
  LaunchIndex launches(t);
  WaitEdges edges(t);
  r.main_stream = choose_main_stream(t, opts.main_stream);

  // The whole-trace sweep: overlap, per-stream state, queue waits, suspected false dependencies.
  std::vector<StreamState> ss(sidx.size());
  WholeExtras x;
  x.launches = &launches;
  x.edges = edges.empty() ? nullptr : &edges;
  x.streams = &ss;
  x.epsilon = opts.false_dep_epsilon;
  x.max_listed = opts.max_false_deps_listed;
  r.whole = sweep(t, t.kernels.size(), [](size_t i) { return uint32_t(i); }, r.main_stream, sidx, &x);
  r.suspected_false_deps = x.false_deps;
  r.false_deps = std::move(x.listed);
  r.kernels_without_launch = x.without_launch;
  r.graph_kernels = x.graph_kernels;

  if (ss.size() < sidx.size()) ss.resize(sidx.size());
  r.streams = stream_metrics(t, launches, sidx, ss, opts, r);
  r.kernel_stats = kernel_stats_by_name(t);
  if (opts.by_op) r.op_stats = kernel_time_by_op(t, launches);
  if (!opts.range.empty()) r.range = range_summary(t, opts, launches, r.main_stream, sidx);
  r.resources = resource_summary(t);
  return r;
}

}  // namespace sl::prof
