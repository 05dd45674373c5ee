#include "profiler/trace_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <zlib.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/gzip.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"

// JSON loading: simdjson's DOM parser (fully validating, a flat tape instead of a tree of
// nodes) and one pass over each event's fields into fixed slots. nlohmann::json is only used
// on the error path: when simdjson rejects a document, nlohmann's SAX parser (no DOM) names the
// byte offset and what it expected, exactly as the loader always reported it.

namespace sl::prof {

namespace {

namespace dom = simdjson::dom;
using json = nlohmann::json;
using Type = dom::element_type;

bool is_type(dom::element e, Type t) { return e.type() == t; }
bool is_number(dom::element e) {
  Type t = e.type();
  return t == Type::INT64 || t == Type::UINT64 || t == Type::DOUBLE;
}
bool is_integer(dom::element e) {
  Type t = e.type();
  return t == Type::INT64 || t == Type::UINT64;
}
double as_double(dom::element e) {  // e is a number
  switch (e.type()) {
    case Type::INT64: return double(e.get_int64().value_unsafe());
    case Type::UINT64: return double(e.get_uint64().value_unsafe());
    default: return e.get_double().value_unsafe();
  }
}
int64_t as_int64(dom::element e) {  // e is an integer (nlohmann's get<int64_t>)
  return e.type() == Type::UINT64 ? int64_t(e.get_uint64().value_unsafe()) : e.get_int64().value_unsafe();
}
std::string_view as_str(dom::element e) { return e.get_string().value_unsafe(); }
// By value: a range-for over `x.get_object().value_unsafe()` would dangle (it returns T&& into
// a temporary).
dom::object as_obj(dom::element e) {  // e is an object
  dom::object o = e.get_object().value_unsafe();
  return o;
}
dom::array as_arr(dom::element e) {  // e is an array
  dom::array a = e.get_array().value_unsafe();
  return a;
}

std::string brief(dom::element e) {
  std::string s = simdjson::minify(e);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const char* type_name(dom::element e) {
  switch (e.type()) {
    case Type::NULL_VALUE: return "null";
    case Type::OBJECT: return "an object";
    case Type::ARRAY: return "an array";
    case Type::STRING: return "a string";
    case Type::BOOL: return "a boolean";
    case Type::INT64:
    case Type::UINT64: return "an integer";
    case Type::DOUBLE: return "a number";
  }
  return "a value";
}

// The event fields the loader reads, and the args keys. Each event's fields are read in one pass
// into slots; a key given twice keeps its last value (as nlohmann did).
enum Field : uint8_t { F_PH, F_CAT, F_NAME, F_TS, F_DUR, F_PID, F_TID, F_ARGS, F_COUNT };
constexpr const char* kFieldNames[F_COUNT] = {"ph", "cat", "name", "ts", "dur", "pid", "tid", "args"};

int field_of(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (k == "ph") return F_PH;
      if (k == "ts") return F_TS;
      return -1;
    case 3:
      if (k == "cat") return F_CAT;
      if (k == "pid") return F_PID;
      if (k == "tid") return F_TID;
      if (k == "dur") return F_DUR;
      return -1;
    case 4:
      if (k == "name") return F_NAME;
      if (k == "args") return F_ARGS;
      return -1;
    default: return -1;
  }
}

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
constexpr const char* kArgNames[] = {
#define SL_X(e, s) s,
    SL_ARG_KEYS(SL_X)
#undef SL_X
};
constexpr size_t kArgCount = size_t(A::Count);
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
const ArgTable kArgTable;

// Field access for one trace event, with errors that name the file, the event and the field.
class Ev {
 public:
  Ev(dom::object e, size_t index, const std::string& origin) : i_(index), origin_(origin) {
    for (dom::key_value_pair kv : e) {
      int f = field_of(kv.key);
      if (f >= 0) {
        f_[f] = kv.value;
        has_ |= uint32_t(1) << f;
      }
    }
  }

  [[noreturn]] void bad(const std::string& what) const {
    std::string who;
    if (has(F_CAT) && is_type(f_[F_CAT], Type::STRING)) who += " cat \"" + std::string(as_str(f_[F_CAT])) + "\"";
    if (has(F_NAME) && is_type(f_[F_NAME], Type::STRING)) {
      std::string n(as_str(f_[F_NAME]));
      if (n.size() > 40) n = n.substr(0, 37) + "...";
      who += " name \"" + n + "\"";
    }
    fail(origin_, ": traceEvents[", i_, "]", who, ": ", what);
  }

  bool has(Field f) const { return (has_ >> f) & 1; }
  dom::element at(Field f) const {
    if (!has(f)) bad(std::string("expected field \"") + kFieldNames[f] + "\"");
    return f_[f];
  }
  std::string_view str(Field f) const {
    dom::element v = at(f);
    if (!is_type(v, Type::STRING))
      bad(std::string("expected \"") + kFieldNames[f] + "\" to be a string, found " + type_name(v) + " " + brief(v));
    return as_str(v);
  }
  std::string_view str_or(Field f, std::string_view d) const { return has(f) ? str(f) : d; }
  // Integer (or integral number, or numeric string: some traces write ids as strings).
  static bool try_integer(dom::element v, int64_t& out) {
    switch (v.type()) {
      case Type::INT64:
      case Type::UINT64: out = as_int64(v); return true;
      case Type::DOUBLE: {
        double d = v.get_double().value_unsafe();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
          out = int64_t(d);
          return true;
        }
        return false;
      }
      case Type::STRING: {
        std::string s(as_str(v));
        char* end = nullptr;
        errno = 0;
        long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end && *end == 0 && errno == 0) {
          out = x;
          return true;
        }
        return false;
      }
      default: return false;
    }
  }
  [[noreturn]] void bad_integer(dom::element v, const std::string& what) const {
    bad("expected " + what + " to be an integer, found " + type_name(v) + " " + brief(v));
  }
  int64_t integer(Field f) const {
    dom::element v = at(f);
    int64_t x;
    if (!try_integer(v, x)) bad_integer(v, std::string("\"") + kFieldNames[f] + "\"");
    return x;
  }
  double number(Field f) const {
    dom::element v = at(f);
    if (!is_number(v))
      bad(std::string("expected \"") + kFieldNames[f] + "\" to be a number, found " + type_name(v) + " " + brief(v));
    double d = as_double(v);
    if (!std::isfinite(d)) bad(std::string("\"") + kFieldNames[f] + "\" is not finite");
    return d;
  }

  // "args": absent -> false; not an object -> error; else its known keys are indexed (once).
  bool args() const {
    if (!has(F_ARGS)) return false;
    if (!args_indexed_) {
      dom::element a = f_[F_ARGS];
      if (!is_type(a, Type::OBJECT)) bad("expected \"args\" to be an object, found " + std::string(type_name(a)));
      args_obj_ = as_obj(a);
      for (dom::key_value_pair kv : args_obj_) {
        int k = kArgTable.find(kv.key);
        if (k >= 0) {
          a_[k] = kv.value;
          a_has_ |= uint64_t(1) << k;
        }
      }
      args_indexed_ = true;
    }
    return true;
  }
  dom::object args_object() const { return args_obj_; }  // after args() returned true
  bool has_arg(A k) const { return args() && ((a_has_ >> int(k)) & 1); }
  dom::element arg(A k) const { return a_[int(k)]; }  // after has_arg(k)

  static std::string arg_label(A k) { return std::string("args.\"") + kArgNames[int(k)] + "\""; }
  int64_t arg_int(A k, int64_t d) const {
    if (!has_arg(k)) return d;
    dom::element v = arg(k);
    if (is_type(v, Type::NULL_VALUE)) return d;
    int64_t x;
    if (!try_integer(v, x)) bad_integer(v, arg_label(k));
    return x;
  }
  int64_t arg_int_req(A k) const {
    if (!has_arg(k)) bad("expected " + arg_label(k));
    dom::element v = arg(k);
    int64_t x;
    if (!try_integer(v, x)) bad_integer(v, arg_label(k));
    return x;
  }
  std::string_view arg_str(A k, std::string_view d) const {
    if (!has_arg(k)) return d;
    dom::element v = arg(k);
    if (!is_type(v, Type::STRING)) bad("expected " + arg_label(k) + " to be a string, found " + type_name(v));
    return as_str(v);
  }
  std::array<uint32_t, 3> arg_dim3(A k) const {
    std::array<uint32_t, 3> r{1, 1, 1};
    if (!has_arg(k)) return r;
    dom::element v = arg(k);
    if (!is_type(v, Type::ARRAY)) bad("expected " + arg_label(k) + " to be an array of 3 integers");
    dom::array a = as_arr(v);
    if (a.size() != 3) bad("expected " + arg_label(k) + " to be an array of 3 integers");
    int i = 0;
    for (dom::element x : a) {
      int64_t n;
      if (!try_integer(x, n)) bad_integer(x, arg_label(k) + "[" + std::to_string(i) + "]");
      if (n < 0 || n > 0xFFFFFFFFll) bad(arg_label(k) + " out of range");
      r[i++] = uint32_t(n);
    }
    return r;
  }

 private:
  dom::element f_[F_COUNT];
  uint32_t has_ = 0;
  size_t i_;
  const std::string& origin_;
  mutable bool args_indexed_ = false;
  mutable dom::object args_obj_;
  mutable dom::element a_[kArgCount];
  mutable uint64_t a_has_ = 0;
};

uint32_t u32(int64_t v) { return uint32_t(v); }

SyncType sync_type_from_name(std::string_view s) {
  if (s == "Event Sync" || s == "event_sync" || s == "Event Synchronize") return SyncType::EventSynchronize;
  if (s == "Stream Wait Event" || s == "stream_wait_event") return SyncType::StreamWaitEvent;
  if (s == "Stream Sync" || s == "stream_sync" || s == "Stream Synchronize") return SyncType::StreamSynchronize;
  if (s == "Context Sync" || s == "context_sync" || s == "Context Synchronize") return SyncType::ContextSynchronize;
  return SyncType::Unknown;
}

// "Memcpy HtoD (Pageable -> Device)" -> kinds (PyTorch traces carry no numeric kinds).
void parse_memcpy_name(std::string_view n, Memcpy& m) {
  static const char* kinds[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
  for (int k = 1; k <= 10; ++k)
    if (n.find(std::string(" ") + kinds[k]) != std::string_view::npos) m.kind = MemcpyKind(k);
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

// Conversions for the "streamlab" block and deviceProperties, with nlohmann's get<T>() rules
// (any number or a boolean converts to an arithmetic type; strings must be strings). A mismatch
// throws Malformed, which the caller turns into an sl::Error naming the place.
struct Malformed {
  std::string what;
};

template <class T>
T get_num(dom::element e) {
  switch (e.type()) {
    case Type::INT64: return T(e.get_int64().value_unsafe());
    case Type::UINT64: return T(e.get_uint64().value_unsafe());
    case Type::DOUBLE: {
      double d = e.get_double().value_unsafe();
      if constexpr (std::is_floating_point_v<T>) {
        return T(d);
      } else {
        // nlohmann casts; out-of-range casts are undefined behaviour, so clamp through int64.
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) throw Malformed{"number " + brief(e) + " out of range"};
        return T(int64_t(d));
      }
    }
    case Type::BOOL: return T(e.get_bool().value_unsafe() ? 1 : 0);
    default: throw Malformed{std::string("expected a number, found ") + type_name(e)};
  }
}
std::string get_str(dom::element e) {
  if (!is_type(e, Type::STRING)) throw Malformed{std::string("expected a string, found ") + type_name(e)};
  return std::string(as_str(e));
}
dom::object get_obj(dom::element e) {
  if (!is_type(e, Type::OBJECT)) throw Malformed{std::string("expected an object, found ") + type_name(e)};
  return as_obj(e);
}
dom::array get_arr(dom::element e) {
  if (!is_type(e, Type::ARRAY)) throw Malformed{std::string("expected an array, found ") + type_name(e)};
  return as_arr(e);
}
// The fields of an object by key, last value winning.
using Fields = std::unordered_map<std::string_view, dom::element>;
Fields fields_of(dom::object o) {
  Fields f;
  for (dom::key_value_pair kv : o) f[kv.key] = kv.value;
  return f;
}
template <class T>
T value_or(const Fields& f, std::string_view k, T d) {
  auto it = f.find(k);
  if (it == f.end()) return d;
  try {
    if constexpr (std::is_same_v<T, std::string>) return get_str(it->second);
    else return get_num<T>(it->second);
  } catch (Malformed& m) {
    m.what = "\"" + std::string(k) + "\": " + m.what;
    throw;
  }
}
const dom::element* find(const Fields& f, std::string_view k) {
  auto it = f.find(k);
  return it == f.end() ? nullptr : &it->second;
}
// Row i of a table in the block: an array of at least n values.
struct Row {
  std::vector<dom::element> v;
  explicit Row(dom::element e) {
    for (dom::element x : get_arr(e)) v.push_back(x);
  }
  dom::element at(size_t i) const {
    if (i >= v.size()) throw Malformed{"expected at least " + std::to_string(i + 1) + " values, found " + std::to_string(v.size())};
    return v[i];
  }
};

Ns opt_time(dom::element v) { return is_type(v, Type::NULL_VALUE) ? kNoTime : get_num<int64_t>(v); }

// The "streamlab" block of our own files.
void load_block(dom::object block, Trace& t, const std::string& origin) {
  std::string section = "block";
  size_t row = size_t(-1);
  auto rows = [&](const Fields& b, const char* name, auto&& per_row) {
    const dom::element* e = find(b, name);
    if (!e) return;
    section = name;
    row = size_t(-1);
    dom::array a = get_arr(*e);
    row = 0;
    for (dom::element r : a) {
      per_row(Row(r));
      ++row;
    }
    row = size_t(-1);
  };
  try {
    Fields b = fields_of(block);
    if (auto e = find(b, "base_time_ns")) section = "base_time_ns", t.base_time = get_num<int64_t>(*e);
    if (auto e = find(b, "session_start_utc_ns"))
      section = "session_start_utc_ns", t.session_start_utc_ns = get_num<int64_t>(*e);
    if (auto e = find(b, "counts")) {
      section = "counts";
      Fields c;
      if (is_type(*e, Type::OBJECT)) c = fields_of(get_obj(*e));
      t.counts.dropped = value_or<uint64_t>(c, "dropped", 0);
      t.counts.zero_timestamps = value_or<uint64_t>(c, "zero_timestamps", 0);
      t.counts.end_before_start = value_or<uint64_t>(c, "end_before_start", 0);
      t.counts.overhead_records = value_or<uint64_t>(c, "overhead_records", 0);
      t.counts.invalid_records = value_or<uint64_t>(c, "invalid_records", 0);
      t.counts.unknown_kinds = value_or<uint64_t>(c, "unknown_kinds", 0);
      t.counts.warmup_discarded = value_or<uint64_t>(c, "warmup_discarded", 0);
      t.counts.buffers = value_or<uint64_t>(c, "buffers", 0);
      t.counts.buffer_bytes = value_or<uint64_t>(c, "buffer_bytes", 0);
      t.counts.pool_exhausted = value_or<uint64_t>(c, "pool_exhausted", 0);
    }
    if (auto e = find(b, "metadata")) {
      section = "metadata";
      for (dom::key_value_pair kv : get_obj(*e)) t.metadata[std::string(kv.key)] = get_str(kv.value);
    }
    if (auto e = find(b, "devices")) {
      section = "devices";
      row = 0;
      for (dom::element de : get_arr(*e)) {
        Fields d = fields_of(get_obj(de));
        const dom::element* idv = find(d, "id");
        if (!idv) throw Malformed{"expected field \"id\""};
        uint32_t id = get_num<uint32_t>(*idv);
        Device* dev = nullptr;
        for (auto& x : t.devices)
          if (x.id == id) dev = &x;
        if (!dev) {
          t.devices.push_back(Device{});
          dev = &t.devices.back();
          dev->id = id;
          dev->name = value_or<std::string>(d, "name", "");
        }
        dev->uuid = value_or<std::string>(d, "uuid", "");
        dev->l2_cache_size = value_or<int64_t>(d, "l2_cache_size", 0);
        dev->clock_rate_khz = value_or<int64_t>(d, "clock_rate_khz", 0);
        dev->memory_bandwidth = value_or<int64_t>(d, "memory_bandwidth", 0);
        ++row;
      }
      row = size_t(-1);
    }
    rows(b, "contexts", [&](const Row& r) {
      Context c;
      c.id = get_num<uint32_t>(r.at(0));
      c.device = get_num<uint32_t>(r.at(1));
      c.pid = get_num<uint32_t>(r.at(2));
      int64_t ns = get_num<int64_t>(r.at(3));
      c.null_stream = ns < 0 ? kNoStream : uint32_t(ns);
      c.created = opt_time(r.at(4));
      c.destroyed = opt_time(r.at(5));
      t.contexts.push_back(c);
    });
    rows(b, "streams", [&](const Row& r) {
      Stream s;
      s.id = get_num<uint32_t>(r.at(0));
      s.context = get_num<uint32_t>(r.at(1));
      s.device = get_num<uint32_t>(r.at(2));
      s.pid = get_num<uint32_t>(r.at(3));
      s.priority = get_num<int32_t>(r.at(4));
      s.flags = get_num<uint8_t>(r.at(5));
      s.is_null = get_num<uint8_t>(r.at(6));
      s.name = t.intern(get_str(r.at(7)));
      s.created = opt_time(r.at(8));
      s.destroyed = opt_time(r.at(9));
      t.streams.push_back(s);
    });
    rows(b, "processes", [&](const Row& r) { t.processes.push_back({get_num<uint32_t>(r.at(0)), get_str(r.at(1))}); });
    rows(b, "threads", [&](const Row& r) {
      t.threads.push_back({get_num<uint32_t>(r.at(0)), get_num<uint32_t>(r.at(1)), get_str(r.at(2))});
    });
    rows(b, "cuda_events", [&](const Row& r) {
      CudaEventRecord e;
      e.ts = opt_time(r.at(0));
      e.correlation = get_num<uint32_t>(r.at(1));
      e.context = get_num<uint32_t>(r.at(2));
      e.stream = get_num<uint32_t>(r.at(3));
      e.event = get_num<uint32_t>(r.at(4));
      e.pid = get_num<uint32_t>(r.at(5));
      e.device = get_num<uint16_t>(r.at(6));
      t.cuda_events.push_back(e);
    });
    rows(b, "allocations", [&](const Row& r) {
      Allocation a;
      a.address = get_num<uint64_t>(r.at(0));
      a.bytes = get_num<uint64_t>(r.at(1));
      a.alloc = opt_time(r.at(2));
      a.free = opt_time(r.at(3));
      a.correlation = get_num<uint32_t>(r.at(4));
      a.context = get_num<uint32_t>(r.at(5));
      int64_t st = get_num<int64_t>(r.at(6));
      a.stream = st < 0 ? kNoStream : uint32_t(st);
      a.pid = get_num<uint32_t>(r.at(7));
      a.device = get_num<uint16_t>(r.at(8));
      a.kind = MemoryKind(get_num<uint8_t>(r.at(9)));
      a.from_pool = get_num<uint8_t>(r.at(10));
      t.allocations.push_back(a);
    });
    rows(b, "overheads", [&](const Row& r) {
      Overhead o;
      o.start = get_num<int64_t>(r.at(0));
      o.end = get_num<int64_t>(r.at(1));
      o.kind = get_num<uint32_t>(r.at(2));
      o.object_kind = get_num<uint32_t>(r.at(3));
      o.object_id = get_num<uint32_t>(r.at(4));
      o.pid = get_num<uint32_t>(r.at(5));
      t.overheads.push_back(o);
    });
    rows(b, "counters", [&](const Row& r) {
      CounterSample c;
      c.ts = get_num<int64_t>(r.at(0));
      c.value = get_num<double>(r.at(1));
      c.name = t.intern(get_str(r.at(2)));
      c.pid = get_num<uint32_t>(r.at(3));
      t.counters.push_back(c);
    });
  } catch (const Malformed& m) {
    std::string where = origin + ": streamlab." + section;
    if (row != size_t(-1)) where += "[" + std::to_string(row) + "]";
    fail(where, ": malformed (", m.what, ")");
  }
}

Trace load_kineto_doc(dom::element doc, const std::string& origin);

// Reading a file straight into simdjson's padded buffer (no second copy).
simdjson::padded_string read_file_padded(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open trace '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
    simdjson::padded_string s(size_t(st.st_size));
    if (st.st_size > 0 && !s.data()) {
      std::fclose(f);
      fail("reading trace '", path, "' failed: cannot allocate ", st.st_size, " bytes");
    }
    size_t n = std::fread(s.data(), 1, s.size(), f);
    bool err = std::ferror(f) || n != s.size();
    std::fclose(f);
    if (err) fail("reading trace '", path, "' failed");
    return s;
  }
  // A pipe or other stream: read it whole, then copy.
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) fail("reading trace '", path, "' failed");
  return simdjson::padded_string(text);
}

// Records nlohmann's first syntax error; builds nothing.
struct SyntaxCheck : nlohmann::json_sax<json> {
  bool failed = false;
  bool syntax = false;  // a parse_error (with a byte offset), not e.g. a number overflow
  size_t byte = 0;
  std::string what;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    failed = true;
    if (const auto* pe = dynamic_cast<const json::parse_error*>(&ex)) syntax = true, byte = pe->byte;
    what = ex.what();
    return false;
  }
};

// `text` is followed by simdjson::SIMDJSON_PADDING readable bytes.
Trace load_padded(std::string_view text, const std::string& origin) {
  if (text.size() > simdjson::SIMDJSON_MAXSIZE_BYTES)
    fail(origin, ": too large for the JSON loader (", text.size(), " bytes; at most ", simdjson::SIMDJSON_MAXSIZE_BYTES,
         ")");
  dom::parser parser;
  dom::element doc;
  // Deeper nesting than simdjson's default 1024 (nlohmann had no limit; nothing we read nests).
  simdjson::error_code err = parser.allocate(std::max<size_t>(text.size(), 64), 10000);
  if (err) fail(origin, ": cannot allocate the JSON parser for ", text.size(), " bytes (", simdjson::error_message(err), ")");
  err = parser.parse(text.data(), text.size(), false).get(doc);
  std::string redo;  // nlohmann's re-serialization, for what simdjson refused but nlohmann accepts
  if (err) {
    // The error path: nlohmann names the byte offset and what it expected, as it always did.
    SyntaxCheck check;
    bool ok = false;
    try {
      ok = json::sax_parse(text.begin(), text.end(), &check);
    } catch (const json::exception& e) {
      fail(origin, ": not valid JSON (", e.what(), ")");
    }
    if (check.failed && !check.syntax) fail(origin, ": not valid JSON (", check.what, ")");
    if (!ok || check.failed)
      fail(origin, ": not valid JSON at byte ", check.byte, " (of ", text.size(), "): ", check.what);
    // Valid JSON simdjson cannot hold as is (a number out of its range, nesting deeper than
    // 10000): load nlohmann's re-serialization (out-of-range numbers become doubles or null).
    try {
      redo = json::parse(text.begin(), text.end()).dump();
    } catch (const json::exception& e) {
      fail(origin, ": not valid JSON (", e.what(), ")");
    }
    simdjson::error_code err2 = parser.parse(redo.data(), redo.size(), true).get(doc);
    if (err2) fail(origin, ": JSON the loader cannot read (", simdjson::error_message(err), ")");
  }
  try {
    return load_kineto_doc(doc, origin);
  } catch (const simdjson::simdjson_error& e) {
    // The accessors check types first; this is the net under everything else.
    fail(origin, ": unexpected JSON value (", e.what(), ")");
  }
}

}  // namespace

const char* to_string(TraceFormat f) {
  switch (f) {
    case TraceFormat::StreamlabJson: return "streamlab JSON";
    case TraceFormat::KinetoJson: return "Kineto / PyTorch profiler JSON";
    case TraceFormat::Sqlite: return "SQLite (Nsight Systems layout)";
    default: return "unknown";
  }
}

TraceFormat detect_trace_format(const std::string& path) {
  if (is_gzip_file(path)) {
    // Only the head is unpacked: enough to tell SQLite from JSON (ours and PyTorch's JSON are
    // told apart when loading).
    gzFile g = gzopen(path.c_str(), "rb");
    if (!g) fail("cannot open trace '", path, "': ", std::strerror(errno));
    char head[16] = {};
    const int n = gzread(g, head, 16);
    gzclose(g);
    if (n == 16 && std::memcmp(head, "SQLite format 3\0", 16) == 0) return TraceFormat::Sqlite;
    return n > 0 ? TraceFormat::KinetoJson : TraceFormat::Unknown;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open trace '", path, "': ", std::strerror(errno));
  char head[16] = {};
  f.read(head, 16);
  size_t n = size_t(f.gcount());
  if (n == 16 && std::memcmp(head, "SQLite format 3\0", 16) == 0) return TraceFormat::Sqlite;
  size_t i = 0;
  while (i < n && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  if (i < n && head[i] == '{') {
    // Our files carry the "streamlab" block at the end; look at the tail.
    f.clear();
    f.seekg(0, std::ios::end);
    std::streamoff size = f.tellg();
    std::streamoff from = std::max<std::streamoff>(0, size - (std::streamoff(64) << 20));
    std::string tail;
    f.seekg(from);
    tail.resize(size_t(size - from));
    f.read(tail.data(), std::streamsize(tail.size()));
    if (tail.find("\"streamlab\": {\"version\"") != std::string::npos) return TraceFormat::StreamlabJson;
    return TraceFormat::KinetoJson;
  }
  return TraceFormat::Unknown;
}

Trace load_kineto_json(std::string_view text, const std::string& origin) {
  simdjson::padded_string padded(text.data(), text.size());
  if (!text.empty() && !padded.data()) fail(origin, ": cannot allocate ", text.size(), " bytes to parse it");
  return load_padded(std::string_view(padded.data(), text.size()), origin);
}

namespace {

Trace load_kineto_doc(dom::element doc, const std::string& origin) {
  if (!is_type(doc, Type::OBJECT))
    fail(origin, ": expected a JSON object with a \"traceEvents\" array (a Kineto / Chrome trace), found ", type_name(doc));
  // Top-level keys: the last of a repeated key wins (as in nlohmann).
  dom::element te, base_el, block_el, dp_el;
  bool has_te = false, has_base = false, has_block = false, has_dp = false;
  for (dom::key_value_pair kv : as_obj(doc)) {
    if (kv.key == "traceEvents") te = kv.value, has_te = true;
    else if (kv.key == "baseTimeNanoseconds") base_el = kv.value, has_base = true;
    else if (kv.key == "streamlab") block_el = kv.value, has_block = true;
    else if (kv.key == "deviceProperties") dp_el = kv.value, has_dp = true;
  }
  if (!has_te || !is_type(te, Type::ARRAY))
    fail(origin, ": expected a \"traceEvents\" array at the top level (a Kineto / Chrome trace)");

  Trace t;
  Ns base = 0;
  if (has_base) {
    if (!is_integer(base_el))
      fail(origin, ": expected \"baseTimeNanoseconds\" to be an integer, found ", type_name(base_el), " ", brief(base_el));
    base = as_int64(base_el);
  }
  const bool ours = has_block && is_type(block_el, Type::OBJECT);
  // PyTorch writes absolute microseconds (~1.7e15): us * 1000 would exceed 2^53 and round to
  // 256 ns; whole microseconds and the fraction are converted apart, exact to the nanosecond.
  auto to_ns = [&](double us) -> Ns {
    // int64 nanoseconds hold +-9.2e15 us; beyond that (1e29, 1e308, inf) the time is not one.
    if (!(std::fabs(us) < 9.2e15))
      fail(origin, ": a timestamp of ", us, " us is outside what the trace model holds (+-9.2e15 us)");
    const double whole = std::floor(us);
    return base + Ns(whole) * 1000 + Ns(std::llround((us - whole) * 1000.0));
  };

  if (has_dp && is_type(dp_el, Type::ARRAY)) {
    size_t i = 0;
    for (dom::element de : as_arr(dp_el)) {
      if (!is_type(de, Type::OBJECT)) fail(origin, ": deviceProperties[", i, "]: expected an object");
      try {
        Fields d = fields_of(as_obj(de));
        Device dev;
        dev.id = value_or<uint32_t>(d, "id", 0u);
        dev.name = value_or<std::string>(d, "name", std::string());
        dev.total_memory = value_or<int64_t>(d, "totalGlobalMem", 0);
        dev.compute_major = value_or<int>(d, "computeMajor", 0);
        dev.compute_minor = value_or<int>(d, "computeMinor", 0);
        dev.max_threads_per_block = value_or<int>(d, "maxThreadsPerBlock", 0);
        dev.max_threads_per_sm = value_or<int>(d, "maxThreadsPerMultiprocessor", 0);
        dev.regs_per_block = value_or<int>(d, "regsPerBlock", 0);
        dev.regs_per_sm = value_or<int>(d, "regsPerMultiprocessor", 0);
        dev.warp_size = value_or<int>(d, "warpSize", 32);
        dev.smem_per_block = value_or<int64_t>(d, "sharedMemPerBlock", 0);
        dev.smem_per_sm = value_or<int64_t>(d, "sharedMemPerMultiprocessor", 0);
        dev.sm_count = value_or<int>(d, "numSms", 0);
        dev.smem_per_block_optin = value_or<int64_t>(d, "sharedMemPerBlockOptin", 0);
        t.devices.push_back(dev);
      } catch (const Malformed& m) {
        fail(origin, ": deviceProperties[", i, "]: ", m.what);
      }
      ++i;
    }
  }

  std::unordered_map<uint64_t, std::pair<Ns, uint64_t>> live_mem;  // PyTorch [memory] events: addr -> (t, bytes)
  uint64_t skipped = 0;
  size_t i = 0;
  for (dom::element e : as_arr(te)) {
    const size_t index = i++;
    if (!is_type(e, Type::OBJECT)) fail(origin, ": traceEvents[", index, "]: expected an object, found ", type_name(e));
    Ev ev(as_obj(e), index, origin);
    if (!ev.has(F_PH)) ev.bad("expected field \"ph\"");
    const std::string_view ph = ev.str(F_PH);
    if (ph == "X") {
      const std::string_view cat = ev.str_or(F_CAT, "");
      if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset" && cat != "cuda_runtime" &&
          cat != "cuda_driver" && cat != "cuda_sync" && cat != "user_annotation") {
        ++skipped;  // cpu_op, python_function, gpu_user_annotation (derived), Trace spans, ...
        continue;
      }
      Ns start = to_ns(ev.number(F_TS));
      double dur_us = ev.number(F_DUR);
      Ns end = start + Ns(std::llround(dur_us * 1000.0));
      if (end < start) t.counts.end_before_start++;
      if (start == 0) t.counts.zero_timestamps++;
      int64_t pid = ev.integer(F_PID);
      int64_t tid = ev.integer(F_TID);
      if (cat == "kernel") {
        Kernel k;
        k.start = start;
        k.end = end;
        k.name = t.intern(ev.str(F_NAME));
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
        int64_t s = ev.arg_int(A::SubmittedNs, -1);
        k.submitted = s >= 0 ? s : kNoTime;
        k.launch_type = uint16_t(ev.arg_int(A::LaunchType, 0));
        k.pid = u32(ev.arg_int(A::Process, 0));
        t.kernels.push_back(k);
      } else if (cat == "gpu_memcpy") {
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
        t.memcpys.push_back(m);
      } else if (cat == "gpu_memset") {
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
        t.memsets.push_back(m);
      } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
        ApiCall a;
        a.start = start;
        a.end = end;
        a.name = t.intern(ev.str(F_NAME));
        a.kind = cat == "cuda_driver" ? ApiKind::Driver : ApiKind::Runtime;
        a.cbid = u32(ev.arg_int(A::Cbid, 0));
        a.correlation = u32(ev.arg_int(A::Correlation, 0));
        a.return_value = int32_t(ev.arg_int(A::ReturnValue, 0));
        a.pid = u32(pid);
        a.tid = u32(tid) & kTidStreamMask;
        t.api_calls.push_back(a);
      } else if (cat == "cuda_sync") {
        Sync s;
        s.start = start;
        s.end = end;
        s.device = uint16_t(ev.arg_int(A::Device, pid));
        int64_t st = ev.arg_int(A::Stream, -1);
        s.stream = st < 0 ? kNoStream : uint32_t(st);
        s.context = u32(ev.arg_int(A::Context, 0));
        s.correlation = u32(ev.arg_int(A::Correlation, 0));
        int64_t evid = ev.arg_int(A::WaitEvent, -1);
        s.event = evid < 0 ? kNoId : uint32_t(evid);
        int64_t ty = ev.arg_int(A::SyncType, -1);
        s.type = ty >= 0 ? SyncType(ty) : sync_type_from_name(ev.arg_str(A::SyncKind, ev.str_or(F_NAME, "")));
        // Where the awaited event was recorded (Kineto, HTA). Our writer marks values it derived
        // from the CUDA event records, which travel in the streamlab block: not the sync's own.
        if (!ev.has_arg(A::WaitDerived)) {
          int64_t ws = ev.arg_int(A::WaitOnStream, -1);
          s.event_stream = ws < 0 ? kNoStream : uint32_t(ws);
          int64_t rc = ev.arg_int(A::WaitRecordCorr, -1);
          s.event_record_correlation = rc < 0 ? 0 : uint32_t(rc);
        }
        s.pid = u32(ev.arg_int(A::Process, 0));
        t.syncs.push_back(s);
      } else {  // user_annotation
        NvtxRange r;
        r.start = start;
        r.end = end;
        r.name = t.intern(ev.str(F_NAME));
        std::string_view dom = ev.arg_str(A::Domain, "");
        r.domain = dom.empty() ? 0 : t.intern(dom);
        r.kind = NvtxKind(std::min<int64_t>(2, std::max<int64_t>(0, ev.arg_int(A::NvtxKind, 0))));
        r.color = u32(ev.arg_int(A::Color, 0));
        r.category = u32(ev.arg_int(A::Category, 0));
        r.pid = u32(pid);
        r.tid = u32(tid) & kTidStreamMask;
        r.end_tid = u32(ev.arg_int(A::EndThread, r.tid));
        t.nvtx.push_back(r);
      }
    } else if (ph == "i" || ph == "I") {
      std::string_view cat = ev.str_or(F_CAT, "");
      std::string_view name = ev.str_or(F_NAME, "");
      if (cat == "user_annotation") {
        NvtxRange r;
        r.start = r.end = to_ns(ev.number(F_TS));
        r.name = t.intern(name);
        r.kind = NvtxKind::Mark;
        r.pid = u32(ev.integer(F_PID));
        r.tid = u32(ev.integer(F_TID)) & kTidStreamMask;
        r.end_tid = r.tid;
        std::string_view dom = ev.arg_str(A::Domain, "");
        r.domain = dom.empty() ? 0 : t.intern(dom);
        t.nvtx.push_back(r);
      } else if (name == "[memory]" && !ours) {
        // PyTorch's allocator events: positive Bytes allocate, negative free, keyed by Addr.
        Ns ts = to_ns(ev.number(F_TS));
        int64_t bytes = ev.arg_int(A::MemBytes, 0);
        uint64_t addr = uint64_t(ev.arg_int(A::Addr, 0));
        int64_t dev = ev.arg_int(A::DeviceId, -1);
        if (dev < 0) continue;  // CPU memory
        if (bytes > 0) {
          live_mem[addr] = {ts, uint64_t(bytes)};
          Allocation a;
          a.address = addr;
          a.bytes = uint64_t(bytes);
          a.alloc = ts;
          a.device = uint16_t(dev);
          t.allocations.push_back(a);
        } else if (bytes < 0) {
          for (auto it = t.allocations.rbegin(); it != t.allocations.rend(); ++it)
            if (it->address == addr && it->free == kNoTime) {
              it->free = ts;
              break;
            }
        }
      } else {
        ++skipped;
      }
    } else if (ph == "M") {
      std::string_view name = ev.str_or(F_NAME, "");
      if (!ev.has_arg(A::Name) || !is_type(ev.arg(A::Name), Type::STRING)) continue;
      std::string_view value = as_str(ev.arg(A::Name));
      int64_t pid = ev.integer(F_PID);
      if (name == "process_name" && value.rfind("GPU ", 0) != 0 && !ours) {
        t.processes.push_back({u32(pid), std::string(value)});
      } else if (name == "thread_name" && !ours && value.rfind("stream ", 0) != 0) {
        t.threads.push_back({u32(pid), u32(ev.integer(F_TID)) & kTidStreamMask, std::string(value)});
      }
    } else if (ph == "C") {
      if (ours) continue;  // derived from allocations / the block
      std::string name(ev.str_or(F_NAME, "counter"));
      Ns ts = to_ns(ev.number(F_TS));
      int64_t pid = ev.integer(F_PID);
      if (!ev.args()) continue;
      // In key order, a repeated key counted once (as nlohmann's object held them).
      std::map<std::string_view, dom::element> items;
      for (dom::key_value_pair kv : ev.args_object()) items[kv.key] = kv.value;
      for (const auto& [k, v] : items) {
        if (!is_number(v))
          ev.bad("expected counter args.\"" + std::string(k) + "\" to be a number, found " + type_name(v));
        CounterSample c;
        c.ts = ts;
        c.value = as_double(v);
        c.name = t.intern(items.size() == 1 ? name : name + "." + std::string(k));
        c.pid = u32(pid);
        t.counters.push_back(c);
      }
    } else if (ph == "s" || ph == "f" || ph == "t" || ph == "B" || ph == "E" || ph == "b" || ph == "e" || ph == "n") {
      ++skipped;
    } else {
      ev.bad("unexpected ph \"" + std::string(ph) + "\"");
    }
  }
  if (ours) load_block(as_obj(block_el), t, origin);
  if (!ours) {
    t.metadata["source"] = "kineto";
    if (skipped) t.metadata["skipped_events"] = std::to_string(skipped);
    t.base_time = base != 0 ? base : kNoTime;
    // PyTorch traces carry no process id on GPU ops; use the only process when there is one.
    uint32_t only_pid = 0;
    bool one = true;
    for (const auto& a : t.api_calls) {
      if (only_pid == 0) only_pid = a.pid;
      else if (a.pid != only_pid) one = false;
    }
    if (one && only_pid)
      for (auto& k : t.kernels)
        if (k.pid == 0) k.pid = only_pid;
    if (one && only_pid) {
      for (auto& m : t.memcpys)
        if (m.pid == 0) m.pid = only_pid;
      for (auto& m : t.memsets)
        if (m.pid == 0) m.pid = only_pid;
      for (auto& s : t.syncs)
        if (s.pid == 0) s.pid = only_pid;
    }
  }
  t.finalize();
  return t;
}

}  // namespace

Trace load_kineto_json_file(const std::string& path) {
  simdjson::padded_string text = read_file_padded(path);
  return load_padded(std::string_view(text.data(), text.size()), "'" + path + "'");
}

Trace load_trace(const std::string& path) {
  if (is_gzip_file(path)) {
    // A gzipped trace: JSON is parsed from memory; SQLite needs a file, so it is unpacked beside
    // the system's temporary files first.
    const std::string text = gunzip_file(path);
    if (text.size() >= 16 && std::memcmp(text.data(), "SQLite format 3\0", 16) == 0) {
      std::string tmp = (std::filesystem::temp_directory_path() / "streamlab-trace-XXXXXX").string();
      const int fd = ::mkstemp(tmp.data());
      SL_CHECK(fd >= 0, "cannot unpack '", path, "': no temporary file (", std::strerror(errno), ")");
      ::close(fd);
      struct Remove {
        std::string p;
        ~Remove() { std::remove(p.c_str()); }
      } remove{tmp};
      write_file_atomic(tmp, text);
      return load_nsys_sqlite(tmp);
    }
    return load_kineto_json(text, "'" + path + "'");
  }
  switch (detect_trace_format(path)) {
    case TraceFormat::Sqlite: return load_nsys_sqlite(path);
    case TraceFormat::StreamlabJson:
    case TraceFormat::KinetoJson: return load_kineto_json_file(path);
    default:
      fail("'", path, "': not a trace streamlab can read (expected our JSON, a PyTorch profiler / Kineto JSON, or "
                      "our SQLite; the file starts with neither '{' nor the SQLite header)");
  }
}

}  // namespace sl::prof
