// The fast JSON loader: "traceEvents" cut into chunks at event boundaries, each chunk parsed with
// simdjson On-Demand on one of several threads into chunk-local records, the chunks merged into
// the trace in file order. Everything outside "traceEvents" (the top level, deviceProperties,
// our "streamlab" block) is parsed by the precise loader's code, with the array left out.
//
// Why it gives the same trace as the precise loader (trace_io.cpp):
// - every event goes through the same json_events::read_event;
// - it gives up (and the precise loader runs, naming the error) on anything it does not read
//   exactly as the precise loader would: malformed JSON, a field of the wrong type, a number
//   simdjson cannot hold, nesting deeper than kMaxDepth, a key with escapes at the top level;
// - every byte is validated: each chunk "[" + events + "]" is walked completely (no value is
//   skipped unchecked), and the rest of the document is parsed by simdjson's DOM parser. The cut
//   points are found by a heuristic (a newline between "," and "{"; a raw newline cannot be
//   inside a JSON string), but a wrong cut cannot go unnoticed: if "[c0]", "[c1]", ... all parse
//   and c0 starts right after the array's "[", each comma between chunks is a separator of the
//   array itself (the text before it is a balanced run of complete values);
// - names are interned per chunk in first-use order and the chunks' tables merged in file
//   order, so the string table comes out in the same order as when interning one event at a
//   time.
//
// What only counts in PyTorch traces (allocator "[memory]" events, process / thread names,
// counters) depends on whether the document carries our block, which usually comes after the
// events. Until it is known, those events are read speculatively and kept aside; counters are
// the only ones that intern names, so the first chunk with counters makes the loader look for
// the block near the end of the file (a guess, checked against the parsed block; a wrong guess
// about it or about baseTimeNanoseconds redoes the events once).
//
// Memory: chunks are read (pread, or copied from the text) into reused per-thread buffers, so
// a large file is never held whole; on this kind of machine first-touch page faults cost more
// than parsing.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <simdjson.h>

#include "core/error.h"
#include "profiler/json_events.h"
#include "profiler/trace_io_detail.h"

namespace sl::prof::trace_io_detail {

namespace {

namespace od = simdjson::ondemand;
namespace dom = simdjson::dom;
using namespace json_events;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Thrown inside the fast loader when the precise loader has to take over.
struct FastMiss {
  const char* why;
};

constexpr size_t kDefaultChunkBytes = size_t(1) << 20;
// Nesting below an event's fields that the fast loader follows; deeper goes to the precise
// loader (bounded recursion here; the precise one accepts up to 10000 levels).
constexpr int kMaxDepth = 64;
constexpr size_t kMaxThreads = 8;
// Where the header (everything before "traceEvents") must end, and how far from the end the
// block and baseTimeNanoseconds are looked for.
constexpr size_t kMaxHeaderBytes = size_t(64) << 20;
constexpr size_t kBlockProbeBytes = size_t(64) << 20;
constexpr size_t kBaseProbeBytes = size_t(64) << 10;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// ---------------------------------------------------------------- one event's values

enum class Kind : uint8_t { Null, Bool, Int64, UInt64, Double, String, Array, Object };

struct Scalar {
  Kind kind = Kind::Null;
  union {
    int64_t i = 0;
    uint64_t u;
    double d;
    bool b;
  };
  std::string_view s;  // Kind::String, unescaped (valid until the parser's next document)
};

// A field or arg: arrays keep their length and first three elements (grid / block dims).
struct Value : Scalar {
  uint32_t count = 0;
  Scalar items[3];
};

// The key of an object field, unescaped. Keys without a backslash are read in place.
bool key_of(od::field& f, std::string_view& key) {
  const char* p = f.key().raw();
  const char* q = p;
  while (*q != '"') {
    if (*q == '\\') return !f.unescaped_key().get(key);
    ++q;
  }
  key = std::string_view(p, size_t(q - p));
  return true;
}

bool validate(od::value v, int depth);

// Any value: scalars converted, containers checked through and only their kind kept.
bool read_scalar(od::value v, Scalar& out, int depth) {
  od::json_type t;
  if (v.type().get(t)) return false;
  switch (t) {
    case od::json_type::number: {
      od::number n;
      if (v.get_number().get(n)) return false;  // malformed, or an integer simdjson cannot hold
      switch (n.get_number_type()) {
        case od::number_type::signed_integer: out.kind = Kind::Int64, out.i = n.get_int64(); break;
        case od::number_type::unsigned_integer: out.kind = Kind::UInt64, out.u = n.get_uint64(); break;
        default: out.kind = Kind::Double, out.d = n.get_double(); break;
      }
      return true;
    }
    case od::json_type::string: out.kind = Kind::String; return !v.get_string().get(out.s);
    case od::json_type::boolean: out.kind = Kind::Bool; return !v.get_bool().get(out.b);
    case od::json_type::null: {
      bool null = false;
      out.kind = Kind::Null;
      return !v.is_null().get(null) && null;
    }
    case od::json_type::array: out.kind = Kind::Array; return validate(v, depth);
    case od::json_type::object: out.kind = Kind::Object; return validate(v, depth);
  }
  return false;
}

bool read_value(od::value v, Value& out, int depth) {
  od::json_type t;
  if (v.type().get(t)) return false;
  if (t != od::json_type::array) return read_scalar(v, out, depth);
  if (depth >= kMaxDepth) return false;
  out.kind = Kind::Array;
  out.count = 0;
  od::array a;
  if (v.get_array().get(a)) return false;
  for (auto r : a) {
    od::value e;
    if (std::move(r).get(e)) return false;
    bool ok = out.count < 3 ? read_scalar(e, out.items[out.count], depth + 1) : validate(e, depth + 1);
    if (!ok) return false;
    ++out.count;
  }
  return true;
}

// Checks a value the loader does not use, completely: nothing is skipped unchecked.
bool validate(od::value v, int depth) {
  if (depth > kMaxDepth) return false;
  od::json_type t;
  if (v.type().get(t)) return false;
  switch (t) {
    case od::json_type::number: {
      od::number n;
      return !v.get_number().get(n);
    }
    case od::json_type::string: {
      std::string_view s;
      return !v.get_string().get(s);
    }
    case od::json_type::boolean: {
      bool b;
      return !v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool null = false;
      return !v.is_null().get(null) && null;
    }
    case od::json_type::array: {
      od::array a;
      if (v.get_array().get(a)) return false;
      for (auto r : a) {
        od::value e;
        if (std::move(r).get(e) || !validate(e, depth + 1)) return false;
      }
      return true;
    }
    case od::json_type::object: {
      od::object o;
      if (v.get_object().get(o)) return false;
      for (auto r : o) {
        od::field f;
        std::string_view key;
        if (std::move(r).get(f) || !key_of(f, key) || !validate(f.value(), depth + 1)) return false;
      }
      return true;
    }
  }
  return false;
}

// Field access for one event, with the precise loader's Ev interface and conversion rules;
// where the precise loader would report an error, bad() hands over to it.
class FastEvent {
 public:
  // Reads the fields of one event; false when its JSON is not valid.
  bool read(od::object obj) {
    has_ = 0;
    args_object_ = false;
    for (auto r : obj) {
      od::field f;
      std::string_view key;
      if (std::move(r).get(f) || !key_of(f, key)) return false;
      const int field = field_of(key);
      bool ok = field == F_ARGS ? read_args(f.value()) : field >= 0 ? read_value(f.value(), f_[field], 1)
                                                                    : validate(f.value(), 1);
      if (!ok) return false;
      if (field >= 0) has_ |= uint32_t(1) << field;
    }
    return true;
  }

  [[noreturn]] void bad(const std::string&) const { throw FastMiss{"an event the precise loader reports"}; }

  bool has(Field f) const { return (has_ >> f) & 1; }
  const Value& at(Field f) const {
    if (!has(f)) bad("");
    return f_[f];
  }
  std::string_view str(Field f) const {
    const Value& v = at(f);
    if (v.kind != Kind::String) bad("");
    return v.s;
  }
  std::string_view str_or(Field f, std::string_view d) const { return has(f) ? str(f) : d; }
  int64_t integer(Field f) const {
    int64_t x;
    if (!try_integer(at(f), x)) bad("");
    return x;
  }
  double number(Field f) const {
    const Value& v = at(f);
    double d;
    if (!as_number(v, d) || !std::isfinite(d)) bad("");
    return d;
  }

  bool args() const {
    if (!has(F_ARGS)) return false;
    if (!args_object_) bad("");
    return true;
  }
  bool has_arg(A k) const { return args() && ((a_has_ >> int(k)) & 1); }
  int64_t arg_int(A k, int64_t d) const {
    if (!has_arg(k)) return d;
    const Value& v = a_[int(k)];
    if (v.kind == Kind::Null) return d;
    int64_t x;
    if (!try_integer(v, x)) bad("");
    return x;
  }
  int64_t arg_int_req(A k) const {
    if (!has_arg(k)) bad("");
    int64_t x;
    if (!try_integer(a_[int(k)], x)) bad("");
    return x;
  }
  std::string_view arg_str(A k, std::string_view d) const {
    if (!has_arg(k)) return d;
    if (a_[int(k)].kind != Kind::String) bad("");
    return a_[int(k)].s;
  }
  bool arg_string(A k, std::string_view& out) const {
    if (!has_arg(k) || a_[int(k)].kind != Kind::String) return false;
    out = a_[int(k)].s;
    return true;
  }
  std::array<uint32_t, 3> arg_dim3(A k) const {
    std::array<uint32_t, 3> r{1, 1, 1};
    if (!has_arg(k)) return r;
    const Value& v = a_[int(k)];
    if (v.kind != Kind::Array || v.count != 3) bad("");
    for (int i = 0; i < 3; ++i) {
      int64_t n;
      if (!try_integer(v.items[i], n) || n < 0 || n > 0xFFFFFFFFll) bad("");
      r[i] = uint32_t(n);
    }
    return r;
  }
  std::vector<std::pair<std::string_view, double>> counter_values() const {
    std::map<std::string_view, Scalar> items;  // key order, the last of a repeated key
    for (const auto& [k, v] : all_args_) items[k] = v;
    std::vector<std::pair<std::string_view, double>> out;
    for (const auto& [k, v] : items) {
      double d;
      if (!as_number(v, d)) bad("");
      out.emplace_back(k, d);
    }
    return out;
  }

 private:
  bool read_args(od::value v) {
    od::json_type t;
    if (v.type().get(t)) return false;
    args_object_ = t == od::json_type::object;
    if (!args_object_) return validate(v, 1);
    a_has_ = 0;
    all_args_.clear();
    od::object o;
    if (v.get_object().get(o)) return false;
    for (auto r : o) {
      od::field f;
      std::string_view key;
      if (std::move(r).get(f) || !key_of(f, key)) return false;
      const int k = kArgTable.find(key);
      Value& dst = k >= 0 ? a_[k] : scratch_;
      if (!read_value(f.value(), dst, 2)) return false;
      if (k >= 0) a_has_ |= uint64_t(1) << k;
      all_args_.emplace_back(key, static_cast<const Scalar&>(dst));
    }
    return true;
  }

  // The precise loader's rules: a number is any JSON number; an integer is an integer, an
  // integral double, or a string holding a decimal integer (some traces write ids as strings).
  static bool as_number(const Scalar& v, double& d) {
    switch (v.kind) {
      case Kind::Int64: d = double(v.i); return true;
      case Kind::UInt64: d = double(v.u); return true;
      case Kind::Double: d = v.d; return true;
      default: return false;
    }
  }
  static bool try_integer(const Scalar& v, int64_t& out) {
    switch (v.kind) {
      case Kind::Int64: out = v.i; return true;
      case Kind::UInt64: out = int64_t(v.u); return true;
      case Kind::Double:
        if (std::isfinite(v.d) && v.d == std::floor(v.d) && std::fabs(v.d) < 9.2e18) {
          out = int64_t(v.d);
          return true;
        }
        return false;
      case Kind::String: {
        std::string s(v.s);
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

  Value f_[F_COUNT];
  uint32_t has_ = 0;
  bool args_object_ = false;
  Value a_[kArgCount];
  uint64_t a_has_ = 0;
  Value scratch_;
  std::vector<std::pair<std::string_view, Scalar>> all_args_;  // every arg, in order (counters)
};

// ---------------------------------------------------------------- one chunk's results

// Names interned by one chunk, in first-use order. A name first used only by what counts in
// PyTorch traces alone (a counter, read before it is known whether the document is ours) is
// kept apart, so that the merged table has exactly the precise loader's order either way.
class ChunkStrings {
 public:
  struct Entry {
    std::string_view text;
    bool not_ours_only;
  };

  void clear() {
    entries_.clear();
    if (slots_.empty()) slots_.assign(1024, 0);
    else std::fill(slots_.begin(), slots_.end(), 0u);
    insert("", false);  // id 0 is the empty string, as in StringTable
  }
  StrId intern(std::string_view s, bool not_ours_only) {
    const uint64_t h = hash(s);
    if (uint32_t id = find(s, h, false); id != kNone) return id;
    if (not_ours_only)
      if (uint32_t id = find(s, h, true); id != kNone) return id;
    return insert(s, not_ours_only, h);
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    if (i < s.size()) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, s.size() - i);
      h = (h ^ w) * 0x94d049bb133111ebull;
      h ^= h >> 29;
    }
    return h;
  }
  static uint64_t slot_hash(uint64_t h, bool not_ours_only) { return not_ours_only ? h * 31 + 7 : h; }
  uint32_t find(std::string_view s, uint64_t h, bool not_ours_only) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_hash(h, not_ours_only) & mask;; i = (i + 1) & mask) {
      uint32_t e = slots_[i];
      if (e == 0) return kNone;
      const Entry& en = entries_[e - 1];
      if (en.not_ours_only == not_ours_only && en.text == s) return e - 1;
    }
  }
  StrId insert(std::string_view s, bool not_ours_only) { return insert(s, not_ours_only, hash(s)); }
  StrId insert(std::string_view s, bool not_ours_only, uint64_t h) {
    if ((entries_.size() + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    entries_.push_back({s, not_ours_only});
    place(uint32_t(entries_.size()), slot_hash(h, not_ours_only));
    return StrId(entries_.size() - 1);
  }
  void place(uint32_t e, uint64_t h) {
    const size_t mask = slots_.size() - 1;
    size_t i = h & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = e;
  }
  void rehash(size_t n) {
    slots_.assign(n, 0);
    for (size_t e = 0; e < entries_.size(); ++e)
      place(uint32_t(e + 1), slot_hash(hash(entries_[e].text), entries_[e].not_ours_only));
  }

  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;  // entry index + 1; 0 = empty
};

struct MemoryOp {
  Ns ts;
  int64_t bytes;
  uint64_t addr;
  uint16_t dev;
};

// read_event's sink for one chunk. Everything that only counts in PyTorch traces (memory ops,
// process / thread names, counters) is kept here whatever the document is; the merge keeps or
// drops it once that is known.
struct ChunkSink {
  std::vector<Kernel> kernels;
  std::vector<Memcpy> memcpys;
  std::vector<Memset> memsets;
  std::vector<ApiCall> api_calls;
  std::vector<Sync> syncs;
  std::vector<NvtxRange> nvtx;
  std::vector<CounterSample> counters;
  std::vector<MemoryOp> memory_ops;
  std::vector<std::pair<uint32_t, std::string_view>> processes;
  std::vector<std::tuple<uint32_t, uint32_t, std::string_view>> threads;
  RecordCounts counts;
  uint64_t skipped = 0;
  ChunkStrings strings;
  bool not_ours_error = false;  // the precise loader would fail here if the document is not ours
  bool speculating = false;

  void clear() {
    kernels.clear(), memcpys.clear(), memsets.clear(), api_calls.clear(), syncs.clear(), nvtx.clear();
    counters.clear(), memory_ops.clear(), processes.clear(), threads.clear();
    counts = RecordCounts{};
    skipped = 0;
    strings.clear();
    not_ours_error = speculating = false;
  }
  StrId intern(std::string_view s) { return strings.intern(s, speculating); }
  void memory_op(Ns ts, int64_t bytes, uint64_t addr, uint16_t dev) { memory_ops.push_back({ts, bytes, addr, dev}); }
  void process(uint32_t pid, std::string_view name) { processes.emplace_back(pid, name); }
  void thread(uint32_t pid, uint32_t tid, std::string_view name) { threads.emplace_back(pid, tid, name); }
  template <class F>
  void speculate_not_ours(F&& f) {
    speculating = true;
    try {
      f();
    } catch (const FastMiss&) {
      not_ours_error = true;
    }
    speculating = false;
  }
};

// A chunk: "[" + events + "]" followed by simdjson's padding, and what it gave.
struct Chunk {
  size_t seq = 0;
  size_t begin = 0, len = 0;  // its events' bytes in the source
  std::unique_ptr<char[]> buf;
  size_t capacity = 0;  // bytes in buf

  // Parse results.
  const char* miss = nullptr;  // why the fast loader gives up here (nullptr: parsed)
  bool array_ended = false;    // "traceEvents" ends inside this chunk ...
  size_t tail_offset = 0;      // ... and the rest of the document starts here (source offset)
  size_t events = 0;
  ChunkSink sink;

  char* text() { return buf.get() + 1; }  // the events' bytes (after the added "[")
  void reserve(size_t n) {
    const size_t need = n + 2 + simdjson::SIMDJSON_PADDING;
    if (need <= capacity) return;
    capacity = std::max(need, capacity + capacity / 2);
    buf.reset(new char[capacity]);
  }
};

// ---------------------------------------------------------------- where the events are

// The top level before "traceEvents", read exactly (it is small); parsed again later by the
// DOM parser, which validates it.
struct Header {
  size_t array_begin = 0;  // the byte after traceEvents' "["
  bool has_base = false;
  Ns base = 0;
  bool block_seen = false;  // a "streamlab" object before the events
};

class HeaderLexer {
 public:
  explicit HeaderLexer(std::string_view s) : s_(s) {}
  // false: not enough bytes, or not a shape the fast loader reads.
  bool run(Header& h) {
    skip_ws();
    if (!eat('{')) return false;
    for (;;) {
      skip_ws();
      std::string_view key;
      if (!string(key)) return false;
      skip_ws();
      if (!eat(':')) return false;
      skip_ws();
      if (i_ >= s_.size()) return false;
      if (key == "traceEvents") {
        if (s_[i_] != '[') return false;
        h.array_begin = i_ + 1;
        return true;
      }
      if (key == "baseTimeNanoseconds") {
        h.has_base = integer(h.base);
        if (!h.has_base) return false;
      } else if (key == "streamlab") {
        h.block_seen = s_[i_] == '{';
      }
      if (!skip_value()) return false;
      skip_ws();
      if (!eat(',')) return false;  // "}" here: no traceEvents (the precise loader says so)
    }
  }

 private:
  void skip_ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool eat(char c) {
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  // A key without escapes (escaped top-level keys go to the precise loader).
  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    size_t b = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') return false;
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    out = s_.substr(b, i_ - b);
    ++i_;
    return true;
  }
  bool integer(Ns& out) {
    size_t e = i_;
    while (e < s_.size() && !is_ws(s_[e]) && s_[e] != ',' && s_[e] != '}') ++e;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + e, out);
    return ec == std::errc() && p == s_.data() + e;
  }
  bool skip_string() {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '\\') ++i_;
      else if (c == '"') return true;
    }
    return false;
  }
  bool skip_value() {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '"') return skip_string();
    if (c != '{' && c != '[') {
      while (i_ < s_.size() && !is_ws(s_[i_]) && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
      return i_ < s_.size();
    }
    size_t depth = 0;
    while (i_ < s_.size()) {
      c = s_[i_];
      if (c == '"') {
        if (!skip_string()) return false;
        continue;
      }
      ++i_;
      if (c == '{' || c == '[') ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) return true;
    }
    return false;
  }

  std::string_view s_;
  size_t i_ = 0;
};

std::optional<Header> scan_header(const Source& src) {
  std::string buf;
  for (size_t n = std::min<size_t>(src.size(), 64 << 10);; n = std::min(src.size(), n * 4)) {
    buf.resize(n);
    src.read(0, buf.data(), n);
    Header h;
    if (HeaderLexer(buf).run(h)) return h;
    if (n == src.size() || n >= kMaxHeaderBytes) return std::nullopt;
  }
}

// A top-level "streamlab" object near the end of the file (our writer puts the block last).
bool probe_block(const Source& src) {
  const std::string_view key = "\"streamlab\"";
  const size_t size = src.size(), lowest = size > kBlockProbeBytes ? size - kBlockProbeBytes : 0;
  const size_t block = size_t(1) << 20, overlap = 256;
  std::string buf;
  for (size_t end = size; end > lowest;) {
    const size_t begin = end - lowest > block ? end - block : lowest;
    buf.resize(std::min(size, end + overlap) - begin);
    src.read(begin, buf.data(), buf.size());
    for (size_t at = buf.find(key); at != std::string::npos; at = buf.find(key, at + 1)) {
      size_t i = at + key.size();
      while (i < buf.size() && is_ws(buf[i])) ++i;
      if (i >= buf.size() || buf[i++] != ':') continue;
      while (i < buf.size() && is_ws(buf[i])) ++i;
      if (i < buf.size() && buf[i] == '{') return true;
    }
    end = begin;
  }
  return false;
}

// baseTimeNanoseconds near the end (where Kineto writes it); 0 when not found.
Ns probe_base(const Source& src) {
  const size_t n = std::min(src.size(), kBaseProbeBytes);
  std::string buf(n, '\0');
  src.read(src.size() - n, buf.data(), n);
  const std::string_view key = "\"baseTimeNanoseconds\"";
  size_t at = buf.rfind(key);
  if (at == std::string::npos) return 0;
  size_t i = at + key.size();
  while (i < n && is_ws(buf[i])) ++i;
  if (i >= n || buf[i++] != ':') return 0;
  while (i < n && is_ws(buf[i])) ++i;
  Ns base = 0;
  std::from_chars(buf.data() + i, buf.data() + n, base);
  return base;
}

// Where a chunk of events may end: a newline between "," and "{" (raw newlines are never inside
// JSON strings). Returns the comma's index, or npos.
size_t last_event_boundary(const char* p, size_t n) {
  for (size_t end = n; end > 0;) {
    const void* hit = memrchr(p, '\n', end);
    if (!hit) return std::string::npos;
    const size_t nl = size_t(static_cast<const char*>(hit) - p);
    end = nl;
    size_t q = nl + 1;
    while (q < n && is_ws(p[q])) ++q;
    if (q >= n || p[q] != '{') continue;
    size_t b = nl;
    while (b > 0 && is_ws(p[b - 1])) --b;
    if (b > 0 && p[b - 1] == ',') return b - 1;
  }
  return std::string::npos;
}

// Where "traceEvents" may end in bytes without event boundaries: "}", a newline, then "]".
// Returns the index just past the "]", or npos.
size_t array_end_candidate(const char* p, size_t n) {
  for (size_t from = 0; from < n;) {
    const void* hit = std::memchr(p + from, '\n', n - from);
    if (!hit) return std::string::npos;
    const size_t nl = size_t(static_cast<const char*>(hit) - p);
    from = nl + 1;
    size_t q = nl + 1;
    while (q < n && is_ws(p[q])) ++q;
    if (q >= n || p[q] != ']') continue;
    size_t b = nl;
    while (b > 0 && is_ws(p[b - 1])) --b;
    if (b == 0 || p[b - 1] == '}') return q + 1;
  }
  return std::string::npos;
}

// ---------------------------------------------------------------- the loader

class FastLoader {
 public:
  FastLoader(const Source& src, const std::string& origin, const JsonLoadOptions& opts, JsonLoadStats* stats)
      : src_(src), origin_(origin), stats_(stats) {
    chunk_bytes_ = opts.chunk_bytes ? opts.chunk_bytes : kDefaultChunkBytes;
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    threads_ = opts.threads ? opts.threads : std::min<unsigned>(hw, kMaxThreads);
    // One chunk or two: not worth a thread.
    if (src.size() < 2 * chunk_bytes_) threads_ = 1;
  }

  std::optional<Trace> run() {
    auto t0 = Clock::now();
    if (src_.size() > simdjson::SIMDJSON_MAXSIZE_BYTES) return give_up("larger than simdjson reads");
    std::optional<Header> header = scan_header(src_);
    if (!header) return give_up("no \"traceEvents\" array in the top level the fast loader reads");
    EventContext cx;
    cx.base = header->has_base ? header->base : probe_base(src_);
    cx.ours = header->block_seen ? Ours::Yes : Ours::Unknown;
    frame_s_ += seconds_since(t0);

    for (int pass = 0; pass < 2; ++pass) {
      if (!events_pass(header->array_begin, cx)) return give_up(miss_);
      auto t1 = Clock::now();
      std::optional<Trace> t = finish(header->array_begin, cx);
      frame_s_ += seconds_since(t1);
      if (t) {
        report(true);
        return t;
      }
      if (miss_) return give_up(miss_);
      if (stats_) stats_->retries++;  // a wrong guess about the tail: again, knowing it
    }
    return give_up("guesses about the tail of the document kept failing");
  }

 private:
  std::nullopt_t give_up(const char* why) {
    report(false);
    if (stats_) stats_->fallback = why;
    return std::nullopt;
  }
  void report(bool fast) {
    if (!stats_) return;
    stats_->fast = fast;
    stats_->threads = threads_;
    stats_->chunks = chunks_;
    stats_->bytes = src_.size();
    stats_->json_events = events_;
    stats_->read_s = read_s_;
    stats_->events_s = events_s_;
    stats_->merge_s = merge_s_;
    stats_->parallel_s = parallel_s_;
    stats_->frame_s = frame_s_;
    stats_->finalize_s = finalize_s_;
  }

  // -------- one pass over the events

  // Reads "traceEvents" into trace_ (and the pending PyTorch-only lists). false: give up.
  bool events_pass(size_t array_begin, EventContext cx) {
    trace_ = Trace{};
    pending_memory_.clear(), pending_processes_.clear(), pending_threads_.clear();
    skipped_ = 0;
    events_ = chunks_ = 0;
    not_ours_error_ = ended_ = stop_ = false;
    miss_ = nullptr;
    next_pos_ = array_begin;
    next_seq_ = next_commit_ = 0;
    chunks_done_ = false;
    ours_ = cx.ours;
    base_ = cx.base;
    merged_bytes_ = 0;

    auto t0 = Clock::now();
    std::vector<std::thread> helpers;
    for (unsigned i = 1; i < threads_; ++i) helpers.emplace_back([this] { work(); });
    work();
    for (auto& h : helpers) h.join();
    parallel_s_ += seconds_since(t0);
    if (miss_) return false;
    if (!ended_) {
      miss_ = "\"traceEvents\" does not end where the fast loader looks";
      return false;
    }
    return true;
  }

  // One thread: take the next chunk, parse it, merge it in turn; until the events end.
  void work() {
    Chunk c;
    od::parser parser;
    double read_s = 0, events_s = 0, merge_s = 0;
    for (;;) {
      auto t0 = Clock::now();
      bool got = false;
      try {
        got = next_chunk(c);
      } catch (...) {
        stop_with("reading the next chunk failed");
      }
      read_s += seconds_since(t0);
      if (!got) break;
      auto t1 = Clock::now();
      parse(parser, c);
      auto t2 = Clock::now();
      events_s += std::chrono::duration<double>(t2 - t1).count();
      merge_in_turn(c);
      merge_s += seconds_since(t2);
    }
    std::lock_guard<std::mutex> lock(merge_mutex_);
    read_s_ += read_s, events_s_ += events_s, merge_s_ += merge_s;
  }

  void stop_with(const char* why) {
    std::lock_guard<std::mutex> lock(merge_mutex_);
    if (!miss_) miss_ = why;
    stop_ = true;
  }

  // Reads the next chunk's bytes into c: from next_pos_ to the last event boundary within about
  // chunk_bytes_ (more when there is none), or to the end of the file.
  bool next_chunk(Chunk& c) {
    std::lock_guard<std::mutex> lock(read_mutex_);
    if (chunks_done_ || stop_) return false;
    const size_t size = src_.size();
    for (size_t want = chunk_bytes_;; want *= 2) {
      const size_t n = std::min(want, size - next_pos_);
      c.reserve(n);
      src_.read(next_pos_, c.text(), n);
      size_t len = n, next = next_pos_ + n;
      if (next_pos_ + n < size) {
        size_t cut = last_event_boundary(c.text(), n);
        if (cut != std::string::npos) {
          len = cut, next = next_pos_ + cut + 1;  // the comma belongs to no chunk
        } else if ((cut = array_end_candidate(c.text(), n)) != std::string::npos) {
          len = cut, next = size;
        } else {
          continue;
        }
      }
      c.seq = next_seq_++;
      c.begin = next_pos_;
      c.len = len;
      c.buf[0] = '[';
      c.text()[len] = ']';
      std::memset(c.text() + len + 1, 0, simdjson::SIMDJSON_PADDING);
      next_pos_ = next;
      chunks_done_ = next >= size;
      return true;
    }
  }

  // Parses chunk c into c.sink; c.miss says why not.
  void parse(od::parser& parser, Chunk& c) {
    c.sink.clear();
    c.miss = nullptr;
    c.array_ended = false;
    c.events = 0;
    EventContext cx{base_, ours_.load()};
    try {
      od::document doc;
      if (parser.iterate(c.buf.get(), c.len + 2, c.capacity).get(doc)) throw FastMiss{"JSON the precise loader reports"};
      od::array events;
      if (doc.get_array().get(events)) throw FastMiss{"JSON the precise loader reports"};
      FastEvent ev;
      for (auto r : events) {
        od::value v;
        od::object o;
        if (std::move(r).get(v) || v.get_object().get(o) || !ev.read(o)) throw FastMiss{"JSON the precise loader reports"};
        read_event(ev, c.sink, cx);
        ++c.events;
      }
      // Our "]" closed the array, or "traceEvents" ended inside the chunk and the rest of the
      // document follows.
      const char* rest = nullptr;
      simdjson::error_code err = doc.current_location().get(rest);
      if (err != simdjson::OUT_OF_BOUNDS) {
        if (err || rest < c.text() || rest > c.text() + c.len) throw FastMiss{"JSON the precise loader reports"};
        c.array_ended = true;
        c.tail_offset = c.begin + size_t(rest - c.text());
      }
      // Each chunk after a separating comma holds an event: "[a,,b]" and "[a,]" must not pass.
      if (c.events == 0 && !(c.seq == 0 && c.array_ended)) throw FastMiss{"JSON the precise loader reports"};
    } catch (const FastMiss& m) {
      c.miss = m.why;
    } catch (const std::bad_alloc&) {
      c.miss = "out of memory in the fast loader";
    }
  }

  // Merges chunk c once every earlier chunk is merged (file order).
  void merge_in_turn(Chunk& c) {
    std::unique_lock<std::mutex> lock(merge_mutex_);
    turn_.wait(lock, [&] { return next_commit_ == c.seq; });
    if (!stop_) {
      if (c.miss) {
        miss_ = c.miss;
        stop_ = true;
      } else {
        try {
          merge(c);
        } catch (const std::bad_alloc&) {
          miss_ = "out of memory in the fast loader";
          stop_ = true;
        }
        if (c.array_ended) {
          ended_ = true;
          tail_offset_ = c.tail_offset;
          stop_ = true;  // later chunks hold the rest of the document, not events
        }
      }
    }
    ++next_commit_;
    turn_.notify_all();
  }

  // Whether the document is ours, guessed from its tail when read_event has not been told.
  bool ours_now() {
    if (ours_.load() == Ours::Unknown) {
      ours_ = probe_block(src_) ? Ours::Yes : Ours::No;
    }
    return ours_.load() == Ours::Yes;
  }

  // Grows v for `add` more records, reserving for the whole file by the share merged so far
  // (no reallocation and copy per chunk; untouched capacity costs no memory).
  template <class T>
  void reserve_for(std::vector<T>& v, size_t add) {
    const size_t need = v.size() + add;
    if (need <= v.capacity()) return;
    const double share = double(src_.size()) / double(std::max<size_t>(merged_bytes_, 1));
    const size_t guess = size_t(double(need) * std::min(share, 1e6) * 1.05) + 64;
    v.reserve(std::max({need, guess, v.capacity() + v.capacity() / 2}));
  }
  template <class T>
  void append(std::vector<T>& to, const std::vector<T>& from) {
    reserve_for(to, from.size());
    to.insert(to.end(), from.begin(), from.end());
  }

  void merge(Chunk& c) {
    ChunkSink& s = c.sink;
    merged_bytes_ = c.begin + c.len;
    // Chunk string ids -> the trace's, interned in the chunk's first-use order.
    const auto& entries = s.strings.entries();
    remap_.resize(entries.size());
    const bool has_not_ours_names = std::any_of(entries.begin(), entries.end(), [](auto& e) { return e.not_ours_only; });
    const bool keep_counters = (!s.counters.empty() || has_not_ours_names) && !ours_now();
    for (size_t i = 0; i < entries.size(); ++i)
      remap_[i] = !entries[i].not_ours_only || keep_counters ? trace_.intern(entries[i].text) : 0;

    Trace& t = trace_;
    size_t at = t.kernels.size();
    append(t.kernels, s.kernels);
    for (size_t i = at; i < t.kernels.size(); ++i) t.kernels[i].name = remap_[t.kernels[i].name];
    append(t.memcpys, s.memcpys);
    append(t.memsets, s.memsets);
    at = t.api_calls.size();
    append(t.api_calls, s.api_calls);
    for (size_t i = at; i < t.api_calls.size(); ++i) t.api_calls[i].name = remap_[t.api_calls[i].name];
    append(t.syncs, s.syncs);
    at = t.nvtx.size();
    append(t.nvtx, s.nvtx);
    for (size_t i = at; i < t.nvtx.size(); ++i) {
      t.nvtx[i].name = remap_[t.nvtx[i].name];
      t.nvtx[i].domain = remap_[t.nvtx[i].domain];
    }
    if (keep_counters) {
      at = t.counters.size();
      append(t.counters, s.counters);
      for (size_t i = at; i < t.counters.size(); ++i) t.counters[i].name = remap_[t.counters[i].name];
    }
    // Kept until it is known whether the document is ours (its names are in the parser's
    // buffers, which the next chunk reuses: copied).
    pending_memory_.insert(pending_memory_.end(), s.memory_ops.begin(), s.memory_ops.end());
    for (const auto& [pid, name] : s.processes) pending_processes_.push_back({pid, std::string(name)});
    for (const auto& [pid, tid, name] : s.threads) pending_threads_.push_back({pid, tid, std::string(name)});
    t.counts += s.counts;
    skipped_ += s.skipped;
    not_ours_error_ |= s.not_ours_error;
    events_ += c.events;
    ++chunks_;
  }

  // -------- everything but the events

  // The document without its events: parsed by the precise loader's code. nullopt with miss_
  // unset: a guess was wrong, read the events again knowing (cx updated).
  std::optional<Trace> finish(size_t array_begin, EventContext& cx) {
    const size_t tail = src_.size() - tail_offset_;
    simdjson::padded_string frame(array_begin + 1 + tail);
    src_.read(0, frame.data(), array_begin);
    frame.data()[array_begin] = ']';
    src_.read(tail_offset_, frame.data() + array_begin + 1, tail);
    dom::parser parser;
    dom::element doc;
    if (parser.parse(frame).get(doc)) return fail_with("JSON the precise loader reports");
    Trace& t = trace_;
    try {
      TopLevel top = read_top_level(doc, origin_);
      if (top.events_keys != 1) return fail_with("\"traceEvents\" given twice");
      const Ns base = base_time_of(top, origin_);
      const bool ours = has_our_block(top);
      const bool ours_wrong = ours_.load() != Ours::Unknown && (ours_.load() == Ours::Yes) != ours;
      if (base != cx.base || ours_wrong) {
        cx.base = base;
        cx.ours = ours ? Ours::Yes : Ours::No;
        return std::nullopt;
      }
      if (!ours && not_ours_error_) return fail_with("an event the precise loader reports");
      load_device_properties(top, t, origin_);
      if (ours) {
        load_block(top.block.get_object().value_unsafe(), t, origin_);
      } else {
        for (const MemoryOp& m : pending_memory_) apply_memory_op(t.allocations, m.ts, m.bytes, m.addr, m.dev);
        t.processes.insert(t.processes.end(), pending_processes_.begin(), pending_processes_.end());
        t.threads.insert(t.threads.end(), pending_threads_.begin(), pending_threads_.end());
        finish_pytorch_trace(t, base, skipped_);
      }
    } catch (const sl::Error&) {
      return fail_with("the top level or the block has an error the precise loader reports");
    } catch (const simdjson::simdjson_error&) {
      return fail_with("the top level or the block has an error the precise loader reports");
    }
    auto t0 = Clock::now();
    t.finalize();
    finalize_s_ = seconds_since(t0);
    return std::move(t);
  }
  std::nullopt_t fail_with(const char* why) {
    miss_ = why;
    return std::nullopt;
  }

  const Source& src_;
  const std::string& origin_;
  JsonLoadStats* stats_;
  size_t chunk_bytes_ = kDefaultChunkBytes;
  unsigned threads_ = 1;

  // One pass.
  Trace trace_;
  std::vector<MemoryOp> pending_memory_;
  std::vector<Process> pending_processes_;
  std::vector<Thread> pending_threads_;
  std::vector<StrId> remap_;
  uint64_t skipped_ = 0;
  size_t events_ = 0, chunks_ = 0, merged_bytes_ = 0;
  bool not_ours_error_ = false;
  std::atomic<Ours> ours_{Ours::Unknown};  // Yes / No: told, or guessed (checked in finish)
  Ns base_ = 0;

  std::mutex read_mutex_;  // chunking
  size_t next_pos_ = 0, next_seq_ = 0;
  bool chunks_done_ = false;

  std::mutex merge_mutex_;  // merging in file order; also guards the fields below
  std::condition_variable turn_;
  size_t next_commit_ = 0;
  std::atomic<bool> stop_{false};
  const char* miss_ = nullptr;
  bool ended_ = false;
  size_t tail_offset_ = 0;

  double read_s_ = 0, events_s_ = 0, merge_s_ = 0, parallel_s_ = 0, frame_s_ = 0, finalize_s_ = 0;
};

}  // namespace

std::optional<Trace> load_fast(const Source& src, const std::string& origin, const JsonLoadOptions& opts,
                               JsonLoadStats* stats) {
  try {
    return FastLoader(src, origin, opts, stats).run();
  } catch (const std::exception& e) {  // e.g. a read error: the precise loader reports it
    if (stats) stats->fallback = std::string("the fast loader failed: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace sl::prof::trace_io_detail
