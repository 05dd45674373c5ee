#include "profiler/trace_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <zlib.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/gzip.h"
#include "core/interrupt_cleanup.h"
#include "core/input_file.h"
#include "profiler/kineto_json.h"
#include "profiler/json_events.h"
#include "profiler/kineto_fields.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/trace_io_detail.h"

// JSON loading, two ways that give the same trace:
// - the fast loader (trace_io_fast.cpp): simdjson On-Demand over chunks of "traceEvents" on
//   several threads; it gives up on anything unusual (malformed input included);
// - the precise loader (here): simdjson's DOM parser (fully validating, a flat tape instead of
//   a tree of nodes) and one pass over each event's fields into fixed slots. nlohmann::json is
//   only used on its error path: when simdjson rejects a document, nlohmann's SAX parser (no
//   DOM) names the byte offset and what it expected, exactly as the loader always reported it.
// Both read each event through json_events.h's read_event.

namespace sl::prof {

namespace {

namespace dom = simdjson::dom;
using json = nlohmann::json;
using namespace json_events;
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
      case Type::INT64: out = v.get_int64().value_unsafe(); return true;
      case Type::UINT64: out = saturated(v.get_uint64().value_unsafe()); return true;
      case Type::DOUBLE: {
        double d = v.get_double().value_unsafe();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
          out = int64_t(d);
          return true;
        }
        return false;
      }
      case Type::STRING: return integer_from_text(as_str(v), out);
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
  bool has_arg(A k) const { return args() && ((a_has_ >> int(k)) & 1); }
  dom::element arg(A k) const { return a_[int(k)]; }  // after has_arg(k)

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
  // A string arg: false when absent or not a string.
  bool arg_string(A k, std::string_view& out) const {
    if (!has_arg(k) || !is_type(arg(k), Type::STRING)) return false;
    out = as_str(arg(k));
    return true;
  }
  // A counter event's args (after args() returned true): in key order, a repeated key once with
  // its last value (as nlohmann's object held them); every value must be a number.
  std::vector<std::pair<std::string_view, double>> counter_values() const {
    std::map<std::string_view, dom::element> items;
    for (dom::key_value_pair kv : args_obj_) items[kv.key] = kv.value;
    std::vector<std::pair<std::string_view, double>> out;
    for (const auto& [k, v] : items) {
      if (!is_number(v)) bad("expected counter args.\"" + std::string(k) + "\" to be a number, found " + type_name(v));
      out.emplace_back(k, as_double(v));
    }
    return out;
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

// Conversions for the "streamlab" block and deviceProperties, with nlohmann's get<T>() rules
// (any number or a boolean converts to an arithmetic type; strings must be strings). A mismatch
// throws Malformed, which the caller turns into an sl::Error naming the place.
struct Malformed {
  std::string what;
};

// An integer into T: one T cannot hold is refused, not wrapped (a stream id of 2^40 is not 0).
template <class T>
T fitted(dom::element e, auto v) {
  if constexpr (std::is_integral_v<T>) {
    if (!std::in_range<T>(v)) throw Malformed{"integer " + brief(e) + " outside the range of its field"};
  }
  return T(v);
}

template <class T>
T get_num(dom::element e) {
  switch (e.type()) {
    case Type::INT64: return fitted<T>(e, e.get_int64().value_unsafe());
    case Type::UINT64: return fitted<T>(e, e.get_uint64().value_unsafe());
    case Type::DOUBLE: {
      double d = e.get_double().value_unsafe();
      if constexpr (std::is_floating_point_v<T>) {
        return T(d);
      } else {
        // nlohmann casts; out-of-range casts are undefined behaviour, so clamp through int64.
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) throw Malformed{"number " + brief(e) + " out of range"};
        return fitted<T>(e, int64_t(d));
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
  static constexpr size_t kMax = kineto_fields::kMaxColumns;
  std::array<dom::element, kMax> v;  // the first kMax values (no allocation per row)
  size_t n = 0;                      // values in the row
  explicit Row(dom::element e) {
    for (dom::element x : get_arr(e)) {
      if (n < kMax) v[n] = x;
      ++n;
    }
  }
  dom::element at(size_t i) const {
    if (i >= n) throw Malformed{"expected at least " + std::to_string(i + 1) + " values, found " + std::to_string(n)};
    return v[i];
  }
};

Ns opt_time(dom::element v) { return is_type(v, Type::NULL_VALUE) ? kNoTime : get_num<int64_t>(v); }

// One value of a block row into its member, by the column's coding (kineto_fields.h).
template <class Rec, class T>
void read_column(const kineto_fields::Column<Rec, T>& col, dom::element v, Rec& r, Trace& t) {
  using kineto_fields::Col;
  T& m = r.*col.member;
  switch (col.col) {
    case Col::TimeOrNull:
      if constexpr (std::is_same_v<T, Ns>) m = opt_time(v);
      return;
    case Col::IdOrMinus1:
      if constexpr (std::is_same_v<T, uint32_t>) {
        const int64_t id = get_num<int64_t>(v);
        m = id < 0 ? kNoStream : uint32_t(id);
      }
      return;
    case Col::Enum:
      if constexpr (std::is_enum_v<T>) m = T(get_num<std::underlying_type_t<T>>(v));
      return;
    case Col::Name:
      if constexpr (std::is_same_v<T, StrId>) m = t.intern(get_str(v));
      return;
    case Col::Text:
      if constexpr (std::is_same_v<T, std::string>) m = get_str(v);
      return;
    case Col::Int:
    case Col::Number:
      if constexpr (std::is_arithmetic_v<T>) m = get_num<T>(v);
      return;
  }
}

// Where a malformed block is reported: the section and the row being read.
struct BlockPlace {
  std::string section = "block";
  size_t row = size_t(-1);
};

// One row table of the block ("allocations": [[...], ...]): each row's values by column.
template <class Rec, class Columns>
void load_rows(const Fields& b, const kineto_fields::BlockTable<Rec, Columns>& table, Trace& t, BlockPlace& at) {
  const dom::element* e = find(b, table.key);
  if (!e) return;
  at.section = table.key;
  at.row = size_t(-1);
  dom::array a = get_arr(*e);
  at.row = 0;
  for (dom::element re : a) {
    const Row row(re);
    Rec rec{};
    size_t i = 0;
    kineto_fields::for_each_field(table.columns, [&](const auto& col) { read_column(col, row.at(i++), rec, t); });
    (t.*table.rows).push_back(std::move(rec));
    ++at.row;
  }
  at.row = size_t(-1);
}

// The block's record counts: the file's, with what this load rejected (counts_with_rejections).
void load_block_counts(dom::element e, Trace& t) {
  Fields c;
  if (is_type(e, Type::OBJECT)) c = fields_of(get_obj(e));
  RecordCounts given;
  for (const RecordCountField& f : kRecordCountFields) {
    // A count is a whole number: 1.5 dropped records is a damaged file, not 1.
    if (const dom::element* v = find(c, f.name); v && v->type() == Type::DOUBLE)
      throw Malformed{"\"" + std::string(f.name) + "\": expected a whole number >= 0, found " + brief(*v)};
    given.*f.member = value_or<uint64_t>(c, f.name, 0);
  }
  t.counts = counts_with_rejections(std::move(given), t.counts);
}

// The keys of a device table (kineto_fields.h) from one JSON object into `dev`.
template <class Table>
void read_device_keys(const Fields& d, const Table& table, Device& dev) {
  kineto_fields::for_each_field(table, [&](const auto& k) {
    using T = std::remove_cvref_t<decltype(dev.*k.member)>;
    if constexpr (std::is_same_v<T, std::string>)
      dev.*k.member = value_or<std::string>(d, k.name, std::string());
    else
      dev.*k.member = value_or<T>(d, k.name, T(k.absent));
  });
}

// The block's devices: what deviceProperties has no place for, merged into its devices by id.
void load_block_devices(dom::element e, Trace& t, BlockPlace& at) {
  at.row = 0;
  for (dom::element de : get_arr(e)) {
    Fields d = fields_of(get_obj(de));
    const dom::element* idv = find(d, "id");
    if (!idv) throw Malformed{"expected field \"id\""};
    uint32_t id = get_num<uint32_t>(*idv);
    Device blk;
    read_device_keys(d, kineto_fields::kBlockDeviceKeys, blk);
    Device* dev = nullptr;
    for (auto& x : t.devices)
      if (x.id == id) dev = &x;
    if (!dev) {
      t.devices.push_back(blk);  // not in deviceProperties: the block's name stands
    } else {
      kineto_fields::for_each_field(kineto_fields::kBlockDeviceKeys, [&](const auto& k) {
        const std::string_view key = k.name;
        if (key != "id" && key != "name") dev->*k.member = blk.*k.member;
      });
    }
    ++at.row;
  }
  at.row = size_t(-1);
}

}  // namespace

namespace trace_io_detail {

// The "streamlab" block of our own files.
void load_block(dom::object block, Trace& t, const std::string& origin) {
  BlockPlace at;
  try {
    Fields b = fields_of(block);
    if (auto e = find(b, "base_time_ns")) at.section = "base_time_ns", t.base_time = get_num<int64_t>(*e);
    if (auto e = find(b, "session_start_utc_ns"))
      at.section = "session_start_utc_ns", t.session_start_utc_ns = get_num<int64_t>(*e);
    if (auto e = find(b, "counts")) at.section = "counts", load_block_counts(*e, t);
    if (auto e = find(b, "metadata")) {
      at.section = "metadata";
      for (dom::key_value_pair kv : get_obj(*e)) t.metadata[std::string(kv.key)] = get_str(kv.value);
    }
    if (auto e = find(b, "devices")) at.section = "devices", load_block_devices(*e, t, at);
    kineto_fields::for_each_field(kineto_fields::kBlockTables, [&](const auto& table) { load_rows(b, table, t, at); });
  } catch (const Malformed& m) {
    std::string where = origin + ": streamlab." + at.section;
    if (at.row != size_t(-1)) where += "[" + std::to_string(at.row) + "]";
    fail(where, ": malformed (", m.what, ")");
  }
}

}  // namespace trace_io_detail

namespace {

// Results of the precise loader go straight into the trace: it knows whether the document is
// ours before it reads the first event.
struct TraceSink {
  Trace& t;
  std::vector<Kernel>& kernels;
  std::vector<Memcpy>& memcpys;
  std::vector<Memset>& memsets;
  std::vector<ApiCall>& api_calls;
  std::vector<Sync>& syncs;
  std::vector<NvtxRange>& nvtx;
  std::vector<CounterSample>& counters;
  RecordCounts& counts;
  uint64_t skipped = 0;
  uint64_t event = 0;  // index of the event read (in "traceEvents")

  explicit TraceSink(Trace& tr)
      : t(tr), kernels(tr.kernels), memcpys(tr.memcpys), memsets(tr.memsets), api_calls(tr.api_calls),
        syncs(tr.syncs), nvtx(tr.nvtx), counters(tr.counters), counts(tr.counts) {}
  StrId intern(std::string_view s) { return t.intern(s); }
  void memory_op(Ns ts, int64_t bytes, uint64_t addr, uint16_t dev) { apply_memory_op(t.allocations, ts, bytes, addr, dev); }
  void process(uint32_t pid, std::string_view name) { t.processes.push_back({pid, std::string(name)}); }
  void thread(uint32_t pid, uint32_t tid, std::string_view name) { t.threads.push_back({pid, tid, std::string(name)}); }
  template <class F>
  void speculate_not_ours(F&& f) {  // not reached: the precise loader never reads with Ours::Unknown
    f();
  }
};

// Deeper JSON is refused: nothing streamlab reads nests more than a few levels.
constexpr size_t kMaxJsonDepth = 10000;

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

// Parses `text` (followed by SIMDJSON_PADDING readable bytes) with `parser`. When simdjson
// refuses it, nlohmann's SAX parser names the byte offset and what it expected, as the loader
// always reported; valid JSON simdjson cannot hold as is (a number out of its range, nesting
// deeper than 10000) is loaded from nlohmann's re-serialization, kept in `redo`.
dom::element parse_document(dom::parser& parser, std::string_view text, const std::string& origin, std::string& redo) {
  if (text.size() > simdjson::SIMDJSON_MAXSIZE_BYTES)
    fail(origin, ": too large for the JSON loader (", text.size(), " bytes; at most ", simdjson::SIMDJSON_MAXSIZE_BYTES,
         ")");
  // Deeper nesting than simdjson's default 1024 (nlohmann had no limit; nothing we read nests).
  simdjson::error_code err = parser.allocate(std::max<size_t>(text.size(), 64), kMaxJsonDepth);
  if (err) fail(origin, ": cannot allocate the JSON parser for ", text.size(), " bytes (", simdjson::error_message(err), ")");
  dom::element doc;
  err = parser.parse(text.data(), text.size(), false).get(doc);
  if (!err) return doc;
  // No trace nests deeper than a few levels; deeper input is refused here rather than handed to
  // the fallback below, whose re-serialization recurses once per level.
  if (err == simdjson::DEPTH_ERROR)
    fail(origin, ": JSON nested deeper than ", kMaxJsonDepth, " levels; no trace nests like this");
  SyntaxCheck check;
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &check);
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON (", e.what(), ")");
  }
  if (check.failed && !check.syntax) fail(origin, ": not valid JSON (", check.what, ")");
  if (!ok || check.failed) fail(origin, ": not valid JSON at byte ", check.byte, " (of ", text.size(), "): ", check.what);
  try {
    redo = json::parse(text.begin(), text.end()).dump();
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON (", e.what(), ")");
  }
  simdjson::error_code err2 = parser.parse(redo.data(), redo.size(), true).get(doc);
  if (err2) fail(origin, ": JSON the loader cannot read (", simdjson::error_message(err), ")");
  return doc;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Trace load_kineto_doc(dom::element doc, const std::string& origin, JsonLoadStats* stats) {
  using namespace trace_io_detail;
  auto t0 = std::chrono::steady_clock::now();
  TopLevel top = read_top_level(doc, origin);
  Trace t;
  const Ns base = base_time_of(top, origin);
  const bool ours = has_our_block(top);
  load_device_properties(top, t, origin);
  load_distributed_info(top, t, origin);
  const EventContext cx{base, ours ? Ours::Yes : Ours::No};
  TraceSink sink(t);
  size_t i = 0;
  for (dom::element e : as_arr(top.events)) {
    const size_t index = i++;
    if (!is_type(e, Type::OBJECT)) fail(origin, ": traceEvents[", index, "]: expected an object, found ", type_name(e));
    Ev ev(as_obj(e), index, origin);
    sink.event = index;
    read_event(ev, sink, cx);
  }
  auto t1 = std::chrono::steady_clock::now();
  if (ours) load_block(as_obj(top.block), t, origin);
  else finish_pytorch_trace(t, base, sink.skipped);
  auto t2 = std::chrono::steady_clock::now();
  t.finalize();
  reject_repeated_correlations(t);
  if (stats) {
    stats->json_events = i;
    stats->events_s = std::chrono::duration<double>(t1 - t0).count();
    stats->frame_s = std::chrono::duration<double>(t2 - t1).count();
    stats->finalize_s = seconds_since(t2);
  }
  return t;
}

}  // namespace

namespace trace_io_detail {

bool block_has_counts(dom::object block) {
  for (dom::key_value_pair kv : block)
    if (kv.key == "counts") return true;
  return false;
}

TopLevel read_top_level(dom::element doc, const std::string& origin) {
  if (!is_type(doc, Type::OBJECT))
    fail(origin, ": expected a JSON object with a \"traceEvents\" array (a Kineto / Chrome trace), found ", type_name(doc));
  // The last of a repeated key wins (as in nlohmann).
  TopLevel top;
  for (dom::key_value_pair kv : as_obj(doc)) {
    if (kv.key == "traceEvents") top.events = kv.value, top.has_events = true, ++top.events_keys;
    else if (kv.key == "baseTimeNanoseconds") top.base = kv.value, top.has_base = true;
    else if (kv.key == "streamlab") top.block = kv.value, top.has_block = true;
    else if (kv.key == "deviceProperties") top.device_properties = kv.value, top.has_device_properties = true;
    else if (kv.key == "distributedInfo") top.distributed = kv.value, top.has_distributed = true;
  }
  if (!top.has_events || !is_type(top.events, Type::ARRAY))
    fail(origin, ": expected a \"traceEvents\" array at the top level (a Kineto / Chrome trace)");
  return top;
}

Ns base_time_of(const TopLevel& top, const std::string& origin) {
  if (!top.has_base) return 0;
  if (!is_integer(top.base))
    fail(origin, ": expected \"baseTimeNanoseconds\" to be an integer, found ", type_name(top.base), " ", brief(top.base));
  // Epoch nanoseconds: at most 2^62 (year 2116), so that base + ts stays inside int64.
  const bool fits = is_type(top.base, Type::INT64) && top.base.get_int64().value_unsafe() >= 0 &&
                    top.base.get_int64().value_unsafe() <= kMaxTraceNs;
  if (!fits)
    fail(origin, ": \"baseTimeNanoseconds\" ", brief(top.base), " outside 0..", kMaxTraceNs,
         " (epoch nanoseconds the trace model holds)");
  return as_int64(top.base);
}

bool has_our_block(const TopLevel& top) { return top.has_block && is_type(top.block, Type::OBJECT); }

void load_device_properties(const TopLevel& top, Trace& t, const std::string& origin) {
  if (!top.has_device_properties || !is_type(top.device_properties, Type::ARRAY)) return;
  size_t i = 0;
  for (dom::element de : as_arr(top.device_properties)) {
    if (!is_type(de, Type::OBJECT)) fail(origin, ": deviceProperties[", i, "]: expected an object");
    try {
      Fields d = fields_of(as_obj(de));
      Device dev;
      read_device_keys(d, kineto_fields::kDeviceProperties, dev);
      t.devices.push_back(dev);
    } catch (const Malformed& m) {
      fail(origin, ": deviceProperties[", i, "]: ", m.what);
    }
    ++i;
  }
}

void load_distributed_info(const TopLevel& top, Trace& t, const std::string& origin) {
  if (!top.has_distributed) return;
  if (!is_type(top.distributed, Type::OBJECT))
    fail(origin, ": expected \"distributedInfo\" to be an object, found ", type_name(top.distributed));
  constexpr int64_t kMaxWorld = int64_t(1) << 20;
  auto read = [&](std::string_view key, int& dst) {
    dom::element v;
    if (as_obj(top.distributed).at_key(key).get(v) != simdjson::SUCCESS) return;
    if (!is_integer(v) || !is_type(v, Type::INT64) || v.get_int64().value_unsafe() < 0 ||
        v.get_int64().value_unsafe() > kMaxWorld)
      fail(origin, ": distributedInfo.", key, ": expected an integer in 0..", kMaxWorld, ", found ", brief(v));
    dst = int(v.get_int64().value_unsafe());
  };
  read("rank", t.rank);
  read("world_size", t.world_size);
  if (t.world_size > 0 && t.rank >= t.world_size)
    fail(origin, ": distributedInfo: rank ", t.rank, " is outside world_size ", t.world_size);
}

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

Trace load_precise(std::string_view text, const std::string& origin, JsonLoadStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  if (stats) stats->bytes = text.size();
  dom::parser parser;
  std::string redo;
  dom::element doc = parse_document(parser, text, origin, redo);
  if (stats) stats->dom_s = seconds_since(t0);
  try {
    return load_kineto_doc(doc, origin, stats);
  } catch (const simdjson::simdjson_error& e) {
    // The accessors check types first; this is the net under everything else.
    fail(origin, ": unexpected JSON value (", e.what(), ")");
  }
}

// --------------------------------------------------------------- sources

MemorySource::MemorySource(std::string_view text) : text_(text) { size_ = text.size(); }
void MemorySource::read(size_t offset, char* dst, size_t n) const { std::memcpy(dst, text_.data() + offset, n); }

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open trace '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int e = errno;
    ::close(fd_);
    fail("cannot open trace '", path, "': ", std::strerror(e));
  }
  regular_ = S_ISREG(st.st_mode);
  size_ = regular_ ? size_t(st.st_size) : 0;
}
FileSource::~FileSource() { ::close(fd_); }

void FileSource::read(size_t offset, char* dst, size_t n) const {
  while (n > 0) {
    ssize_t got = ::pread(fd_, dst, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("reading trace '", path_, "' failed", got < 0 ? std::string(": ") + std::strerror(errno) : "");
    dst += got;
    offset += size_t(got);
    n -= size_t(got);
  }
}

// Backwards in blocks of 1 MiB (overlapping by the needle's length), so that a large trace is
// not read whole to look at its end.
bool tail_contains(const Source& src, std::string_view needle, size_t window) {
  const size_t size = src.size();
  const size_t lowest = size > window ? size - window : 0;
  const size_t block = size_t(1) << 20;
  std::string buf;
  size_t end = size;
  while (end > lowest) {
    size_t begin = end - lowest > block ? end - block : lowest;
    size_t stop = std::min(size, end + needle.size() - 1);
    buf.resize(stop - begin);
    src.read(begin, buf.data(), buf.size());
    if (buf.find(needle) != std::string::npos) return true;
    end = begin;
  }
  return false;
}

}  // namespace trace_io_detail

const char* to_string(TraceFormat f) {
  switch (f) {
    case TraceFormat::StreamlabJson: return "streamlab JSON";
    case TraceFormat::KinetoJson: return "Kineto / PyTorch profiler JSON";
    case TraceFormat::Sqlite: return "SQLite (Nsight Systems layout)";
    default: return "unknown";
  }
}

TraceFormat detect_trace_format(const std::string& path) {
  // A stream is read once, by load_trace; looking at its head here would consume it (or, for a
  // FIFO without a writer, block).
  if (is_stream(path)) return TraceFormat::Unknown;
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
  trace_io_detail::FileSource src(path);
  char head[16] = {};
  size_t n = 0;
  if (src.regular()) {
    n = std::min<size_t>(16, src.size());
    src.read(0, head, n);
  } else {
    std::ifstream f(path, std::ios::binary);
    f.read(head, 16);
    n = size_t(f.gcount());
  }
  if (n == 16 && std::memcmp(head, "SQLite format 3\0", 16) == 0) return TraceFormat::Sqlite;
  size_t i = 0;
  while (i < n && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  if (i < n && head[i] == '{') {
    // Our files carry the "streamlab" block at the end; look at the last 64 MiB.
    if (src.regular() && trace_io_detail::tail_contains(src, "\"streamlab\": {\"version\"", size_t(64) << 20))
      return TraceFormat::StreamlabJson;
    return TraceFormat::KinetoJson;
  }
  return TraceFormat::Unknown;
}

Trace load_kineto_json(std::string_view text, const std::string& origin, const JsonLoadOptions& opts,
                       JsonLoadStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  if (stats) *stats = JsonLoadStats{};
  if (opts.fast) {
    trace_io_detail::MemorySource src(text);
    if (auto t = trace_io_detail::load_fast(src, origin, opts, stats)) {
      if (stats) stats->wall_s = seconds_since(t0);
      return std::move(*t);
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  simdjson::padded_string padded(text.data(), text.size());
  if (!text.empty() && !padded.data()) fail(origin, ": cannot allocate ", text.size(), " bytes to parse it");
  if (stats) stats->read_s = seconds_since(t1);
  Trace t = trace_io_detail::load_precise(std::string_view(padded.data(), text.size()), origin, stats);
  if (stats) stats->wall_s = seconds_since(t0);
  return t;
}

Trace load_kineto_json(std::string_view text, const std::string& origin) {
  return load_kineto_json(text, origin, JsonLoadOptions{});
}

Trace load_kineto_json_file(const std::string& path, const JsonLoadOptions& opts, JsonLoadStats* stats) {
  JsonLoadStats own;  // for the fast loader's reason, when the caller does not ask for stats
  if (!stats) stats = &own;
  auto t0 = std::chrono::steady_clock::now();
  if (stats) *stats = JsonLoadStats{};
  const std::string origin = "'" + path + "'";
  if (opts.fast) {
    trace_io_detail::FileSource src(path);
    if (src.regular()) {
      if (auto t = trace_io_detail::load_fast(src, origin, opts, stats)) {
        if (stats) stats->wall_s = seconds_since(t0);
        return std::move(*t);
      }
    }
  }
  // The precise loader parses the document whole: its text, simdjson's tape (up to about twice
  // the text for event-dense JSON) and its strings, then the trace. A file that would not fit is
  // refused here with the figures, rather than allocated until the process is killed.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    const double need = 4.0 * double(st.st_size), have = double(host_memory_available());
    if (have > 0 && need > have)
      fail(origin, ": ", !stats->fallback.empty() ? "the fast loader could not read it (" + stats->fallback + ") and " : "",
           "the precise JSON loader would need about ", need / double(1 << 30), " GiB (4x the file's ",
           double(st.st_size) / double(1 << 30), " GiB), more than the ", have / double(1 << 30),
           " GiB available");
  }
  auto t1 = std::chrono::steady_clock::now();
  simdjson::padded_string text = trace_io_detail::read_file_padded(path);
  if (stats) stats->read_s = seconds_since(t1);
  Trace t = trace_io_detail::load_precise(std::string_view(text.data(), text.size()), origin, stats);
  if (stats) stats->wall_s = seconds_since(t0);
  return t;
}

Trace load_kineto_json_file(const std::string& path) { return load_kineto_json_file(path, JsonLoadOptions{}); }

namespace {

// Where the copies go: TMPDIR, or /tmp when TMPDIR is unset or empty; a TMPDIR that is not a
// folder is an error naming it (std::filesystem said only "No such file or directory").
std::filesystem::path temp_folder(const std::string& of) {
  const char* env = std::getenv("TMPDIR");
  if (!env || !*env) return "/tmp";
  std::error_code ec;
  SL_CHECK(std::filesystem::is_directory(env, ec), "cannot read trace '", of, "': it needs a temporary copy, and TMPDIR '",
           env, "' is not a folder");
  return env;
}

// A copy of a trace that cannot be read in place (a stream, a gzip file) in a temporary file,
// written piece by piece as it is read or unpacked: the loaders then read it as any file, in
// chunks, so the trace is never held whole in memory. Removed when done.
class TempCopy {
 public:
  explicit TempCopy(const std::string& of) : of_(of) {
    path_ = (temp_folder(of) / "streamlab-trace-XXXXXX").string();
    fd_ = ::mkstemp(path_.data());
    SL_CHECK(fd_ >= 0, "cannot read trace '", of, "': no temporary file in ", temp_folder(of).string(), " (",
             std::strerror(errno), "; TMPDIR chooses where it goes)");
    cleanup_.reset(path_);
  }
  ~TempCopy() {
    if (fd_ >= 0) ::close(fd_);
    std::remove(path_.c_str());
  }
  TempCopy(const TempCopy&) = delete;
  TempCopy& operator=(const TempCopy&) = delete;
  void append(const char* p, size_t n) {
    // A stream without end (`analyze /dev/zero` after its head, a gzip bomb) would fill the disk
    // before failing: every 256 MiB the folder's free space is looked at, and the copy stops while
    // 1 GiB is still free (STREAMLAB_TMP_RESERVE_GIB sets how much, for tests).
    static const double reserve_gib = [] {
      const char* v = std::getenv("STREAMLAB_TMP_RESERVE_GIB");
      return v && std::atof(v) > 0 ? std::atof(v) : 1.0;
    }();
    written_ += n;
    if (written_ >= next_space_check_) {
      next_space_check_ = written_ + (size_t(256) << 20);
      struct statvfs vfs {};
      const std::string folder = std::filesystem::path(path_).parent_path().string();
      if (::statvfs(folder.c_str(), &vfs) == 0) {
        const double free_gib = double(vfs.f_bavail) * double(vfs.f_frsize) / double(1 << 30);
        SL_CHECK(free_gib >= reserve_gib, "cannot read trace '", of_, "': its temporary copy in ", folder, " reached ",
                 double(written_) / double(1 << 30), " GiB with only ", free_gib,
                 " GiB left there; stopped so as not to fill the disk (it keeps ", reserve_gib,
                 " GiB free; TMPDIR chooses where the copy goes)");
      }
    }
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      SL_CHECK(w > 0, "cannot read trace '", of_, "': writing its copy ", path_, " failed (", std::strerror(errno),
               "; TMPDIR chooses where it goes)");
      p += w, n -= size_t(w);
    }
  }
  const std::string& path() {
    if (fd_ >= 0) {
      SL_CHECK(::close(fd_) == 0, "cannot read trace '", of_, "': closing its copy ", path_, " failed (",
               std::strerror(errno), ")");
      fd_ = -1;
    }
    return path_;
  }

 private:
  std::string of_, path_;
  size_t written_ = 0, next_space_check_ = 0;
  InterruptCleanup cleanup_;  // as large as the trace: not left in /tmp by a Ctrl-C
  int fd_ = -1;
};

// Loads regular file `file` (gzipped or not), naming it `shown` in messages: the user's path
// when `file` is a temporary copy.
Trace load_file(const std::string& file, const std::string& shown) {
  if (is_gzip_file(file)) {
    TempCopy copy(shown);
    gunzip_file(file, [&](const char* p, size_t n) { copy.append(p, n); });
    return load_file(copy.path(), shown);
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("trace '", shown, "': a directory, not a trace file");
  try {
    switch (detect_trace_format(file)) {
      case TraceFormat::Sqlite: return load_nsys_sqlite(file);
      case TraceFormat::StreamlabJson:
      case TraceFormat::KinetoJson: return load_kineto_json_file(file);
      default:
        fail("'", file, "': not a trace streamlab can read (expected our JSON, a PyTorch profiler / Kineto JSON, or "
                        "our SQLite; the file starts with neither '{' nor the SQLite header)");
    }
  } catch (const Error& e) {
    if (file == shown) throw;
    std::string m = e.what();
    for (size_t at = m.find(file); at != std::string::npos; at = m.find(file, at + shown.size()))
      m.replace(at, file.size(), shown);
    throw Error(m);
  }
}

// The first bytes of a stream, checked as they arrive: a trace begins with gzip's magic, SQLite's
// header or (after blanks) JSON's '{'. Anything else (`analyze /dev/zero`, a binary) is refused at
// once instead of copied whole into TMPDIR first.
class StreamHead {
 public:
  explicit StreamHead(const std::string& of) : of_(of) {}
  void look(const char* p, size_t n) {
    for (size_t i = 0; i < n && !known_; ++i) {
      const unsigned char c = static_cast<unsigned char>(p[i]);
      if (head_.empty() && std::isspace(c)) {
        SL_CHECK(++blanks_ <= (size_t(1) << 20), "trace '", of_, "': the stream begins with more than 1 MiB of blanks");
        continue;
      }
      head_ += char(c);
      if (head_[0] == '{') return void(known_ = true);
      static const std::string gzip("\x1f\x8b", 2), sqlite("SQLite format 3\0", 16);
      const std::string& magic = head_[0] == '\x1f' ? gzip : sqlite;
      if (magic.compare(0, head_.size(), head_) != 0)
        fail("trace '", of_, "': not a trace streamlab can read (a stream must begin with JSON's '{', the SQLite "
             "header or gzip's magic; byte ", blanks_ + head_.size() - 1, " is 0x", hex_byte(c), ")");
      known_ = head_.size() == magic.size();
    }
  }

 private:
  static std::string hex_byte(unsigned char c) {
    const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }
  std::string of_, head_;
  size_t blanks_ = 0;
  bool known_ = false;
};

}  // namespace

Trace load_trace(const std::string& path) {
  if (!is_stream(path)) return load_file(path, path);
  // A pipe (`analyze /dev/stdin`), FIFO or device: copied to a file first (a FIFO waits at most
  // 30 s for its writer; STREAMLAB_FIFO_WAIT_S shortens the wait for tests), then loaded as the
  // file it carries, whatever its format.
  static const double wait_s = [] {
    const char* v = std::getenv("STREAMLAB_FIFO_WAIT_S");
    return v && std::atof(v) > 0 ? std::atof(v) : 30.0;
  }();
  TempCopy copy(path);
  size_t bytes = 0;
  StreamHead head(path);
  read_stream(path, "trace", wait_s, size_t(1) << 40, [&](const char* p, size_t n) {
    head.look(p, n);
    copy.append(p, n);
    bytes += n;
  });
  if (bytes == 0) fail("trace '", path, "': the stream is empty");
  return load_file(copy.path(), path);
}

}  // namespace sl::prof
