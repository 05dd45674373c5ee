// What one Kineto / Chrome trace event means for the trace model, shared by the two JSON loaders
// of trace_io: the precise one (simdjson DOM over the whole document, exact error messages) and
// the fast one (simdjson On-Demand over chunks of "traceEvents" on several threads, which falls
// back to the precise one on anything unusual). Both read events through the same function,
// read_event, so they cannot disagree on what an event means.
//
// read_event is a template over
// - Ev, the field access of one event (has / str / number / integer / args ...); its bad()
//   never returns (the precise loader throws sl::Error naming the event, the fast one gives up);
// - Sink, where results go: the event vectors, the string table, record counts, and the
//   events that only count in PyTorch traces ("[memory]" allocator events, process / thread
//   names, counters), which are ignored when the file carries our "streamlab" block.
// Internal to the profiler library.
#pragma once
#include <cstdlib>
#include <cerrno>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "profiler/kineto_json.h"
#include "profiler/trace.h"

namespace sl::prof::json_events {

// s == lit, with the literal's length known at compile time (an inline compare, not a memcmp
// call: these run for every field of every event).
template <size_t N>
inline bool is(std::string_view s, const char (&lit)[N]) {
  return s.size() == N - 1 && __builtin_memcmp(s.data(), lit, N - 1) == 0;
}

// The event fields the loaders read.
enum Field : uint8_t { F_PH, F_CAT, F_NAME, F_TS, F_DUR, F_PID, F_TID, F_ARGS, F_COUNT };
inline constexpr const char* kFieldNames[F_COUNT] = {"ph", "cat", "name", "ts", "dur", "pid", "tid", "args"};

inline int field_of(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (is(k, "ph")) return F_PH;
      if (is(k, "ts")) return F_TS;
      return -1;
    case 3:
      if (is(k, "cat")) return F_CAT;
      if (is(k, "pid")) return F_PID;
      if (is(k, "tid")) return F_TID;
      if (is(k, "dur")) return F_DUR;
      return -1;
    case 4:
      if (is(k, "name")) return F_NAME;
      if (is(k, "args")) return F_ARGS;
      return -1;
    default: return -1;
  }
}

// The "args" keys the loaders read.
#define SL_ARG_KEYS(X)                                                                                    \
  X(Device, "device") X(Stream, "stream") X(Context, "context") X(Correlation, "correlation")             \
  X(Registers, "registers per thread") X(Grid, "grid") X(Block, "block") X(Smem, "shared memory")         \
  X(StaticSmem, "static shared memory") X(DynamicSmem, "dynamic shared memory") X(GraphId, "graph id")    \
  X(GraphNodeId, "graph node id") X(QueuedNs, "queued ns") X(SubmittedNs, "submitted ns")                 \
  X(LaunchType, "launch type") X(Process, "process") X(Bytes, "bytes") X(CopyKind, "copy kind")           \
  X(SrcKind, "src kind") X(DstKind, "dst kind") X(Value, "value") X(MemoryKind, "memory kind")            \
  X(Cbid, "cbid") X(ReturnValue, "return value") X(WaitEvent, "wait_on_cuda_event_id")                    \
  X(SyncType, "sync type") X(SyncKind, "cuda_sync_kind") X(Domain, "domain") X(NvtxKind, "nvtx kind")     \
  X(Color, "color") X(Category, "category") X(EndThread, "end thread") X(MemBytes, "Bytes")               \
  X(Addr, "Addr") X(DeviceId, "Device Id") X(Name, "name") X(WaitOnStream, "wait_on_stream")                \
  X(WaitRecordCorr, "wait_on_cuda_event_record_corr_id") X(WaitDerived, "wait_on derived")

enum class A : uint8_t {
#define SL_X(e, s) e,
  SL_ARG_KEYS(SL_X)
#undef SL_X
      Count
};
inline constexpr const char* kArgNames[] = {
#define SL_X(e, s) s,
    SL_ARG_KEYS(SL_X)
#undef SL_X
};
inline constexpr size_t kArgCount = size_t(A::Count);
static_assert(kArgCount <= 64);

// args keys bucketed by length: a lookup compares against the one to four keys of that length.
struct ArgTable {
  static constexpr size_t kMaxLen = 40;  // longest key: "wait_on_cuda_event_record_corr_id" (33)
  std::array<std::vector<std::pair<std::string_view, uint8_t>>, kMaxLen> by_len;
  ArgTable() {
    for (size_t i = 0; i < kArgCount; ++i) {
      std::string_view s = kArgNames[i];
      by_len.at(s.size()).emplace_back(s, uint8_t(i));
    }
  }
  int find(std::string_view k) const {
    if (k.size() >= kMaxLen) return -1;
    for (const auto& [s, id] : by_len[k.size()])
      if (s == k) return id;
    return -1;
  }
};
inline const ArgTable kArgTable;

inline std::string arg_label(A k) { return std::string("args.\"") + kArgNames[int(k)] + "\""; }

inline uint32_t u32(int64_t v) { return uint32_t(v); }

// An integer written as a JSON string ("stream": "7", as some writers do): the whole text must be
// a base-10 integer in range. Both loaders read such values the same way.
inline bool integer_from_text(std::string_view text, int64_t& out) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || !end || *end != 0 || errno != 0) return false;
  out = x;
  return true;
}

inline SyncType sync_type_from_name(std::string_view s) {
  if (s == "Event Sync" || s == "event_sync" || s == "Event Synchronize") return SyncType::EventSynchronize;
  if (s == "Stream Wait Event" || s == "stream_wait_event") return SyncType::StreamWaitEvent;
  if (s == "Stream Sync" || s == "stream_sync" || s == "Stream Synchronize") return SyncType::StreamSynchronize;
  if (s == "Context Sync" || s == "context_sync" || s == "Context Synchronize") return SyncType::ContextSynchronize;
  return SyncType::Unknown;
}

// "Memcpy HtoD (Pageable -> Device)" -> kinds (PyTorch traces carry no numeric kinds).
inline void parse_memcpy_name(std::string_view n, Memcpy& m) {
  static constexpr std::string_view kinds[] = {"Unknown", " HtoD", " DtoH", " HtoA", " AtoH", " AtoA",
                                               " AtoD",   " DtoA", " DtoD", " HtoH", " PtoP"};
  for (int k = 1; k <= 10; ++k)
    if (n.find(kinds[k]) != std::string_view::npos) m.kind = MemcpyKind(k);
  auto mem = [](std::string_view s) {
    for (int k = 7; k >= 1; --k)
      if (s == to_string(MemoryKind(k))) return MemoryKind(k);
    return MemoryKind::Unknown;
  };
  size_t l = n.find('('), arrow = n.find(" -> "), r = n.rfind(')');
  if (l != std::string_view::npos && arrow != std::string_view::npos && r != std::string_view::npos && l < arrow &&
      arrow < r) {
    m.src_kind = mem(n.substr(l + 1, arrow - l - 1));
    m.dst_kind = mem(n.substr(arrow + 4, r - arrow - 4));
  }
}

// PyTorch's allocator events: positive Bytes allocate, negative free the latest live allocation
// at that address.
inline void apply_memory_op(std::vector<Allocation>& allocations, Ns ts, int64_t bytes, uint64_t addr, uint16_t dev) {
  if (bytes > 0) {
    Allocation a;
    a.address = addr;
    a.bytes = uint64_t(bytes);
    a.alloc = ts;
    a.device = dev;
    allocations.push_back(a);
  } else if (bytes < 0) {
    for (auto it = allocations.rbegin(); it != allocations.rend(); ++it)
      if (it->address == addr && it->free == kNoTime) {
        it->free = ts;
        break;
      }
  }
}

// Whether the document carries our "streamlab" block: it decides what PyTorch-only events
// mean. Unknown: the fast loader has not seen the block's place yet; PyTorch-only events are
// then read speculatively (Sink::speculate_not_ours) and kept or dropped once it is known.
enum class Ours : uint8_t { No, Yes, Unknown };

struct EventContext {
  Ns base = 0;  // baseTimeNanoseconds
  Ours ours = Ours::No;
  // PyTorch writes absolute microseconds (~1.7e15): us * 1000 would exceed 2^53 and round to
  // 256 ns, so whole microseconds and the fraction are converted apart. int64 nanoseconds hold
  // +-9.2e15 us; a timestamp beyond that (1e29, 1e308) is not one, and an error.
  template <class Ev>
  Ns to_ns(const Ev& ev, double us) const {
    if (!(std::fabs(us) < 9.2e15)) ev.bad("a timestamp of " + std::to_string(us) + " us is outside what the trace "
                                          "model holds (+-9.2e15 us)");
    const double whole = std::floor(us);
    // Added to baseTimeNanoseconds (any int64), it can still leave int64: an error, not a wrap.
    Ns ns;
    if (__builtin_add_overflow(base, Ns(whole) * 1000 + Ns(std::llround((us - whole) * 1000.0)), &ns))
      ev.bad("a timestamp of " + std::to_string(us) + " us after baseTimeNanoseconds " + std::to_string(base) +
             " is outside what the trace model holds");
    return ns;
  }
};

inline bool is_gpu_or_api_category(std::string_view cat) {
  return is(cat, "kernel") || is(cat, "gpu_memcpy") || is(cat, "gpu_memset") || is(cat, "cuda_runtime") ||
         is(cat, "cuda_driver") || is(cat, "cuda_sync") || is(cat, "user_annotation");
}

template <class Ev, class Sink>
void read_complete_event(const Ev& ev, Sink& s, const EventContext& cx, std::string_view cat) {
  Ns start = cx.to_ns(ev, ev.number(F_TS));
  double dur_us = ev.number(F_DUR);
  // The same bound as for timestamps: a longer duration, or one that ends beyond int64, is an
  // error, not a wrap.
  Ns end;
  if (!(std::fabs(dur_us) < 9.2e15) || __builtin_add_overflow(start, Ns(std::llround(dur_us * 1000.0)), &end))
    ev.bad("a duration of " + std::to_string(dur_us) + " us from " + std::to_string(start) +
           " ns is outside what the trace model holds");
  if (end < start) s.counts.end_before_start++;
  if (start == 0) s.counts.zero_timestamps++;
  int64_t pid = ev.integer(F_PID);
  int64_t tid = ev.integer(F_TID);
  if (is(cat, "kernel")) {
    Kernel k;
    k.start = start;
    k.end = end;
    k.name = s.intern(ev.str(F_NAME));
    k.device = uint16_t(ev.arg_int(A::Device, pid));
    k.stream = u32(ev.arg_int_req(A::Stream));
    k.context = u32(ev.arg_int(A::Context, 0));
    k.correlation = u32(ev.arg_int(A::Correlation, 0));
    k.registers = uint16_t(ev.arg_int(A::Registers, 0));
    auto g = ev.arg_dim3(A::Grid);
    auto bl = ev.arg_dim3(A::Block);
    for (int d = 0; d < 3; ++d) {
      k.grid[d] = g[d];
      k.block[d] = uint16_t(std::min<uint32_t>(bl[d], 0xFFFF));
    }
    int64_t smem = ev.arg_int(A::Smem, 0);
    int64_t ssmem = ev.arg_int(A::StaticSmem, -1);
    k.static_smem = u32(ssmem >= 0 ? ssmem : 0);
    int64_t dsmem = ev.arg_int(A::DynamicSmem, -1);
    k.dynamic_smem = u32(dsmem >= 0 ? dsmem : smem - int64_t(k.static_smem));
    k.graph_id = u32(ev.arg_int(A::GraphId, 0));
    k.graph_node_id = uint64_t(ev.arg_int(A::GraphNodeId, 0));
    int64_t q = ev.arg_int(A::QueuedNs, -1);
    k.queued = q >= 0 ? q : kNoTime;
    int64_t sub = ev.arg_int(A::SubmittedNs, -1);
    k.submitted = sub >= 0 ? sub : kNoTime;
    k.launch_type = uint16_t(ev.arg_int(A::LaunchType, 0));
    k.pid = u32(ev.arg_int(A::Process, 0));
    s.kernels.push_back(k);
  } else if (is(cat, "gpu_memcpy")) {
    Memcpy m;
    m.start = start;
    m.end = end;
    m.device = uint16_t(ev.arg_int(A::Device, pid));
    m.stream = u32(ev.arg_int_req(A::Stream));
    m.context = u32(ev.arg_int(A::Context, 0));
    m.correlation = u32(ev.arg_int(A::Correlation, 0));
    m.bytes = uint64_t(ev.arg_int(A::Bytes, 0));
    parse_memcpy_name(ev.str(F_NAME), m);
    int64_t ck = ev.arg_int(A::CopyKind, -1);
    if (ck >= 0) m.kind = MemcpyKind(ck);
    int64_t sk = ev.arg_int(A::SrcKind, -1);
    if (sk >= 0) m.src_kind = MemoryKind(sk);
    int64_t dk = ev.arg_int(A::DstKind, -1);
    if (dk >= 0) m.dst_kind = MemoryKind(dk);
    m.graph_node_id = uint64_t(ev.arg_int(A::GraphNodeId, 0));
    m.pid = u32(ev.arg_int(A::Process, 0));
    s.memcpys.push_back(m);
  } else if (is(cat, "gpu_memset")) {
    Memset m;
    m.start = start;
    m.end = end;
    m.device = uint16_t(ev.arg_int(A::Device, pid));
    m.stream = u32(ev.arg_int_req(A::Stream));
    m.context = u32(ev.arg_int(A::Context, 0));
    m.correlation = u32(ev.arg_int(A::Correlation, 0));
    m.bytes = uint64_t(ev.arg_int(A::Bytes, 0));
    m.value = u32(ev.arg_int(A::Value, 0));
    m.mem_kind = MemoryKind(ev.arg_int(A::MemoryKind, uint8_t(MemoryKind::Device)));
    m.graph_node_id = uint64_t(ev.arg_int(A::GraphNodeId, 0));
    m.pid = u32(ev.arg_int(A::Process, 0));
    s.memsets.push_back(m);
  } else if (is(cat, "cuda_runtime") || is(cat, "cuda_driver")) {
    ApiCall a;
    a.start = start;
    a.end = end;
    a.name = s.intern(ev.str(F_NAME));
    a.kind = is(cat, "cuda_driver") ? ApiKind::Driver : ApiKind::Runtime;
    a.cbid = u32(ev.arg_int(A::Cbid, 0));
    a.correlation = u32(ev.arg_int(A::Correlation, 0));
    a.return_value = int32_t(ev.arg_int(A::ReturnValue, 0));
    a.pid = u32(pid);
    a.tid = u32(tid) & kTidStreamMask;
    s.api_calls.push_back(a);
  } else if (is(cat, "cuda_sync")) {
    Sync y;
    y.start = start;
    y.end = end;
    y.device = uint16_t(ev.arg_int(A::Device, pid));
    int64_t st = ev.arg_int(A::Stream, -1);
    y.stream = st < 0 ? kNoStream : uint32_t(st);
    y.context = u32(ev.arg_int(A::Context, 0));
    y.correlation = u32(ev.arg_int(A::Correlation, 0));
    int64_t evid = ev.arg_int(A::WaitEvent, -1);
    y.event = evid < 0 ? kNoId : uint32_t(evid);
    int64_t ty = ev.arg_int(A::SyncType, -1);
    y.type = ty >= 0 ? SyncType(ty) : sync_type_from_name(ev.arg_str(A::SyncKind, ev.str_or(F_NAME, "")));
    // Where the awaited event was recorded (Kineto, HTA). Our writer marks values it derived
    // from the CUDA event records, which travel in the streamlab block: not the sync's own.
    if (!ev.has_arg(A::WaitDerived)) {
      int64_t ws = ev.arg_int(A::WaitOnStream, -1);
      y.event_stream = ws < 0 ? kNoStream : uint32_t(ws);
      int64_t rc = ev.arg_int(A::WaitRecordCorr, -1);
      y.event_record_correlation = rc < 0 ? 0 : uint32_t(rc);
    }
    y.pid = u32(ev.arg_int(A::Process, 0));
    s.syncs.push_back(y);
  } else {  // user_annotation
    NvtxRange r;
    r.start = start;
    r.end = end;
    r.name = s.intern(ev.str(F_NAME));
    std::string_view dom = ev.arg_str(A::Domain, "");
    r.domain = dom.empty() ? 0 : s.intern(dom);
    r.kind = NvtxKind(std::min<int64_t>(2, std::max<int64_t>(0, ev.arg_int(A::NvtxKind, 0))));
    r.color = u32(ev.arg_int(A::Color, 0));
    r.category = u32(ev.arg_int(A::Category, 0));
    r.pid = u32(pid);
    r.tid = u32(tid) & kTidStreamMask;
    r.end_tid = u32(ev.arg_int(A::EndThread, r.tid));
    s.nvtx.push_back(r);
  }
}

// Runs `f` (which reads what only counts in PyTorch traces) when the document is not ours.
template <class Sink, class F>
void unless_ours(Sink& s, const EventContext& cx, F&& f) {
  if (cx.ours == Ours::No) f();
  else if (cx.ours == Ours::Unknown) s.speculate_not_ours(f);
}

template <class Ev, class Sink>
void read_instant_event(const Ev& ev, Sink& s, const EventContext& cx) {
  std::string_view cat = ev.str_or(F_CAT, "");
  std::string_view name = ev.str_or(F_NAME, "");
  if (is(cat, "user_annotation")) {
    NvtxRange r;
    r.start = r.end = cx.to_ns(ev, ev.number(F_TS));
    r.name = s.intern(name);
    r.kind = NvtxKind::Mark;
    r.pid = u32(ev.integer(F_PID));
    r.tid = u32(ev.integer(F_TID)) & kTidStreamMask;
    r.end_tid = r.tid;
    std::string_view dom = ev.arg_str(A::Domain, "");
    r.domain = dom.empty() ? 0 : s.intern(dom);
    s.nvtx.push_back(r);
  } else if (is(name, "[memory]") && cx.ours != Ours::Yes) {
    unless_ours(s, cx, [&] {
      Ns ts = cx.to_ns(ev, ev.number(F_TS));
      int64_t bytes = ev.arg_int(A::MemBytes, 0);
      uint64_t addr = uint64_t(ev.arg_int(A::Addr, 0));
      int64_t dev = ev.arg_int(A::DeviceId, -1);
      if (dev < 0) return;  // CPU memory
      s.memory_op(ts, bytes, addr, uint16_t(dev));
    });
  } else {
    ++s.skipped;
  }
}

template <class Ev, class Sink>
void read_metadata_event(const Ev& ev, Sink& s, const EventContext& cx) {
  std::string_view name = ev.str_or(F_NAME, "");
  std::string_view value;
  if (!ev.arg_string(A::Name, value)) return;
  int64_t pid = ev.integer(F_PID);
  if (is(name, "process_name") && value.rfind("GPU ", 0) != 0) {
    unless_ours(s, cx, [&] { s.process(u32(pid), value); });
  } else if (is(name, "thread_name") && value.rfind("stream ", 0) != 0) {
    unless_ours(s, cx, [&] { s.thread(u32(pid), u32(ev.integer(F_TID)) & kTidStreamMask, value); });
  }
}

template <class Ev, class Sink>
void read_counter_event(const Ev& ev, Sink& s, const EventContext& cx) {
  std::string name(ev.str_or(F_NAME, "counter"));
  Ns ts = cx.to_ns(ev, ev.number(F_TS));
  int64_t pid = ev.integer(F_PID);
  if (!ev.args()) return;
  // In key order, a repeated key counted once with its last value (as nlohmann's object held them).
  std::vector<std::pair<std::string_view, double>> items = ev.counter_values();
  for (const auto& [k, v] : items) {
    CounterSample c;
    c.ts = ts;
    c.value = v;
    c.name = s.intern(items.size() == 1 ? name : name + "." + std::string(k));
    c.pid = u32(pid);
    s.counters.push_back(c);
  }
}

// One element of "traceEvents" (an object, already checked by the caller).
template <class Ev, class Sink>
void read_event(const Ev& ev, Sink& s, const EventContext& cx) {
  if (!ev.has(F_PH)) ev.bad("expected field \"ph\"");
  const std::string_view ph = ev.str(F_PH);
  if (is(ph, "X")) {
    const std::string_view cat = ev.str_or(F_CAT, "");
    if (!is_gpu_or_api_category(cat)) {
      ++s.skipped;  // cpu_op, python_function, gpu_user_annotation (derived), Trace spans, ...
      return;
    }
    read_complete_event(ev, s, cx, cat);
  } else if (is(ph, "i") || is(ph, "I")) {
    read_instant_event(ev, s, cx);
  } else if (is(ph, "M")) {
    read_metadata_event(ev, s, cx);
  } else if (is(ph, "C")) {
    if (cx.ours == Ours::Yes) return;  // derived from allocations / the block
    unless_ours(s, cx, [&] { read_counter_event(ev, s, cx); });
  } else if (is(ph, "s") || is(ph, "f") || is(ph, "t") || is(ph, "B") || is(ph, "E") || is(ph, "b") || is(ph, "e") || is(ph, "n")) {
    ++s.skipped;
  } else {
    ev.bad("unexpected ph \"" + std::string(ph) + "\"");
  }
}

// What a trace without our block gets after its events: the source, skipped events, the base
// time, and the only process's id on GPU ops (PyTorch traces carry no process id on them).
inline void finish_pytorch_trace(Trace& t, Ns base, uint64_t skipped) {
  t.metadata["source"] = "kineto";
  if (skipped) t.metadata["skipped_events"] = std::to_string(skipped);
  t.base_time = base != 0 ? base : kNoTime;
  uint32_t only_pid = 0;
  bool one = true;
  for (const auto& a : t.api_calls) {
    if (only_pid == 0) only_pid = a.pid;
    else if (a.pid != only_pid) one = false;
  }
  if (!one || !only_pid) return;
  for (auto& k : t.kernels)
    if (k.pid == 0) k.pid = only_pid;
  for (auto& m : t.memcpys)
    if (m.pid == 0) m.pid = only_pid;
  for (auto& m : t.memsets)
    if (m.pid == 0) m.pid = only_pid;
  for (auto& y : t.syncs)
    if (y.pid == 0) y.pid = only_pid;
}

}  // namespace sl::prof::json_events
