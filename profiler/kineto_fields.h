// The fields of our Kineto-style JSON (docs/traces.md 3), defined once: the args of each kind of
// trace event and the columns of each row table of the "streamlab" block. The writer
// (kineto_json.cpp) writes from these tables, both loaders (json_events.h, read by trace_io.cpp
// and trace_io_fast.cpp; the block by trace_io.cpp) read through them, and the validator
// (kineto_validate.cpp) checks against them, so that a key or a column cannot be spelt, ranged or
// ordered differently in one of them.
//
// Everything here resolves at compile time: a key is an enum (A) whose text is a constant, a
// table is a constexpr tuple iterated with a fold, so the loaders' per-event work is what it was.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "profiler/trace.h"

namespace sl::prof::kineto_fields {

// ---------------------------------------------------------------- an event's own keys

// The Trace Event Format keys of an event that the loaders read (json_events.h, both loaders) and
// the validator checks. (The writer writes them inside longer constant texts such as
// `{"ph": "X", "cat": "`; the round-trip tests read every one of those back.)
enum Field : uint8_t { F_PH, F_CAT, F_NAME, F_TS, F_DUR, F_PID, F_TID, F_ARGS, F_COUNT };
inline constexpr const char* kFieldNames[F_COUNT] = {"ph", "cat", "name", "ts", "dur", "pid", "tid", "args"};

// ---------------------------------------------------------------- keys of "args"

// The "args" keys the loaders read, then (SL_WRITTEN_ARG_KEYS) those only written: for Kineto's
// readers (HTA, Perfetto) or derived from other fields.
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
#define SL_WRITTEN_ARG_KEYS(X)                                                                          \
  X(Queued, "queued") X(Bandwidth, "memory bandwidth (GB/s)") X(BlocksPerSm, "blocks per SM")             \
  X(WarpsPerSm, "warps per SM") X(ExternalId, "External id")

enum class A : uint8_t {
#define SL_X(e, s) e,
  SL_ARG_KEYS(SL_X) SL_WRITTEN_ARG_KEYS(SL_X)
#undef SL_X
      Count
};
inline constexpr const char* kArgNames[] = {
#define SL_X(e, s) s,
    SL_ARG_KEYS(SL_X) SL_WRITTEN_ARG_KEYS(SL_X)
#undef SL_X
};
// The keys the loaders index (the first kArgCount of kArgNames): one bit each in a 64-bit mask.
inline constexpr size_t kArgCount = size_t(A::Queued);
static_assert(kArgCount <= 64);
static_assert(std::size(kArgNames) == size_t(A::Count));

inline constexpr std::string_view name_of(A k) { return kArgNames[size_t(k)]; }

// A constant text: `args."<key>"` for messages, the key itself for the writer.
template <size_t N>
struct Text {
  char s[N + 1] = {};
  constexpr std::string_view view() const { return {s, N}; }
};
template <A k>
inline constexpr auto kArgLabel = [] {
  constexpr std::string_view key = name_of(k);
  Text<key.size() + 7> t;  // args."<key>"
  constexpr std::string_view head = "args.\"";
  size_t n = 0;
  for (char c : head) t.s[n++] = c;
  for (char c : key) t.s[n++] = c;
  t.s[n++] = '"';
  return t;
}();
// The message label of an arg ("args.\"stream\""), a constant.
template <A k>
constexpr std::string_view arg_label() {
  return kArgLabel<k>.view();
}

// ---------------------------------------------------------------- args of the trace events

// CUDA's stream ids fit 32 bits; 0xFFFFFFFF is the model's "no stream" (context scope).
inline constexpr int64_t kMaxStream = int64_t(kNoStream) - 1;

// What the loaders take when an arg is absent (or null).
inline constexpr int64_t kAbsentIsPid = std::numeric_limits<int64_t>::min();      // the event's "pid"
inline constexpr int64_t kAbsentKeeps = std::numeric_limits<int64_t>::min() + 1;  // the value set before
inline constexpr int64_t kAbsentIsError = std::numeric_limits<int64_t>::min() + 2;  // the event is malformed

// When the writer writes an arg.
enum class Written : uint8_t {
  Always,
  NonZero,  // left out when 0 (the loaders' default)
  IfTime,   // left out when kNoTime
  ByWriter, // by the writer's own rule for the group it belongs to (kineto_json.cpp)
};

// How an integer arg maps to its member.
enum class Coding : uint8_t {
  Plain,        // the value, in lo..hi
  NoneIsMinus1, // written -1 for `none` (kNoStream / kNoId); read -1 as none, else lo..hi
  WrittenMinus1,// written -1 for kNoStream; read in lo..hi (a GPU op always has a stream)
  NsOrNone,     // nanoseconds; a negative value reads as kNoTime (never range-checked)
};

// One integer arg of a record: its key, the member it holds, the range the loaders accept
// (outside it the record is dropped and counted: json_events.h FieldCheck), the value of an
// absent arg, and when the writer writes it.
template <class Rec, class T>
struct IntArg {
  A key;
  T Rec::*member;
  int64_t lo, hi;
  int64_t absent = 0;
  Written written = Written::Always;
  Coding coding = Coding::Plain;
  bool kineto = false;  // one of Kineto's args: the validator requires it
  int64_t none = 0;     // NoneIsMinus1 / WrittenMinus1: the member's "none" value
};

// An arg with a form of its own (an array, a value derived from other fields, a name that decides
// how other args read): the writer and the loaders each handle it by its key, in this place of
// the table; the validator checks its presence (kineto) and JSON type.
enum class Shape : uint8_t { Integer, Number, String, Dim3, NumberOrString };
template <class Rec>
struct SpecialArg {
  A key;
  Shape shape;
  bool kineto = false;
  bool read = true;  // false: written only (the loaders ignore it)
};

template <class T>
inline constexpr int64_t max_of = int64_t(std::min<uint64_t>(uint64_t(std::numeric_limits<T>::max()), uint64_t(INT64_MAX) - 1));
template <class T>
inline constexpr int64_t min_of = int64_t(std::numeric_limits<T>::min());

// The common case: T's whole range, default 0.
template <class Rec, class T>
constexpr IntArg<Rec, T> int_arg(A key, T Rec::*m, Written w = Written::Always, bool kineto = false) {
  return {key, m, min_of<T>, max_of<T>, 0, w, Coding::Plain, kineto, 0};
}
// An enum member: 0 .. its last value.
template <class Rec, class E>
constexpr IntArg<Rec, E> enum_arg(A key, E Rec::*m, E last, int64_t absent = 0) {
  return {key, m, 0, int64_t(last), absent, Written::Always, Coding::Plain, false, 0};
}

// Kernels (cat "kernel"), in the order written. Kineto's "queued" (absolute us), "shared memory",
// "blocks per SM", "warps per SM", "grid" and "block" are special; the exact shared memory split
// and the latency timestamps in ns are streamlab's, for the round trip.
inline constexpr auto kKernelArgs = std::make_tuple(
    SpecialArg<Kernel>{A::Queued, Shape::Integer, false, false},
    IntArg<Kernel, uint16_t>{A::Device, &Kernel::device, 0, 0xFFFF, kAbsentIsPid, Written::Always, Coding::Plain, true},
    int_arg(A::Context, &Kernel::context, Written::Always, true),
    IntArg<Kernel, uint32_t>{A::Stream, &Kernel::stream, 0, kMaxStream, kAbsentIsError, Written::Always, Coding::Plain, true},
    int_arg(A::Correlation, &Kernel::correlation, Written::Always, true),
    int_arg(A::Registers, &Kernel::registers, Written::Always, true),
    SpecialArg<Kernel>{A::Smem, Shape::Integer, true},
    SpecialArg<Kernel>{A::BlocksPerSm, Shape::Number, false, false},
    SpecialArg<Kernel>{A::WarpsPerSm, Shape::Number, false, false},
    SpecialArg<Kernel>{A::Grid, Shape::Dim3, true},
    SpecialArg<Kernel>{A::Block, Shape::Dim3, true},
    // Written together when either is set.
    int_arg(A::GraphId, &Kernel::graph_id, Written::ByWriter),
    int_arg(A::GraphNodeId, &Kernel::graph_node_id, Written::ByWriter),
    SpecialArg<Kernel>{A::StaticSmem, Shape::Integer},
    SpecialArg<Kernel>{A::DynamicSmem, Shape::Integer},
    IntArg<Kernel, Ns>{A::QueuedNs, &Kernel::queued, 0, INT64_MAX - 1, -1, Written::IfTime, Coding::NsOrNone},
    IntArg<Kernel, Ns>{A::SubmittedNs, &Kernel::submitted, 0, INT64_MAX - 1, -1, Written::IfTime, Coding::NsOrNone},
    int_arg(A::LaunchType, &Kernel::launch_type, Written::NonZero),
    int_arg(A::Process, &Kernel::pid, Written::NonZero));

// The args copies and sets begin with (Kineto's).
template <class Op>
constexpr auto gpu_op_head() {
  return std::make_tuple(
      IntArg<Op, uint16_t>{A::Device, &Op::device, 0, 0xFFFF, kAbsentIsPid, Written::Always, Coding::Plain, true},
      int_arg(A::Context, &Op::context, Written::Always, true),
      IntArg<Op, uint32_t>{A::Stream, &Op::stream, 0, kMaxStream, kAbsentIsError, Written::Always, Coding::WrittenMinus1,
                           true, kNoStream},
      int_arg(A::Correlation, &Op::correlation, Written::Always, true),
      int_arg(A::Bytes, &Op::bytes, Written::Always, true),
      SpecialArg<Op>{A::Bandwidth, Shape::NumberOrString, true, false});
}
// And end with.
template <class Op>
constexpr auto gpu_op_tail() {
  return std::make_tuple(int_arg(A::GraphNodeId, &Op::graph_node_id, Written::NonZero),
                         int_arg(A::Process, &Op::pid, Written::NonZero));
}

// Copies (cat "gpu_memcpy"): the kinds are read from the name first (PyTorch writes no numeric
// kinds), so an absent kind keeps that.
inline constexpr auto kMemcpyArgs = std::tuple_cat(
    gpu_op_head<Memcpy>(),
    std::make_tuple(enum_arg(A::CopyKind, &Memcpy::kind, MemcpyKind::PtoP, kAbsentKeeps),
                    enum_arg(A::SrcKind, &Memcpy::src_kind, MemoryKind::ManagedStatic, kAbsentKeeps),
                    enum_arg(A::DstKind, &Memcpy::dst_kind, MemoryKind::ManagedStatic, kAbsentKeeps)),
    gpu_op_tail<Memcpy>());

// Sets (cat "gpu_memset").
inline constexpr auto kMemsetArgs = std::tuple_cat(
    gpu_op_head<Memset>(),
    std::make_tuple(int_arg(A::Value, &Memset::value),
                    enum_arg(A::MemoryKind, &Memset::mem_kind, MemoryKind::ManagedStatic, int64_t(MemoryKind::Device))),
    gpu_op_tail<Memset>());

// Runtime and driver calls (cat "cuda_runtime" / "cuda_driver"); pid and tid are the event's.
inline constexpr auto kApiCallArgs =
    std::make_tuple(int_arg(A::Cbid, &ApiCall::cbid, Written::Always, true),
                    int_arg(A::Correlation, &ApiCall::correlation, Written::Always, true),
                    int_arg(A::ReturnValue, &ApiCall::return_value, Written::NonZero));

// Synchronizations (cat "cuda_sync"). The wait_on args (Kineto's, which HTA reads) name where
// the awaited event was recorded: the sync's own values, or values the writer derived from the
// CUDA event records, marked "wait_on derived" and then not read back (they are not the sync's).
inline constexpr auto kSyncArgs = std::make_tuple(
    SpecialArg<Sync>{A::SyncKind, Shape::String, true},
    // The wait_on group, written when writes_wait_args().
    SpecialArg<Sync>{A::WaitOnStream, Shape::Integer},
    SpecialArg<Sync>{A::WaitRecordCorr, Shape::Integer, false, false},  // read with WaitOnStream
    SpecialArg<Sync>{A::WaitDerived, Shape::Integer, false, false},     // likewise
    IntArg<Sync, uint32_t>{A::WaitEvent, &Sync::event, 0, int64_t(kNoId) - 1, -1, Written::ByWriter,
                           Coding::NoneIsMinus1, false, kNoId},
    IntArg<Sync, uint32_t>{A::Stream, &Sync::stream, 0, int64_t(kNoStream) - 1, -1, Written::Always,
                           Coding::NoneIsMinus1, true, kNoStream},
    int_arg(A::Correlation, &Sync::correlation, Written::Always, true),
    IntArg<Sync, uint16_t>{A::Device, &Sync::device, 0, 0xFFFF, kAbsentIsPid, Written::Always, Coding::Plain, true},
    int_arg(A::Context, &Sync::context, Written::Always, true),
    enum_arg(A::SyncType, &Sync::type, SyncType::ContextSynchronize, kAbsentKeeps),
    int_arg(A::Process, &Sync::pid, Written::NonZero));
// The wait_on args are written (as a group) for event syncs and waits, and for any sync that
// carries its own.
inline bool writes_wait_args(const Sync& s) {
  return s.type == SyncType::EventSynchronize || s.type == SyncType::StreamWaitEvent || s.event_stream != kNoStream ||
         s.event_record_correlation != 0;
}

// NVTX ranges and marks (cat "user_annotation"); pid and tid are the event's.
inline constexpr auto kNvtxArgs = std::make_tuple(
    SpecialArg<NvtxRange>{A::ExternalId, Shape::Integer, false, false},
    SpecialArg<NvtxRange>{A::Domain, Shape::String},
    enum_arg(A::NvtxKind, &NvtxRange::kind, NvtxKind::Mark),
    int_arg(A::Color, &NvtxRange::color, Written::NonZero),
    int_arg(A::Category, &NvtxRange::category, Written::NonZero),
    SpecialArg<NvtxRange>{A::EndThread, Shape::Integer});

// Calls f(field) for each field of `table`, in order, at compile time (a fold over the tuple).
template <class Table, class F>
constexpr void for_each_field(const Table& table, F&& f) {
  std::apply([&](const auto&... field) { (f(field), ...); }, table);
}
// As for_each_field, with each field and its index as template arguments
// (`f.template operator()<field, index>()`),
// so that its key is a constant where the writer builds `"key": ` texts at compile time.
template <const auto& Table, class F>
constexpr void for_each_field_t(F&& f) {
  using Tup = std::remove_cvref_t<decltype(Table)>;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (f.template operator()<std::get<I>(Table), I>(), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tup>>{});
}

template <class F>
struct is_special : std::false_type {};
template <class Rec>
struct is_special<SpecialArg<Rec>> : std::true_type {};
template <class F>
inline constexpr bool is_special_v = is_special<std::remove_cvref_t<F>>::value;

// The integer an IntArg's member holds, as written (before Coding).
template <class Rec, class T>
constexpr int64_t member_value(const IntArg<Rec, T>& f, const Rec& r) {
  if constexpr (std::is_enum_v<T>) return int64_t(std::underlying_type_t<T>(r.*f.member));
  else return int64_t(r.*f.member);
}
// The value the writer writes for an IntArg (for the Coding), and whether it writes it.
template <class Rec, class T>
constexpr bool written(const IntArg<Rec, T>& f, const Rec& r) {
  switch (f.written) {
    case Written::Always: return true;
    case Written::NonZero: return member_value(f, r) != 0;
    case Written::IfTime: return member_value(f, r) != kNoTime;
    case Written::ByWriter: return true;
  }
  return true;
}
template <class Rec, class T>
constexpr int64_t written_value(const IntArg<Rec, T>& f, const Rec& r) {
  if ((f.coding == Coding::NoneIsMinus1 || f.coding == Coding::WrittenMinus1) && member_value(f, r) == f.none) return -1;
  return member_value(f, r);
}

// ---------------------------------------------------------------- devices

// One property of a device: its key and member; an absent key reads as `absent` (strings: "").
template <class T>
struct DeviceKey {
  const char* name;
  T Device::*member;
  int64_t absent = 0;
};

// Kineto's "deviceProperties" entries (CUDA's cudaDeviceProp names), in the order written; the
// validator requires each key, of its JSON type.
inline constexpr auto kDeviceProperties = std::make_tuple(
    DeviceKey<uint32_t>{"id", &Device::id}, DeviceKey<std::string>{"name", &Device::name},
    DeviceKey<int64_t>{"totalGlobalMem", &Device::total_memory}, DeviceKey<int>{"computeMajor", &Device::compute_major},
    DeviceKey<int>{"computeMinor", &Device::compute_minor},
    DeviceKey<int>{"maxThreadsPerBlock", &Device::max_threads_per_block},
    DeviceKey<int>{"maxThreadsPerMultiprocessor", &Device::max_threads_per_sm},
    DeviceKey<int>{"regsPerBlock", &Device::regs_per_block},
    DeviceKey<int>{"regsPerMultiprocessor", &Device::regs_per_sm}, DeviceKey<int>{"warpSize", &Device::warp_size, 32},
    DeviceKey<int64_t>{"sharedMemPerBlock", &Device::smem_per_block},
    DeviceKey<int64_t>{"sharedMemPerMultiprocessor", &Device::smem_per_sm},
    DeviceKey<int>{"numSms", &Device::sm_count},
    DeviceKey<int64_t>{"sharedMemPerBlockOptin", &Device::smem_per_block_optin});

// The block's "devices": what deviceProperties has no key for, merged into its devices by id
// ("id" first; "name" is used when deviceProperties lacks the device).
inline constexpr auto kBlockDeviceKeys = std::make_tuple(
    DeviceKey<uint32_t>{"id", &Device::id}, DeviceKey<std::string>{"name", &Device::name},
    DeviceKey<std::string>{"uuid", &Device::uuid}, DeviceKey<int64_t>{"l2_cache_size", &Device::l2_cache_size},
    DeviceKey<int64_t>{"clock_rate_khz", &Device::clock_rate_khz},
    DeviceKey<int64_t>{"memory_bandwidth", &Device::memory_bandwidth});

// ---------------------------------------------------------------- rows of the "streamlab" block

// The block's tables are arrays of compact rows ([1, 0, 1234, ...]) read back by position: the
// columns of each are named here, in their on-disk order (the format is unchanged; files written
// before the names existed read the same).
enum class Col : uint8_t {
  Int,         // an integer of the member's type (a value it cannot hold makes the file malformed)
  TimeOrNull,  // nanoseconds, null for kNoTime
  IdOrMinus1,  // a stream id, -1 for kNoStream (any negative value reads as kNoStream)
  Enum,        // an enum, as its underlying integer
  Name,        // a StrId, written as its string
  Text,        // a std::string
  Number,      // a double
};

template <class Rec, class T>
struct Column {
  const char* name;
  T Rec::*member;
  Col col;
};

template <class Rec, class T>
constexpr Column<Rec, T> column(const char* name, T Rec::*m, Col col = Col::Int) {
  return {name, m, col};
}

inline constexpr auto kContextColumns = std::make_tuple(
    column("id", &Context::id), column("device", &Context::device), column("pid", &Context::pid),
    column("null_stream", &Context::null_stream, Col::IdOrMinus1), column("created", &Context::created, Col::TimeOrNull),
    column("destroyed", &Context::destroyed, Col::TimeOrNull));

inline constexpr auto kStreamColumns = std::make_tuple(
    column("id", &Stream::id), column("context", &Stream::context), column("device", &Stream::device),
    column("pid", &Stream::pid), column("priority", &Stream::priority), column("flags", &Stream::flags),
    column("is_null", &Stream::is_null), column("name", &Stream::name, Col::Name),
    column("created", &Stream::created, Col::TimeOrNull), column("destroyed", &Stream::destroyed, Col::TimeOrNull));

inline constexpr auto kProcessColumns =
    std::make_tuple(column("pid", &Process::pid), column("name", &Process::name, Col::Text));

inline constexpr auto kThreadColumns = std::make_tuple(column("pid", &Thread::pid), column("tid", &Thread::tid),
                                                       column("name", &Thread::name, Col::Text));

inline constexpr auto kCudaEventColumns = std::make_tuple(
    column("ts", &CudaEventRecord::ts, Col::TimeOrNull), column("correlation", &CudaEventRecord::correlation),
    column("context", &CudaEventRecord::context), column("stream", &CudaEventRecord::stream),
    column("event", &CudaEventRecord::event), column("pid", &CudaEventRecord::pid),
    column("device", &CudaEventRecord::device));

// The allocation row: [address, bytes, alloc, free, correlation, context, stream, pid, device,
// kind, from_pool].
inline constexpr auto kAllocationColumns = std::make_tuple(
    column("address", &Allocation::address), column("bytes", &Allocation::bytes),
    column("alloc", &Allocation::alloc, Col::TimeOrNull), column("free", &Allocation::free, Col::TimeOrNull),
    column("correlation", &Allocation::correlation), column("context", &Allocation::context),
    column("stream", &Allocation::stream, Col::IdOrMinus1), column("pid", &Allocation::pid),
    column("device", &Allocation::device), column("kind", &Allocation::kind, Col::Enum),
    column("from_pool", &Allocation::from_pool));

inline constexpr auto kOverheadColumns = std::make_tuple(
    column("start", &Overhead::start), column("end", &Overhead::end), column("kind", &Overhead::kind),
    column("object_kind", &Overhead::object_kind), column("object_id", &Overhead::object_id),
    column("pid", &Overhead::pid));

inline constexpr auto kCounterColumns =
    std::make_tuple(column("ts", &CounterSample::ts), column("value", &CounterSample::value, Col::Number),
                    column("name", &CounterSample::name, Col::Name), column("pid", &CounterSample::pid));

// A row table of the block: its key in the block, the trace's vector it fills, its columns.
template <class Rec, class Columns>
struct BlockTable {
  const char* key;
  std::vector<Rec> Trace::*rows;
  const Columns& columns;
  const char* separator;  // between rows: a line break in the tables that grow with the trace
};
template <class Rec, class Columns>
constexpr BlockTable<Rec, Columns> block_table(const char* key, std::vector<Rec> Trace::*rows, const Columns& c,
                                               const char* separator) {
  return {key, rows, c, separator};
}

// The block's row tables, in the order written.
inline constexpr auto kBlockTables = std::make_tuple(
    block_table("contexts", &Trace::contexts, kContextColumns, ", "),
    block_table("streams", &Trace::streams, kStreamColumns, ",\n"),
    block_table("processes", &Trace::processes, kProcessColumns, ", "),
    block_table("threads", &Trace::threads, kThreadColumns, ", "),
    block_table("cuda_events", &Trace::cuda_events, kCudaEventColumns, ",\n"),
    block_table("allocations", &Trace::allocations, kAllocationColumns, ",\n"),
    block_table("overheads", &Trace::overheads, kOverheadColumns, ",\n"),
    block_table("counters", &Trace::counters, kCounterColumns, ",\n"));

// The widest row (the loaders keep a row's values in a fixed array).
inline constexpr size_t kMaxColumns = [] {
  size_t n = 0;
  for_each_field(kBlockTables, [&](const auto& t) {
    n = std::max(n, std::tuple_size_v<std::remove_cvref_t<decltype(t.columns)>>);
  });
  return n;
}();

}  // namespace sl::prof::kineto_fields
