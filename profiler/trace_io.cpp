#include "profiler/trace_io.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"

namespace sl::prof {

namespace {

using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open trace '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("reading trace '", path, "' failed");
  return ss.str();
}

std::string brief(const json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "a value";
  }
}

// Field access for one trace event, with errors that name the file, the event and the field.
class Ev {
 public:
  Ev(const json& e, size_t index, const std::string& origin) : e_(e), i_(index), origin_(origin) {}

  [[noreturn]] void bad(const std::string& what) const {
    std::string who;
    if (e_.is_object()) {
      if (e_.contains("cat") && e_["cat"].is_string()) who += " cat \"" + e_["cat"].get<std::string>() + "\"";
      if (e_.contains("name") && e_["name"].is_string()) {
        std::string n = e_["name"];
        if (n.size() > 40) n = n.substr(0, 37) + "...";
        who += " name \"" + n + "\"";
      }
    }
    fail(origin_, ": traceEvents[", i_, "]", who, ": ", what);
  }

  bool has(const char* k) const { return e_.contains(k); }
  const json& at(const char* k) const {
    auto it = e_.find(k);
    if (it == e_.end()) bad(std::string("expected field \"") + k + "\"");
    return *it;
  }
  std::string str(const char* k) const {
    const json& v = at(k);
    if (!v.is_string()) bad(std::string("expected \"") + k + "\" to be a string, found " + type_name(v) + " " + brief(v));
    return v.get<std::string>();
  }
  std::string str_or(const char* k, const std::string& d) const { return has(k) ? str(k) : d; }
  // Integer (or integral number, or numeric string: some traces write ids as strings).
  int64_t integer(const json& v, const std::string& what) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_unsigned()) return int64_t(v.get<uint64_t>());
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return int64_t(d);
    }
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == 0 && errno == 0) return x;
    }
    bad("expected " + what + " to be an integer, found " + type_name(v) + " " + brief(v));
  }
  int64_t integer(const char* k) const { return integer(at(k), std::string("\"") + k + "\""); }
  double number(const char* k) const {
    const json& v = at(k);
    if (!v.is_number()) bad(std::string("expected \"") + k + "\" to be a number, found " + type_name(v) + " " + brief(v));
    double d = v.get<double>();
    if (!std::isfinite(d)) bad(std::string("\"") + k + "\" is not finite");
    return d;
  }
  const json* args() const {
    auto it = e_.find("args");
    if (it == e_.end()) return nullptr;
    if (!it->is_object()) bad("expected \"args\" to be an object, found " + std::string(type_name(*it)));
    return &*it;
  }
  int64_t arg_int(const char* k, int64_t d) const {
    const json* a = args();
    if (!a) return d;
    auto it = a->find(k);
    if (it == a->end() || it->is_null()) return d;
    return integer(*it, std::string("args.\"") + k + "\"");
  }
  int64_t arg_int_req(const char* k) const {
    const json* a = args();
    if (!a || !a->contains(k)) bad(std::string("expected args.\"") + k + "\"");
    return integer((*a)[k], std::string("args.\"") + k + "\"");
  }
  std::string arg_str(const char* k, const std::string& d) const {
    const json* a = args();
    if (!a) return d;
    auto it = a->find(k);
    if (it == a->end()) return d;
    if (!it->is_string()) bad(std::string("expected args.\"") + k + "\" to be a string, found " + type_name(*it));
    return it->get<std::string>();
  }
  std::array<uint32_t, 3> arg_dim3(const char* k) const {
    std::array<uint32_t, 3> r{1, 1, 1};
    const json* a = args();
    if (!a || !a->contains(k)) return r;
    const json& v = (*a)[k];
    if (!v.is_array() || v.size() != 3) bad(std::string("expected args.\"") + k + "\" to be an array of 3 integers");
    for (int i = 0; i < 3; ++i) {
      int64_t x = integer(v[i], std::string("args.\"") + k + "\"[" + std::to_string(i) + "]");
      if (x < 0 || x > 0xFFFFFFFFll) bad(std::string("args.\"") + k + "\" out of range");
      r[i] = uint32_t(x);
    }
    return r;
  }

 private:
  const json& e_;
  size_t i_;
  const std::string& origin_;
};

uint32_t u32(int64_t v) { return uint32_t(v); }

SyncType sync_type_from_name(const std::string& s) {
  if (s == "Event Sync" || s == "event_sync" || s == "Event Synchronize") return SyncType::EventSynchronize;
  if (s == "Stream Wait Event" || s == "stream_wait_event") return SyncType::StreamWaitEvent;
  if (s == "Stream Sync" || s == "stream_sync" || s == "Stream Synchronize") return SyncType::StreamSynchronize;
  if (s == "Context Sync" || s == "context_sync" || s == "Context Synchronize") return SyncType::ContextSynchronize;
  return SyncType::Unknown;
}

// "Memcpy HtoD (Pageable -> Device)" -> kinds (PyTorch traces carry no numeric kinds).
void parse_memcpy_name(const std::string& n, Memcpy& m) {
  static const char* kinds[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
  for (int k = 1; k <= 10; ++k)
    if (n.find(std::string(" ") + kinds[k]) != std::string::npos) m.kind = MemcpyKind(k);
  auto mem = [](const std::string& s) {
    for (int k = 7; k >= 1; --k)
      if (s == to_string(MemoryKind(k))) return MemoryKind(k);
    return MemoryKind::Unknown;
  };
  size_t l = n.find('('), arrow = n.find(" -> "), r = n.rfind(')');
  if (l != std::string::npos && arrow != std::string::npos && r != std::string::npos && l < arrow && arrow < r) {
    m.src_kind = mem(n.substr(l + 1, arrow - l - 1));
    m.dst_kind = mem(n.substr(arrow + 4, r - arrow - 4));
  }
}

Ns opt_time(const json& v) { return v.is_null() ? kNoTime : v.get<int64_t>(); }

// The "streamlab" block of our own files.
void load_block(const json& b, Trace& t, const std::string& origin) {
  auto where = [&](const std::string& w) { return origin + ": streamlab." + w; };
  try {
    if (b.contains("base_time_ns")) t.base_time = b["base_time_ns"].get<int64_t>();
    if (b.contains("session_start_utc_ns")) t.session_start_utc_ns = b["session_start_utc_ns"].get<int64_t>();
    if (b.contains("counts")) {
      const json& c = b["counts"];
      auto g = [&](const char* k) { return c.contains(k) ? c[k].get<uint64_t>() : 0; };
      t.counts.dropped = g("dropped");
      t.counts.zero_timestamps = g("zero_timestamps");
      t.counts.end_before_start = g("end_before_start");
      t.counts.overhead_records = g("overhead_records");
      t.counts.invalid_records = g("invalid_records");
      t.counts.unknown_kinds = g("unknown_kinds");
      t.counts.warmup_discarded = g("warmup_discarded");
      t.counts.buffers = g("buffers");
      t.counts.buffer_bytes = g("buffer_bytes");
      t.counts.pool_exhausted = g("pool_exhausted");
    }
    if (b.contains("metadata"))
      for (auto& [k, v] : b["metadata"].items()) t.metadata[k] = v.get<std::string>();
    if (b.contains("devices"))
      for (const auto& d : b["devices"]) {
        uint32_t id = d["id"].get<uint32_t>();
        Device* dev = nullptr;
        for (auto& x : t.devices)
          if (x.id == id) dev = &x;
        if (!dev) {
          t.devices.push_back(Device{});
          dev = &t.devices.back();
          dev->id = id;
          dev->name = d.value("name", "");
        }
        dev->uuid = d.value("uuid", "");
        dev->l2_cache_size = d.value("l2_cache_size", int64_t(0));
        dev->clock_rate_khz = d.value("clock_rate_khz", int64_t(0));
        dev->memory_bandwidth = d.value("memory_bandwidth", int64_t(0));
      }
    if (b.contains("contexts"))
      for (const auto& r : b["contexts"]) {
        Context c;
        c.id = r.at(0).get<uint32_t>();
        c.device = r.at(1).get<uint32_t>();
        c.pid = r.at(2).get<uint32_t>();
        int64_t ns = r.at(3).get<int64_t>();
        c.null_stream = ns < 0 ? kNoStream : uint32_t(ns);
        c.created = opt_time(r.at(4));
        c.destroyed = opt_time(r.at(5));
        t.contexts.push_back(c);
      }
    if (b.contains("streams"))
      for (const auto& r : b["streams"]) {
        Stream s;
        s.id = r.at(0).get<uint32_t>();
        s.context = r.at(1).get<uint32_t>();
        s.device = r.at(2).get<uint32_t>();
        s.pid = r.at(3).get<uint32_t>();
        s.priority = r.at(4).get<int32_t>();
        s.flags = r.at(5).get<uint8_t>();
        s.is_null = r.at(6).get<uint8_t>();
        s.name = t.intern(r.at(7).get<std::string>());
        s.created = opt_time(r.at(8));
        s.destroyed = opt_time(r.at(9));
        t.streams.push_back(s);
      }
    if (b.contains("processes"))
      for (const auto& r : b["processes"]) t.processes.push_back({r.at(0).get<uint32_t>(), r.at(1).get<std::string>()});
    if (b.contains("threads"))
      for (const auto& r : b["threads"])
        t.threads.push_back({r.at(0).get<uint32_t>(), r.at(1).get<uint32_t>(), r.at(2).get<std::string>()});
    if (b.contains("cuda_events"))
      for (const auto& r : b["cuda_events"]) {
        CudaEventRecord e;
        e.ts = opt_time(r.at(0));
        e.correlation = r.at(1).get<uint32_t>();
        e.context = r.at(2).get<uint32_t>();
        e.stream = r.at(3).get<uint32_t>();
        e.event = r.at(4).get<uint32_t>();
        e.pid = r.at(5).get<uint32_t>();
        e.device = r.at(6).get<uint16_t>();
        t.cuda_events.push_back(e);
      }
    if (b.contains("allocations"))
      for (const auto& r : b["allocations"]) {
        Allocation a;
        a.address = r.at(0).get<uint64_t>();
        a.bytes = r.at(1).get<uint64_t>();
        a.alloc = opt_time(r.at(2));
        a.free = opt_time(r.at(3));
        a.correlation = r.at(4).get<uint32_t>();
        a.context = r.at(5).get<uint32_t>();
        int64_t st = r.at(6).get<int64_t>();
        a.stream = st < 0 ? kNoStream : uint32_t(st);
        a.pid = r.at(7).get<uint32_t>();
        a.device = r.at(8).get<uint16_t>();
        a.kind = MemoryKind(r.at(9).get<uint8_t>());
        a.from_pool = r.at(10).get<uint8_t>();
        t.allocations.push_back(a);
      }
    if (b.contains("overheads"))
      for (const auto& r : b["overheads"]) {
        Overhead o;
        o.start = r.at(0).get<int64_t>();
        o.end = r.at(1).get<int64_t>();
        o.kind = r.at(2).get<uint32_t>();
        o.object_kind = r.at(3).get<uint32_t>();
        o.object_id = r.at(4).get<uint32_t>();
        o.pid = r.at(5).get<uint32_t>();
        t.overheads.push_back(o);
      }
    if (b.contains("counters"))
      for (const auto& r : b["counters"]) {
        CounterSample c;
        c.ts = r.at(0).get<int64_t>();
        c.value = r.at(1).get<double>();
        c.name = t.intern(r.at(2).get<std::string>());
        c.pid = r.at(3).get<uint32_t>();
        t.counters.push_back(c);
      }
  } catch (const json::exception& e) {
    fail(where("block"), ": malformed (", e.what(), ")");
  }
}

}  // namespace

namespace {
Trace load_kineto_doc(const json& doc, const std::string& origin);
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
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail(origin, ": not valid JSON at byte ", e.byte, " (of ", text.size(), "): ", e.what());
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON (", e.what(), ")");
  }
  try {
    return load_kineto_doc(doc, origin);
  } catch (const json::exception& e) {
    // Ev's accessors check types first; this is the net under everything else.
    fail(origin, ": unexpected JSON value (", e.what(), ")");
  }
}

namespace {

Trace load_kineto_doc(const json& doc, const std::string& origin) {
  if (!doc.is_object())
    fail(origin, ": expected a JSON object with a \"traceEvents\" array (a Kineto / Chrome trace), found ", type_name(doc));
  auto te = doc.find("traceEvents");
  if (te == doc.end() || !te->is_array())
    fail(origin, ": expected a \"traceEvents\" array at the top level (a Kineto / Chrome trace)");

  Trace t;
  Ns base = 0;
  if (doc.contains("baseTimeNanoseconds")) {
    const json& b = doc["baseTimeNanoseconds"];
    if (!b.is_number_integer() && !b.is_number_unsigned())
      fail(origin, ": expected \"baseTimeNanoseconds\" to be an integer, found ", type_name(b), " ", brief(b));
    base = b.get<int64_t>();
  }
  const bool ours = doc.contains("streamlab") && doc["streamlab"].is_object();
  auto to_ns = [&](double us) -> Ns { return base + Ns(std::llround(us * 1000.0)); };

  if (doc.contains("deviceProperties") && doc["deviceProperties"].is_array()) {
    const json& dp = doc["deviceProperties"];
    for (size_t i = 0; i < dp.size(); ++i) {
      const json& d = dp[i];
      if (!d.is_object()) fail(origin, ": deviceProperties[", i, "]: expected an object");
      try {
        Device dev;
        dev.id = d.value("id", 0u);
        dev.name = d.value("name", std::string());
        dev.total_memory = d.value("totalGlobalMem", int64_t(0));
        dev.compute_major = d.value("computeMajor", 0);
        dev.compute_minor = d.value("computeMinor", 0);
        dev.max_threads_per_block = d.value("maxThreadsPerBlock", 0);
        dev.max_threads_per_sm = d.value("maxThreadsPerMultiprocessor", 0);
        dev.regs_per_block = d.value("regsPerBlock", 0);
        dev.regs_per_sm = d.value("regsPerMultiprocessor", 0);
        dev.warp_size = d.value("warpSize", 32);
        dev.smem_per_block = d.value("sharedMemPerBlock", int64_t(0));
        dev.smem_per_sm = d.value("sharedMemPerMultiprocessor", int64_t(0));
        dev.sm_count = d.value("numSms", 0);
        dev.smem_per_block_optin = d.value("sharedMemPerBlockOptin", int64_t(0));
        t.devices.push_back(dev);
      } catch (const json::exception& e) {
        fail(origin, ": deviceProperties[", i, "]: ", e.what());
      }
    }
  }

  std::unordered_map<uint64_t, std::pair<Ns, uint64_t>> live_mem;  // PyTorch [memory] events: addr -> (t, bytes)
  uint64_t skipped = 0;
  const json& evs = *te;
  for (size_t i = 0; i < evs.size(); ++i) {
    const json& e = evs[i];
    if (!e.is_object()) fail(origin, ": traceEvents[", i, "]: expected an object, found ", type_name(e));
    Ev ev(e, i, origin);
    if (!e.contains("ph")) ev.bad("expected field \"ph\"");
    const std::string ph = ev.str("ph");
    if (ph == "X") {
      const std::string cat = ev.str_or("cat", "");
      if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset" && cat != "cuda_runtime" &&
          cat != "cuda_driver" && cat != "cuda_sync" && cat != "user_annotation") {
        ++skipped;  // cpu_op, python_function, gpu_user_annotation (derived), Trace spans, ...
        continue;
      }
      Ns start = to_ns(ev.number("ts"));
      double dur_us = ev.number("dur");
      Ns end = start + Ns(std::llround(dur_us * 1000.0));
      if (end < start) t.counts.end_before_start++;
      if (start == 0) t.counts.zero_timestamps++;
      int64_t pid = ev.integer("pid");
      int64_t tid = ev.integer("tid");
      if (cat == "kernel") {
        Kernel k;
        k.start = start;
        k.end = end;
        k.name = t.intern(ev.str("name"));
        k.device = uint16_t(ev.arg_int("device", pid));
        k.stream = u32(ev.arg_int_req("stream"));
        k.context = u32(ev.arg_int("context", 0));
        k.correlation = u32(ev.arg_int("correlation", 0));
        k.registers = uint16_t(ev.arg_int("registers per thread", 0));
        auto g = ev.arg_dim3("grid");
        auto bl = ev.arg_dim3("block");
        for (int d = 0; d < 3; ++d) {
          k.grid[d] = g[d];
          k.block[d] = uint16_t(std::min<uint32_t>(bl[d], 0xFFFF));
        }
        int64_t smem = ev.arg_int("shared memory", 0);
        k.static_smem = u32(ev.arg_int("static shared memory", -1) >= 0 ? ev.arg_int("static shared memory", 0) : 0);
        k.dynamic_smem = u32(ev.arg_int("dynamic shared memory", -1) >= 0 ? ev.arg_int("dynamic shared memory", 0)
                                                                           : smem - int64_t(k.static_smem));
        k.graph_id = u32(ev.arg_int("graph id", 0));
        k.graph_node_id = uint64_t(ev.arg_int("graph node id", 0));
        int64_t q = ev.arg_int("queued ns", -1);
        k.queued = q >= 0 ? q : kNoTime;
        int64_t s = ev.arg_int("submitted ns", -1);
        k.submitted = s >= 0 ? s : kNoTime;
        k.launch_type = uint16_t(ev.arg_int("launch type", 0));
        k.pid = u32(ev.arg_int("process", 0));
        t.kernels.push_back(k);
      } else if (cat == "gpu_memcpy") {
        Memcpy m;
        m.start = start;
        m.end = end;
        m.device = uint16_t(ev.arg_int("device", pid));
        m.stream = u32(ev.arg_int_req("stream"));
        m.context = u32(ev.arg_int("context", 0));
        m.correlation = u32(ev.arg_int("correlation", 0));
        m.bytes = uint64_t(ev.arg_int("bytes", 0));
        parse_memcpy_name(ev.str("name"), m);
        if (ev.arg_int("copy kind", -1) >= 0) m.kind = MemcpyKind(ev.arg_int("copy kind", 0));
        if (ev.arg_int("src kind", -1) >= 0) m.src_kind = MemoryKind(ev.arg_int("src kind", 0));
        if (ev.arg_int("dst kind", -1) >= 0) m.dst_kind = MemoryKind(ev.arg_int("dst kind", 0));
        m.graph_node_id = uint64_t(ev.arg_int("graph node id", 0));
        m.pid = u32(ev.arg_int("process", 0));
        t.memcpys.push_back(m);
      } else if (cat == "gpu_memset") {
        Memset m;
        m.start = start;
        m.end = end;
        m.device = uint16_t(ev.arg_int("device", pid));
        m.stream = u32(ev.arg_int_req("stream"));
        m.context = u32(ev.arg_int("context", 0));
        m.correlation = u32(ev.arg_int("correlation", 0));
        m.bytes = uint64_t(ev.arg_int("bytes", 0));
        m.value = u32(ev.arg_int("value", 0));
        m.mem_kind = MemoryKind(ev.arg_int("memory kind", uint8_t(MemoryKind::Device)));
        m.graph_node_id = uint64_t(ev.arg_int("graph node id", 0));
        m.pid = u32(ev.arg_int("process", 0));
        t.memsets.push_back(m);
      } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
        ApiCall a;
        a.start = start;
        a.end = end;
        a.name = t.intern(ev.str("name"));
        a.kind = cat == "cuda_driver" ? ApiKind::Driver : ApiKind::Runtime;
        a.cbid = u32(ev.arg_int("cbid", 0));
        a.correlation = u32(ev.arg_int("correlation", 0));
        a.return_value = int32_t(ev.arg_int("return value", 0));
        a.pid = u32(pid);
        a.tid = u32(tid) & kTidStreamMask;
        t.api_calls.push_back(a);
      } else if (cat == "cuda_sync") {
        Sync s;
        s.start = start;
        s.end = end;
        s.device = uint16_t(ev.arg_int("device", pid));
        int64_t st = ev.arg_int("stream", -1);
        s.stream = st < 0 ? kNoStream : uint32_t(st);
        s.context = u32(ev.arg_int("context", 0));
        s.correlation = u32(ev.arg_int("correlation", 0));
        int64_t evid = ev.arg_int("wait_on_cuda_event_id", -1);
        s.event = evid < 0 ? kNoId : uint32_t(evid);
        int64_t ty = ev.arg_int("sync type", -1);
        s.type = ty >= 0 ? SyncType(ty) : sync_type_from_name(ev.arg_str("cuda_sync_kind", ev.str_or("name", "")));
        s.pid = u32(ev.arg_int("process", 0));
        t.syncs.push_back(s);
      } else {  // user_annotation
        NvtxRange r;
        r.start = start;
        r.end = end;
        r.name = t.intern(ev.str("name"));
        std::string dom = ev.arg_str("domain", "");
        r.domain = dom.empty() ? 0 : t.intern(dom);
        r.kind = NvtxKind(std::min<int64_t>(2, std::max<int64_t>(0, ev.arg_int("nvtx kind", 0))));
        r.color = u32(ev.arg_int("color", 0));
        r.category = u32(ev.arg_int("category", 0));
        r.pid = u32(pid);
        r.tid = u32(tid) & kTidStreamMask;
        r.end_tid = u32(ev.arg_int("end thread", r.tid));
        t.nvtx.push_back(r);
      }
    } else if (ph == "i" || ph == "I") {
      std::string cat = ev.str_or("cat", "");
      std::string name = ev.str_or("name", "");
      if (cat == "user_annotation") {
        NvtxRange r;
        r.start = r.end = to_ns(ev.number("ts"));
        r.name = t.intern(name);
        r.kind = NvtxKind::Mark;
        r.pid = u32(ev.integer("pid"));
        r.tid = u32(ev.integer("tid")) & kTidStreamMask;
        r.end_tid = r.tid;
        std::string dom = ev.arg_str("domain", "");
        r.domain = dom.empty() ? 0 : t.intern(dom);
        t.nvtx.push_back(r);
      } else if (name == "[memory]" && !ours) {
        // PyTorch's allocator events: positive Bytes allocate, negative free, keyed by Addr.
        Ns ts = to_ns(ev.number("ts"));
        int64_t bytes = ev.arg_int("Bytes", 0);
        uint64_t addr = uint64_t(ev.arg_int("Addr", 0));
        int64_t dev = ev.arg_int("Device Id", -1);
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
      std::string name = ev.str_or("name", "");
      const json* a = ev.args();
      if (!a || !a->contains("name") || !(*a)["name"].is_string()) continue;
      std::string value = (*a)["name"];
      int64_t pid = ev.integer("pid");
      if (name == "process_name" && value.rfind("GPU ", 0) != 0 && !ours) {
        t.processes.push_back({u32(pid), value});
      } else if (name == "thread_name" && !ours && value.rfind("stream ", 0) != 0) {
        t.threads.push_back({u32(pid), u32(ev.integer("tid")) & kTidStreamMask, value});
      }
    } else if (ph == "C") {
      if (ours) continue;  // derived from allocations / the block
      std::string name = ev.str_or("name", "counter");
      Ns ts = to_ns(ev.number("ts"));
      int64_t pid = ev.integer("pid");
      const json* a = ev.args();
      if (!a) continue;
      for (auto& [k, v] : a->items()) {
        if (!v.is_number()) ev.bad("expected counter args.\"" + k + "\" to be a number, found " + type_name(v));
        CounterSample c;
        c.ts = ts;
        c.value = v.get<double>();
        c.name = t.intern(a->size() == 1 ? name : name + "." + k);
        c.pid = u32(pid);
        t.counters.push_back(c);
      }
    } else if (ph == "s" || ph == "f" || ph == "t" || ph == "B" || ph == "E" || ph == "b" || ph == "e" || ph == "n") {
      ++skipped;
    } else {
      ev.bad("unexpected ph \"" + ph + "\"");
    }
  }
  if (ours) load_block(doc["streamlab"], t, origin);
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
  std::string text = read_file(path);
  return load_kineto_json(text, "'" + path + "'");
}

Trace load_trace(const std::string& path) {
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
