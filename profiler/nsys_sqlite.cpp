#include "profiler/nsys_sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <concepts>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/atomic_file.h"
#include "core/gzip.h"
#include "core/interrupt_cleanup.h"
#include "core/error.h"
#include "core/utf8.h"
#include "profiler/export_fields.h"

namespace sl::prof {

namespace {

// ---------------------------------------------------------------- thin SQLite wrappers

class Db {
 public:
  Db(const std::string& path, int flags) : path_(path) {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      fail("'", path, "': cannot open as SQLite: ", msg);
    }
  }
  ~Db() {
    if (db_) sqlite3_close(db_);
  }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : "unknown error";
      sqlite3_free(err);
      std::string head = sql.substr(0, 80);
      fail("'", path_, "': SQLite statement failed (", m, "): ", head);
    }
  }
  bool has_table(const std::string& name) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT type = 'view' FROM sqlite_master WHERE type IN ('table','view') AND name = ?", -1,
                       &st, nullptr);
    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    bool r = sqlite3_step(st) == SQLITE_ROW;
    const bool view = r && sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    // A view is a query stored in the file: reading it can run without end (a recursive one
    // yields rows forever), whereas a table's rows are bounded by the file's size.
    if (view) fail("'", path_, "': ", name, " is a view; the loader reads tables only");
    return r;
  }
  std::set<std::string> columns(const std::string& table) {
    std::set<std::string> cols;
    sqlite3_stmt* st = nullptr;
    std::string q = "PRAGMA table_info(" + table + ")";
    if (sqlite3_prepare_v2(db_, q.c_str(), -1, &st, nullptr) != SQLITE_OK) return cols;
    while (sqlite3_step(st) == SQLITE_ROW) cols.insert(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
    sqlite3_finalize(st);
    return cols;
  }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  Stmt(Db& db, const std::string& sql) : db_(db), sql_(sql) {
    if (sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &st_, nullptr) != SQLITE_OK)
      fail("'", db.path(), "': cannot prepare (", sqlite3_errmsg(db.get()), "): ", sql.substr(0, 100));
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Binds the values to ?1, ?2, ... in order and inserts the row. The arguments of one call are
  // evaluated in no set order: work out values with side effects (string ids) before the call.
  template <class... V>
  void row(const V&... v) {
    int idx = 0;
    (bind(++idx, v), ...);
    run();
  }
  // One value, the C++ type choosing the SQLite type: integers, REAL, TEXT, NULL (std::nullopt,
  // or an empty std::optional: see null_if).
  template <std::integral T>
  void bind(int idx, T v) {
    sqlite3_bind_int64(st_, idx, int64_t(v));
  }
  void bind(int idx, double v) { sqlite3_bind_double(st_, idx, v); }
  void bind(int idx, std::string_view v) { sqlite3_bind_text(st_, idx, v.data(), int(v.size()), SQLITE_TRANSIENT); }
  void bind(int idx, std::nullopt_t) { sqlite3_bind_null(st_, idx); }
  void bind(int idx, const std::optional<int64_t>& v) {
    if (v)
      sqlite3_bind_int64(st_, idx, *v);
    else
      sqlite3_bind_null(st_, idx);
  }
  void run() {
    if (sqlite3_step(st_) != SQLITE_DONE) insert_failed();
    sqlite3_reset(st_);
  }
  bool next() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("'", db_.path(), "': query failed (", sqlite3_errmsg(db_.get()), "): ", sql_.substr(0, 100));
    return false;
  }
  sqlite3_stmt* get() { return st_; }

 private:
  [[noreturn]] void insert_failed() {
    fail("'", db_.path(), "': insert failed (", sqlite3_errmsg(db_.get()), "): ", sql_.substr(0, 100));
  }

  Db& db_;
  std::string sql_;
  sqlite3_stmt* st_ = nullptr;
};

std::string insert_sql(const std::string& table, int n) {
  std::string s = "INSERT INTO " + table + " VALUES (";
  for (int i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s + ")";
}

// NULL where the value is `none` (kNoTime, kNoStream, graph id 0), else the value.
std::optional<int64_t> null_if(int64_t v, int64_t none) {
  if (v == none) return std::nullopt;
  return v;
}

// ---------------------------------------------------------------- schema

const char* kSchema = R"SQL(
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_KERNEL_LAUNCH_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_DEV_MEM_EVENT_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, busLocation TEXT, isDiscrete INTEGER,
  l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER,
  uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER,
  maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxThreadsPerBlock INTEGER, maxThreadsPerSm INTEGER,
  maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, maxShmemPerBlockOptin INTEGER, vmId INTEGER);
CREATE TABLE TARGET_INFO_CUDA_STREAM (streamId INTEGER NOT NULL, hwId INTEGER NOT NULL, vmId INTEGER NOT NULL,
  processId INTEGER NOT NULL, contextId INTEGER NOT NULL, priority INTEGER NOT NULL, flag INTEGER NOT NULL);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL REFERENCES StringIds(id), priority INTEGER, globalTid INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL REFERENCES StringIds(id), shortName INTEGER NOT NULL REFERENCES StringIds(id),
  mangledName INTEGER REFERENCES StringIds(id), launchType INTEGER REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id),
  cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
  staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
  localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER,
  sharedMemoryLimitConfig INTEGER, graphId INTEGER, queued INTEGER, submitted INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL REFERENCES ENUM_CUDA_MEMCPY_OPER(id), deprecatedSrcId INTEGER,
  srcKind INTEGER REFERENCES ENUM_CUDA_MEM_KIND(id), dstKind INTEGER REFERENCES ENUM_CUDA_MEM_KIND(id),
  srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
  graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER REFERENCES ENUM_CUDA_MEM_KIND(id));
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL REFERENCES ENUM_NSYS_EVENT_CLASS(id), globalTid INTEGER, correlationId INTEGER,
  nameId INTEGER NOT NULL REFERENCES StringIds(id), returnValue INTEGER NOT NULL, callchainId INTEGER, cbid INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL REFERENCES ENUM_NSYS_EVENT_CLASS(id), globalTid INTEGER, correlationId INTEGER,
  nameId INTEGER NOT NULL REFERENCES StringIds(id), returnValue INTEGER NOT NULL, callchainId INTEGER, cbid INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  syncType INTEGER NOT NULL REFERENCES ENUM_CUPTI_SYNC_TYPE(id), eventId INTEGER NOT NULL, eventStreamId INTEGER,
  eventRecordCorrelationId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL REFERENCES ENUM_NSYS_EVENT_TYPE(id),
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
  textId INTEGER REFERENCES StringIds(id), domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
  uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER, bytes INTEGER NOT NULL,
  memKind INTEGER NOT NULL REFERENCES ENUM_CUDA_MEM_KIND(id),
  memoryOperationType INTEGER NOT NULL REFERENCES ENUM_CUDA_DEV_MEM_EVENT_OPER(id), name TEXT, correlationId INTEGER,
  streamId INTEGER, isAsync INTEGER);
CREATE TABLE PROFILER_OVERHEAD (start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER,
  nameId INTEGER NOT NULL REFERENCES StringIds(id), overheadKind INTEGER, objectKind INTEGER, objectId INTEGER);
CREATE TABLE STREAMLAB_STREAMS (streamId INTEGER NOT NULL, contextId INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  pid INTEGER NOT NULL, priority INTEGER NOT NULL, flags INTEGER NOT NULL, nullStream INTEGER NOT NULL, name TEXT,
  created INTEGER, destroyed INTEGER);
CREATE TABLE STREAMLAB_CONTEXTS (contextId INTEGER NOT NULL, deviceId INTEGER NOT NULL, pid INTEGER NOT NULL,
  nullStreamId INTEGER, created INTEGER, destroyed INTEGER);
CREATE TABLE STREAMLAB_CUDA_EVENTS (ts INTEGER, correlationId INTEGER NOT NULL, contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL, eventId INTEGER NOT NULL, pid INTEGER NOT NULL, deviceId INTEGER NOT NULL);
CREATE TABLE STREAMLAB_COUNTERS (ts INTEGER NOT NULL, value REAL NOT NULL, name TEXT NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE STREAMLAB_META (name TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL);
)SQL";

constexpr int kEventTypePushPop = 59, kEventTypeStartEnd = 60, kEventTypeMark = 34, kEventTypeDomainCreate = 75;
constexpr int kClassRuntime = 0, kClassDriver = 1;

struct EnumRow {
  int id;
  const char* name;
  const char* label;
};

void write_enum(Db& db, const char* table, std::initializer_list<EnumRow> rows) {
  Stmt st(db, insert_sql(table, 3));
  for (const EnumRow& r : rows) st.row(r.id, r.name, r.label);
}

void write_enums(Db& db) {
  write_enum(db, "ENUM_CUDA_MEMCPY_OPER",
             {{0, "CUDA_MEMCPY_OPER_UNKNOWN", "Unknown"},
              {1, "CUDA_MEMCPY_OPER_HTOD", "Host-to-Device"},
              {2, "CUDA_MEMCPY_OPER_DTOH", "Device-to-Host"},
              {3, "CUDA_MEMCPY_OPER_HTOA", "Host-to-Array"},
              {4, "CUDA_MEMCPY_OPER_ATOH", "Array-to-Host"},
              {5, "CUDA_MEMCPY_OPER_ATOA", "Array-to-Array"},
              {6, "CUDA_MEMCPY_OPER_ATOD", "Array-to-Device"},
              {7, "CUDA_MEMCPY_OPER_DTOA", "Device-to-Array"},
              {8, "CUDA_MEMCPY_OPER_DTOD", "Device-to-Device"},
              {9, "CUDA_MEMCPY_OPER_HTOH", "Host-to-Host"},
              {10, "CUDA_MEMCPY_OPER_PTOP", "Peer-to-Peer"}});
  write_enum(db, "ENUM_CUDA_MEM_KIND",
             {{0, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"},
              {1, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"},
              {2, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"},
              {3, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"},
              {4, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"},
              {5, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"},
              {6, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"},
              {7, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"}});
  write_enum(db, "ENUM_CUPTI_SYNC_TYPE",
             {{0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"},
              {1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"},
              {2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait event"},
              {3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"},
              {4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"}});
  write_enum(db, "ENUM_CUDA_KERNEL_LAUNCH_TYPE",
             {{0, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"},
              {1, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Cooperative single device"},
              {2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Cooperative multi device"}});
  write_enum(db, "ENUM_CUDA_DEV_MEM_EVENT_OPER",
             {{0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"},
              {1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"}});
  write_enum(db, "ENUM_NSYS_EVENT_TYPE",
             {{kEventTypeMark, "NvtxMark", "NVTX mark"},
              {kEventTypePushPop, "NvtxPushPopRange", "NVTX push-pop range"},
              {kEventTypeStartEnd, "NvtxStartEndRange", "NVTX start-end range"},
              {kEventTypeDomainCreate, "NvtxDomainCreate", "NVTX domain create"}});
  write_enum(db, "ENUM_NSYS_EVENT_CLASS",
             {{kClassRuntime, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime API"},
              {kClassDriver, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver API"}});
}

}  // namespace

std::string kernel_short_name(const std::string& n) {
  // Drop the parameter list: the last top-level '(' ... ')'.
  std::string s = n;
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s = s.substr(0, i);
        break;
      }
    }
  }
  // Drop trailing template arguments.
  while (!s.empty() && s.back() == '>') {
    int depth = 0;
    size_t i = s.size();
    while (i-- > 0) {
      if (s[i] == '>') ++depth;
      if (s[i] == '<' && --depth == 0) break;
    }
    if (i == size_t(-1)) break;
    s = s.substr(0, i);
  }
  // Drop the return type and namespaces: the part after the last top-level space / "::".
  size_t cut = 0;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && c == ' ') cut = i + 1;
    if (depth == 0 && c == ':' && i + 1 < s.size() && s[i + 1] == ':') cut = i + 2;
  }
  s = s.substr(cut);
  return s.empty() ? n : s;
}

namespace {
void write_nsys_sqlite_db(const Trace& t, const std::string& path);
}  // namespace

// Written to a temporary file beside `path` and renamed over it only when complete: a killed or
// failing export never leaves a database that reads as a (smaller) valid trace.
// A name ending in ".gz" gets the database gzipped (as compare keeps its traces; the loaders read
// it so): built in a second temporary file beside the first, then streamed through gzip into it.
void write_nsys_sqlite(const Trace& t, const std::string& path) {
  if (!has_gz_suffix(path)) {
    AtomicFile out(path, AtomicFile::Kind::Path);
    write_nsys_sqlite_db(t, out.temp_path());  // the database is closed when this returns
    out.commit();
    return;
  }
  AtomicFile out(path);
  SL_CHECK(!out.temp_path().empty(), "refusing to write '", path,
           "': a gzipped SQLite export needs a file, not a device or stream");
  const std::string db = out.temp_path() + ".db";
  InterruptCleanup cleanup(db);
  struct RemoveDb {
    const std::string& p;
    ~RemoveDb() { std::remove(p.c_str()); }
  } remove_db{db};
  write_nsys_sqlite_db(t, db);
  try {
    gzip_file_into(db, out.file());
  } catch (const Error& e) {
    fail("'", path, "': ", e.what());
  }
  out.commit();
}

namespace {

// A column the writers have no value for: NULL in the row.
constexpr auto null = std::nullopt;

// StringIds as written: our string ids, plus short names and domains interned on the fly into a
// side table. Ids are handed out in first-use order, so the table writers work out their string
// ids in column order, in the order write_nsys_sqlite_db calls them.
class NsysStrings {
 public:
  NsysStrings(Db& db, const Trace& t) : t_(t), sid_(t.strings.size(), -1), insert_(db, insert_sql("StringIds", 2)) {}
  int64_t id_of(StrId s) {
    if (sid_[s] < 0) sid_[s] = add(t_.str(s));
    return sid_[s];
  }
  int64_t id_of_text(const std::string& v) {
    const StrId s = t_.strings.find(v);
    if (s != kNoId) return id_of(s);
    auto it = extra_.find(v);
    return it != extra_.end() ? it->second : add(v);
  }

 private:
  int64_t add(const std::string& v) {
    const int64_t id = next_++;
    insert_.row(id, v);
    extra_.emplace(v, id);
    return id;
  }
  const Trace& t_;
  std::vector<int64_t> sid_;
  int64_t next_ = 0;
  Stmt insert_;
  std::unordered_map<std::string, int64_t> extra_;
};

// META_DATA_EXPORT: the schema version of Nsight Systems' export that this layout follows.
void write_export_info(Db& db, const Trace& t) {
  Stmt m(db, insert_sql("META_DATA_EXPORT", 2));
  m.row("EXPORT_SCHEMA_VERSION", "3.11.1");
  m.row("EXPORT_PRODUCT_VERSION", std::string("streamlab ") + STREAMLAB_VERSION);
  m.row("EXPORT_TIME_UNIT", "ns");
}

// TARGET_INFO_GPU: one row per device (the Kineto JSON's deviceProperties).
void write_gpus(Db& db, const Trace& t) {
  Stmt g(db, "INSERT INTO TARGET_INFO_GPU (id, name, busLocation, isDiscrete, l2CacheSize, totalMemory, memoryBandwidth, "
             "clockRate, smCount, pwGpuId, uuid, luid, chipName, cuDevice, computeMajor, computeMinor, maxRegistersPerBlock, "
             "maxShmemPerBlock, maxThreadsPerBlock, maxThreadsPerSm, maxShmemPerSm, maxRegistersPerSm, threadsPerWarp, "
             "maxShmemPerBlockOptin, vmId) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (const auto& d : t.devices)
    g.row(d.id, d.name.empty() ? "GPU " + std::to_string(d.id) : d.name, /*busLocation*/ "", /*isDiscrete*/ 1,
          d.l2_cache_size, d.total_memory, d.memory_bandwidth, /*clockRate*/ d.clock_rate_khz * 1000, d.sm_count,
          /*pwGpuId*/ d.id, d.uuid, /*luid*/ 0, /*chipName*/ "", /*cuDevice*/ d.id, d.compute_major, d.compute_minor,
          d.regs_per_block, d.smem_per_block, d.max_threads_per_block, d.max_threads_per_sm, d.smem_per_sm,
          d.regs_per_sm, d.warp_size, d.smem_per_block_optin, /*vmId*/ 0);
}

// Streams in nsys's layout and in ours (STREAMLAB_STREAMS: names, lifetimes), and contexts.
void write_streams_and_contexts(Db& db, const Trace& t) {
  Stmt s(db, insert_sql("TARGET_INFO_CUDA_STREAM", 7));
  Stmt x(db, insert_sql("STREAMLAB_STREAMS", 10));
  for (const auto& st : t.streams) {
    s.row(st.id, /*hwId*/ st.id, /*vmId*/ 0, st.pid, st.context, st.priority, st.flags);
    x.row(st.id, st.context, st.device, st.pid, st.priority, st.flags, st.is_null, t.str(st.name),
          null_if(st.created, kNoTime), null_if(st.destroyed, kNoTime));
  }
  Stmt c(db, insert_sql("STREAMLAB_CONTEXTS", 6));
  for (const auto& ctx : t.contexts)
    c.row(ctx.id, ctx.device, ctx.pid, null_if(ctx.null_stream, kNoStream), null_if(ctx.created, kNoTime),
          null_if(ctx.destroyed, kNoTime));
}

// PROCESSES (also those seen only through events: reports join on them) and ThreadNames.
void write_processes_and_threads(Db& db, const Trace& t, NsysStrings& strings) {
  std::set<uint32_t> pids;
  for (const auto& p : t.processes) pids.insert(p.pid);
  Stmt p(db, insert_sql("PROCESSES", 3));
  for (const auto& pr : t.processes) p.row(nsys_global_pid(pr.pid), pr.pid, pr.name);
  // Processes seen only through events get a row too (reports join on them).
  std::set<uint32_t> seen;
  for (const auto& a : t.api_calls) seen.insert(a.pid);
  for (const auto& k : t.kernels) seen.insert(k.pid);
  for (uint32_t pid : seen)
    if (!pids.count(pid)) p.row(nsys_global_pid(pid), pid, "process " + std::to_string(pid));
  Stmt th(db, insert_sql("ThreadNames", 3));
  for (const auto& tr : t.threads) th.row(strings.id_of_text(tr.name), /*priority*/ 0, nsys_global_tid(tr.pid, tr.tid));
}

// CUPTI_ACTIVITY_KIND_KERNEL, with short names as nsys's reports print them.
void write_kernels(Db& db, const Trace& t, NsysStrings& strings) {
  Stmt k(db, insert_sql("CUPTI_ACTIVITY_KIND_KERNEL", 31));
  std::unordered_map<StrId, int64_t> short_ids;
  for (const auto& x : t.kernels) {
    int64_t name = strings.id_of(x.name);
    auto it = short_ids.find(x.name);
    if (it == short_ids.end()) it = short_ids.emplace(x.name, strings.id_of_text(kernel_short_name(t.str(x.name)))).first;
    k.row(x.start, x.end, x.device, x.context, /*greenContextId*/ null, x.stream, x.correlation,
          nsys_global_pid(x.pid), /*demangledName*/ name, /*shortName*/ it->second, /*mangledName*/ null,
          x.launch_type, /*cacheConfig*/ 0, x.registers, x.grid[0], x.grid[1], x.grid[2], x.block[0], x.block[1],
          x.block[2], x.static_smem, x.dynamic_smem, /*localMemoryPerThread*/ 0, /*localMemoryTotal*/ 0,
          /*gridId*/ 0, /*sharedMemoryExecuted*/ null, null_if(int64_t(x.graph_node_id), 0),
          /*sharedMemoryLimitConfig*/ null, null_if(x.graph_id, 0), null_if(x.queued, kNoTime),
          null_if(x.submitted, kNoTime));
  }
}

// CUPTI_ACTIVITY_KIND_MEMCPY and _MEMSET.
void write_copies(Db& db, const Trace& t) {
  Stmt m(db, insert_sql("CUPTI_ACTIVITY_KIND_MEMCPY", 20));
  for (const auto& x : t.memcpys)
    m.row(x.start, x.end, x.device, x.context, /*greenContextId*/ null, x.stream, x.correlation,
          nsys_global_pid(x.pid), x.bytes, uint8_t(x.kind), /*deprecatedSrcId*/ null, uint8_t(x.src_kind),
          uint8_t(x.dst_kind), /*srcDeviceId*/ x.device, /*srcContextId*/ x.context, /*dstDeviceId*/ x.device,
          /*dstContextId*/ x.context, /*migrationCause*/ null, null_if(int64_t(x.graph_node_id), 0),
          /*virtualAddress*/ null);
  Stmt s(db, insert_sql("CUPTI_ACTIVITY_KIND_MEMSET", 12));
  for (const auto& x : t.memsets)
    s.row(x.start, x.end, x.device, x.context, /*greenContextId*/ null, x.stream, x.correlation,
          nsys_global_pid(x.pid), x.value, x.bytes, null_if(int64_t(x.graph_node_id), 0), uint8_t(x.mem_kind));
}

// CUPTI_ACTIVITY_KIND_RUNTIME and _DRIVER.
void write_api_calls(Db& db, const Trace& t, NsysStrings& strings) {
  Stmt rt(db, insert_sql("CUPTI_ACTIVITY_KIND_RUNTIME", 9));
  Stmt dr(db, insert_sql("CUPTI_ACTIVITY_KIND_DRIVER", 9));
  for (const auto& a : t.api_calls) {
    bool driver = a.kind == ApiKind::Driver;
    (driver ? dr : rt).row(a.start, a.end, driver ? kClassDriver : kClassRuntime, nsys_global_tid(a.pid, a.tid),
                           a.correlation, strings.id_of(a.name), a.return_value, /*callchainId*/ null, a.cbid);
  }
}

// CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.
void write_syncs(Db& db, const Trace& t) {
  // eventStreamId / eventRecordCorrelationId: streamlab's columns (not in nsys's layout, whose
  // reports ignore them) for where the awaited event was recorded; NULL when not known.
  Stmt s(db, insert_sql("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", 12));
  for (const auto& x : t.syncs)
    s.row(x.start, x.end, x.device, x.context, /*greenContextId*/ null, id_or_minus1(x.stream, kNoStream),
          x.correlation, nsys_global_pid(x.pid), uint8_t(x.type), id_or_minus1(x.event, kNoId),
          null_if(id_or_minus1(x.event_stream, kNoStream), -1), null_if(x.event_record_correlation, 0));
}

// NVTX_EVENTS: a domain-create row per (process, domain), then the ranges and marks.
void write_nvtx(Db& db, const Trace& t, NsysStrings& strings) {
  Stmt n(db, "INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, category, color, text, globalTid, endGlobalTid, "
             "textId, domainId) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
  std::map<std::pair<uint32_t, StrId>, int64_t> domains;  // (pid, domain name) -> domain id
  int64_t next_domain = 1;
  for (const auto& r : t.nvtx) {
    if (r.domain == 0 || domains.count({r.pid, r.domain})) continue;
    int64_t id = next_domain++;
    domains[{r.pid, r.domain}] = id;
    n.row(r.start, /*end*/ null, kEventTypeDomainCreate, /*rangeId*/ null, /*category*/ null, /*color*/ null,
          t.str(r.domain), nsys_global_tid(r.pid, r.tid), /*endGlobalTid*/ null, /*textId*/ null, id);
  }
  int64_t range_id = 1;
  for (const auto& r : t.nvtx) {
    std::optional<int64_t> end, range;
    if (r.kind != NvtxKind::Mark) end = r.end;
    if (r.kind == NvtxKind::StartEnd) range = range_id++;
    int type = r.kind == NvtxKind::PushPop ? kEventTypePushPop : r.kind == NvtxKind::StartEnd ? kEventTypeStartEnd : kEventTypeMark;
    int64_t text_id = strings.id_of(r.name);
    n.row(r.start, end, type, range, r.category, r.color, t.str(r.name), nsys_global_tid(r.pid, r.tid),
          nsys_global_tid(r.pid, r.end_tid ? r.end_tid : r.tid), text_id, r.domain ? domains[{r.pid, r.domain}] : 0);
  }
}

// CUDA_GPU_MEMORY_USAGE_EVENTS: an allocation row and a free row per allocation seen.
void write_allocations(Db& db, const Trace& t) {
  Stmt m(db, insert_sql("CUDA_GPU_MEMORY_USAGE_EVENTS", 13));
  for (const auto& a : t.allocations) {
    for (int op = 0; op < 2; ++op) {
      Ns ts = op == 0 ? a.alloc : a.free;
      if (ts == kNoTime) continue;
      m.row(ts, nsys_global_pid(a.pid), a.device, a.context, a.address, /*pc*/ null, a.bytes, uint8_t(a.kind),
            /*memoryOperationType*/ op, /*name*/ null, a.correlation, id_or_minus1(a.stream, kNoStream), a.from_pool);
    }
    // An allocation that only has a free inside the window (alloc before it) keeps its size.
  }
}

// PROFILER_OVERHEAD: CUPTI's own overhead.
void write_overheads(Db& db, const Trace& t, NsysStrings& strings) {
  Stmt o(db, insert_sql("PROFILER_OVERHEAD", 7));
  for (const auto& x : t.overheads)
    o.row(x.start, x.end, nsys_global_tid(x.pid, x.object_id), strings.id_of_text("CUPTI overhead"), x.kind, x.object_kind,
          x.object_id);
}

// Our own tables: CUDA event records, counters, and STREAMLAB_META (base time, record counts,
// metadata), which tells the loader the file is ours.
void write_streamlab_tables(Db& db, const Trace& t) {
  Stmt e(db, insert_sql("STREAMLAB_CUDA_EVENTS", 7));
  for (const auto& x : t.cuda_events)
    e.row(null_if(x.ts, kNoTime), x.correlation, x.context, x.stream, x.event, x.pid, x.device);
  Stmt c(db, insert_sql("STREAMLAB_COUNTERS", 4));
  for (const auto& x : t.counters) c.row(x.ts, x.value, t.str(x.name), x.pid);
  Stmt m(db, insert_sql("STREAMLAB_META", 2));
  m.row("format_version", "1");
  m.row("base_time_ns", std::to_string(t.base_time == kNoTime ? 0 : t.base_time));
  for (const RecordCountField& f : kRecordCountFields)
    m.row(std::string("count.") + f.name, std::to_string(t.counts.*f.member));
  for (const auto& [k, v] : t.metadata) m.row("meta." + k, v);
  // Which rank of a job recorded it (Kineto's distributedInfo): kept, so that a rank's trace
  // exported to SQLite and back does not claim rank 0.
  if (t.rank >= 0) m.row("rank", std::to_string(t.rank));
  if (t.world_size > 0) m.row("world_size", std::to_string(t.world_size));
}

void write_nsys_sqlite_db(const Trace& t, const std::string& path) {
  Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA page_size = 65536;");
  db.exec(kSchema);
  db.exec("BEGIN");
  write_enums(db);
  NsysStrings strings(db, t);
  write_export_info(db, t);
  Stmt(db, insert_sql("TARGET_INFO_SESSION_START_TIME", 3)).row(t.session_start_utc_ns, "", "");
  write_gpus(db, t);
  write_streams_and_contexts(db, t);
  write_processes_and_threads(db, t, strings);
  write_kernels(db, t, strings);
  write_copies(db, t);
  write_api_calls(db, t, strings);
  write_syncs(db, t);
  write_nvtx(db, t, strings);
  write_allocations(db, t);
  write_overheads(db, t, strings);
  write_streamlab_tables(db, t);
  db.exec("COMMIT");
}

}  // namespace

// ---------------------------------------------------------------- loader

namespace {

// Reads one table by column name, with errors naming the file, table, column and row.
class TableReader {
 public:
  TableReader(Db& db, const std::string& table, const std::vector<std::string>& required,
              const std::vector<std::string>& optional)
      : db_(db), table_(table) {
    std::set<std::string> have = db.columns(table);
    std::string sel;
    for (const auto& c : required) {
      if (!have.count(c))
        fail("'", db.path(), "': table ", table, " has no column \"", c, "\" (expected the Nsight Systems export layout)");
      index_[c] = int(cols_.size());
      cols_.push_back(c);
    }
    for (const auto& c : optional)
      if (have.count(c)) {
        index_[c] = int(cols_.size());
        cols_.push_back(c);
      }
    for (size_t i = 0; i < cols_.size(); ++i) sel += (i ? ", " : "") + std::string("\"") + cols_[i] + "\"";
    stmt_ = std::make_unique<Stmt>(db, "SELECT rowid, " + sel + " FROM " + table + " ORDER BY rowid");
  }
  bool next() {
    if (!stmt_->next()) return false;
    row_ = sqlite3_column_int64(stmt_->get(), 0);
    return true;
  }
  bool has(const std::string& c) const { return index_.count(c) > 0; }
  bool is_null(const std::string& c) const {
    auto it = index_.find(c);
    return it == index_.end() || sqlite3_column_type(stmt_->get(), it->second + 1) == SQLITE_NULL;
  }
  int64_t i(const std::string& c) const {
    auto it = index_.find(c);
    if (it == index_.end()) fail("'", db_.path(), "': table ", table_, " has no column \"", c, "\"");
    int type = sqlite3_column_type(stmt_->get(), it->second + 1);
    if (type != SQLITE_INTEGER)
      fail("'", db_.path(), "': table ", table_, " row ", row_, ": column \"", c, "\" expected an integer, found ",
           type == SQLITE_NULL ? "NULL" : type == SQLITE_TEXT ? "text" : type == SQLITE_FLOAT ? "a real" : "a blob");
    return sqlite3_column_int64(stmt_->get(), it->second + 1);
  }
  int64_t i_or(const std::string& c, int64_t d) const { return is_null(c) ? d : i(c); }
  Ns t_or_none(const std::string& c) const { return is_null(c) ? kNoTime : i(c); }
  double d(const std::string& c) const {
    auto it = index_.find(c);
    if (it == index_.end()) fail("'", db_.path(), "': table ", table_, " has no column \"", c, "\"");
    return sqlite3_column_double(stmt_->get(), it->second + 1);
  }
  std::string s(const std::string& c) const {
    auto it = index_.find(c);
    if (it == index_.end() || sqlite3_column_type(stmt_->get(), it->second + 1) == SQLITE_NULL) return {};
    // Text as valid UTF-8 (another tool's file may hold other bytes, which no JSON writer could
    // then write), its full length (a NUL inside a value would end a C string).
    const unsigned char* p = sqlite3_column_text(stmt_->get(), it->second + 1);
    const int n = sqlite3_column_bytes(stmt_->get(), it->second + 1);
    return p ? valid_utf8(std::string_view(reinterpret_cast<const char*>(p), size_t(n))) : std::string();
  }
  int64_t row() const { return row_; }
  [[noreturn]] void bad(const std::string& what) const {
    fail("'", db_.path(), "': table ", table_, " row ", row_, ": ", what);
  }

  // Range checks against the trace model's types, as the JSON loaders do them: the row's value
  // of column c as T when it lies in lo..hi; else the row is invalid and the first such column
  // names why (keep() then drops and counts it, with the rowid).
  template <class T>
  T fit(const std::string& c, int64_t v, int64_t lo = int64_t(std::numeric_limits<T>::min()),
        int64_t hi = int64_t(std::min<uint64_t>(uint64_t(std::numeric_limits<T>::max()), uint64_t(INT64_MAX)))) {
    if (v >= lo && v <= hi) return T(v);
    if (problem_.empty()) {
      problem_ = table_ + ": " + c + " outside " + std::to_string(lo) + ".." + std::to_string(hi);
      value_ = std::to_string(v);
    }
    return T{};
  }
  template <class T>
  T u(const std::string& c) { return fit<T>(c, i(c)); }
  template <class T>
  T u_or(const std::string& c, int64_t d) { return fit<T>(c, i_or(c, d)); }
  // A stream / event id where -1 or NULL means none.
  uint32_t id_or_none(const std::string& c, uint32_t none) {
    const int64_t v = i_or(c, -1);
    return v == -1 ? none : fit<uint32_t>(c, v, 0, int64_t(none) - 1);
  }
  // A time in ns: inside +-2^62 (what the JSON loaders accept, so that spans fit int64).
  Ns time(const std::string& c) { return fit<Ns>(c, i(c), -kMaxTraceNs, kMaxTraceNs); }
  Ns time_or_none(const std::string& c) { return is_null(c) ? kNoTime : time(c); }

  // Whether the row read goes into the trace: not when a column was out of range (counted with
  // why). End before start and zero timestamps are kept and counted, as in the other loaders.
  bool keep(RecordCounts& counts, Ns start, Ns end) {
    if (!problem_.empty()) {
      counts.reject(problem_, uint64_t(row_), value_);
      problem_.clear();
      return false;
    }
    // The longest record any loader accepts (trace.h).
    if (end - start > kMaxDurationNs) {
      counts.reject(table_ + ": end - start longer than 1e12 us (11.6 days): a corrupt value", uint64_t(row_),
                    std::to_string(end - start) + " ns");
      return false;
    }
    if (end < start) counts.end_before_start++;
    if (start == 0) counts.zero_timestamps++;
    return true;
  }
  bool keep(RecordCounts& counts) {  // a row without a duration (a counter sample, a CUDA event record)
    if (problem_.empty()) return true;
    counts.reject(problem_, uint64_t(row_), value_);
    problem_.clear();
    return false;
  }
  // For tables that describe the trace rather than hold its records (streams, contexts): an
  // out-of-range value is an error.
  void require_fit() const {
    if (!problem_.empty()) bad(problem_ + " (value " + value_ + ")");
  }

 private:
  Db& db_;
  std::string table_;
  std::vector<std::string> cols_;
  std::map<std::string, int> index_;
  std::unique_ptr<Stmt> stmt_;
  int64_t row_ = 0;
  std::string problem_, value_;  // the row's first out-of-range column
};

uint32_t pid_of_global(int64_t g) { return uint32_t((g >> 24) & 0xFFFFFF); }
uint32_t tid_of_global(int64_t g) { return uint32_t(g & 0xFFFFFF); }

// The file starts with SQLite's header (a clear error for a JSON trace given as SQLite).
void check_sqlite_header(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open trace '", path, "': ", std::strerror(errno));
  char head[16] = {};
  size_t n = std::fread(head, 1, 16, f);
  std::fclose(f);
  if (n < 16 || std::memcmp(head, "SQLite format 3\0", 16) != 0)
    fail("'", path, "': not an SQLite database (expected the 16-byte header \"SQLite format 3\")");
}

// A column computed on reading (GENERATED ... VIRTUAL) runs an expression stored in the file for
// every row, quick_check included: like a view, it can cost without bound (printf('%.*c', 1e9,
// 'x') per row). Stored values are bounded by the file's size.
void refuse_virtual_columns(Db& db) {
  Stmt q(db, "SELECT m.name, c.name FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS c "
             "WHERE m.type = 'table' AND c.hidden = 2 LIMIT 1");
  if (q.next())
    fail("'", db.path(), "': table ", reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 0)), " column \"",
         reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 1)),
         "\" is a virtual generated column; the loader reads stored values only");
}

// A truncated or corrupt file: checked quickly before reading.
void check_integrity(Db& db) {
  Stmt q(db, "PRAGMA quick_check");
  if (q.next()) {
    const unsigned char* r = sqlite3_column_text(q.get(), 0);
    std::string res = r ? reinterpret_cast<const char*>(r) : "";
    if (res != "ok") fail("'", db.path(), "': SQLite file is corrupt (", res, ")");
  }
}

// StringIds: the names every other table refers to by id, interned into the trace.
class StringIds {
 public:
  StringIds(Db& db, Trace& t) {
    if (!db.has_table("StringIds"))
      fail("'", db.path(), "': no StringIds table (expected an SQLite file in the Nsight Systems export layout)");
    TableReader r(db, "StringIds", {"id", "value"}, {});
    while (r.next()) ids_[r.i("id")] = t.intern(r.s("value"));
  }
  // Column `col` of the row r is on: the string it names (0, the empty string, for NULL).
  StrId operator()(const TableReader& r, const std::string& col) const {
    if (r.is_null(col)) return 0;
    const int64_t id = r.i(col);
    auto it = ids_.find(id);
    if (it == ids_.end()) r.bad("column \"" + col + "\" refers to string id " + std::to_string(id) + " missing from StringIds");
    return it->second;
  }

 private:
  std::unordered_map<int64_t, StrId> ids_;
};

// Our export (it has STREAMLAB_META) always has every table of its schema: one missing means the
// file was altered, and reading on would report an empty trace as if nothing ran. Nsight Systems
// leaves out the tables of kinds it saw no record of, but a CUDA trace has at least its API calls.
void require_cuda_tables(Db& db, bool ours) {
  for (const char* table : {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                            "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER",
                            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"}) {
    if (ours && !db.has_table(table))
      fail("'", db.path(), "': no ", table, " table, which every streamlab SQLite export has: the file was altered");
  }
  if (!ours && !db.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") && !db.has_table("CUPTI_ACTIVITY_KIND_DRIVER") &&
      !db.has_table("CUPTI_ACTIVITY_KIND_KERNEL"))
    fail("'", db.path(), "': no CUPTI_ACTIVITY_KIND_RUNTIME, _DRIVER or _KERNEL table: not an Nsight Systems export of a "
                         "CUDA trace (nsys profile --trace=cuda, then nsys export --type sqlite)");
}

// STREAMLAB_META (ours): base time, metadata, and the record counts the exporter wrote into
// `given` (returns whether it wrote any). Another file's metadata says it came from nsys.
bool read_meta(Db& db, Trace& t, bool ours, RecordCounts& given) {
  if (!ours) {
    t.metadata["source"] = "nsys";
    return false;
  }
  bool counts_given = false;
  TableReader r(db, "STREAMLAB_META", {"name", "value"}, {});
  while (r.next()) {
    std::string k = r.s("name"), v = r.s("value");
    // Decimal digits only: stoull alone read "-1" as 2^64 - 1, "5abc" as 5 and "0x10" as 0.
    auto num = [&]() -> uint64_t {
      if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
        r.bad("value of \"" + k + "\" is not a whole number >= 0: '" + v + "'");
      errno = 0;
      const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
      if (errno == ERANGE) r.bad("value of \"" + k + "\" is past 2^64 - 1: " + v);
      return x;
    };
    constexpr uint64_t kMaxWorld = uint64_t(1) << 20;
    if (k == "base_time_ns") {
      if (num() > uint64_t(kMaxTraceNs)) r.bad("base_time_ns " + v + " outside 0..2^62");
      t.base_time = Ns(num());
    } else if (k.rfind("count.", 0) == 0) {
      counts_given = true;
      for (const RecordCountField& f : kRecordCountFields)
        if (k.compare(6, std::string::npos, f.name) == 0) given.*f.member = num();
    } else if (k.rfind("meta.", 0) == 0) {
      t.metadata[k.substr(5)] = v;
    } else if (k == "rank" || k == "world_size") {
      const uint64_t x = num();
      if (x > kMaxWorld) r.bad(k + " " + v + " outside 0.." + std::to_string(kMaxWorld));
      (k == "rank" ? t.rank : t.world_size) = int(x);
    }
  }
  if (t.world_size > 0 && t.rank >= t.world_size)
    fail("'", db.path(), "': table STREAMLAB_META: rank ", t.rank, " is outside world_size ", t.world_size);
  return counts_given;
}

// The session start in UTC (TARGET_INFO_SESSION_START_TIME), when the file has it.
void read_session_start(Db& db, Trace& t) {
  if (db.has_table("TARGET_INFO_SESSION_START_TIME")) {
    TableReader r(db, "TARGET_INFO_SESSION_START_TIME", {"utcEpochNs"}, {});
    if (r.next()) t.session_start_utc_ns = r.i_or("utcEpochNs", 0);
  }
}

// The GPUs (TARGET_INFO_GPU): the deviceProperties of the Kineto JSON.
void read_devices(Db& db, Trace& t) {
  if (db.has_table("TARGET_INFO_GPU")) {
    TableReader r(db, "TARGET_INFO_GPU", {"id"},
                  {"name", "uuid", "l2CacheSize", "totalMemory", "memoryBandwidth", "clockRate", "smCount", "computeMajor",
                   "computeMinor", "maxRegistersPerBlock", "maxShmemPerBlock", "maxThreadsPerBlock", "maxThreadsPerSm",
                   "maxShmemPerSm", "maxRegistersPerSm", "threadsPerWarp", "maxShmemPerBlockOptin"});
    while (r.next()) {
      Device d;
      d.id = r.u<uint32_t>("id");
      r.require_fit();
      d.name = r.s("name");
      d.uuid = r.s("uuid");
      d.l2_cache_size = r.i_or("l2CacheSize", 0);
      d.total_memory = r.i_or("totalMemory", 0);
      d.memory_bandwidth = r.i_or("memoryBandwidth", 0);
      d.clock_rate_khz = r.i_or("clockRate", 0) / 1000;
      d.sm_count = int(r.i_or("smCount", 0));
      d.compute_major = int(r.i_or("computeMajor", 0));
      d.compute_minor = int(r.i_or("computeMinor", 0));
      d.regs_per_block = int(r.i_or("maxRegistersPerBlock", 0));
      d.smem_per_block = r.i_or("maxShmemPerBlock", 0);
      d.max_threads_per_block = int(r.i_or("maxThreadsPerBlock", 0));
      d.max_threads_per_sm = int(r.i_or("maxThreadsPerSm", 0));
      d.smem_per_sm = r.i_or("maxShmemPerSm", 0);
      d.regs_per_sm = int(r.i_or("maxRegistersPerSm", 0));
      d.warp_size = int(r.i_or("threadsPerWarp", 32));
      d.smem_per_block_optin = r.i_or("maxShmemPerBlockOptin", 0);
      t.devices.push_back(d);
    }
  }
}

// The streams: ours (STREAMLAB_STREAMS, with names and lifetimes), else Nsight Systems' own list.
void read_streams(Db& db, Trace& t) {
  if (db.has_table("STREAMLAB_STREAMS")) {
    TableReader r(db, "STREAMLAB_STREAMS", {"streamId", "contextId", "deviceId", "pid", "priority", "flags", "nullStream"},
                  {"name", "created", "destroyed"});
    while (r.next()) {
      Stream s;
      s.id = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      s.context = r.u<uint32_t>("contextId");
      s.device = r.u<uint32_t>("deviceId");
      s.pid = r.u<uint32_t>("pid");
      s.priority = r.u<int32_t>("priority");
      s.flags = r.u<uint8_t>("flags");
      s.is_null = r.fit<uint8_t>("nullStream", r.i("nullStream"), 0, 1);
      std::string n = r.s("name");
      s.name = n.empty() ? 0 : t.intern(n);
      s.created = r.time_or_none("created");
      s.destroyed = r.time_or_none("destroyed");
      r.require_fit();
      t.streams.push_back(s);
    }
  } else if (db.has_table("TARGET_INFO_CUDA_STREAM")) {
    TableReader r(db, "TARGET_INFO_CUDA_STREAM", {"streamId"}, {"processId", "contextId", "priority", "flag"});
    while (r.next()) {
      Stream s;
      s.id = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      s.pid = r.u_or<uint32_t>("processId", 0);
      s.context = r.u_or<uint32_t>("contextId", 0);
      s.priority = r.u_or<int32_t>("priority", 0);
      s.flags = r.u_or<uint8_t>("flag", 0);
      r.require_fit();
      t.streams.push_back(s);
    }
  }
}

// CUDA contexts (STREAMLAB_CONTEXTS, ours only).
void read_contexts(Db& db, Trace& t) {
  if (db.has_table("STREAMLAB_CONTEXTS")) {
    TableReader r(db, "STREAMLAB_CONTEXTS", {"contextId", "deviceId", "pid"}, {"nullStreamId", "created", "destroyed"});
    while (r.next()) {
      Context c;
      c.id = r.u<uint32_t>("contextId");
      c.device = r.u<uint32_t>("deviceId");
      c.pid = r.u<uint32_t>("pid");
      c.null_stream = r.id_or_none("nullStreamId", kNoStream);
      c.created = r.time_or_none("created");
      c.destroyed = r.time_or_none("destroyed");
      r.require_fit();
      t.contexts.push_back(c);
    }
  }
}

// Process names (PROCESSES), without the placeholder rows our export writes.
void read_processes(Db& db, Trace& t) {
  if (db.has_table("PROCESSES")) {
    TableReader r(db, "PROCESSES", {"pid"}, {"name"});
    while (r.next()) {
      std::string n = r.s("name");
      if (n.rfind("process ", 0) == 0) continue;  // placeholder rows we wrote
      const uint32_t pid = r.u<uint32_t>("pid");
      r.require_fit();
      t.processes.push_back({pid, n});
    }
  }
}

// Thread names (ThreadNames).
void read_threads(Db& db, Trace& t, const StringIds& strings) {
  if (db.has_table("ThreadNames")) {
    TableReader r(db, "ThreadNames", {"nameId", "globalTid"}, {});
    while (r.next()) {
      int64_t g = r.i("globalTid");
      t.threads.push_back({pid_of_global(g), tid_of_global(g), t.str(strings(r, "nameId"))});
    }
  }
}

// Kernels (CUPTI_ACTIVITY_KIND_KERNEL); the demangled name when the file has it.
void read_kernels(Db& db, Trace& t, const StringIds& strings) {
  if (db.has_table("CUPTI_ACTIVITY_KIND_KERNEL")) {
    const bool has_demangled = db.columns("CUPTI_ACTIVITY_KIND_KERNEL").count("demangledName") > 0;
    TableReader r(db, "CUPTI_ACTIVITY_KIND_KERNEL", {"start", "end", "deviceId", "streamId"},
                  {"contextId", "correlationId", "globalPid", "demangledName", "shortName", "launchType",
                   "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory",
                   "dynamicSharedMemory", "graphNodeId", "graphId", "queued", "submitted"});
    while (r.next()) {
      Kernel k;
      k.start = r.time("start");
      k.end = r.time("end");
      k.device = r.u<uint16_t>("deviceId");
      k.stream = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      k.context = r.u_or<uint32_t>("contextId", 0);
      k.correlation = r.u_or<uint32_t>("correlationId", 0);
      k.pid = pid_of_global(r.i_or("globalPid", 0));
      k.name = strings(r, has_demangled ? "demangledName" : "shortName");
      k.launch_type = r.u_or<uint16_t>("launchType", 0);
      k.registers = r.u_or<uint16_t>("registersPerThread", 0);
      k.grid[0] = r.u_or<uint32_t>("gridX", 1);
      k.grid[1] = r.u_or<uint32_t>("gridY", 1);
      k.grid[2] = r.u_or<uint32_t>("gridZ", 1);
      k.block[0] = r.u_or<uint16_t>("blockX", 1);
      k.block[1] = r.u_or<uint16_t>("blockY", 1);
      k.block[2] = r.u_or<uint16_t>("blockZ", 1);
      k.static_smem = r.u_or<uint32_t>("staticSharedMemory", 0);
      k.dynamic_smem = r.u_or<uint32_t>("dynamicSharedMemory", 0);
      k.graph_node_id = r.u_or<uint64_t>("graphNodeId", 0);
      k.graph_id = r.u_or<uint32_t>("graphId", 0);
      k.queued = r.time_or_none("queued");
      k.submitted = r.time_or_none("submitted");
      if (r.keep(t.counts, k.start, k.end)) t.kernels.push_back(k);
    }
  }
}

// Memory copies (CUPTI_ACTIVITY_KIND_MEMCPY).
void read_memcpys(Db& db, Trace& t) {
  if (db.has_table("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_MEMCPY", {"start", "end", "deviceId", "streamId", "bytes", "copyKind"},
                  {"contextId", "correlationId", "globalPid", "srcKind", "dstKind", "graphNodeId"});
    while (r.next()) {
      Memcpy m;
      m.start = r.time("start");
      m.end = r.time("end");
      m.device = r.u<uint16_t>("deviceId");
      m.stream = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      m.bytes = r.u<uint64_t>("bytes");
      m.kind = MemcpyKind(r.fit<uint8_t>("copyKind", r.i("copyKind"), 0, int64_t(MemcpyKind::PtoP)));
      m.context = r.u_or<uint32_t>("contextId", 0);
      m.correlation = r.u_or<uint32_t>("correlationId", 0);
      m.pid = pid_of_global(r.i_or("globalPid", 0));
      m.src_kind = MemoryKind(r.fit<uint8_t>("srcKind", r.i_or("srcKind", 0), 0, int64_t(MemoryKind::ManagedStatic)));
      m.dst_kind = MemoryKind(r.fit<uint8_t>("dstKind", r.i_or("dstKind", 0), 0, int64_t(MemoryKind::ManagedStatic)));
      m.graph_node_id = r.u_or<uint64_t>("graphNodeId", 0);
      if (r.keep(t.counts, m.start, m.end)) t.memcpys.push_back(m);
    }
  }
}

// Memsets (CUPTI_ACTIVITY_KIND_MEMSET).
void read_memsets(Db& db, Trace& t) {
  if (db.has_table("CUPTI_ACTIVITY_KIND_MEMSET")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_MEMSET", {"start", "end", "deviceId", "streamId", "bytes"},
                  {"contextId", "correlationId", "globalPid", "value", "memKind", "graphNodeId"});
    while (r.next()) {
      Memset m;
      m.start = r.time("start");
      m.end = r.time("end");
      m.device = r.u<uint16_t>("deviceId");
      m.stream = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      m.bytes = r.u<uint64_t>("bytes");
      m.context = r.u_or<uint32_t>("contextId", 0);
      m.correlation = r.u_or<uint32_t>("correlationId", 0);
      m.pid = pid_of_global(r.i_or("globalPid", 0));
      m.value = r.u_or<uint32_t>("value", 0);
      m.mem_kind = MemoryKind(r.fit<uint8_t>("memKind", r.i_or("memKind", 3), 0, int64_t(MemoryKind::ManagedStatic)));
      m.graph_node_id = r.u_or<uint64_t>("graphNodeId", 0);
      if (r.keep(t.counts, m.start, m.end)) t.memsets.push_back(m);
    }
  }
}

// Runtime and driver API calls (CUPTI_ACTIVITY_KIND_RUNTIME, _DRIVER).
void read_api_calls(Db& db, Trace& t, const StringIds& strings) {
  for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}) {
    if (!db.has_table(table)) continue;
    TableReader r(db, table, {"start", "end", "nameId"}, {"globalTid", "correlationId", "returnValue", "cbid"});
    bool driver = std::strcmp(table, "CUPTI_ACTIVITY_KIND_DRIVER") == 0;
    while (r.next()) {
      ApiCall a;
      a.start = r.time("start");
      a.end = r.time("end");
      a.name = strings(r, "nameId");
      int64_t g = r.i_or("globalTid", 0);
      a.pid = pid_of_global(g);
      a.tid = tid_of_global(g);
      a.correlation = r.u_or<uint32_t>("correlationId", 0);
      a.return_value = r.u_or<int32_t>("returnValue", 0);
      a.cbid = r.u_or<uint32_t>("cbid", 0);
      a.kind = driver ? ApiKind::Driver : ApiKind::Runtime;
      if (r.keep(t.counts, a.start, a.end)) t.api_calls.push_back(a);
    }
  }
}

// Synchronisations, stream waits on events included (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION).
void read_syncs(Db& db, Trace& t) {
  if (db.has_table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {"start", "end", "syncType"},
                  {"deviceId", "contextId", "streamId", "correlationId", "globalPid", "eventId", "eventStreamId",
                   "eventRecordCorrelationId"});
    while (r.next()) {
      Sync s;
      s.start = r.time("start");
      s.end = r.time("end");
      s.type = SyncType(r.fit<uint8_t>("syncType", r.i("syncType"), 0, int64_t(SyncType::ContextSynchronize)));
      s.device = r.u_or<uint16_t>("deviceId", 0);
      s.context = r.u_or<uint32_t>("contextId", 0);
      s.stream = r.id_or_none("streamId", kNoStream);
      s.correlation = r.u_or<uint32_t>("correlationId", 0);
      s.pid = pid_of_global(r.i_or("globalPid", 0));
      s.event = r.id_or_none("eventId", kNoId);
      s.event_stream = r.id_or_none("eventStreamId", kNoStream);
      s.event_record_correlation = r.u_or<uint32_t>("eventRecordCorrelationId", 0);
      if (r.keep(t.counts, s.start, s.end)) t.syncs.push_back(s);
    }
  }
}

// NVTX ranges and marks (NVTX_EVENTS), with their domains' names from the domain-create rows.
void read_nvtx(Db& db, Trace& t, const StringIds& strings) {
  if (db.has_table("NVTX_EVENTS")) {
    std::map<std::pair<uint32_t, int64_t>, StrId> domains;
    {
      TableReader r(db, "NVTX_EVENTS", {"start", "eventType"}, {"text", "globalTid", "domainId"});
      while (r.next())
        if (r.i("eventType") == kEventTypeDomainCreate)
          domains[{pid_of_global(r.i_or("globalTid", 0)), r.i_or("domainId", 0)}] = t.intern(r.s("text"));
    }
    TableReader r(db, "NVTX_EVENTS", {"start", "eventType"},
                  {"end", "text", "textId", "globalTid", "endGlobalTid", "domainId", "category", "color"});
    while (r.next()) {
      int64_t ty = r.i("eventType");
      if (ty != kEventTypePushPop && ty != kEventTypeStartEnd && ty != kEventTypeMark && ty != 70 && ty != 71) continue;
      NvtxRange n;
      n.start = r.time("start");
      n.kind = (ty == kEventTypePushPop || ty == 70) ? NvtxKind::PushPop : (ty == kEventTypeMark) ? NvtxKind::Mark : NvtxKind::StartEnd;
      n.end = n.kind == NvtxKind::Mark || r.is_null("end") ? n.start : r.time("end");
      n.name = !r.is_null("textId") ? strings(r, "textId") : t.intern(r.s("text"));
      int64_t g = r.i_or("globalTid", 0);
      n.pid = pid_of_global(g);
      n.tid = tid_of_global(g);
      n.end_tid = r.is_null("endGlobalTid") ? n.tid : tid_of_global(r.i("endGlobalTid"));
      int64_t dom = r.i_or("domainId", 0);
      if (dom != 0) {
        auto it = domains.find({n.pid, dom});
        n.domain = it == domains.end() ? t.intern("domain " + std::to_string(dom)) : it->second;
      }
      n.category = r.u_or<uint32_t>("category", 0);
      n.color = r.u_or<uint32_t>("color", 0);
      if (r.keep(t.counts, n.start, n.end)) t.nvtx.push_back(n);
    }
  }
}

// Device memory allocations and frees (CUDA_GPU_MEMORY_USAGE_EVENTS), paired by address.
void read_allocations(Db& db, Trace& t) {
  if (db.has_table("CUDA_GPU_MEMORY_USAGE_EVENTS")) {
    TableReader r(db, "CUDA_GPU_MEMORY_USAGE_EVENTS", {"start", "address", "bytes", "memoryOperationType"},
                  {"globalPid", "deviceId", "contextId", "memKind", "correlationId", "streamId", "isAsync"});
    std::unordered_map<uint64_t, size_t> open;  // (address) -> allocation index
    while (r.next()) {
      int64_t op = r.i("memoryOperationType");
      // Addresses are 64-bit patterns: SQLite's int64 holds them as they are.
      uint64_t addr = uint64_t(r.i("address"));
      if (op == 0) {
        Allocation a;
        a.address = addr;
        a.bytes = r.u<uint64_t>("bytes");
        a.alloc = r.time("start");
        a.pid = pid_of_global(r.i_or("globalPid", 0));
        a.device = r.u_or<uint16_t>("deviceId", 0);
        a.context = r.u_or<uint32_t>("contextId", 0);
        a.kind = MemoryKind(r.fit<uint8_t>("memKind", r.i_or("memKind", 3), 0, int64_t(MemoryKind::ManagedStatic)));
        a.correlation = r.u_or<uint32_t>("correlationId", 0);
        a.stream = r.id_or_none("streamId", kNoStream);
        a.from_pool = r.fit<uint8_t>("isAsync", r.i_or("isAsync", 0), 0, 1);
        if (!r.keep(t.counts, a.alloc, a.alloc)) continue;
        open[addr] = t.allocations.size();
        t.allocations.push_back(a);
      } else if (op == 1) {
        const Ns at = r.time("start");
        auto it = open.find(addr);
        if (it != open.end()) {
          if (!r.keep(t.counts, at, at)) continue;
          t.allocations[it->second].free = at;
          open.erase(it);
        } else {
          Allocation a;  // allocated before the window
          a.address = addr;
          a.bytes = r.u<uint64_t>("bytes");
          a.alloc = kNoTime;
          a.free = at;
          a.pid = pid_of_global(r.i_or("globalPid", 0));
          a.device = r.u_or<uint16_t>("deviceId", 0);
          a.context = r.u_or<uint32_t>("contextId", 0);
          if (r.keep(t.counts, at, at)) t.allocations.push_back(a);
        }
      } else {
        r.bad("memoryOperationType " + std::to_string(op) + " (expected 0 allocation or 1 deallocation)");
      }
    }
  }
}

// CUPTI's own overhead (PROFILER_OVERHEAD, when it has the overheadKind column).
void read_overheads(Db& db, Trace& t) {
  if (db.has_table("PROFILER_OVERHEAD") && db.columns("PROFILER_OVERHEAD").count("overheadKind")) {
    TableReader r(db, "PROFILER_OVERHEAD", {"start", "end"}, {"globalTid", "overheadKind", "objectKind", "objectId"});
    while (r.next()) {
      Overhead o;
      o.start = r.time("start");
      o.end = r.time("end");
      o.pid = pid_of_global(r.i_or("globalTid", 0));
      o.kind = r.u_or<uint32_t>("overheadKind", 0);
      o.object_kind = r.u_or<uint32_t>("objectKind", 0);
      o.object_id = r.u_or<uint32_t>("objectId", 0);
      if (r.keep(t.counts, o.start, o.end)) t.overheads.push_back(o);
    }
  }
}

// CUDA event records (STREAMLAB_CUDA_EVENTS, ours only).
void read_cuda_events(Db& db, Trace& t) {
  if (db.has_table("STREAMLAB_CUDA_EVENTS")) {
    TableReader r(db, "STREAMLAB_CUDA_EVENTS", {"correlationId", "contextId", "streamId", "eventId", "pid", "deviceId"},
                  {"ts"});
    while (r.next()) {
      CudaEventRecord e;
      e.ts = r.time_or_none("ts");
      e.correlation = r.u<uint32_t>("correlationId");
      e.context = r.u<uint32_t>("contextId");
      e.stream = r.fit<uint32_t>("streamId", r.i("streamId"), 0, int64_t(kNoStream) - 1);
      e.event = r.u<uint32_t>("eventId");
      e.pid = r.u<uint32_t>("pid");
      e.device = r.u<uint16_t>("deviceId");
      if (r.keep(t.counts)) t.cuda_events.push_back(e);
    }
  }
}

// Counter samples (STREAMLAB_COUNTERS, ours only).
void read_counters(Db& db, Trace& t) {
  if (db.has_table("STREAMLAB_COUNTERS")) {
    TableReader r(db, "STREAMLAB_COUNTERS", {"ts", "value", "name", "pid"}, {});
    while (r.next()) {
      CounterSample c;
      c.ts = r.time("ts");
      c.value = r.d("value");
      c.name = t.intern(r.s("name"));
      c.pid = r.u<uint32_t>("pid");
      if (r.keep(t.counts)) t.counters.push_back(c);
    }
  }
}

}  // namespace

Trace load_nsys_sqlite(const std::string& path) {
  check_sqlite_header(path);
  Db db(path, SQLITE_OPEN_READONLY);
  refuse_virtual_columns(db);
  check_integrity(db);
  Trace t;
  const StringIds strings(db, t);
  const bool ours = db.has_table("STREAMLAB_META");
  require_cuda_tables(db, ours);
  RecordCounts given;  // the counts our export wrote, when it did
  const bool counts_given = read_meta(db, t, ours, given);
  read_session_start(db, t);
  read_devices(db, t);
  read_streams(db, t);
  read_contexts(db, t);
  read_processes(db, t);
  read_threads(db, t, strings);
  read_kernels(db, t, strings);
  read_memcpys(db, t);
  read_memsets(db, t);
  read_api_calls(db, t, strings);
  read_syncs(db, t);
  read_nvtx(db, t, strings);
  read_allocations(db, t);
  read_overheads(db, t);
  read_cuda_events(db, t);
  read_counters(db, t);
  if (counts_given) t.counts = counts_with_rejections(std::move(given), t.counts);
  t.finalize();
  reject_repeated_correlations(t);
  return t;
}

}  // namespace sl::prof
