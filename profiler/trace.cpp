#include "profiler/trace.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "profiler/parallel.h"

namespace sl::prof {

// ---------------------------------------------------------------- StringTable

StringTable::StringTable() { intern(""); }

StringTable::StringTable(const StringTable& o) : strings_(o.strings_) {
  index_.reserve(strings_.size());
  for (size_t i = 0; i < strings_.size(); ++i) index_.emplace(std::string_view(strings_[i]), static_cast<StrId>(i));
}

StringTable& StringTable::operator=(const StringTable& o) {
  if (this != &o) {
    StringTable tmp(o);
    *this = std::move(tmp);
  }
  return *this;
}

StrId StringTable::intern(std::string_view s) {
  auto it = index_.find(s);
  if (it != index_.end()) return it->second;
  strings_.emplace_back(s);
  StrId id = static_cast<StrId>(strings_.size() - 1);
  index_.emplace(std::string_view(strings_.back()), id);
  return id;
}

StrId StringTable::find(std::string_view s) const {
  auto it = index_.find(s);
  return it == index_.end() ? kNoId : it->second;
}

size_t StringTable::bytes() const {
  size_t b = 0;
  for (const auto& s : strings_) b += s.capacity() + sizeof(std::string) + 32;
  return b;
}

// ---------------------------------------------------------------- names

const char* to_string(MemcpyKind k) {
  switch (k) {
    case MemcpyKind::HtoD: return "HtoD";
    case MemcpyKind::DtoH: return "DtoH";
    case MemcpyKind::HtoA: return "HtoA";
    case MemcpyKind::AtoH: return "AtoH";
    case MemcpyKind::AtoA: return "AtoA";
    case MemcpyKind::AtoD: return "AtoD";
    case MemcpyKind::DtoA: return "DtoA";
    case MemcpyKind::DtoD: return "DtoD";
    case MemcpyKind::HtoH: return "HtoH";
    case MemcpyKind::PtoP: return "PtoP";
    default: return "Unknown";
  }
}

const char* to_string(MemoryKind k) {
  switch (k) {
    case MemoryKind::Pageable: return "Pageable";
    case MemoryKind::Pinned: return "Pinned";
    case MemoryKind::Device: return "Device";
    case MemoryKind::Array: return "Array";
    case MemoryKind::Managed: return "Managed";
    case MemoryKind::DeviceStatic: return "Device Static";
    case MemoryKind::ManagedStatic: return "Managed Static";
    default: return "Unknown";
  }
}

const char* to_string(SyncType k) {
  switch (k) {
    case SyncType::EventSynchronize: return "Event Sync";
    case SyncType::StreamWaitEvent: return "Stream Wait Event";
    case SyncType::StreamSynchronize: return "Stream Sync";
    case SyncType::ContextSynchronize: return "Context Sync";
    default: return "Unknown";
  }
}

std::string memcpy_display_name(MemcpyKind kind, MemoryKind src, MemoryKind dst) {
  std::string s = "Memcpy ";
  s += to_string(kind);
  s += " (";
  s += to_string(src);
  s += " -> ";
  s += to_string(dst);
  s += ")";
  return s;
}

std::string memset_display_name(MemoryKind kind) { return std::string("Memset (") + to_string(kind) + ")"; }

std::string_view strip_api_version(std::string_view name) {
  // CUPTI names runtime callbacks "<function>_v<digits>".
  size_t p = name.rfind("_v");
  if (p == std::string_view::npos || p == 0 || p + 2 >= name.size()) return name;
  for (size_t i = p + 2; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return name;
  return name.substr(0, p);
}

void RecordCounts::reject(std::string_view what, uint64_t where, std::string_view value) {
  ++rejected_on_load;
  for (LoadIssue& i : load_issues)
    if (i.what == what) {
      ++i.records;
      return;
    }
  load_issues.push_back({std::string(what), 1, where, std::string(value)});
}

RecordCounts& RecordCounts::operator+=(const RecordCounts& o) {
  for (const RecordCountField& f : kRecordCountFields) this->*f.member += o.*f.member;
  for (const LoadIssue& oi : o.load_issues) {
    auto it = std::find_if(load_issues.begin(), load_issues.end(), [&](const LoadIssue& i) { return i.what == oi.what; });
    if (it == load_issues.end()) load_issues.push_back(oi);
    else it->records += oi.records;
  }
  return *this;
}

RecordCounts counts_with_rejections(RecordCounts given, const RecordCounts& loaded) {
  // Records with end < start or a zero timestamp stay in the trace: more of them in the file
  // than the recording counted means the file was altered since.
  given.end_before_start = std::max(given.end_before_start, loaded.end_before_start);
  given.zero_timestamps = std::max(given.zero_timestamps, loaded.zero_timestamps);
  RecordCounts rejected;
  rejected.rejected_on_load = loaded.rejected_on_load;
  rejected.load_issues = loaded.load_issues;
  return given += rejected;
}

uint64_t reject_repeated_correlations(Trace& t) {
  // CUPTI numbers correlation ids densely per process: one flag per (id, kind) when there is one
  // process and the ids are compact (a load of millions of calls stays in milliseconds), else
  // the keys sorted.
  uint32_t max_corr = 0, pid = t.api_calls.empty() ? 0 : t.api_calls[0].pid;
  bool one_pid = true;
  for (const ApiCall& a : t.api_calls) max_corr = std::max(max_corr, a.correlation), one_pid &= a.pid == pid;
  std::vector<size_t> repeated;  // indices of the calls that repeat an earlier (pid, id, kind)
  if (one_pid && max_corr <= 4 * t.api_calls.size() + 4096) {
    std::vector<uint8_t> seen(size_t(max_corr) + 1, 0);
    for (size_t i = 0; i < t.api_calls.size(); ++i) {
      const ApiCall& a = t.api_calls[i];
      const uint8_t bit = uint8_t(1u << (int(a.kind) & 1));
      if (a.correlation == 0) continue;  // no id: nothing links to it
      if (seen[a.correlation] & bit) repeated.push_back(i);
      seen[a.correlation] |= bit;
    }
  } else {
    std::vector<std::pair<uint64_t, size_t>> keys;  // ((pid, id) << 1 | kind, index)
    for (size_t i = 0; i < t.api_calls.size(); ++i) {
      const ApiCall& a = t.api_calls[i];
      if (a.correlation != 0)
        keys.push_back({((uint64_t(a.pid) << 32 | a.correlation) << 1) | (uint64_t(a.kind) & 1), i});
    }
    std::sort(keys.begin(), keys.end());
    for (size_t k = 1; k < keys.size(); ++k)
      if (keys[k].first == keys[k - 1].first) repeated.push_back(keys[k].second);
    std::sort(repeated.begin(), repeated.end());  // the first reported is the earliest
  }
  for (size_t i : repeated) {
    const ApiCall& a = t.api_calls[i];
    t.counts.reject("API call repeats the correlation id of an earlier call of its process (the GPU op's launch "
                    "call is ambiguous)",
                    kNoIndex,
                    "correlation " + std::to_string(a.correlation) + " of pid " + std::to_string(a.pid) + ", " +
                        t.str(a.name) + " at " + std::to_string(a.start) + " ns");
  }
  return repeated.size();
}

// ---------------------------------------------------------------- Trace

namespace {

// A stable sort by key, skipped when already sorted (the usual case: most sources write in time
// order).
template <class T, class KeyOf>
void sort_by(std::vector<T>& v, KeyOf key_of, unsigned threads) {
  auto less = [&](const T& a, const T& b) { return key_of(a) < key_of(b); };
  if (!parallel::is_sorted(v.data(), v.size(), less, threads)) parallel::stable_sort_by_key(v, key_of, threads);
}

// By start, the longer first on ties: (start, ~end) ascending (~ reverses the order of a signed
// integer without overflow).
struct StartKey {
  Ns start, not_end;
  bool operator<(const StartKey& o) const { return start < o.start || (start == o.start && not_end < o.not_end); }
};
template <class T>
void sort_by_start(std::vector<T>& v, unsigned threads) {
  sort_by(v, [](const T& e) { return StartKey{e.start, ~e.end}; }, threads);
}

}  // namespace

void Trace::finalize(unsigned threads) {
  // One vector after another, each on every thread: the vectors differ too much in size for one
  // thread per vector to balance.
  sort_by_start(kernels, threads);
  sort_by_start(memcpys, threads);
  sort_by_start(memsets, threads);
  sort_by_start(api_calls, threads);
  sort_by_start(syncs, threads);
  sort_by_start(nvtx, threads);
  sort_by_start(overheads, threads);
  sort_by(cuda_events, [](const CudaEventRecord& e) { return e.ts; }, threads);
  sort_by(allocations, [](const Allocation& a) { return a.alloc; }, threads);
  sort_by(counters, [](const CounterSample& c) { return c.ts; }, threads);

  // NVTX push/pop depth per (pid, tid, domain): ranges sorted by (start, longer first), so a
  // stack of open ends gives the depth.
  {
    std::unordered_map<uint64_t, std::vector<Ns>> stacks;
    for (auto& r : nvtx) {
      if (r.end_tid == 0) r.end_tid = r.tid;
      if (r.kind != NvtxKind::PushPop) continue;
      uint64_t key = (uint64_t(r.pid) << 32) ^ r.tid ^ (uint64_t(r.domain) << 48);
      auto& st = stacks[key];
      while (!st.empty() && st.back() <= r.start) st.pop_back();
      r.depth = static_cast<uint16_t>(std::min<size_t>(st.size(), 0xFFFF));
      st.push_back(r.end);
    }
  }

  // Declare streams / contexts / devices that events mention but no record declared.
  {
    std::unordered_set<uint32_t> known;
    for (const auto& s : streams) known.insert(s.id);
    uint32_t last = kNoStream;  // ops come in runs on one stream: skip the lookup for those
    auto add_stream = [&](uint32_t id, uint32_t ctx, uint32_t dev, uint32_t pid) {
      if (id == last) return;
      last = id;
      if (id == kNoStream || known.count(id)) return;
      known.insert(id);
      Stream s;
      s.id = id;
      s.context = ctx;
      s.device = dev;
      s.pid = pid;
      streams.push_back(s);
    };
    for (const auto& k : kernels) add_stream(k.stream, k.context, k.device, k.pid);
    for (const auto& m : memcpys) add_stream(m.stream, m.context, m.device, m.pid);
    for (const auto& m : memsets) add_stream(m.stream, m.context, m.device, m.pid);
    std::sort(streams.begin(), streams.end(), [](const Stream& a, const Stream& b) { return a.id < b.id; });

    std::set<uint32_t> ctx_known;
    for (const auto& c : contexts) ctx_known.insert(c.id);
    for (const auto& s : streams)
      if (!ctx_known.count(s.context)) {
        ctx_known.insert(s.context);
        Context c;
        c.id = s.context;
        c.device = s.device;
        c.pid = s.pid;
        contexts.push_back(c);
      }
    std::sort(contexts.begin(), contexts.end(), [](const Context& a, const Context& b) { return a.id < b.id; });

    std::set<uint32_t> dev_known;
    for (const auto& d : devices) dev_known.insert(d.id);
    for (const auto& c : contexts)
      if (!dev_known.count(c.device)) {
        dev_known.insert(c.device);
        Device d;
        d.id = c.device;
        d.name = "GPU " + std::to_string(c.device);
        devices.push_back(d);
      }
    std::sort(devices.begin(), devices.end(), [](const Device& a, const Device& b) { return a.id < b.id; });
  }

  if (base_time == kNoTime) {
    Ns t = first_time();
    base_time = (t == kNoTime) ? 0 : t;
  }
}

size_t Trace::event_count() const {
  return kernels.size() + memcpys.size() + memsets.size() + api_calls.size() + syncs.size() + cuda_events.size() +
         nvtx.size() + allocations.size() + counters.size() + overheads.size();
}

size_t Trace::bytes_held() const {
  return kernels.capacity() * sizeof(Kernel) + memcpys.capacity() * sizeof(Memcpy) +
         memsets.capacity() * sizeof(Memset) + api_calls.capacity() * sizeof(ApiCall) +
         syncs.capacity() * sizeof(Sync) + cuda_events.capacity() * sizeof(CudaEventRecord) +
         nvtx.capacity() * sizeof(NvtxRange) + allocations.capacity() * sizeof(Allocation) +
         counters.capacity() * sizeof(CounterSample) + overheads.capacity() * sizeof(Overhead) +
         streams.capacity() * sizeof(Stream) + strings.bytes();
}

namespace {
// The earliest start (latest = false) or the latest end (latest = true) over every timed event.
Ns extreme_time(const Trace& tr, bool latest) {
  Ns t = kNoTime;
  auto upd = [&](Ns v) {
    if (v != kNoTime && (t == kNoTime || (latest ? v > t : v < t))) t = v;
  };
  auto scan = [&](const auto& vec) {
    for (const auto& e : vec) upd(latest ? e.end : e.start);
  };
  scan(tr.kernels);
  scan(tr.memcpys);
  scan(tr.memsets);
  scan(tr.api_calls);
  scan(tr.syncs);
  scan(tr.nvtx);
  scan(tr.overheads);
  for (const auto& e : tr.cuda_events) upd(e.ts);
  for (const auto& a : tr.allocations) {
    upd(a.alloc);
    if (latest) upd(a.free);
  }
  for (const auto& c : tr.counters) upd(c.ts);
  return t;
}
}  // namespace

Ns Trace::first_time() const { return extreme_time(*this, false); }
Ns Trace::last_time() const { return extreme_time(*this, true); }

const Stream* Trace::find_stream(uint32_t id) const {
  for (const auto& s : streams)
    if (s.id == id) return &s;
  return nullptr;
}

Stream* Trace::find_stream(uint32_t id) {
  for (auto& s : streams)
    if (s.id == id) return &s;
  return nullptr;
}

const Device* Trace::find_device(uint32_t id) const {
  for (const auto& d : devices)
    if (d.id == id) return &d;
  return nullptr;
}

std::string Trace::stream_label(uint32_t id) const {
  const Stream* s = find_stream(id);
  if (s && s->name != 0) return str(s->name);
  return "stream " + std::to_string(id);
}

std::string stream_role(const std::string& label) {
  // A pooled stream is named "<pool slot> = <name> + <name> ...", one name per user drawn onto it
  // (aliasing): its role is the set of its users' roles, "aux1|shared_expert".
  const size_t eq = label.find(" = ");
  if (eq != std::string::npos) {
    std::set<std::string> roles;
    std::string rest = label.substr(eq + 3);
    for (size_t at = 0; at <= rest.size();) {
      const size_t plus = rest.find(" + ", at);
      const std::string part = rest.substr(at, plus == std::string::npos ? std::string::npos : plus - at);
      if (!part.empty()) roles.insert(stream_role(part));
      if (plus == std::string::npos) break;
      at = plus + 3;
    }
    std::string out;
    for (const auto& r : roles) out += (out.empty() ? "" : "|") + r;
    return out.empty() ? label : out;
  }
  const size_t dot = label.rfind('.');
  return dot == std::string::npos || dot + 1 == label.size() ? label : label.substr(dot + 1);
}

namespace {

struct Diff {
  const Trace& a;
  const Trace& b;
  std::string out;
  template <class V>
  bool check(const char* what, size_t i, const char* field, const V& x, const V& y) {
    if (!out.empty() || x == y) return out.empty();
    std::ostringstream os;
    os << what << "[" << i << "]." << field << ": " << x << " vs " << y;
    out = os.str();
    return false;
  }
  bool str(const char* what, size_t i, const char* field, StrId x, StrId y, bool strip = false) {
    std::string sx = a.str(x), sy = b.str(y);
    if (strip) {
      sx = std::string(strip_api_version(sx));
      sy = std::string(strip_api_version(sy));
    }
    return check(what, i, field, sx, sy);
  }
  template <class T>
  bool size(const char* what, const std::vector<T>& x, const std::vector<T>& y) {
    return check(what, 0, "size()", x.size(), y.size());
  }
};

}  // namespace

std::string first_difference(const Trace& a, const Trace& b, bool api_modulo) {
  Diff d{a, b, {}};
#define F(vec, field) d.check(#vec, i, #field, a.vec[i].field, b.vec[i].field)
#define FE(vec, field) d.check(#vec, i, #field, int64_t(a.vec[i].field), int64_t(b.vec[i].field))
  d.size("kernels", a.kernels, b.kernels);
  for (size_t i = 0; d.out.empty() && i < a.kernels.size(); ++i) {
    F(kernels, start), F(kernels, end), F(kernels, queued), F(kernels, submitted), F(kernels, graph_node_id);
    d.str("kernels", i, "name", a.kernels[i].name, b.kernels[i].name);
    F(kernels, correlation), F(kernels, stream), F(kernels, context), F(kernels, graph_id), F(kernels, pid);
    F(kernels, grid[0]), F(kernels, grid[1]), F(kernels, grid[2]), F(kernels, block[0]), F(kernels, block[1]),
        F(kernels, block[2]), F(kernels, device), F(kernels, registers), F(kernels, launch_type),
        F(kernels, static_smem), F(kernels, dynamic_smem);
  }
  d.size("memcpys", a.memcpys, b.memcpys);
  for (size_t i = 0; d.out.empty() && i < a.memcpys.size(); ++i) {
    F(memcpys, start), F(memcpys, end), F(memcpys, bytes), F(memcpys, graph_node_id), F(memcpys, correlation),
        F(memcpys, stream), F(memcpys, context), F(memcpys, pid), F(memcpys, device), FE(memcpys, kind),
        FE(memcpys, src_kind), FE(memcpys, dst_kind);
  }
  d.size("memsets", a.memsets, b.memsets);
  for (size_t i = 0; d.out.empty() && i < a.memsets.size(); ++i) {
    F(memsets, start), F(memsets, end), F(memsets, bytes), F(memsets, value), F(memsets, correlation),
        F(memsets, stream), F(memsets, context), F(memsets, pid), F(memsets, device), FE(memsets, mem_kind);
  }
  d.size("api_calls", a.api_calls, b.api_calls);
  for (size_t i = 0; d.out.empty() && i < a.api_calls.size(); ++i) {
    F(api_calls, start), F(api_calls, end), F(api_calls, cbid), F(api_calls, correlation), F(api_calls, pid),
        F(api_calls, tid), F(api_calls, return_value), FE(api_calls, kind);
    d.str("api_calls", i, "name", a.api_calls[i].name, b.api_calls[i].name, api_modulo);
  }
  d.size("syncs", a.syncs, b.syncs);
  for (size_t i = 0; d.out.empty() && i < a.syncs.size(); ++i) {
    F(syncs, start), F(syncs, end), F(syncs, correlation), F(syncs, stream), F(syncs, context), F(syncs, event),
        F(syncs, pid), F(syncs, event_stream), F(syncs, event_record_correlation), F(syncs, device), FE(syncs, type);
  }
  d.size("cuda_events", a.cuda_events, b.cuda_events);
  for (size_t i = 0; d.out.empty() && i < a.cuda_events.size(); ++i) {
    F(cuda_events, ts), F(cuda_events, correlation), F(cuda_events, context), F(cuda_events, stream),
        F(cuda_events, event), F(cuda_events, pid), F(cuda_events, device);
  }
  d.size("nvtx", a.nvtx, b.nvtx);
  for (size_t i = 0; d.out.empty() && i < a.nvtx.size(); ++i) {
    F(nvtx, start), F(nvtx, end), F(nvtx, pid), F(nvtx, tid), F(nvtx, end_tid), F(nvtx, color), F(nvtx, category),
        F(nvtx, depth), FE(nvtx, kind);
    d.str("nvtx", i, "name", a.nvtx[i].name, b.nvtx[i].name);
    d.str("nvtx", i, "domain", a.nvtx[i].domain, b.nvtx[i].domain);
  }
  d.size("allocations", a.allocations, b.allocations);
  for (size_t i = 0; d.out.empty() && i < a.allocations.size(); ++i) {
    F(allocations, address), F(allocations, bytes), F(allocations, alloc), F(allocations, free),
        F(allocations, correlation), F(allocations, context), F(allocations, stream), F(allocations, pid),
        F(allocations, device), FE(allocations, kind), FE(allocations, from_pool);
  }
  d.size("counters", a.counters, b.counters);
  for (size_t i = 0; d.out.empty() && i < a.counters.size(); ++i) {
    F(counters, ts), F(counters, value), F(counters, pid);
    d.str("counters", i, "name", a.counters[i].name, b.counters[i].name);
  }
  d.size("overheads", a.overheads, b.overheads);
  for (size_t i = 0; d.out.empty() && i < a.overheads.size(); ++i) {
    F(overheads, start), F(overheads, end), F(overheads, kind), F(overheads, object_kind), F(overheads, object_id),
        F(overheads, pid);
  }
  d.size("streams", a.streams, b.streams);
  for (size_t i = 0; d.out.empty() && i < a.streams.size(); ++i) {
    F(streams, id), F(streams, context), F(streams, device), F(streams, pid), F(streams, priority),
        FE(streams, flags), FE(streams, is_null), F(streams, created), F(streams, destroyed);
    d.str("streams", i, "name", a.streams[i].name, b.streams[i].name);
  }
  d.size("contexts", a.contexts, b.contexts);
  for (size_t i = 0; d.out.empty() && i < a.contexts.size(); ++i) {
    F(contexts, id), F(contexts, device), F(contexts, pid), F(contexts, null_stream), F(contexts, created),
        F(contexts, destroyed);
  }
  d.size("devices", a.devices, b.devices);
  for (size_t i = 0; d.out.empty() && i < a.devices.size(); ++i) {
    F(devices, id), F(devices, name), F(devices, uuid), F(devices, compute_major), F(devices, compute_minor),
        F(devices, sm_count), F(devices, total_memory), F(devices, max_threads_per_block), F(devices, max_threads_per_sm),
        F(devices, regs_per_block), F(devices, regs_per_sm), F(devices, warp_size), F(devices, smem_per_block),
        F(devices, smem_per_sm), F(devices, smem_per_block_optin), F(devices, l2_cache_size),
        F(devices, clock_rate_khz), F(devices, memory_bandwidth);
  }
  d.size("processes", a.processes, b.processes);
  for (size_t i = 0; d.out.empty() && i < a.processes.size(); ++i) F(processes, pid), F(processes, name);
  d.size("threads", a.threads, b.threads);
  for (size_t i = 0; d.out.empty() && i < a.threads.size(); ++i) F(threads, pid), F(threads, tid), F(threads, name);
#undef F
#undef FE
  size_t i = 0;
  d.check("trace", i, "base_time", a.base_time, b.base_time);
  d.check("trace", i, "session_start_utc_ns", a.session_start_utc_ns, b.session_start_utc_ns);
  for (const RecordCountField& f : kRecordCountFields) d.check("counts", i, f.name, a.counts.*f.member, b.counts.*f.member);
  d.size("load_issues", a.counts.load_issues, b.counts.load_issues);
  for (size_t j = 0; d.out.empty() && j < a.counts.load_issues.size(); ++j) {
    const LoadIssue &x = a.counts.load_issues[j], &y = b.counts.load_issues[j];
    d.check("load_issues", j, "what", x.what, y.what);
    d.check("load_issues", j, "records", x.records, y.records);
    d.check("load_issues", j, "first", x.first, y.first);
    d.check("load_issues", j, "first_value", x.first_value, y.first_value);
  }
  return d.out;
}

std::string first_difference_by_id(const Trace& a, const Trace& b) {
  std::string d = first_difference(a, b);
  if (!d.empty()) return d;
  if (a.strings.size() != b.strings.size())
    return "string tables: " + std::to_string(a.strings.size()) + " vs " + std::to_string(b.strings.size());
  for (size_t i = 0; i < a.strings.size(); ++i)
    if (a.strings.str(StrId(i)) != b.strings.str(StrId(i))) return "string " + std::to_string(i);
  if (a.metadata != b.metadata) return "metadata";
  return "";
}

}  // namespace sl::prof
