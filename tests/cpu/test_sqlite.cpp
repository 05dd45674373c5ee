// SQLite in the Nsight Systems export layout: the tables and columns the nsys reports and rules
// query, the reports' own SQL run on our file, and the lossless round trip.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/analysis.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;

namespace {

struct Db {
  sqlite3* db = nullptr;
  explicit Db(const std::string& path) { EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK); }
  ~Db() { sqlite3_close(db); }
  std::set<std::string> columns(const std::string& table) {
    std::set<std::string> c;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) c.insert(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
    sqlite3_finalize(st);
    return c;
  }
  std::map<std::string, std::string> types(const std::string& table) {
    std::map<std::string, std::string> c;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW)
      c[reinterpret_cast<const char*>(sqlite3_column_text(st, 1))] = reinterpret_cast<const char*>(sqlite3_column_text(st, 2));
    sqlite3_finalize(st);
    return c;
  }
  // Rows of a query as strings (NULL -> "NULL").
  std::vector<std::vector<std::string>> rows(const std::string& sql) {
    std::vector<std::vector<std::string>> r;
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
    EXPECT_EQ(rc, SQLITE_OK) << sqlite3_errmsg(db) << "\n" << sql;
    if (rc != SQLITE_OK) return r;
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* v = sqlite3_column_text(st, i);
        row.push_back(v ? reinterpret_cast<const char*>(v) : "NULL");
      }
      r.push_back(row);
    }
    sqlite3_finalize(st);
    return r;
  }
  void exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << "\n" << sql;
    sqlite3_free(err);
  }
};

// The loader's error for `path`, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    load_nsys_sqlite(path);
  } catch (const sl::Error& e) {
    return e.what();
  }
  return "";
}

std::string write_sample(const Trace& t, const std::string& name) {
  std::string path = testing::TempDir() + "/" + name;
  write_nsys_sqlite(t, path);
  return path;
}

}  // namespace

// Column names as the nsys reports and rules query them (from the report SQL of
// cuda_gpu_kern_sum, cuda_gpu_trace, cuda_api_sum, cuda_kern_exec_trace, nvtx_sum, the
// kernel_helper view and the gpu_gaps rule, and the nsys export schema documentation).
TEST(NsysSqlite, TablesAndColumnsMatchTheReports) {
  Trace t = make_sample_trace();
  std::string path = write_sample(t, "sl_schema.sqlite");
  Db db(path);
  const std::map<std::string, std::vector<std::string>> expected = {
      {"StringIds", {"id", "value"}},
      {"CUPTI_ACTIVITY_KIND_KERNEL",
       {"start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
        "demangledName", "shortName", "mangledName", "launchType", "registersPerThread", "gridX", "gridY", "gridZ",
        "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
        "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId"}},
      {"CUPTI_ACTIVITY_KIND_MEMCPY",
       {"start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid", "bytes",
        "copyKind", "srcKind", "dstKind", "graphNodeId"}},
      {"CUPTI_ACTIVITY_KIND_MEMSET",
       {"start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid", "value",
        "bytes", "memKind", "graphNodeId"}},
      {"CUPTI_ACTIVITY_KIND_RUNTIME", {"start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"}},
      {"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
       {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "syncType", "eventId"}},
      {"NVTX_EVENTS", {"start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid",
                       "textId", "domainId"}},
      {"CUDA_GPU_MEMORY_USAGE_EVENTS",
       {"start", "globalPid", "deviceId", "contextId", "address", "bytes", "memKind", "memoryOperationType",
        "correlationId", "streamId"}},
      {"TARGET_INFO_GPU", {"id", "name", "busLocation", "totalMemory", "smCount", "uuid", "computeMajor", "computeMinor",
                           "chipName", "memoryBandwidth", "clockRate", "l2CacheSize"}},
      {"TARGET_INFO_SESSION_START_TIME", {"utcEpochNs"}},
      {"META_DATA_EXPORT", {"name", "value"}},
      {"PROCESSES", {"globalPid", "pid", "name"}},
      {"ThreadNames", {"nameId", "priority", "globalTid"}},
      {"ENUM_CUDA_MEMCPY_OPER", {"id", "name", "label"}},
      {"ENUM_CUDA_MEM_KIND", {"id", "name", "label"}},
      {"ENUM_CUPTI_SYNC_TYPE", {"id", "name", "label"}},
      {"ENUM_CUDA_KERNEL_LAUNCH_TYPE", {"id", "name", "label"}},
      {"ENUM_CUDA_DEV_MEM_EVENT_OPER", {"id", "name", "label"}},
      {"ENUM_NSYS_EVENT_TYPE", {"id", "name", "label"}},
  };
  for (const auto& [table, cols] : expected) {
    std::set<std::string> have = db.columns(table);
    ASSERT_FALSE(have.empty()) << "table " << table << " missing";
    for (const auto& c : cols) EXPECT_TRUE(have.count(c)) << table << "." << c;
  }
  // Types: nsys declares times and ids INTEGER, names TEXT.
  auto kt = db.types("CUPTI_ACTIVITY_KIND_KERNEL");
  EXPECT_EQ(kt["start"], "INTEGER");
  EXPECT_EQ(kt["demangledName"], "INTEGER");
  EXPECT_EQ(db.types("StringIds")["value"], "TEXT");
  EXPECT_EQ(db.types("NVTX_EVENTS")["text"], "TEXT");
  // Enum labels the reports print.
  EXPECT_EQ(db.rows("SELECT label FROM ENUM_CUDA_MEMCPY_OPER WHERE id = 1")[0][0], "Host-to-Device");
  EXPECT_EQ(db.rows("SELECT label FROM ENUM_CUDA_MEM_KIND WHERE id = 2")[0][0], "Pinned");
  EXPECT_EQ(db.rows("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange'")[0][0], "59");
  EXPECT_EQ(db.rows("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'").size(), 1u);
}

// The reports' own queries (minus nsys's registered median/stdev functions) on our file agree
// with our analysis.
TEST(NsysSqlite, ReportQueriesAgreeWithOurAnalysis) {
  Trace t = make_sample_trace();
  std::string path = write_sample(t, "sl_reports.sqlite");
  Db db(path);
  // kernel_helper's view, default (demangled) names.
  db.exec("CREATE TEMP VIEW CUPTI_ACTIVITY_KIND_KERNEL_NAMED AS SELECT k.*, str.value AS name FROM "
          "CUPTI_ACTIVITY_KIND_KERNEL AS k LEFT JOIN StringIds AS str ON str.id == k.demangledName");
  // cuda_gpu_kern_sum.
  auto sum = db.rows(
      "WITH summary AS (SELECT name, sum(end - start) AS total, count(*) AS num, min(end - start) AS min, "
      "max(end - start) AS max FROM CUPTI_ACTIVITY_KIND_KERNEL_NAMED GROUP BY 1) "
      "SELECT summary.total, summary.num, summary.min, summary.max, summary.name FROM summary ORDER BY 1 DESC, 2, 5");
  AnalysisResult r = analyze(t);
  ASSERT_EQ(sum.size(), r.kernel_stats.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    EXPECT_EQ(sum[i][4], r.kernel_stats[i].name);
    EXPECT_EQ(std::stoll(sum[i][0]), r.kernel_stats[i].total);
    EXPECT_EQ(std::stoull(sum[i][1]), r.kernel_stats[i].count);
    EXPECT_EQ(std::stoll(sum[i][2]), r.kernel_stats[i].min);
    EXPECT_EQ(std::stoll(sum[i][3]), r.kernel_stats[i].max);
  }
  // shortName: the base name.
  auto shorts = db.rows("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                        "ORDER BY k.start LIMIT 1");
  EXPECT_EQ(shorts[0][0], "fp8_gemm");
  // cuda_gpu_trace's kernel, memcpy and memset sub-queries.
  auto trace = db.rows(
      "SELECT start, (end - start), gridX, blockX, registersPerThread, staticSharedMemory, dynamicSharedMemory, "
      "printf('%s (%d)', gpu.name, deviceId), contextId, greenContextId, streamId, kern.name, correlationId "
      "FROM CUPTI_ACTIVITY_KIND_KERNEL_NAMED AS kern LEFT JOIN TARGET_INFO_GPU AS gpu ON gpu.id == kern.deviceId "
      "UNION ALL SELECT start, (end - start), NULL, NULL, NULL, NULL, NULL, printf('%s (%d)', gpu.name, deviceId), "
      "contextId, greenContextId, streamId, '[CUDA memcpy ' || memopstr.label || ']', correlationId "
      "FROM CUPTI_ACTIVITY_KIND_MEMCPY AS memcpy LEFT JOIN ENUM_CUDA_MEMCPY_OPER AS memopstr ON memcpy.copyKind == memopstr.id "
      "LEFT JOIN ENUM_CUDA_MEM_KIND AS msrck ON memcpy.srcKind == msrck.id LEFT JOIN ENUM_CUDA_MEM_KIND AS mdstk ON "
      "memcpy.dstKind == mdstk.id LEFT JOIN TARGET_INFO_GPU AS gpu ON memcpy.deviceId == gpu.id "
      "UNION ALL SELECT start, (end - start), NULL, NULL, NULL, NULL, NULL, printf('%s (%d)', gpu.name, deviceId), "
      "contextId, greenContextId, streamId, '[CUDA memset]', correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET AS memset "
      "LEFT JOIN ENUM_CUDA_MEM_KIND AS mk ON memset.memKind == mk.id LEFT JOIN TARGET_INFO_GPU AS gpu ON "
      "memset.deviceId == gpu.id ORDER BY 1");
  ASSERT_EQ(trace.size(), t.kernels.size() + t.memcpys.size() + t.memsets.size());
  EXPECT_EQ(trace[0][11], "[CUDA memcpy Host-to-Device]");
  EXPECT_EQ(trace[0][7], "NVIDIA H200 (0)");
  // cuda_api_sum: names with the _vNNNN suffix stripped by the report's CASE.
  auto api = db.rows(
      "WITH summary AS (SELECT nameId, sum(end - start) AS total, count(*) AS num FROM CUPTI_ACTIVITY_KIND_RUNTIME "
      "GROUP BY 1) SELECT CASE substr(ids.value, -6, 2) WHEN '_v' THEN substr(ids.value, 1, length(ids.value)-6) "
      "ELSE ids.value END AS name, summary.num FROM summary LEFT JOIN StringIds AS ids ON ids.id == summary.nameId "
      "ORDER BY name");
  std::map<std::string, int> api_counts;
  for (auto& row : api) api_counts[row[0]] = std::stoi(row[1]);
  EXPECT_EQ(api_counts["cudaLaunchKernel"], 4);
  // The report's CASE strips 4-digit versions only: CUPTI's "cudaGraphLaunch_v10000" stays as is.
  EXPECT_EQ(api_counts["cudaGraphLaunch_v10000"], 1);
  EXPECT_EQ(api_counts.count("cuLaunchKernel"), 0u) << "driver calls are in CUPTI_ACTIVITY_KIND_DRIVER";
  // cuda_kern_exec_trace's join of kernels to their launch by correlation and process.
  auto exec = db.rows(
      "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL_NAMED AS k JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON "
      "k.correlationId == r.correlationId AND k.globalPid == (r.globalTid & 0xFFFFFFFFFF000000)");
  EXPECT_EQ(std::stoul(exec[0][0]), t.kernels.size() - 1) << "all but the driver-launched kernel";
  auto pidtid = db.rows("SELECT (globalTid >> 24) & 0x00FFFFFF, globalTid & 0x00FFFFFF FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1");
  EXPECT_EQ(pidtid[0][0], "3141");
  EXPECT_EQ(pidtid[0][1], "3141");
  // nvtx_sum: push/pop and start/end ranges with their names and the domain prefix.
  auto nvtx = db.rows(
      "WITH domains AS (SELECT domainId AS id, globalTid, text AS name FROM NVTX_EVENTS WHERE eventType == 75) "
      "SELECT CASE WHEN d.name NOT NULL THEN d.name || ':' || coalesce(sid.value, ne.text) ELSE coalesce(sid.value, ne.text) END, "
      "ne.end - ne.start, CASE ne.eventType WHEN 59 THEN 'PushPop' WHEN 60 THEN 'StartEnd' END "
      "FROM NVTX_EVENTS AS ne LEFT JOIN domains AS d ON ne.domainId == d.id AND "
      "(ne.globalTid & 0x0000FFFFFF000000) == (d.globalTid & 0x0000FFFFFF000000) "
      "LEFT JOIN StringIds AS sid ON ne.textId == sid.id WHERE ne.eventType == 59 OR ne.eventType == 60 ORDER BY ne.start");
  ASSERT_EQ(nvtx.size(), 4u);
  EXPECT_EQ(nvtx[0][0], "step");
  EXPECT_EQ(nvtx[0][2], "PushPop");
  EXPECT_EQ(nvtx[2][0], "streamlab:prefetch");
  EXPECT_EQ(nvtx[2][2], "StartEnd");
  // gpu_gaps: the GPU ops of a process and device, by time.
  auto gaps = db.rows(
      "WITH ops AS (SELECT start, end, globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end, "
      "globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, end, globalPid, deviceId FROM "
      "CUPTI_ACTIVITY_KIND_MEMSET) SELECT count(*), min(start), max(end), count(DISTINCT globalPid) FROM ops");
  EXPECT_EQ(std::stoul(gaps[0][0]), t.kernels.size() + t.memcpys.size() + t.memsets.size());
  EXPECT_EQ(gaps[0][3], "1");
  // Memory usage events: allocation and deallocation rows.
  auto mem = db.rows("SELECT memoryOperationType, count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1 ORDER BY 1");
  ASSERT_EQ(mem.size(), 2u);
  EXPECT_EQ(mem[0][1], "2");
  EXPECT_EQ(mem[1][1], "1");
}

TEST(NsysSqlite, RoundTripIsLossless) {
  Trace t = make_sample_trace();
  std::string path = write_sample(t, "sl_roundtrip.sqlite");
  EXPECT_EQ(detect_trace_format(path), TraceFormat::Sqlite);
  Trace back = load_trace(path);
  EXPECT_EQ(first_difference(t, back), "");
  // And through JSON -> SQLite -> JSON.
  SyntheticOptions o;
  o.target_events = 20'000;
  Trace s = make_synthetic_trace(o);
  std::string p2 = write_sample(s, "sl_roundtrip2.sqlite");
  EXPECT_EQ(first_difference(s, load_nsys_sqlite(p2)), "");
}

// The recording stream and record call of a stream wait travel in two columns of our own
// (NULL when unknown) and come back as they were.
TEST(NsysSqlite, StreamWaitRecordFieldsRoundTrip) {
  Trace t = make_sample_trace();
  size_t with_fields = 0;
  for (const auto& s : t.syncs) with_fields += s.event_stream != kNoStream;
  ASSERT_EQ(with_fields, 1u) << "the sample trace carries one wait with its recording stream";
  std::string path = write_sample(t, "sl_wait_fields.sqlite");
  {
    Db db(path);
    auto rows = db.rows(
        "SELECT eventStreamId, eventRecordCorrelationId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
        "WHERE eventStreamId IS NOT NULL");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0][0], "14");
    EXPECT_EQ(db.rows("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE eventRecordCorrelationId IS NULL")[0][0],
              std::to_string(t.syncs.size() - 1));
  }
  Trace back = load_trace(path);
  EXPECT_EQ(first_difference(t, back), "");
  // A file without the two columns (an nsys export) loads with the fields unknown.
  {
    Db db(path);
    db.exec("ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION DROP COLUMN eventStreamId");
    db.exec("ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION DROP COLUMN eventRecordCorrelationId");
  }
  Trace plain = load_trace(path);
  ASSERT_EQ(plain.syncs.size(), t.syncs.size());
  for (const auto& s : plain.syncs) {
    EXPECT_EQ(s.event_stream, kNoStream);
    EXPECT_EQ(s.event_record_correlation, 0u);
  }
}

TEST(NsysSqlite, KernelShortNames) {
  EXPECT_EQ(kernel_short_name("void ns::gemm<128>(float*, int)"), "gemm");
  EXPECT_EQ(kernel_short_name("rmsnorm"), "rmsnorm");
  EXPECT_EQ(kernel_short_name("void at::native::(anonymous namespace)::elementwise_kernel<128, 4>(int, at::native::F)"),
            "elementwise_kernel");
  EXPECT_EQ(kernel_short_name("indexer_topk<\"k\\2048\">"), "indexer_topk");
}

TEST(NsysSqlite, LoaderErrorsNameTableColumnAndRow) {
  Trace t = make_sample_trace();
  std::string path = write_sample(t, "sl_bad.sqlite");
  {
    Db db(path);
    db.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 2");
  }
  try {
    load_nsys_sqlite(path);
    FAIL() << "expected sl::Error";
  } catch (const sl::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUPTI_ACTIVITY_KIND_KERNEL row 2"), std::string::npos) << m;
    EXPECT_NE(m.find("\"start\" expected an integer"), std::string::npos) << m;
    EXPECT_NE(m.find("sl_bad.sqlite"), std::string::npos) << m;
  }
  {
    Db db(path);
    db.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 5 WHERE rowid = 2");
    db.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 99999 WHERE rowid = 3");
  }
  const std::string e = load_error(path);
  EXPECT_NE(e.find("string id 99999"), std::string::npos) << e;
  {
    Db db(path);
    db.exec("DROP TABLE StringIds");
  }
  EXPECT_THROW(load_nsys_sqlite(path), sl::Error);
  // A view in place of a table is refused, not read: a recursive one never ends
  // (tests/fuzz/regressions/nsys_sqlite).
  {
    Db db(path);
    db.exec("CREATE VIEW StringIds AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT x AS id, 'a' AS value FROM c");
  }
  try {
    load_nsys_sqlite(path);
    FAIL() << "expected sl::Error";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sl_bad.sqlite': StringIds is a view; the loader reads tables only"),
              std::string::npos)
        << e.what();
  }
  // So is a column computed on reading (each row can cost without bound).
  {
    Db db(path);
    db.exec("DROP VIEW StringIds");
    db.exec("CREATE TABLE StringIds (id INTEGER, value TEXT GENERATED ALWAYS AS (printf('%.*c', 1000, 'x')) VIRTUAL)");
  }
  try {
    load_nsys_sqlite(path);
    FAIL() << "expected sl::Error";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("table StringIds column \"value\" is a virtual generated column"),
              std::string::npos)
        << e.what();
  }
}

TEST(NsysSqlite, TruncatedFileIsAnErrorNotACrash) {
  Trace t = make_sample_trace();
  std::string path = write_sample(t, "sl_trunc.sqlite");
  std::string data;
  {
    FILE* f = fopen(path.c_str(), "rb");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
    fclose(f);
  }
  for (size_t cut : {size_t(10), size_t(100), data.size() / 2, data.size() - 1000}) {
    std::string p = testing::TempDir() + "/sl_trunc_cut.sqlite";
    FILE* f = fopen(p.c_str(), "wb");
    fwrite(data.data(), 1, cut, f);
    fclose(f);
    try {
      Trace back = load_trace(p);
      // A cut that happens to keep a consistent database may load; it must not crash.
    } catch (const sl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("sl_trunc_cut.sqlite"), std::string::npos) << e.what();
    }
  }
}

// A rank's trace keeps its rank and world size through SQLite (it came back as rank 0, so that
// every rank's re-export claimed rank 0 and HTA would merge them).
TEST(NsysSqlite, RankAndWorldSizeRoundTrip) {
  Trace t = make_sample_trace();
  t.rank = 3;
  t.world_size = 4;
  const Trace back = load_nsys_sqlite(write_sample(t, "sl_rank.sqlite"));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 4);
  Trace none = make_sample_trace();
  const Trace none_back = load_nsys_sqlite(write_sample(none, "sl_norank.sqlite"));
  EXPECT_EQ(none_back.rank, none.rank);
  EXPECT_EQ(none_back.world_size, none.world_size);
}

// STREAMLAB_META's numbers are decimal digits: std::stoull alone read "-1" as 2^64 - 1 (a clean
// trace reported 18446744073709551615 dropped records), "5abc" as 5 and "0x10" as 0.
TEST(NsysSqlite, MetaNumbersAreDecimalDigitsOnly) {
  Trace t = make_sample_trace();
  const std::string path = write_sample(t, "sl_meta.sqlite");
  for (const char* bad : {"-1", "5abc", "0x10", "1e3", "", " 7", "99999999999999999999999"}) {
    {
      Db db(path);
      db.exec(std::string("UPDATE STREAMLAB_META SET value = '") + bad + "' WHERE name = 'count.dropped'");
    }
    const std::string e = load_error(path);
    EXPECT_NE(e.find("\"count.dropped\""), std::string::npos) << "count.dropped = '" << bad << "': " << e;
  }
  {
    Db db(path);
    db.exec("UPDATE STREAMLAB_META SET value = '12' WHERE name = 'count.dropped'");
    db.exec("INSERT INTO STREAMLAB_META VALUES ('rank', '4'), ('world_size', '2')");
  }
  const std::string e = load_error(path);
  EXPECT_NE(e.find("rank 4 is outside world_size 2"), std::string::npos) << e;
}

// Names that are not UTF-8 (another tool's SQLite): read as U+FFFD per bad byte, with a NUL kept,
// so that the JSON writers write a file JSON readers accept (analyze --json threw, and the Kineto
// export was not JSON).
TEST(NsysSqlite, NonUtf8NamesAreReadAsReplacementCharacters) {
  Trace t = make_sample_trace();
  const std::string path = write_sample(t, "sl_utf8.sqlite");
  {
    Db db(path);
    db.exec("UPDATE StringIds SET value = X'41FF00FE42' WHERE id = (SELECT demangledName FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1)");
  }
  const Trace back = load_nsys_sqlite(path);
  const std::string want = std::string("A\xEF\xBF\xBD") + '\0' + "\xEF\xBF\xBD" + "B";
  bool found = false;
  for (const auto& k : back.kernels) found = found || back.str(k.name) == want;
  EXPECT_TRUE(found) << "no kernel named A<U+FFFD><NUL><U+FFFD>B";
  const nlohmann::json j = nlohmann::json::parse(kineto_json_string(back));  // throws on invalid JSON
  bool in_json = false;
  for (const auto& e : j["traceEvents"]) in_json = in_json || (e.contains("name") && e["name"] == want);
  EXPECT_TRUE(in_json);
}
