// The field tables of profiler/kineto_fields.h against the writer, both loaders and the
// validator, driven by the tables: a field added to a table is tested here without a new test.
// - every integer arg of every record kind, written and read back by the precise and the fast
//   loader, equals the original;
// - an arg of the wrong type, or one past its range, makes the validator fail, and past its range
//   the loaders drop and count the record; a missing Kineto arg makes the validator fail;
// - every column of every row table of the "streamlab" block round-trips, and a row missing a
//   column or holding a value of the wrong type makes the file malformed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_fields.h"
#include "profiler/kineto_json.h"
#include "profiler/kineto_validate.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;
namespace kf = sl::prof::kineto_fields;
using json = nlohmann::json;

namespace {

JsonLoadOptions precise() {
  JsonLoadOptions o;
  o.fast = false;
  return o;
}
JsonLoadOptions fast() {
  JsonLoadOptions o;
  o.threads = 2;
  o.chunk_bytes = 256;
  return o;
}

// A value in the field's range other than its default, distinct per field.
template <class Rec, class T>
T sample(const kf::IntArg<Rec, T>& f, int64_t index) {
  if constexpr (std::is_enum_v<T>) {
    return T(1);
  } else {
    int64_t v = std::max<int64_t>(f.lo, 0) + 2 + index;
    if (f.coding == kf::Coding::NsOrNone) v = 1'000'000 + index;
    return T(std::min(v, f.hi));
  }
}

// Sets every integer arg of r to its sample value.
template <class Table, class Rec>
void fill(const Table& table, Rec& r) {
  int64_t i = 0;
  kf::for_each_field(table, [&](const auto& f) {
    if constexpr (!kf::is_special_v<decltype(f)>) r.*f.member = sample(f, i);
    ++i;
  });
}

// The first integer arg whose member differs ("" when none).
template <class Table, class Rec>
std::string differing_arg(const Table& table, const Rec& a, const Rec& b) {
  std::string d;
  kf::for_each_field(table, [&](const auto& f) {
    if constexpr (!kf::is_special_v<decltype(f)>) {
      if (d.empty() && !(a.*f.member == b.*f.member))
        d = std::string(kf::name_of(f.key)) + ": " + std::to_string(kf::member_value(f, a)) + " != " +
            std::to_string(kf::member_value(f, b));
    }
  });
  return d;
}

// One record of each kind, every integer arg set from the tables.
Trace one_of_each() {
  Trace t;
  t.base_time = 1'000'000;
  Kernel k;
  fill(kf::kKernelArgs, k);
  k.start = 1'001'000, k.end = 1'002'000;
  k.name = t.intern("k");
  t.kernels.push_back(k);
  Memcpy m;
  fill(kf::kMemcpyArgs, m);
  m.start = 1'003'000, m.end = 1'004'000;
  t.memcpys.push_back(m);
  Memset s;
  fill(kf::kMemsetArgs, s);
  s.start = 1'005'000, s.end = 1'006'000;
  t.memsets.push_back(s);
  ApiCall a;
  fill(kf::kApiCallArgs, a);
  a.start = 1'000'500, a.end = 1'000'900;
  a.pid = 11, a.tid = 12;
  a.name = t.intern("cudaLaunchKernel");
  t.api_calls.push_back(a);
  Sync y;
  fill(kf::kSyncArgs, y);
  y.start = 1'007'000, y.end = 1'008'000;
  y.event_stream = 21, y.event_record_correlation = 22;  // the wait_on group (special args)
  t.syncs.push_back(y);
  NvtxRange r;
  fill(kf::kNvtxArgs, r);
  r.start = 1'000'100, r.end = 1'009'000;
  r.pid = 11, r.tid = 12, r.end_tid = 13;
  r.name = t.intern("range");
  r.domain = t.intern("dom");
  t.nvtx.push_back(r);
  t.finalize();
  return t;
}

Trace load(const std::string& text, const JsonLoadOptions& o) { return load_kineto_json(text, "fields", o, nullptr); }

// The table of the records of category `cat`, applied to f.
template <class F>
void with_table(const std::string& cat, F&& f) {
  if (cat == "kernel") f(kf::kKernelArgs);
  else if (cat == "gpu_memcpy") f(kf::kMemcpyArgs);
  else if (cat == "gpu_memset") f(kf::kMemsetArgs);
  else if (cat == "cuda_runtime") f(kf::kApiCallArgs);
  else if (cat == "cuda_sync") f(kf::kSyncArgs);
  else f(kf::kNvtxArgs);
}
const char* const kCats[] = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_sync", "user_annotation"};

// The text with the value of args."key" of the first event of `cat` replaced by `value` (or the
// member removed when value is empty). Events are written one per line.
std::string with_arg(const std::string& text, const std::string& cat, std::string_view key, const std::string& value) {
  const size_t line = text.find("\"cat\": \"" + cat + "\"");
  EXPECT_NE(line, std::string::npos) << cat;
  const size_t line_end = text.find('\n', line);
  const std::string k = "\"" + std::string(key) + "\": ";
  size_t at = text.find(k, line);
  EXPECT_TRUE(at != std::string::npos && at < line_end) << cat << " " << key;
  const size_t v = at + k.size();
  size_t e = v;
  if (text[v] == '[') e = text.find(']', v) + 1;
  else if (text[v] == '"') e = text.find('"', v + 1) + 1;
  else e = text.find_first_of(",}", v);
  if (!value.empty()) return text.substr(0, v) + value + text.substr(e);
  // Remove the member and one separator next to it.
  if (text.compare(at - 2, 2, ", ") == 0) return text.substr(0, at - 2) + text.substr(e);
  return text.substr(0, at) + text.substr(e + (text.compare(e, 2, ", ") == 0 ? 2 : 0));
}

}  // namespace

TEST(KinetoFields, EveryIntegerArgRoundTripsThroughBothLoaders) {
  const Trace t = one_of_each();
  const std::string text = kineto_json_string(t);
  ASSERT_TRUE(validate_kineto_json(text).ok()) << validate_kineto_json(text).report();
  for (const JsonLoadOptions& o : {precise(), fast()}) {
    SCOPED_TRACE(o.fast ? "fast" : "precise");
    const Trace back = load(text, o);
    EXPECT_EQ(first_difference(t, back, true), "");
    ASSERT_EQ(back.kernels.size(), 1u);
    ASSERT_EQ(back.memcpys.size(), 1u);
    ASSERT_EQ(back.memsets.size(), 1u);
    ASSERT_EQ(back.api_calls.size(), 1u);
    ASSERT_EQ(back.syncs.size(), 1u);
    ASSERT_EQ(back.nvtx.size(), 1u);
    EXPECT_EQ(differing_arg(kf::kKernelArgs, t.kernels[0], back.kernels[0]), "");
    EXPECT_EQ(differing_arg(kf::kMemcpyArgs, t.memcpys[0], back.memcpys[0]), "");
    EXPECT_EQ(differing_arg(kf::kMemsetArgs, t.memsets[0], back.memsets[0]), "");
    EXPECT_EQ(differing_arg(kf::kApiCallArgs, t.api_calls[0], back.api_calls[0]), "");
    EXPECT_EQ(differing_arg(kf::kSyncArgs, t.syncs[0], back.syncs[0]), "");
    EXPECT_EQ(differing_arg(kf::kNvtxArgs, t.nvtx[0], back.nvtx[0]), "");
    EXPECT_EQ(back.syncs[0].event_stream, 21u);
    EXPECT_EQ(back.syncs[0].event_record_correlation, 22u);
  }
}

// Each written arg, given the wrong type, past its range, or left out.
TEST(KinetoFields, ValidatorAndLoadersCheckEveryArgOfTheTables) {
  const Trace t = one_of_each();
  const std::string text = kineto_json_string(t);
  size_t checked = 0;
  for (const std::string cat : kCats) {
    with_table(cat, [&](const auto& table) {
      kf::for_each_field(table, [&](const auto& f) {
        using Fd = std::remove_cvref_t<decltype(f)>;
        const std::string key(kf::name_of(f.key));
        const std::string label = "args.\"" + key + "\"";
        if (text.find("\"" + key + "\": ", text.find("\"cat\": \"" + cat + "\"")) > text.find('\n', text.find("\"cat\": \"" + cat + "\"")))
          return;  // not written for this record (written only when set, or with its group)
        SCOPED_TRACE(cat + " " + label);
        ++checked;
        // Of the wrong type.
        {
          const KinetoValidation v = validate_kineto_json(with_arg(text, cat, key, "{\"x\": 1}"));
          EXPECT_FALSE(v.ok());
          EXPECT_NE(v.report().find(label), std::string::npos) << v.report();
        }
        // Left out: the validator requires Kineto's args.
        {
          const KinetoValidation v = validate_kineto_json(with_arg(text, cat, key, ""));
          if (f.kineto) EXPECT_NE(v.report().find(label + " missing"), std::string::npos) << v.report();
          else EXPECT_TRUE(v.ok()) << v.report();
        }
        // Past its range: invalid, and both loaders drop the record and say why.
        if constexpr (!kf::is_special_v<Fd>) {
          if (f.coding == kf::Coding::NsOrNone) return;
          const std::string past = with_arg(text, cat, key, std::to_string(f.hi + 1));
          const KinetoValidation v = validate_kineto_json(past);
          EXPECT_NE(v.report().find(label + " = " + std::to_string(f.hi + 1) + " outside"), std::string::npos)
              << v.report();
          for (const JsonLoadOptions& o : {precise(), fast()}) {
            const Trace back = load(past, o);
            EXPECT_EQ(back.counts.rejected_on_load, 1u) << (o.fast ? "fast" : "precise");
            ASSERT_EQ(back.counts.load_issues.size(), 1u);
            EXPECT_NE(back.counts.load_issues[0].what.find(label + " outside"), std::string::npos)
                << back.counts.load_issues[0].what;
          }
        }
      });
    });
  }
  EXPECT_GT(checked, 40u);
}

namespace {

// A trace whose block has a row in every table.
Trace with_block_rows() {
  Trace t = make_sample_trace();
  t.processes.push_back({1, "proc"});
  t.threads.push_back({1, 1, "main"});
  CudaEventRecord e;
  e.ts = t.base_time + 10, e.correlation = 3, e.context = 1, e.stream = 7, e.event = 4, e.pid = 1, e.device = 0;
  t.cuda_events.push_back(e);
  Allocation a;
  a.address = 0x7f0000001000, a.bytes = 4096, a.alloc = t.base_time + 5, a.free = kNoTime, a.correlation = 2;
  a.context = 1, a.stream = kNoStream, a.pid = 1, a.device = 0, a.kind = MemoryKind::Managed, a.from_pool = 1;
  t.allocations.push_back(a);
  Overhead o;
  o.start = t.base_time + 1, o.end = t.base_time + 2, o.kind = 1, o.object_kind = 2, o.object_id = 3, o.pid = 1;
  t.overheads.push_back(o);
  CounterSample c;
  c.ts = t.base_time + 3, c.value = 2.5, c.name = t.intern("power"), c.pid = 0;
  t.counters.push_back(c);
  t.finalize();
  return t;
}

// The text with column `col` of the first row of the block's table `key` replaced (or removed
// when `value` is null_opt).
std::string with_column(const std::string& text, const std::string& key, size_t col, const json* value) {
  const size_t block = text.find("\"streamlab\": {");
  const size_t at = text.find("\"" + key + "\": [", block);
  EXPECT_NE(at, std::string::npos) << key;
  const size_t row = text.find('[', text.find('[', at) + 1);
  size_t end = row;
  for (bool in_str = false; ++end < text.size();) {  // the row's closing bracket
    if (text[end] == '\\') ++end;
    else if (text[end] == '"') in_str = !in_str;
    else if (!in_str && text[end] == ']') break;
  }
  json r = json::parse(text.substr(row, end + 1 - row));
  if (value) r[col] = *value;
  else r.erase(r.begin() + std::ptrdiff_t(col));
  return text.substr(0, row) + r.dump() + text.substr(end + 1);
}

}  // namespace

TEST(KinetoFields, EveryBlockColumnRoundTripsAndIsChecked) {
  const Trace t = with_block_rows();
  const std::string text = kineto_json_string(t);
  for (const JsonLoadOptions& o : {precise(), fast()}) EXPECT_EQ(first_difference(t, load(text, o), true), "");
  size_t columns = 0;
  kf::for_each_field(kf::kBlockTables, [&](const auto& table) {
    ASSERT_FALSE((t.*table.rows).empty()) << table.key;
    size_t col = 0;
    kf::for_each_field(table.columns, [&](const auto& c) {
      SCOPED_TRACE(std::string(table.key) + "." + c.name);
      ++columns;
      const std::string where = std::string("streamlab.") + table.key + "[0]: malformed";
      // The last column removed: the row is too short.
      if (col + 1 == std::tuple_size_v<std::remove_cvref_t<decltype(table.columns)>>) {
        for (const JsonLoadOptions& o : {precise(), fast()}) {
          try {
            load(with_column(text, table.key, col, nullptr), o);
            ADD_FAILURE() << "a short row loaded";
          } catch (const sl::Error& e) {
            EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
          }
        }
      }
      // A value of the wrong type: text where a number belongs, a number where text belongs.
      const json wrong = c.col == kf::Col::Name || c.col == kf::Col::Text ? json(1) : json("x");
      for (const JsonLoadOptions& o : {precise(), fast()}) {
        try {
          load(with_column(text, table.key, col, &wrong), o);
          ADD_FAILURE() << "a value of the wrong type loaded";
        } catch (const sl::Error& e) {
          EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
        }
      }
      ++col;
    });
  });
  EXPECT_EQ(columns, 6u + 10 + 2 + 3 + 7 + 11 + 6 + 4);
}

// The allocation row's columns by name, in the order older files have them.
TEST(KinetoFields, AllocationColumnsInTheirOnDiskOrder) {
  std::vector<std::string> names;
  kf::for_each_field(kf::kAllocationColumns, [&](const auto& c) { names.push_back(c.name); });
  EXPECT_EQ(names, (std::vector<std::string>{"address", "bytes", "alloc", "free", "correlation", "context", "stream",
                                             "pid", "device", "kind", "from_pool"}));
  // A row as an older file has it.
  Trace t = with_block_rows();
  std::string text = kineto_json_string(t);
  const size_t at = text.find("\"allocations\": [");
  const size_t end = text.find(']', text.find('[', at) + 1);
  text = text.substr(0, text.find('[', at) + 1) + "[4096,64,null,null,9,1,-1,1,0,3,0]" + text.substr(end + 1);
  const Trace back = load(text, precise());
  const Allocation* found = nullptr;
  for (const Allocation& x : back.allocations)
    if (x.address == 4096) found = &x;
  ASSERT_NE(found, nullptr);
  const Allocation& a = *found;
  EXPECT_EQ(a.address, 4096u);
  EXPECT_EQ(a.bytes, 64u);
  EXPECT_EQ(a.alloc, kNoTime);
  EXPECT_EQ(a.correlation, 9u);
  EXPECT_EQ(a.stream, kNoStream);
  EXPECT_EQ(a.kind, MemoryKind::Device);
}
