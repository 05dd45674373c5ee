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
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "profiler/kineto_fields.h"
#include "profiler/kineto_json.h"
#include "profiler/trace.h"

namespace sl::prof::json_events {

// s == lit, with the literal's length known at compile time (an inline compare, not a memcmp
// call: these run for every field of every event).
template <size_t N>
inline bool is(std::string_view s, const char (&lit)[N]) {
  return s.size() == N - 1 && __builtin_memcmp(s.data(), lit, N - 1) == 0;
}

// The event fields the loaders read (kineto_fields.h).
using kineto_fields::Field;
using enum kineto_fields::Field;
using kineto_fields::kFieldNames;

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

// The "args" keys (kineto_fields.h): the loaders index the first kArgCount of them.
using kineto_fields::A;
using kineto_fields::kArgCount;
using kineto_fields::kArgNames;

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

// For what only counts in PyTorch traces (read, maybe speculatively, before it is known whether the
// document is ours): an id outside 32 bits is an error of the event.
template <class Ev>
uint32_t u32(const Ev& ev, int64_t v, const char* field) {
  if (v < 0 || v > int64_t(UINT32_MAX)) ev.bad(std::string(field) + " " + std::to_string(v) + " outside 0..4294967295");
  return uint32_t(v);
}

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

// The range checks of one record's fields against the trace model's types. A value the model
// cannot hold (a stream id of 2^40, a timestamp of 1e29 us) is not truncated into another one:
// the first such field names the problem and the record is dropped, counted by the sink
// (RecordCounts::reject) with the event's index, and reported; analyze fails on it unless
// --allow-invalid-records.
struct FieldCheck {
  const char* record;       // "kernel", "memcpy", ...
  std::string what, value;  // the first problem ("" = none)

  bool ok() const { return what.empty(); }
  void fail(std::string_view problem, std::string v) {
    if (!ok()) return;
    what = std::string("traceEvents: ") + record + " " + std::string(problem);
    value = std::move(v);
  }
  // v as T when lo <= v <= hi. (Integers past int64 arrive as INT64_MAX: see saturated().)
  template <class T>
  T fit(int64_t v, std::string_view field, int64_t lo = int64_t(std::numeric_limits<T>::min()),
        int64_t hi = int64_t(std::min<uint64_t>(uint64_t(std::numeric_limits<T>::max()), uint64_t(INT64_MAX) - 1))) {
    if (v >= lo && v <= hi) return T(v);
    fail(std::string(field) + " outside " + std::to_string(lo) + ".." + std::to_string(hi), shown(v));
    return T{};
  }
  // A field whose -1 means "none" (a sync's stream, a CUDA event id): -1 -> none, else fit.
  template <class T>
  T fit_or_none(int64_t v, std::string_view field, T none) {
    return v == -1 ? none : fit<T>(v, field, 0, int64_t(none) - 1);
  }
  static std::string shown(int64_t v) { return v == INT64_MAX ? ">= 2^63" : std::to_string(v); }
};

// JSON integers beyond int64 saturate to INT64_MAX when read, so that no range check passes
// them (2^64-1 must not come back as -1).
inline int64_t saturated(uint64_t u) { return u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u); }

// The longest record (trace.h's kMaxDurationNs), in the JSON's microseconds.
inline constexpr double kMaxDurationUs = double(kMaxDurationNs) / 1000.0;

struct EventContext {
  Ns base = 0;  // baseTimeNanoseconds
  Ours ours = Ours::No;
  // PyTorch writes absolute microseconds (~1.7e15): us * 1000 would exceed 2^53 and round to
  // 256 ns, so whole microseconds and the fraction are converted apart. int64 nanoseconds hold
  // +-9.2e15 us; a timestamp beyond that (1e29, 1e308), or one that overflows with the base
  // time, is not one: the record is invalid.
  Ns to_ns(double us, FieldCheck& c, std::string_view field) const {
    if (std::fabs(us) < double(kMaxTraceNs) / 1000.0) {
      const double whole = std::floor(us);
      Ns ns = 0;
      if (!__builtin_add_overflow(Ns(whole) * 1000 + Ns(std::llround((us - whole) * 1000.0)), base, &ns) &&
          ns >= -kMaxTraceNs && ns <= kMaxTraceNs)
        return ns;
    }
    c.fail(std::string(field) + " outside +-2^62 ns (with baseTimeNanoseconds)", us_text(us));
    return 0;
  }
  // A duration added to `start` (ns): the end, or the record is invalid.
  Ns end_of(Ns start, double dur_us, FieldCheck& c) const {
    if (std::fabs(dur_us) <= kMaxDurationUs) return start + Ns(std::llround(dur_us * 1000.0));
    c.fail("\"dur\" longer than 1e12 us (11.6 days): a corrupt value", us_text(dur_us));
    return 0;
  }
  static std::string us_text(double us) {
    char v[40];
    std::snprintf(v, sizeof v, "%.6g us", us);
    return v;
  }
};

// The category's record name in messages ("kernel" -> "kernel", "cuda_runtime" -> "API call").
inline const char* record_of(std::string_view cat) {
  if (is(cat, "kernel")) return "kernel";
  if (is(cat, "gpu_memcpy")) return "memcpy";
  if (is(cat, "gpu_memset")) return "memset";
  if (is(cat, "cuda_runtime") || is(cat, "cuda_driver")) return "API call";
  if (is(cat, "cuda_sync")) return "sync";
  return "NVTX range";
}

inline bool is_gpu_or_api_category(std::string_view cat) {
  return is(cat, "kernel") || is(cat, "gpu_memcpy") || is(cat, "gpu_memset") || is(cat, "cuda_runtime") ||
         is(cat, "cuda_driver") || is(cat, "cuda_sync") || is(cat, "user_annotation");
}

// A sink holds `counts` (RecordCounts) and `event`, the index in "traceEvents" of the event read.
template <class Sink>
void reject(Sink& s, std::string_view what, std::string_view value) {
  s.counts.reject(what, s.event, value);
}

// Whether a record read with check `c` goes into the trace: not when a field was out of range
// (counted, with why). End before start and zero timestamps are kept and counted, as the
// CUPTI decoder counts them.
template <class Sink>
bool keep(Sink& s, const FieldCheck& c, Ns start, Ns end) {
  if (!c.ok()) {
    reject(s, c.what, c.value);
    return false;
  }
  if (end < start) s.counts.end_before_start++;
  if (start == 0) s.counts.zero_timestamps++;
  return true;
}

// A GPU op or API call in another phase than "X" (complete: ts and dur): "B"/"E" pairs, instants,
// async events. The trace model has no way to pair them, so they are dropped, and counted.
template <class Sink>
void reject_not_complete(Sink& s, std::string_view cat, std::string_view ph) {
  reject(s, std::string("traceEvents: ") + record_of(cat) + " given as a \"" + std::string(ph) +
                "\" event (GPU ops and API calls must be complete \"X\" events with a duration)",
         "");
}

// What only counts in PyTorch traces (allocator events, counters) may be read before it is known
// whether the document is ours, so an out-of-range timestamp there is an error of the event, not
// a dropped record.
template <class Ev>
Ns to_ns_or_bad(const Ev& ev, const EventContext& cx) {
  FieldCheck c{"event", {}, {}};
  const Ns ns = cx.to_ns(ev.number(F_TS), c, "\"ts\"");
  if (!c.ok()) ev.bad(c.what + ": " + c.value);
  return ns;
}

// ---- The args of one record, through its table (kineto_fields.h).

// Reads one integer arg into its member: the table gives the key, the range, the value when
// absent and how -1 reads. An arg that is not an integer is an error of the event (ev.bad); one
// out of range fails the check `c` (the record is dropped and counted).
template <auto F, class Ev, class Rec>
void read_int_arg(const Ev& ev, FieldCheck& c, Rec& r, int64_t pid) {
  using namespace kineto_fields;
  using T = std::remove_cvref_t<decltype(r.*F.member)>;
  constexpr std::string_view label = kineto_fields::arg_label<F.key>();
  int64_t v;
  if constexpr (F.absent == kAbsentIsError) {
    v = ev.arg_int_req(F.key);
  } else if constexpr (F.absent == kAbsentKeeps) {
    v = ev.arg_int(F.key, -1);
    if (v == -1) return;
  } else {
    v = ev.arg_int(F.key, F.absent == kAbsentIsPid ? pid : F.absent);
  }
  if constexpr (F.coding == Coding::NsOrNone) {
    r.*F.member = v >= 0 ? v : kNoTime;
  } else if constexpr (F.coding == Coding::NoneIsMinus1) {
    r.*F.member = c.fit_or_none<T>(v, label, T(F.none));
  } else if constexpr (std::is_enum_v<T>) {
    r.*F.member = T(c.fit<std::underlying_type_t<T>>(v, label, F.lo, F.hi));
  } else {
    r.*F.member = c.fit<T>(v, label, F.lo, F.hi);
  }
}

// Reads the args of `Table` into r in table order: integer args by the table, the others
// (kineto_fields::SpecialArg, read by their own rules) by special.template operator()<key>().
template <const auto& Table, class Ev, class Rec, class Special>
void read_args(const Ev& ev, FieldCheck& c, Rec& r, int64_t pid, Special&& special) {
  kineto_fields::for_each_field_t<Table>([&]<auto F, size_t>() {
    if constexpr (kineto_fields::is_special_v<decltype(F)>) {
      if constexpr (F.read) special.template operator()<F.key>();
    } else {
      read_int_arg<F>(ev, c, r, pid);
    }
  });
}
template <const auto& Table, class Ev, class Rec>
void read_args(const Ev& ev, FieldCheck& c, Rec& r, int64_t pid) {
  read_args<Table>(ev, c, r, pid, []<kineto_fields::A>() {});
}

template <class Ev, class Sink>
void read_kernel(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid) {
  Kernel k;
  k.start = start;
  k.end = end;
  k.name = s.intern(ev.str(F_NAME));
  read_args<kineto_fields::kKernelArgs>(ev, c, k, pid, [&]<A key>() {
    if constexpr (key == A::Smem) {
      // Kineto gives the total; ours also the split (static + dynamic), which wins.
      const int64_t smem = ev.arg_int(A::Smem, 0);
      const int64_t ssmem = ev.arg_int(A::StaticSmem, -1);
      k.static_smem = ssmem >= 0 ? c.fit<uint32_t>(ssmem, kineto_fields::arg_label<A::StaticSmem>()) : 0;
      const int64_t dsmem = ev.arg_int(A::DynamicSmem, -1);
      k.dynamic_smem = c.fit<uint32_t>(dsmem >= 0 ? dsmem : smem - int64_t(k.static_smem),
                                       dsmem >= 0 ? kineto_fields::arg_label<A::DynamicSmem>() : kineto_fields::arg_label<A::Smem>());
    } else if constexpr (key == A::Grid) {
      const auto g = ev.arg_dim3(A::Grid);
      const auto bl = ev.arg_dim3(A::Block);
      for (int d = 0; d < 3; ++d) {
        k.grid[d] = g[d];
        k.block[d] = c.fit<uint16_t>(bl[d], kineto_fields::arg_label<A::Block>());
      }
    }
    // Block: read with the grid; StaticSmem, DynamicSmem: with the shared memory.
  });
  if (keep(s, c, start, end)) s.kernels.push_back(k);
}

template <class Ev, class Sink>
void read_memcpy(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid) {
  Memcpy m;
  m.start = start;
  m.end = end;
  parse_memcpy_name(ev.str(F_NAME), m);  // the kinds, unless the args give them
  read_args<kineto_fields::kMemcpyArgs>(ev, c, m, pid);
  if (keep(s, c, start, end)) s.memcpys.push_back(m);
}

template <class Ev, class Sink>
void read_memset(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid) {
  Memset m;
  m.start = start;
  m.end = end;
  read_args<kineto_fields::kMemsetArgs>(ev, c, m, pid);
  if (keep(s, c, start, end)) s.memsets.push_back(m);
}

template <class Ev, class Sink>
void read_api_call(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid, int64_t tid, bool driver) {
  ApiCall a;
  a.start = start;
  a.end = end;
  a.name = s.intern(ev.str(F_NAME));
  a.kind = driver ? ApiKind::Driver : ApiKind::Runtime;
  read_args<kineto_fields::kApiCallArgs>(ev, c, a, pid);
  a.pid = c.fit<uint32_t>(pid, "\"pid\"");
  a.tid = c.fit<uint32_t>(tid, "\"tid\"") & kTidStreamMask;
  if (keep(s, c, start, end)) s.api_calls.push_back(a);
}

template <class Ev, class Sink>
void read_sync(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid) {
  Sync y;
  y.start = start;
  y.end = end;
  read_args<kineto_fields::kSyncArgs>(ev, c, y, pid, [&]<A key>() {
    // Where the awaited event was recorded (Kineto, HTA). Our writer marks values it derived
    // from the CUDA event records, which travel in the streamlab block: not the sync's own.
    if constexpr (key == A::WaitOnStream) {
      if (!ev.has_arg(A::WaitDerived)) {
        y.event_stream = c.fit_or_none<uint32_t>(ev.arg_int(A::WaitOnStream, -1), kineto_fields::arg_label<A::WaitOnStream>(), kNoStream);
        const int64_t rc = ev.arg_int(A::WaitRecordCorr, -1);
        y.event_record_correlation = rc == -1 ? 0 : c.fit<uint32_t>(rc, kineto_fields::arg_label<A::WaitRecordCorr>());
      }
    }
  });
  // Without a numeric sync type, the type by name (PyTorch writes cuda_sync_kind).
  if (ev.arg_int(A::SyncType, -1) == -1) y.type = sync_type_from_name(ev.arg_str(A::SyncKind, ev.str_or(F_NAME, "")));
  if (keep(s, c, start, end)) s.syncs.push_back(y);
}

template <class Ev, class Sink>
void read_nvtx_range(const Ev& ev, Sink& s, FieldCheck& c, Ns start, Ns end, int64_t pid, int64_t tid) {
  NvtxRange r;
  r.start = start;
  r.end = end;
  r.name = s.intern(ev.str(F_NAME));
  r.pid = c.fit<uint32_t>(pid, "\"pid\"");
  r.tid = c.fit<uint32_t>(tid, "\"tid\"") & kTidStreamMask;
  read_args<kineto_fields::kNvtxArgs>(ev, c, r, pid, [&]<A key>() {
    if constexpr (key == A::Domain) {
      std::string_view dom = ev.arg_str(A::Domain, "");
      r.domain = dom.empty() ? 0 : s.intern(dom);
    } else if constexpr (key == A::EndThread) {
      r.end_tid = c.fit<uint32_t>(ev.arg_int(A::EndThread, r.tid), kineto_fields::arg_label<A::EndThread>());
    }
  });
  if (keep(s, c, start, end)) s.nvtx.push_back(r);
}

// A complete ("X") event of a category the trace model holds.
template <class Ev, class Sink>
void read_complete_event(const Ev& ev, Sink& s, const EventContext& cx, std::string_view cat) {
  FieldCheck c{record_of(cat), {}, {}};
  const Ns start = cx.to_ns(ev.number(F_TS), c, "\"ts\"");
  const Ns end = cx.end_of(start, ev.number(F_DUR), c);
  const int64_t pid = ev.integer(F_PID);
  const int64_t tid = ev.integer(F_TID);
  if (is(cat, "kernel")) read_kernel(ev, s, c, start, end, pid);
  else if (is(cat, "gpu_memcpy")) read_memcpy(ev, s, c, start, end, pid);
  else if (is(cat, "gpu_memset")) read_memset(ev, s, c, start, end, pid);
  else if (is(cat, "cuda_runtime") || is(cat, "cuda_driver")) read_api_call(ev, s, c, start, end, pid, tid, is(cat, "cuda_driver"));
  else if (is(cat, "cuda_sync")) read_sync(ev, s, c, start, end, pid);
  else read_nvtx_range(ev, s, c, start, end, pid, tid);  // user_annotation
}

// Runs `f` (which reads what only counts in PyTorch traces) when the document is not ours.
template <class Sink, class F>
void unless_ours(Sink& s, const EventContext& cx, F&& f) {
  if (cx.ours == Ours::No) f();
  else if (cx.ours == Ours::Unknown) s.speculate_not_ours(f);
}

template <class Ev, class Sink>
void read_instant_event(const Ev& ev, Sink& s, const EventContext& cx, std::string_view ph_i) {
  std::string_view cat = ev.str_or(F_CAT, "");
  std::string_view name = ev.str_or(F_NAME, "");
  if (is(cat, "user_annotation")) {
    FieldCheck c{"NVTX mark", {}, {}};
    NvtxRange r;
    r.start = r.end = cx.to_ns(ev.number(F_TS), c, "\"ts\"");
    r.name = s.intern(name);
    r.kind = NvtxKind::Mark;
    r.pid = c.fit<uint32_t>(ev.integer(F_PID), "\"pid\"");
    r.tid = c.fit<uint32_t>(ev.integer(F_TID), "\"tid\"") & kTidStreamMask;
    r.end_tid = r.tid;
    std::string_view dom = ev.arg_str(A::Domain, "");
    r.domain = dom.empty() ? 0 : s.intern(dom);
    if (keep(s, c, r.start, r.end)) s.nvtx.push_back(r);
  } else if (is_gpu_or_api_category(cat)) {
    reject_not_complete(s, cat, ph_i);  // a kernel, copy or API call needs its duration
  } else if (is(name, "[memory]") && cx.ours != Ours::Yes) {
    unless_ours(s, cx, [&] {
      Ns ts = to_ns_or_bad(ev, cx);
      int64_t bytes = ev.arg_int(A::MemBytes, 0);
      uint64_t addr = uint64_t(ev.arg_int(A::Addr, 0));
      int64_t dev = ev.arg_int(A::DeviceId, -1);
      if (dev < 0) return;  // CPU memory
      if (dev > 0xFFFF) ev.bad("args.\"Device Id\" " + std::to_string(dev) + " outside 0..65535");
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
    unless_ours(s, cx, [&] { s.process(u32(ev, pid, "\"pid\""), value); });
  } else if (is(name, "thread_name") && value.rfind("stream ", 0) != 0) {
    unless_ours(s, cx, [&] { s.thread(u32(ev, pid, "\"pid\""), u32(ev, ev.integer(F_TID), "\"tid\"") & kTidStreamMask, value); });
  }
}

template <class Ev, class Sink>
void read_counter_event(const Ev& ev, Sink& s, const EventContext& cx) {
  std::string name(ev.str_or(F_NAME, "counter"));
  Ns ts = to_ns_or_bad(ev, cx);
  int64_t pid = ev.integer(F_PID);
  if (!ev.args()) return;
  // In key order, a repeated key counted once with its last value (as nlohmann's object held them).
  std::vector<std::pair<std::string_view, double>> items = ev.counter_values();
  for (const auto& [k, v] : items) {
    CounterSample c;
    c.ts = ts;
    c.value = v;
    c.name = s.intern(items.size() == 1 ? name : name + "." + std::string(k));
    c.pid = u32(ev, pid, "\"pid\"");
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
    read_instant_event(ev, s, cx, ph);
  } else if (is(ph, "M")) {
    read_metadata_event(ev, s, cx);
  } else if (is(ph, "C")) {
    if (cx.ours == Ours::Yes) return;  // derived from allocations / the block
    unless_ours(s, cx, [&] { read_counter_event(ev, s, cx); });
  } else if (is(ph, "B") || is(ph, "E") || is(ph, "b") || is(ph, "e") || is(ph, "n")) {
    const std::string_view cat = ev.str_or(F_CAT, "");
    if (is_gpu_or_api_category(cat)) reject_not_complete(s, cat, ph);
    else ++s.skipped;
  } else if (is(ph, "s") || is(ph, "f") || is(ph, "t")) {
    ++s.skipped;  // flows
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
