#include "profiler/nsys_sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/error.h"

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
    sqlite3_prepare_v2(db_, "SELECT 1 FROM sqlite_master WHERE type IN ('table','view') AND name = ?", -1, &st, nullptr);
    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    bool r = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
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

  void i(int idx, int64_t v) { sqlite3_bind_int64(st_, idx, v); }
  void t(int idx, Ns v) {
    if (v == kNoTime)
      sqlite3_bind_null(st_, idx);
    else
      sqlite3_bind_int64(st_, idx, v);
  }
  void d(int idx, double v) { sqlite3_bind_double(st_, idx, v); }
  void s(int idx, const std::string& v) { sqlite3_bind_text(st_, idx, v.c_str(), int(v.size()), SQLITE_TRANSIENT); }
  void null(int idx) { sqlite3_bind_null(st_, idx); }
  void run() {
    int rc = sqlite3_step(st_);
    if (rc != SQLITE_DONE)
      fail("'", db_.path(), "': insert failed (", sqlite3_errmsg(db_.get()), "): ", sql_.substr(0, 100));
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
  Db& db_;
  std::string sql_;
  sqlite3_stmt* st_ = nullptr;
};

std::string insert_sql(const std::string& table, int n) {
  std::string s = "INSERT INTO " + table + " VALUES (";
  for (int i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s + ")";
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
  syncType INTEGER NOT NULL REFERENCES ENUM_CUPTI_SYNC_TYPE(id), eventId INTEGER NOT NULL);
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

void write_enums(Db& db) {
  Stmt memcpy_op(db, insert_sql("ENUM_CUDA_MEMCPY_OPER", 3));
  const char* ops[][2] = {{"CUDA_MEMCPY_OPER_UNKNOWN", "Unknown"},  {"CUDA_MEMCPY_OPER_HTOD", "Host-to-Device"},
                          {"CUDA_MEMCPY_OPER_DTOH", "Device-to-Host"}, {"CUDA_MEMCPY_OPER_HTOA", "Host-to-Array"},
                          {"CUDA_MEMCPY_OPER_ATOH", "Array-to-Host"},  {"CUDA_MEMCPY_OPER_ATOA", "Array-to-Array"},
                          {"CUDA_MEMCPY_OPER_ATOD", "Array-to-Device"}, {"CUDA_MEMCPY_OPER_DTOA", "Device-to-Array"},
                          {"CUDA_MEMCPY_OPER_DTOD", "Device-to-Device"}, {"CUDA_MEMCPY_OPER_HTOH", "Host-to-Host"},
                          {"CUDA_MEMCPY_OPER_PTOP", "Peer-to-Peer"}};
  for (int i = 0; i <= 10; ++i) {
    memcpy_op.i(1, i);
    memcpy_op.s(2, ops[i][0]);
    memcpy_op.s(3, ops[i][1]);
    memcpy_op.run();
  }
  Stmt mem(db, insert_sql("ENUM_CUDA_MEM_KIND", 3));
  const char* kinds[][2] = {{"CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"},   {"CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"},
                            {"CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"},     {"CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"},
                            {"CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"},       {"CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"},
                            {"CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"},
                            {"CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"}};
  for (int i = 0; i <= 7; ++i) {
    mem.i(1, i);
    mem.s(2, kinds[i][0]);
    mem.s(3, kinds[i][1]);
    mem.run();
  }
  Stmt sync(db, insert_sql("ENUM_CUPTI_SYNC_TYPE", 3));
  const char* syncs[][2] = {{"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"},
                            {"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"},
                            {"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait event"},
                            {"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"},
                            {"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"}};
  for (int i = 0; i <= 4; ++i) {
    sync.i(1, i);
    sync.s(2, syncs[i][0]);
    sync.s(3, syncs[i][1]);
    sync.run();
  }
  Stmt lt(db, insert_sql("ENUM_CUDA_KERNEL_LAUNCH_TYPE", 3));
  const char* lts[][2] = {{"CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"},
                          {"CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Cooperative single device"},
                          {"CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Cooperative multi device"}};
  for (int i = 0; i <= 2; ++i) {
    lt.i(1, i);
    lt.s(2, lts[i][0]);
    lt.s(3, lts[i][1]);
    lt.run();
  }
  Stmt mo(db, insert_sql("ENUM_CUDA_DEV_MEM_EVENT_OPER", 3));
  const char* mos[][2] = {{"CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"},
                          {"CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"}};
  for (int i = 0; i <= 1; ++i) {
    mo.i(1, i);
    mo.s(2, mos[i][0]);
    mo.s(3, mos[i][1]);
    mo.run();
  }
  Stmt et(db, insert_sql("ENUM_NSYS_EVENT_TYPE", 3));
  struct E {
    int id;
    const char *n, *l;
  } ets[] = {{kEventTypeMark, "NvtxMark", "NVTX mark"},
             {kEventTypePushPop, "NvtxPushPopRange", "NVTX push-pop range"},
             {kEventTypeStartEnd, "NvtxStartEndRange", "NVTX start-end range"},
             {kEventTypeDomainCreate, "NvtxDomainCreate", "NVTX domain create"}};
  for (auto& e : ets) {
    et.i(1, e.id);
    et.s(2, e.n);
    et.s(3, e.l);
    et.run();
  }
  Stmt ec(db, insert_sql("ENUM_NSYS_EVENT_CLASS", 3));
  ec.i(1, kClassRuntime);
  ec.s(2, "TRACE_PROCESS_EVENT_CUDA_RUNTIME");
  ec.s(3, "CUDA runtime API");
  ec.run();
  ec.i(1, kClassDriver);
  ec.s(2, "TRACE_PROCESS_EVENT_CUDA_DRIVER");
  ec.s(3, "CUDA driver API");
  ec.run();
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

void write_nsys_sqlite(const Trace& t, const std::string& path) {
  std::remove(path.c_str());
  Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA page_size = 65536;");
  db.exec(kSchema);
  db.exec("BEGIN");
  write_enums(db);

  // Strings: our ids, plus short names and domains interned on the fly into a side table.
  std::vector<int64_t> sid(t.strings.size(), -1);
  int64_t next_sid = 0;
  Stmt str(db, insert_sql("StringIds", 2));
  std::unordered_map<std::string, int64_t> extra;
  auto id_of = [&](StrId s) -> int64_t {
    if (sid[s] < 0) {
      sid[s] = next_sid++;
      str.i(1, sid[s]);
      str.s(2, t.str(s));
      str.run();
      extra.emplace(t.str(s), sid[s]);
    }
    return sid[s];
  };
  auto id_of_text = [&](const std::string& v) -> int64_t {
    StrId s = t.strings.find(v);
    if (s != kNoId) return id_of(s);
    auto it = extra.find(v);
    if (it != extra.end()) return it->second;
    int64_t id = next_sid++;
    str.i(1, id);
    str.s(2, v);
    str.run();
    extra.emplace(v, id);
    return id;
  };

  {
    Stmt m(db, insert_sql("META_DATA_EXPORT", 2));
    auto kv = [&](const std::string& k, const std::string& v) {
      m.s(1, k);
      m.s(2, v);
      m.run();
    };
    kv("EXPORT_SCHEMA_VERSION", "3.11.1");
    kv("EXPORT_PRODUCT_VERSION", std::string("streamlab ") + STREAMLAB_VERSION);
    kv("EXPORT_TIME_UNIT", "ns");
  }
  {
    Stmt s(db, insert_sql("TARGET_INFO_SESSION_START_TIME", 3));
    s.i(1, t.session_start_utc_ns);
    s.s(2, "");
    s.s(3, "");
    s.run();
  }
  {
    Stmt g(db, "INSERT INTO TARGET_INFO_GPU (id, name, busLocation, isDiscrete, l2CacheSize, totalMemory, memoryBandwidth, "
               "clockRate, smCount, pwGpuId, uuid, luid, chipName, cuDevice, computeMajor, computeMinor, maxRegistersPerBlock, "
               "maxShmemPerBlock, maxThreadsPerBlock, maxThreadsPerSm, maxShmemPerSm, maxRegistersPerSm, threadsPerWarp, "
               "maxShmemPerBlockOptin, vmId) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const auto& d : t.devices) {
      g.i(1, d.id);
      g.s(2, d.name.empty() ? "GPU " + std::to_string(d.id) : d.name);
      g.s(3, "");
      g.i(4, 1);
      g.i(5, d.l2_cache_size);
      g.i(6, d.total_memory);
      g.i(7, d.memory_bandwidth);
      g.i(8, d.clock_rate_khz * 1000);
      g.i(9, d.sm_count);
      g.i(10, d.id);
      g.s(11, d.uuid);
      g.i(12, 0);
      g.s(13, "");
      g.i(14, d.id);
      g.i(15, d.compute_major);
      g.i(16, d.compute_minor);
      g.i(17, d.regs_per_block);
      g.i(18, d.smem_per_block);
      g.i(19, d.max_threads_per_block);
      g.i(20, d.max_threads_per_sm);
      g.i(21, d.smem_per_sm);
      g.i(22, d.regs_per_sm);
      g.i(23, d.warp_size);
      g.i(24, d.smem_per_block_optin);
      g.i(25, 0);
      g.run();
    }
  }
  {
    Stmt s(db, insert_sql("TARGET_INFO_CUDA_STREAM", 7));
    Stmt x(db, insert_sql("STREAMLAB_STREAMS", 10));
    for (const auto& st : t.streams) {
      s.i(1, st.id);
      s.i(2, st.id);
      s.i(3, 0);
      s.i(4, st.pid);
      s.i(5, st.context);
      s.i(6, st.priority);
      s.i(7, st.flags);
      s.run();
      x.i(1, st.id);
      x.i(2, st.context);
      x.i(3, st.device);
      x.i(4, st.pid);
      x.i(5, st.priority);
      x.i(6, st.flags);
      x.i(7, st.is_null);
      x.s(8, t.str(st.name));
      x.t(9, st.created);
      x.t(10, st.destroyed);
      x.run();
    }
    Stmt c(db, insert_sql("STREAMLAB_CONTEXTS", 6));
    for (const auto& ctx : t.contexts) {
      c.i(1, ctx.id);
      c.i(2, ctx.device);
      c.i(3, ctx.pid);
      if (ctx.null_stream == kNoStream)
        c.null(4);
      else
        c.i(4, ctx.null_stream);
      c.t(5, ctx.created);
      c.t(6, ctx.destroyed);
      c.run();
    }
  }
  {
    std::set<uint32_t> pids;
    for (const auto& p : t.processes) pids.insert(p.pid);
    Stmt p(db, insert_sql("PROCESSES", 3));
    for (const auto& pr : t.processes) {
      p.i(1, nsys_global_pid(pr.pid));
      p.i(2, pr.pid);
      p.s(3, pr.name);
      p.run();
    }
    // Processes seen only through events get a row too (reports join on them).
    std::set<uint32_t> seen;
    for (const auto& a : t.api_calls) seen.insert(a.pid);
    for (const auto& k : t.kernels) seen.insert(k.pid);
    for (uint32_t pid : seen)
      if (!pids.count(pid)) {
        p.i(1, nsys_global_pid(pid));
        p.i(2, pid);
        p.s(3, "process " + std::to_string(pid));
        p.run();
      }
    Stmt th(db, insert_sql("ThreadNames", 3));
    for (const auto& tr : t.threads) {
      th.i(1, id_of_text(tr.name));
      th.i(2, 0);
      th.i(3, nsys_global_tid(tr.pid, tr.tid));
      th.run();
    }
  }

  {
    Stmt k(db, insert_sql("CUPTI_ACTIVITY_KIND_KERNEL", 31));
    std::unordered_map<StrId, int64_t> short_ids;
    for (const auto& x : t.kernels) {
      k.i(1, x.start);
      k.i(2, x.end);
      k.i(3, x.device);
      k.i(4, x.context);
      k.null(5);
      k.i(6, x.stream);
      k.i(7, x.correlation);
      k.i(8, nsys_global_pid(x.pid));
      k.i(9, id_of(x.name));
      auto it = short_ids.find(x.name);
      if (it == short_ids.end()) it = short_ids.emplace(x.name, id_of_text(kernel_short_name(t.str(x.name)))).first;
      k.i(10, it->second);
      k.null(11);
      k.i(12, x.launch_type);
      k.i(13, 0);
      k.i(14, x.registers);
      k.i(15, x.grid[0]);
      k.i(16, x.grid[1]);
      k.i(17, x.grid[2]);
      k.i(18, x.block[0]);
      k.i(19, x.block[1]);
      k.i(20, x.block[2]);
      k.i(21, x.static_smem);
      k.i(22, x.dynamic_smem);
      k.i(23, 0);
      k.i(24, 0);
      k.i(25, 0);
      k.null(26);
      if (x.graph_node_id)
        k.i(27, int64_t(x.graph_node_id));
      else
        k.null(27);
      k.null(28);
      if (x.graph_id)
        k.i(29, x.graph_id);
      else
        k.null(29);
      k.t(30, x.queued);
      k.t(31, x.submitted);
      k.run();
    }
  }
  {
    Stmt m(db, insert_sql("CUPTI_ACTIVITY_KIND_MEMCPY", 20));
    for (const auto& x : t.memcpys) {
      m.i(1, x.start);
      m.i(2, x.end);
      m.i(3, x.device);
      m.i(4, x.context);
      m.null(5);
      m.i(6, x.stream);
      m.i(7, x.correlation);
      m.i(8, nsys_global_pid(x.pid));
      m.i(9, int64_t(x.bytes));
      m.i(10, uint8_t(x.kind));
      m.null(11);
      m.i(12, uint8_t(x.src_kind));
      m.i(13, uint8_t(x.dst_kind));
      m.i(14, x.device);
      m.i(15, x.context);
      m.i(16, x.device);
      m.i(17, x.context);
      m.null(18);
      if (x.graph_node_id)
        m.i(19, int64_t(x.graph_node_id));
      else
        m.null(19);
      m.null(20);
      m.run();
    }
    Stmt s(db, insert_sql("CUPTI_ACTIVITY_KIND_MEMSET", 12));
    for (const auto& x : t.memsets) {
      s.i(1, x.start);
      s.i(2, x.end);
      s.i(3, x.device);
      s.i(4, x.context);
      s.null(5);
      s.i(6, x.stream);
      s.i(7, x.correlation);
      s.i(8, nsys_global_pid(x.pid));
      s.i(9, x.value);
      s.i(10, int64_t(x.bytes));
      if (x.graph_node_id)
        s.i(11, int64_t(x.graph_node_id));
      else
        s.null(11);
      s.i(12, uint8_t(x.mem_kind));
      s.run();
    }
  }
  {
    Stmt rt(db, insert_sql("CUPTI_ACTIVITY_KIND_RUNTIME", 9));
    Stmt dr(db, insert_sql("CUPTI_ACTIVITY_KIND_DRIVER", 9));
    for (const auto& a : t.api_calls) {
      Stmt& s = a.kind == ApiKind::Driver ? dr : rt;
      s.i(1, a.start);
      s.i(2, a.end);
      s.i(3, a.kind == ApiKind::Driver ? kClassDriver : kClassRuntime);
      s.i(4, nsys_global_tid(a.pid, a.tid));
      s.i(5, a.correlation);
      s.i(6, id_of(a.name));
      s.i(7, a.return_value);
      s.null(8);
      s.i(9, a.cbid);
      s.run();
    }
  }
  {
    Stmt s(db, insert_sql("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", 10));
    for (const auto& x : t.syncs) {
      s.i(1, x.start);
      s.i(2, x.end);
      s.i(3, x.device);
      s.i(4, x.context);
      s.null(5);
      s.i(6, x.stream == kNoStream ? -1 : int64_t(x.stream));
      s.i(7, x.correlation);
      s.i(8, nsys_global_pid(x.pid));
      s.i(9, uint8_t(x.type));
      s.i(10, x.event == kNoId ? -1 : int64_t(x.event));
      s.run();
    }
  }
  {
    Stmt n(db, "INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, category, color, text, globalTid, endGlobalTid, "
               "textId, domainId) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    std::map<std::pair<uint32_t, StrId>, int64_t> domains;  // (pid, domain name) -> domain id
    int64_t next_domain = 1;
    for (const auto& r : t.nvtx) {
      if (r.domain == 0 || domains.count({r.pid, r.domain})) continue;
      int64_t id = next_domain++;
      domains[{r.pid, r.domain}] = id;
      n.i(1, r.start);
      n.null(2);
      n.i(3, kEventTypeDomainCreate);
      n.null(4);
      n.null(5);
      n.null(6);
      n.s(7, t.str(r.domain));
      n.i(8, nsys_global_tid(r.pid, r.tid));
      n.null(9);
      n.null(10);
      n.i(11, id);
      n.run();
    }
    int64_t range_id = 1;
    for (const auto& r : t.nvtx) {
      n.i(1, r.start);
      if (r.kind == NvtxKind::Mark)
        n.null(2);
      else
        n.i(2, r.end);
      n.i(3, r.kind == NvtxKind::PushPop ? kEventTypePushPop : r.kind == NvtxKind::StartEnd ? kEventTypeStartEnd : kEventTypeMark);
      if (r.kind == NvtxKind::StartEnd)
        n.i(4, range_id++);
      else
        n.null(4);
      n.i(5, r.category);
      n.i(6, r.color);
      n.s(7, t.str(r.name));
      n.i(8, nsys_global_tid(r.pid, r.tid));
      n.i(9, nsys_global_tid(r.pid, r.end_tid ? r.end_tid : r.tid));
      n.i(10, id_of(r.name));
      n.i(11, r.domain ? domains[{r.pid, r.domain}] : 0);
      n.run();
    }
  }
  {
    Stmt m(db, insert_sql("CUDA_GPU_MEMORY_USAGE_EVENTS", 13));
    for (const auto& a : t.allocations) {
      for (int op = 0; op < 2; ++op) {
        Ns ts = op == 0 ? a.alloc : a.free;
        if (ts == kNoTime) continue;
        m.i(1, ts);
        m.i(2, nsys_global_pid(a.pid));
        m.i(3, a.device);
        m.i(4, a.context);
        m.i(5, int64_t(a.address));
        m.null(6);
        m.i(7, int64_t(a.bytes));
        m.i(8, uint8_t(a.kind));
        m.i(9, op);
        m.null(10);
        m.i(11, a.correlation);
        m.i(12, a.stream == kNoStream ? -1 : int64_t(a.stream));
        m.i(13, a.from_pool);
        m.run();
      }
      // An allocation that only has a free inside the window (alloc before it) keeps its size.
    }
  }
  {
    Stmt o(db, insert_sql("PROFILER_OVERHEAD", 7));
    for (const auto& x : t.overheads) {
      o.i(1, x.start);
      o.i(2, x.end);
      o.i(3, nsys_global_tid(x.pid, x.object_id));
      o.i(4, id_of_text("CUPTI overhead"));
      o.i(5, x.kind);
      o.i(6, x.object_kind);
      o.i(7, x.object_id);
      o.run();
    }
  }
  {
    Stmt e(db, insert_sql("STREAMLAB_CUDA_EVENTS", 7));
    for (const auto& x : t.cuda_events) {
      e.t(1, x.ts);
      e.i(2, x.correlation);
      e.i(3, x.context);
      e.i(4, x.stream);
      e.i(5, x.event);
      e.i(6, x.pid);
      e.i(7, x.device);
      e.run();
    }
    Stmt c(db, insert_sql("STREAMLAB_COUNTERS", 4));
    for (const auto& x : t.counters) {
      c.i(1, x.ts);
      c.d(2, x.value);
      c.s(3, t.str(x.name));
      c.i(4, x.pid);
      c.run();
    }
    Stmt m(db, insert_sql("STREAMLAB_META", 2));
    auto kv = [&](const std::string& k, const std::string& v) {
      m.s(1, k);
      m.s(2, v);
      m.run();
    };
    kv("format_version", "1");
    kv("base_time_ns", std::to_string(t.base_time == kNoTime ? 0 : t.base_time));
    const RecordCounts& rc = t.counts;
    kv("count.dropped", std::to_string(rc.dropped));
    kv("count.zero_timestamps", std::to_string(rc.zero_timestamps));
    kv("count.end_before_start", std::to_string(rc.end_before_start));
    kv("count.overhead_records", std::to_string(rc.overhead_records));
    kv("count.invalid_records", std::to_string(rc.invalid_records));
    kv("count.unknown_kinds", std::to_string(rc.unknown_kinds));
    kv("count.warmup_discarded", std::to_string(rc.warmup_discarded));
    kv("count.buffers", std::to_string(rc.buffers));
    kv("count.buffer_bytes", std::to_string(rc.buffer_bytes));
    kv("count.pool_exhausted", std::to_string(rc.pool_exhausted));
    for (const auto& [k, v] : t.metadata) kv("meta." + k, v);
  }
  db.exec("COMMIT");
}

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
    const unsigned char* p = sqlite3_column_text(stmt_->get(), it->second + 1);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  int64_t row() const { return row_; }
  [[noreturn]] void bad(const std::string& what) const {
    fail("'", db_.path(), "': table ", table_, " row ", row_, ": ", what);
  }

 private:
  Db& db_;
  std::string table_;
  std::vector<std::string> cols_;
  std::map<std::string, int> index_;
  std::unique_ptr<Stmt> stmt_;
  int64_t row_ = 0;
};

uint32_t pid_of_global(int64_t g) { return uint32_t((g >> 24) & 0xFFFFFF); }
uint32_t tid_of_global(int64_t g) { return uint32_t(g & 0xFFFFFF); }

}  // namespace

Trace load_nsys_sqlite(const std::string& path) {
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("cannot open trace '", path, "': ", std::strerror(errno));
    char head[16] = {};
    size_t n = std::fread(head, 1, 16, f);
    std::fclose(f);
    if (n < 16 || std::memcmp(head, "SQLite format 3\0", 16) != 0)
      fail("'", path, "': not an SQLite database (expected the 16-byte header \"SQLite format 3\")");
  }
  Db db(path, SQLITE_OPEN_READONLY);
  {
    // A truncated or corrupt file: check integrity quickly before reading.
    Stmt q(db, "PRAGMA quick_check");
    if (q.next()) {
      const unsigned char* r = sqlite3_column_text(q.get(), 0);
      std::string res = r ? reinterpret_cast<const char*>(r) : "";
      if (res != "ok") fail("'", path, "': SQLite file is corrupt (", res, ")");
    }
  }
  if (!db.has_table("StringIds"))
    fail("'", path, "': no StringIds table (expected an SQLite file in the Nsight Systems export layout)");
  Trace t;
  std::unordered_map<int64_t, StrId> strs;
  {
    TableReader r(db, "StringIds", {"id", "value"}, {});
    while (r.next()) strs[r.i("id")] = t.intern(r.s("value"));
  }
  auto S = [&](const TableReader& r, const std::string& col) -> StrId {
    if (r.is_null(col)) return 0;
    int64_t id = r.i(col);
    auto it = strs.find(id);
    if (it == strs.end()) r.bad("column \"" + col + "\" refers to string id " + std::to_string(id) + " missing from StringIds");
    return it->second;
  };

  if (db.has_table("STREAMLAB_META")) {
    TableReader r(db, "STREAMLAB_META", {"name", "value"}, {});
    while (r.next()) {
      std::string k = r.s("name"), v = r.s("value");
      auto num = [&]() -> uint64_t {
        try {
          return std::stoull(v);
        } catch (...) {
          r.bad("value of \"" + k + "\" is not a number: " + v);
        }
      };
      if (k == "base_time_ns") t.base_time = Ns(num());
      else if (k == "count.dropped") t.counts.dropped = num();
      else if (k == "count.zero_timestamps") t.counts.zero_timestamps = num();
      else if (k == "count.end_before_start") t.counts.end_before_start = num();
      else if (k == "count.overhead_records") t.counts.overhead_records = num();
      else if (k == "count.invalid_records") t.counts.invalid_records = num();
      else if (k == "count.unknown_kinds") t.counts.unknown_kinds = num();
      else if (k == "count.warmup_discarded") t.counts.warmup_discarded = num();
      else if (k == "count.buffers") t.counts.buffers = num();
      else if (k == "count.buffer_bytes") t.counts.buffer_bytes = num();
      else if (k == "count.pool_exhausted") t.counts.pool_exhausted = num();
      else if (k.rfind("meta.", 0) == 0) t.metadata[k.substr(5)] = v;
    }
  } else {
    t.metadata["source"] = "nsys";
  }
  if (db.has_table("TARGET_INFO_SESSION_START_TIME")) {
    TableReader r(db, "TARGET_INFO_SESSION_START_TIME", {"utcEpochNs"}, {});
    if (r.next()) t.session_start_utc_ns = r.i_or("utcEpochNs", 0);
  }
  if (db.has_table("TARGET_INFO_GPU")) {
    TableReader r(db, "TARGET_INFO_GPU", {"id"},
                  {"name", "uuid", "l2CacheSize", "totalMemory", "memoryBandwidth", "clockRate", "smCount", "computeMajor",
                   "computeMinor", "maxRegistersPerBlock", "maxShmemPerBlock", "maxThreadsPerBlock", "maxThreadsPerSm",
                   "maxShmemPerSm", "maxRegistersPerSm", "threadsPerWarp", "maxShmemPerBlockOptin"});
    while (r.next()) {
      Device d;
      d.id = uint32_t(r.i("id"));
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
  if (db.has_table("STREAMLAB_STREAMS")) {
    TableReader r(db, "STREAMLAB_STREAMS", {"streamId", "contextId", "deviceId", "pid", "priority", "flags", "nullStream"},
                  {"name", "created", "destroyed"});
    while (r.next()) {
      Stream s;
      s.id = uint32_t(r.i("streamId"));
      s.context = uint32_t(r.i("contextId"));
      s.device = uint32_t(r.i("deviceId"));
      s.pid = uint32_t(r.i("pid"));
      s.priority = int32_t(r.i("priority"));
      s.flags = uint8_t(r.i("flags"));
      s.is_null = uint8_t(r.i("nullStream"));
      std::string n = r.s("name");
      s.name = n.empty() ? 0 : t.intern(n);
      s.created = r.t_or_none("created");
      s.destroyed = r.t_or_none("destroyed");
      t.streams.push_back(s);
    }
  } else if (db.has_table("TARGET_INFO_CUDA_STREAM")) {
    TableReader r(db, "TARGET_INFO_CUDA_STREAM", {"streamId"}, {"processId", "contextId", "priority", "flag"});
    while (r.next()) {
      Stream s;
      s.id = uint32_t(r.i("streamId"));
      s.pid = uint32_t(r.i_or("processId", 0));
      s.context = uint32_t(r.i_or("contextId", 0));
      s.priority = int32_t(r.i_or("priority", 0));
      s.flags = uint8_t(r.i_or("flag", 0));
      t.streams.push_back(s);
    }
  }
  if (db.has_table("STREAMLAB_CONTEXTS")) {
    TableReader r(db, "STREAMLAB_CONTEXTS", {"contextId", "deviceId", "pid"}, {"nullStreamId", "created", "destroyed"});
    while (r.next()) {
      Context c;
      c.id = uint32_t(r.i("contextId"));
      c.device = uint32_t(r.i("deviceId"));
      c.pid = uint32_t(r.i("pid"));
      c.null_stream = r.is_null("nullStreamId") ? kNoStream : uint32_t(r.i("nullStreamId"));
      c.created = r.t_or_none("created");
      c.destroyed = r.t_or_none("destroyed");
      t.contexts.push_back(c);
    }
  }
  if (db.has_table("PROCESSES")) {
    TableReader r(db, "PROCESSES", {"pid"}, {"name"});
    while (r.next()) {
      std::string n = r.s("name");
      if (n.rfind("process ", 0) == 0) continue;  // placeholder rows we wrote
      t.processes.push_back({uint32_t(r.i("pid")), n});
    }
  }
  if (db.has_table("ThreadNames")) {
    TableReader r(db, "ThreadNames", {"nameId", "globalTid"}, {});
    while (r.next()) {
      int64_t g = r.i("globalTid");
      t.threads.push_back({pid_of_global(g), tid_of_global(g), t.str(S(r, "nameId"))});
    }
  }
  if (db.has_table("CUPTI_ACTIVITY_KIND_KERNEL")) {
    const bool has_demangled = db.columns("CUPTI_ACTIVITY_KIND_KERNEL").count("demangledName") > 0;
    TableReader r(db, "CUPTI_ACTIVITY_KIND_KERNEL", {"start", "end", "deviceId", "streamId"},
                  {"contextId", "correlationId", "globalPid", "demangledName", "shortName", "launchType",
                   "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory",
                   "dynamicSharedMemory", "graphNodeId", "graphId", "queued", "submitted"});
    while (r.next()) {
      Kernel k;
      k.start = r.i("start");
      k.end = r.i("end");
      k.device = uint16_t(r.i("deviceId"));
      k.stream = uint32_t(r.i("streamId"));
      k.context = uint32_t(r.i_or("contextId", 0));
      k.correlation = uint32_t(r.i_or("correlationId", 0));
      k.pid = pid_of_global(r.i_or("globalPid", 0));
      k.name = S(r, has_demangled ? "demangledName" : "shortName");
      k.launch_type = uint16_t(r.i_or("launchType", 0));
      k.registers = uint16_t(r.i_or("registersPerThread", 0));
      k.grid[0] = uint32_t(r.i_or("gridX", 1));
      k.grid[1] = uint32_t(r.i_or("gridY", 1));
      k.grid[2] = uint32_t(r.i_or("gridZ", 1));
      k.block[0] = uint16_t(r.i_or("blockX", 1));
      k.block[1] = uint16_t(r.i_or("blockY", 1));
      k.block[2] = uint16_t(r.i_or("blockZ", 1));
      k.static_smem = uint32_t(r.i_or("staticSharedMemory", 0));
      k.dynamic_smem = uint32_t(r.i_or("dynamicSharedMemory", 0));
      k.graph_node_id = uint64_t(r.i_or("graphNodeId", 0));
      k.graph_id = uint32_t(r.i_or("graphId", 0));
      k.queued = r.t_or_none("queued");
      k.submitted = r.t_or_none("submitted");
      t.kernels.push_back(k);
    }
  }
  if (db.has_table("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_MEMCPY", {"start", "end", "deviceId", "streamId", "bytes", "copyKind"},
                  {"contextId", "correlationId", "globalPid", "srcKind", "dstKind", "graphNodeId"});
    while (r.next()) {
      Memcpy m;
      m.start = r.i("start");
      m.end = r.i("end");
      m.device = uint16_t(r.i("deviceId"));
      m.stream = uint32_t(r.i("streamId"));
      m.bytes = uint64_t(r.i("bytes"));
      int64_t ck = r.i("copyKind");
      if (ck < 0 || ck > 10) r.bad("copyKind " + std::to_string(ck) + " out of range (expected 0..10)");
      m.kind = MemcpyKind(ck);
      m.context = uint32_t(r.i_or("contextId", 0));
      m.correlation = uint32_t(r.i_or("correlationId", 0));
      m.pid = pid_of_global(r.i_or("globalPid", 0));
      m.src_kind = MemoryKind(r.i_or("srcKind", 0) & 0xFF);
      m.dst_kind = MemoryKind(r.i_or("dstKind", 0) & 0xFF);
      m.graph_node_id = uint64_t(r.i_or("graphNodeId", 0));
      t.memcpys.push_back(m);
    }
  }
  if (db.has_table("CUPTI_ACTIVITY_KIND_MEMSET")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_MEMSET", {"start", "end", "deviceId", "streamId", "bytes"},
                  {"contextId", "correlationId", "globalPid", "value", "memKind", "graphNodeId"});
    while (r.next()) {
      Memset m;
      m.start = r.i("start");
      m.end = r.i("end");
      m.device = uint16_t(r.i("deviceId"));
      m.stream = uint32_t(r.i("streamId"));
      m.bytes = uint64_t(r.i("bytes"));
      m.context = uint32_t(r.i_or("contextId", 0));
      m.correlation = uint32_t(r.i_or("correlationId", 0));
      m.pid = pid_of_global(r.i_or("globalPid", 0));
      m.value = uint32_t(r.i_or("value", 0));
      m.mem_kind = MemoryKind(r.i_or("memKind", 3) & 0xFF);
      m.graph_node_id = uint64_t(r.i_or("graphNodeId", 0));
      t.memsets.push_back(m);
    }
  }
  for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}) {
    if (!db.has_table(table)) continue;
    TableReader r(db, table, {"start", "end", "nameId"}, {"globalTid", "correlationId", "returnValue", "cbid"});
    bool driver = std::strcmp(table, "CUPTI_ACTIVITY_KIND_DRIVER") == 0;
    while (r.next()) {
      ApiCall a;
      a.start = r.i("start");
      a.end = r.i("end");
      a.name = S(r, "nameId");
      int64_t g = r.i_or("globalTid", 0);
      a.pid = pid_of_global(g);
      a.tid = tid_of_global(g);
      a.correlation = uint32_t(r.i_or("correlationId", 0));
      a.return_value = int32_t(r.i_or("returnValue", 0));
      a.cbid = uint32_t(r.i_or("cbid", 0));
      a.kind = driver ? ApiKind::Driver : ApiKind::Runtime;
      t.api_calls.push_back(a);
    }
  }
  if (db.has_table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")) {
    TableReader r(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {"start", "end", "syncType"},
                  {"deviceId", "contextId", "streamId", "correlationId", "globalPid", "eventId"});
    while (r.next()) {
      Sync s;
      s.start = r.i("start");
      s.end = r.i("end");
      int64_t ty = r.i("syncType");
      if (ty < 0 || ty > 4) r.bad("syncType " + std::to_string(ty) + " out of range (expected 0..4)");
      s.type = SyncType(ty);
      s.device = uint16_t(r.i_or("deviceId", 0));
      s.context = uint32_t(r.i_or("contextId", 0));
      int64_t st = r.i_or("streamId", -1);
      s.stream = st < 0 ? kNoStream : uint32_t(st);
      s.correlation = uint32_t(r.i_or("correlationId", 0));
      s.pid = pid_of_global(r.i_or("globalPid", 0));
      int64_t ev = r.i_or("eventId", -1);
      s.event = ev < 0 ? kNoId : uint32_t(ev);
      t.syncs.push_back(s);
    }
  }
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
      n.start = r.i("start");
      n.kind = (ty == kEventTypePushPop || ty == 70) ? NvtxKind::PushPop : (ty == kEventTypeMark) ? NvtxKind::Mark : NvtxKind::StartEnd;
      n.end = n.kind == NvtxKind::Mark ? n.start : r.i_or("end", n.start);
      n.name = !r.is_null("textId") ? S(r, "textId") : t.intern(r.s("text"));
      int64_t g = r.i_or("globalTid", 0);
      n.pid = pid_of_global(g);
      n.tid = tid_of_global(g);
      n.end_tid = r.is_null("endGlobalTid") ? n.tid : tid_of_global(r.i("endGlobalTid"));
      int64_t dom = r.i_or("domainId", 0);
      if (dom != 0) {
        auto it = domains.find({n.pid, dom});
        n.domain = it == domains.end() ? t.intern("domain " + std::to_string(dom)) : it->second;
      }
      n.category = uint32_t(r.i_or("category", 0));
      n.color = uint32_t(r.i_or("color", 0));
      t.nvtx.push_back(n);
    }
  }
  if (db.has_table("CUDA_GPU_MEMORY_USAGE_EVENTS")) {
    TableReader r(db, "CUDA_GPU_MEMORY_USAGE_EVENTS", {"start", "address", "bytes", "memoryOperationType"},
                  {"globalPid", "deviceId", "contextId", "memKind", "correlationId", "streamId", "isAsync"});
    std::unordered_map<uint64_t, size_t> open;  // (address) -> allocation index
    while (r.next()) {
      int64_t op = r.i("memoryOperationType");
      uint64_t addr = uint64_t(r.i("address"));
      if (op == 0) {
        Allocation a;
        a.address = addr;
        a.bytes = uint64_t(r.i("bytes"));
        a.alloc = r.i("start");
        a.pid = pid_of_global(r.i_or("globalPid", 0));
        a.device = uint16_t(r.i_or("deviceId", 0));
        a.context = uint32_t(r.i_or("contextId", 0));
        a.kind = MemoryKind(r.i_or("memKind", 3) & 0xFF);
        a.correlation = uint32_t(r.i_or("correlationId", 0));
        int64_t st = r.i_or("streamId", -1);
        a.stream = st < 0 ? kNoStream : uint32_t(st);
        a.from_pool = uint8_t(r.i_or("isAsync", 0));
        open[addr] = t.allocations.size();
        t.allocations.push_back(a);
      } else if (op == 1) {
        auto it = open.find(addr);
        if (it != open.end()) {
          t.allocations[it->second].free = r.i("start");
          open.erase(it);
        } else {
          Allocation a;  // allocated before the window
          a.address = addr;
          a.bytes = uint64_t(r.i("bytes"));
          a.alloc = kNoTime;
          a.free = r.i("start");
          a.pid = pid_of_global(r.i_or("globalPid", 0));
          a.device = uint16_t(r.i_or("deviceId", 0));
          a.context = uint32_t(r.i_or("contextId", 0));
          t.allocations.push_back(a);
        }
      } else {
        r.bad("memoryOperationType " + std::to_string(op) + " (expected 0 allocation or 1 deallocation)");
      }
    }
  }
  if (db.has_table("PROFILER_OVERHEAD") && db.columns("PROFILER_OVERHEAD").count("overheadKind")) {
    TableReader r(db, "PROFILER_OVERHEAD", {"start", "end"}, {"globalTid", "overheadKind", "objectKind", "objectId"});
    while (r.next()) {
      Overhead o;
      o.start = r.i("start");
      o.end = r.i("end");
      o.pid = pid_of_global(r.i_or("globalTid", 0));
      o.kind = uint32_t(r.i_or("overheadKind", 0));
      o.object_kind = uint32_t(r.i_or("objectKind", 0));
      o.object_id = uint32_t(r.i_or("objectId", 0));
      t.overheads.push_back(o);
    }
  }
  if (db.has_table("STREAMLAB_CUDA_EVENTS")) {
    TableReader r(db, "STREAMLAB_CUDA_EVENTS", {"correlationId", "contextId", "streamId", "eventId", "pid", "deviceId"},
                  {"ts"});
    while (r.next()) {
      CudaEventRecord e;
      e.ts = r.t_or_none("ts");
      e.correlation = uint32_t(r.i("correlationId"));
      e.context = uint32_t(r.i("contextId"));
      e.stream = uint32_t(r.i("streamId"));
      e.event = uint32_t(r.i("eventId"));
      e.pid = uint32_t(r.i("pid"));
      e.device = uint16_t(r.i("deviceId"));
      t.cuda_events.push_back(e);
    }
  }
  if (db.has_table("STREAMLAB_COUNTERS")) {
    TableReader r(db, "STREAMLAB_COUNTERS", {"ts", "value", "name", "pid"}, {});
    while (r.next()) {
      CounterSample c;
      c.ts = r.i("ts");
      c.value = r.d("value");
      c.name = t.intern(r.s("name"));
      c.pid = uint32_t(r.i("pid"));
      t.counters.push_back(c);
    }
  }
  t.finalize();
  return t;
}

}  // namespace sl::prof
