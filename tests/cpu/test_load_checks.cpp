// The loaders refuse what the trace model cannot hold: a field outside its type's range is not
// wrapped into another value, a GPU op without a duration is not silently skipped, a repeated
// correlation id is not silently resolved, an altered SQLite is not read as an empty trace.
// Each case is a small valid trace with one field changed by hand; the expectation is written
// from the trace model's types (trace.h), not from what the loader happens to do.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/summary.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;
using json = nlohmann::json;

namespace {

// PyTorch's layout: event 0 a launch, event 1 its kernel, event 2 a second launch and event 3
// its kernel (stream 7, correlations 77 and 78).
json base_doc() {
  return json::parse(R"JSON({
  "baseTimeNanoseconds": 1760000000000000000,
  "traceEvents": [
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
   "ts": 120.0, "dur": 8.0, "args": {"cbid": 211, "correlation": 77}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 130.0, "dur": 50.0,
   "args": {"device": 0, "context": 1, "stream": 7, "correlation": 77, "grid": [264, 1, 1], "block": [128, 1, 1]}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
   "ts": 140.0, "dur": 8.0, "args": {"cbid": 211, "correlation": 78}},
  {"ph": "X", "cat": "kernel", "name": "norm", "pid": 0, "tid": 7, "ts": 190.0, "dur": 10.0,
   "args": {"device": 0, "context": 1, "stream": 7, "correlation": 78, "grid": [1, 1, 1], "block": [256, 1, 1]}}
  ]})JSON");
}

// Loaded by the precise loader and by the fast one (small chunks, two threads): both must give
// the same trace, load issues included.
Trace load_both(const json& doc) {
  const std::string text = doc.dump();
  JsonLoadOptions precise;
  precise.fast = false;
  Trace a = load_kineto_json(text, "t.json", precise);
  JsonLoadOptions fast;
  fast.threads = 2;
  fast.chunk_bytes = 64;
  JsonLoadStats stats;
  Trace b = load_kineto_json(text, "t.json", fast, &stats);
  EXPECT_TRUE(stats.fast) << stats.fallback;
  EXPECT_EQ(first_difference(a, b), "");
  return a;
}

// One record dropped for `what` (a substring), first at event `event`, carrying `value`.
void expect_one_rejected(const Trace& t, const std::string& what, uint64_t event, const std::string& value) {
  EXPECT_EQ(t.counts.rejected_on_load, 1u);
  EXPECT_FALSE(t.counts.clean());
  ASSERT_EQ(t.counts.load_issues.size(), 1u);
  const LoadIssue& i = t.counts.load_issues[0];
  EXPECT_NE(i.what.find(what), std::string::npos) << i.what;
  EXPECT_EQ(i.records, 1u);
  EXPECT_EQ(i.first, event);
  EXPECT_EQ(i.first_value, value);
  // The report names it.
  EXPECT_NE(record_count_warnings(t.counts).find(what), std::string::npos) << record_count_warnings(t.counts);
}

}  // namespace

TEST(LoadChecks, TheUnchangedTraceIsClean) {
  Trace t = load_both(base_doc());
  EXPECT_EQ(t.kernels.size(), 2u);
  EXPECT_EQ(t.api_calls.size(), 2u);
  EXPECT_TRUE(t.counts.clean());
}

TEST(LoadChecks, IdsOutsideTheirTypeAreRejectedNotWrapped) {
  struct Case {
    const char* key;
    json value;
    const char* what;
    const char* shown;
  };
  const std::vector<Case> cases = {
      {"stream", json(int64_t(1) << 40), "args.\"stream\" outside 0..4294967294", "1099511627776"},
      {"stream", json(-1), "args.\"stream\" outside 0..4294967294", "-1"},
      {"stream", json(4294967295u), "args.\"stream\" outside 0..4294967294", "4294967295"},  // the model's "none"
      {"stream", json(18446744073709551615u), "args.\"stream\" outside", ">= 2^63"},
      {"device", json(70000), "args.\"device\" outside 0..65535", "70000"},
      {"correlation", json(int64_t(1) << 32), "args.\"correlation\" outside 0..4294967295", "4294967296"},
      {"registers per thread", json(65536), "args.\"registers per thread\" outside 0..65535", "65536"},
      {"block", json::array({70000, 1, 1}), "args.\"block\" outside 0..65535", "70000"},
      {"graph node id", json(-5), "args.\"graph node id\" outside", "-5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
    json doc = base_doc();
    doc["traceEvents"][3]["args"][c.key] = c.value;
    Trace t = load_both(doc);
    EXPECT_EQ(t.kernels.size(), 1u) << "the kernel with the bad field is dropped";
    EXPECT_EQ(t.str(t.kernels[0].name), "gemm");
    expect_one_rejected(t, c.what, 3, c.shown);
  }
}

TEST(LoadChecks, KindsOutsideTheirEnumsAreRejected) {
  json doc = base_doc();
  doc["traceEvents"].push_back({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy HtoD"}, {"pid", 0}, {"tid", 7},
                                {"ts", 300.0}, {"dur", 2.0}, {"args", {{"stream", 7}, {"copy kind", 11}}}});
  Trace t = load_both(doc);
  EXPECT_TRUE(t.memcpys.empty());
  expect_one_rejected(t, "memcpy args.\"copy kind\" outside 0..10", 4, "11");

  doc = base_doc();
  doc["traceEvents"][0]["args"]["return value"] = int64_t(1) << 31;
  t = load_both(doc);
  EXPECT_EQ(t.api_calls.size(), 1u);
  expect_one_rejected(t, "API call args.\"return value\" outside -2147483648..2147483647", 0, "2147483648");
}

TEST(LoadChecks, TimesTheModelCannotHoldAreRejected) {
  // int64 ns from the epoch hold +-9.2e15 us; the loaders keep +-2^62 ns (4.6e15 us with the
  // base time) so that spans fit. 1e308 and 1e29 us are far outside; so is a 289-year kernel.
  const std::vector<std::pair<std::string, json>> cases = {{"ts", 1e308}, {"ts", 1e29}, {"ts", -1e16}, {"dur", 9.1e15}, {"dur", 1e300}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key + " = " + value.dump());
    json doc = base_doc();
    doc["traceEvents"][1][key] = value;
    Trace t = load_both(doc);
    ASSERT_EQ(t.kernels.size(), 1u);
    EXPECT_EQ(t.str(t.kernels[0].name), "norm");
    ASSERT_EQ(t.counts.load_issues.size(), 1u);
    EXPECT_NE(t.counts.load_issues[0].what.find("\"" + key + "\""), std::string::npos) << t.counts.load_issues[0].what;
    EXPECT_EQ(t.counts.load_issues[0].first, 1u);
  }
  // A base time of 2^64-1 is not -1: the document is refused, naming the field.
  json doc = base_doc();
  doc["baseTimeNanoseconds"] = 18446744073709551615u;
  try {
    load_kineto_json(doc.dump(), "t.json");
    ADD_FAILURE() << "loaded a base time of 2^64-1";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("baseTimeNanoseconds"), std::string::npos) << e.what();
  }
  // A duration below zero is kept and counted as end < start, as the CUPTI decoder counts it.
  doc = base_doc();
  doc["traceEvents"][1]["dur"] = -5.0;
  Trace t = load_both(doc);
  EXPECT_EQ(t.kernels.size(), 2u);
  EXPECT_EQ(t.counts.end_before_start, 1u);
  EXPECT_FALSE(t.counts.clean());
}

TEST(LoadChecks, GpuOpsWithoutADurationAreRejectedNotSkipped) {
  for (const char* ph : {"B", "E", "i", "b"}) {
    SCOPED_TRACE(ph);
    json doc = base_doc();
    doc["traceEvents"][1]["ph"] = ph;
    doc["traceEvents"][1].erase("dur");
    Trace t = load_both(doc);
    EXPECT_EQ(t.kernels.size(), 1u);
    expect_one_rejected(t, std::string("kernel given as a \"") + ph + "\" event", 1, "");
  }
  // CPU-side B/E pairs (not in the model) are still skipped without complaint.
  json doc = base_doc();
  doc["traceEvents"].push_back({{"ph", "B"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 1}, {"tid", 1}, {"ts", 1.0}});
  EXPECT_TRUE(load_both(doc).counts.clean());
}

TEST(LoadChecks, RepeatedCorrelationIdsAreCounted) {
  json doc = base_doc();
  doc["traceEvents"][2]["args"]["correlation"] = 77;  // the second launch repeats the first's id
  Trace t = load_both(doc);
  EXPECT_EQ(t.api_calls.size(), 2u) << "kept: only the link to its kernel is ambiguous";
  EXPECT_EQ(t.counts.rejected_on_load, 1u);
  ASSERT_EQ(t.counts.load_issues.size(), 1u);
  EXPECT_EQ(t.counts.load_issues[0].first, kNoIndex);
  EXPECT_NE(t.counts.load_issues[0].first_value.find("correlation 77 of pid 4242"), std::string::npos)
      << t.counts.load_issues[0].first_value;
  // The same id in another process is another id (several processes: the sorted path).
  doc = base_doc();
  doc["traceEvents"][2]["pid"] = 4243;
  doc["traceEvents"][2]["args"]["correlation"] = 77;
  EXPECT_TRUE(load_both(doc).counts.clean());
  doc["traceEvents"].push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaMemcpyAsync"}, {"pid", 4243},
                                {"tid", 1}, {"ts", 300.0}, {"dur", 1.0}, {"args", {{"correlation", 77}}}});
  t = load_both(doc);
  EXPECT_EQ(t.counts.rejected_on_load, 1u);
  EXPECT_NE(t.counts.load_issues.at(0).first_value.find("correlation 77 of pid 4243, cudaMemcpyAsync"),
            std::string::npos)
      << t.counts.load_issues.at(0).first_value;
  // A runtime and a driver call may share an id (one calls the other): not counted.
  doc = base_doc();
  doc["traceEvents"][2]["cat"] = "cuda_driver";
  doc["traceEvents"][2]["args"]["correlation"] = 77;
  EXPECT_TRUE(load_both(doc).counts.clean());
}

TEST(LoadChecks, OurBlockKeepsTheLoadersRejections) {
  // Our own layout: the block's counts are the recording's; a record the loader rejects now is
  // added to them, and an integer of the block outside its field is an error.
  SyntheticOptions o;
  o.target_events = 2000;
  Trace src = make_synthetic_trace(o);
  json doc = json::parse(kineto_json_string(src));
  size_t k = 0;
  while (doc["traceEvents"][k].value("cat", "") != "kernel") ++k;
  doc["traceEvents"][k]["args"]["stream"] = int64_t(1) << 40;
  Trace t = load_both(doc);
  EXPECT_EQ(t.kernels.size(), src.kernels.size() - 1);
  EXPECT_EQ(t.counts.rejected_on_load, 1u);
  EXPECT_EQ(t.counts.load_issues.at(0).first, k);

  doc = json::parse(kineto_json_string(src));
  ASSERT_TRUE(doc["streamlab"].contains("streams"));
  doc["streamlab"]["streams"][0][0] = int64_t(1) << 40;
  EXPECT_THROW(load_kineto_json(doc.dump(), "t.json"), sl::Error);
}

namespace {

std::string exported_sqlite(const std::string& name) {
  SyntheticOptions o;
  o.target_events = 2000;
  const std::string path = testing::TempDir() + "/" + name;
  write_nsys_sqlite(make_synthetic_trace(o), path);
  return path;
}

void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << "\n" << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

std::string error_of(const std::string& path) {
  try {
    load_nsys_sqlite(path);
  } catch (const sl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LoadChecks, SqliteRowsOutsideTheModelAreRejected) {
  const std::string path = exported_sqlite("ranges.sqlite");
  const Trace before = load_nsys_sqlite(path);
  ASSERT_TRUE(before.counts.clean());
  exec(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 1099511627776 WHERE rowid = 3");
  Trace t = load_nsys_sqlite(path);
  EXPECT_EQ(t.kernels.size(), before.kernels.size() - 1);
  expect_one_rejected(t, "CUPTI_ACTIVITY_KIND_KERNEL: streamId outside 0..4294967294", 3, "1099511627776");
}

TEST(LoadChecks, SqliteDurationsLongerThanTheJsonLimitAreRejected) {
  // The JSON loaders reject a "dur" over 1e12 us; the same record in SQLite is rejected alike
  // (it used to stretch the span to 2e15 us and analyze exited 0).
  const std::string path = exported_sqlite("long_kernel.sqlite");
  const Trace before = load_nsys_sqlite(path);
  exec(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 2000000000000000000 WHERE rowid = 5");
  Trace t = load_nsys_sqlite(path);
  EXPECT_EQ(t.kernels.size(), before.kernels.size() - 1);
  expect_one_rejected(t, "CUPTI_ACTIVITY_KIND_KERNEL: end - start longer than 1e12 us", 5, "2000000000000000000 ns");
}

TEST(LoadChecks, SqliteEndBeforeStartIsCounted) {
  const std::string path = exported_sqlite("end_before_start.sqlite");
  exec(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 100 WHERE rowid IN (2, 5)");
  Trace t = load_nsys_sqlite(path);
  EXPECT_EQ(t.counts.end_before_start, 2u) << "the file has more than the recording counted";
  EXPECT_FALSE(t.counts.clean());
  EXPECT_NE(record_count_warnings(t.counts).find("end < start"), std::string::npos);
}

TEST(LoadChecks, SqliteWithoutItsTablesIsAnError) {
  // Our export always has the kernel table: without it, not an empty trace but an error.
  std::string path = exported_sqlite("no_kernels.sqlite");
  exec(path, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL");
  std::string e = error_of(path);
  EXPECT_NE(e.find("no CUPTI_ACTIVITY_KIND_KERNEL table"), std::string::npos) << e;
  // Not ours and no CUDA activity table at all: not an export of a CUDA trace.
  path = exported_sqlite("no_cuda.sqlite");
  exec(path,
       "DROP TABLE STREAMLAB_META; DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL; DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME; "
       "DROP TABLE CUPTI_ACTIVITY_KIND_DRIVER");
  e = error_of(path);
  EXPECT_NE(e.find("not an Nsight Systems export of a CUDA trace"), std::string::npos) << e;
  // Not ours, API calls but no kernel table (nsys leaves out kinds it saw none of): loads.
  path = exported_sqlite("nsys_no_kernels.sqlite");
  exec(path, "DROP TABLE STREAMLAB_META; DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL");
  Trace t = load_nsys_sqlite(path);
  EXPECT_TRUE(t.kernels.empty());
  EXPECT_FALSE(t.api_calls.empty());
}
