// PyTorch profiler (Kineto) layout for synthetic traces; see synthetic.h.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/synthetic.h"

namespace sl::prof {

namespace {

// Appends to a buffer handed to `sink` in large pieces.
class Writer {
 public:
  explicit Writer(std::function<void(const char*, size_t)> sink) : sink_(std::move(sink)) { buf_.reserve(kFlush + 4096); }
  ~Writer() { flush(); }
  Writer& operator<<(std::string_view s) {
    buf_.append(s);
    if (buf_.size() >= kFlush) flush();
    return *this;
  }
  Writer& operator<<(int64_t v) {
    char tmp[24];
    auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    return *this << std::string_view(tmp, size_t(r.ptr - tmp));
  }
  Writer& operator<<(uint64_t v) { return *this << int64_t(v); }
  Writer& operator<<(uint32_t v) { return *this << int64_t(v); }
  Writer& operator<<(int v) { return *this << int64_t(v); }
  // Nanoseconds relative to the base as microseconds with three decimals (exact).
  Writer& us(Ns ns) {
    if (ns < 0) {
      *this << "-";
      ns = -ns;
    }
    char frac[4] = {char('0' + ns % 1000 / 100), char('0' + ns % 100 / 10), char('0' + ns % 10), 0};
    return *this << int64_t(ns / 1000) << "." << std::string_view(frac, 3);
  }
  Writer& str(std::string_view s) {  // a JSON string
    buf_ += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') buf_ += '\\', buf_ += c;
      else if (c == '\n') buf_ += "\\n";
      else if (c == '\t') buf_ += "\\t";
      else if (static_cast<unsigned char>(c) < 0x20) {
        char u[8];
        std::snprintf(u, sizeof u, "\\u%04x", unsigned(c));
        buf_ += u;
      } else {
        buf_ += c;
      }
    }
    buf_ += '"';
    return *this;
  }
  void flush() {
    if (!buf_.empty()) sink_(buf_.data(), buf_.size());
    buf_.clear();
  }

 private:
  static constexpr size_t kFlush = size_t(1) << 20;
  std::function<void(const char*, size_t)> sink_;
  std::string buf_;
};

// One event, as Kineto prints it: two-space indent, the fixed fields on one line, args below.
struct EventOut {
  Writer& w;
  const Trace& t;
  Ns base;
  bool first = true;

  void open(const char* ph, std::string_view cat, std::string_view name, int64_t pid, int64_t tid, Ns ts) {
    w << (first ? "\n  {\n" : ",\n  {\n");
    first = false;
    w << "    \"ph\": \"" << ph << "\", \"cat\": ";
    w.str(cat) << ", \"name\": ";
    w.str(name) << ", \"pid\": " << pid << ", \"tid\": " << tid << ",\n    \"ts\": ";
    w.us(ts - base);
  }
  void dur(Ns d) { w << ", \"dur\": "; w.us(d); }
  void args_begin() { w << ",\n    \"args\": {\n      "; }
  void close_args() { w << "\n    }\n  }"; }
  void close() { w << "\n  }"; }
  void flow(const char* ph, uint64_t id, int64_t pid, int64_t tid, Ns ts) {
    w << ",\n  {\n    \"ph\": \"" << ph << "\", \"id\": " << id << ", \"pid\": " << pid << ", \"tid\": " << tid
      << ", \"ts\": ";
    w.us(ts - base);
    w << ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"" << (ph[0] == 'f' ? ", \"bp\": \"e\"" : "") << "\n  }";
  }
};

// A GPU activity, for the completion-order part of the file.
struct GpuActivity {
  Ns end;
  int kind;  // 0 kernel, 1 memcpy, 2 memset, 3 sync
  size_t index;
};

void write_gpu_activity(EventOut& o, const Trace& t, const GpuActivity& g) {
  Writer& w = o.w;
  if (g.kind == 0) {
    const Kernel& k = t.kernels[g.index];
    o.open("X", "kernel", t.str(k.name), k.device, k.stream, k.start);
    o.dur(k.end - k.start);
    o.args_begin();
    w << "\"External id\": " << k.correlation << ", \"queued\": 0, \"device\": " << k.device
      << ", \"context\": " << k.context << ", \"stream\": " << k.stream << ", \"correlation\": " << k.correlation
      << ",\n      \"registers per thread\": " << k.registers
      << ", \"shared memory\": " << (k.static_smem + k.dynamic_smem) << ", \"blocks per SM\": 1.5, \"warps per SM\": 12"
      << ",\n      \"grid\": [" << k.grid[0] << ", " << k.grid[1] << ", " << k.grid[2] << "], \"block\": ["
      << k.block[0] << ", " << k.block[1] << ", " << k.block[2] << "], \"est. achieved occupancy %\": 25";
    o.close_args();
    o.flow("f", k.correlation, k.device, k.stream, k.start);
  } else if (g.kind == 1) {
    const Memcpy& m = t.memcpys[g.index];
    o.open("X", "gpu_memcpy", memcpy_display_name(m.kind, m.src_kind, m.dst_kind), m.device, m.stream, m.start);
    o.dur(m.end - m.start);
    o.args_begin();
    w << "\"External id\": " << m.correlation << ", \"device\": " << m.device << ", \"context\": " << m.context
      << ", \"stream\": " << m.stream << ", \"correlation\": " << m.correlation << ", \"bytes\": " << m.bytes
      << ", \"memory bandwidth (GB/s)\": 12.5";
    o.close_args();
  } else if (g.kind == 2) {
    const Memset& m = t.memsets[g.index];
    o.open("X", "gpu_memset", memset_display_name(m.mem_kind), m.device, m.stream, m.start);
    o.dur(m.end - m.start);
    o.args_begin();
    w << "\"External id\": " << m.correlation << ", \"device\": " << m.device << ", \"context\": " << m.context
      << ", \"stream\": " << m.stream << ", \"correlation\": " << m.correlation << ", \"bytes\": " << m.bytes
      << ", \"memory bandwidth (GB/s)\": 3.25";
    o.close_args();
  } else {
    const Sync& s = t.syncs[g.index];
    o.open("X", "cuda_sync", to_string(s.type), s.device, s.stream == kNoStream ? 0 : s.stream, s.start);
    o.dur(s.end - s.start);
    o.args_begin();
    w << "\"cuda_sync_kind\": ";
    w.str(to_string(s.type)) << ", \"stream\": " << (s.stream == kNoStream ? int64_t(-1) : int64_t(s.stream))
                             << ", \"correlation\": " << s.correlation << ", \"device\": " << s.device
                             << ", \"context\": " << s.context;
    o.close_args();
  }
}

void write_pytorch(const Trace& t, Writer& w) {
  const Ns base = t.base_time != kNoTime ? t.base_time : std::max<Ns>(0, t.first_time());
  const uint32_t pid = t.api_calls.empty() ? 1 : t.api_calls[0].pid;
  w << "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [";
  for (size_t i = 0; i < t.devices.size(); ++i) {
    const Device& d = t.devices[i];
    w << (i ? "," : "") << "\n    {\n      \"id\": " << d.id << ", \"name\": ";
    w.str(d.name) << ", \"totalGlobalMem\": " << d.total_memory << ",\n      \"computeMajor\": " << d.compute_major
                  << ", \"computeMinor\": " << d.compute_minor << ",\n      \"maxThreadsPerBlock\": "
                  << d.max_threads_per_block << ", \"numSms\": " << d.sm_count << ", \"warpSize\": " << d.warp_size
                  << "\n    }";
  }
  w << "\n  ],\n  \"cupti_version\": 24,\n  \"cuda_runtime_version\": 12040,\n  \"cuda_driver_version\": 12040,\n"
       "  \"profile_memory\": 1,\n  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 1},\n"
       "  \"record_shapes\": 1,\n  \"traceEvents\": [";
  EventOut o{w, t, base};
  // Metadata first, as Kineto writes it.
  o.open("M", "__metadata", "process_name", pid, 0, base);
  o.args_begin();
  w << "\"name\": \"python\"";
  o.close_args();
  o.open("M", "__metadata", "thread_name", pid, pid, base);
  o.args_begin();
  w << "\"name\": \"thread " << pid << " (python)\"";
  o.close_args();
  for (const Device& d : t.devices) {
    o.open("M", "__metadata", "process_name", d.id, 0, base);
    o.args_begin();
    w << "\"name\": \"GPU " << d.id << "\"";
    o.close_args();
  }
  for (const Stream& s : t.streams) {
    o.open("M", "__metadata", "thread_name", s.device, s.id, base);
    o.args_begin();
    w << "\"name\": \"stream " << s.id << " \"";
    o.close_args();
  }
  // The CPU side in time order: NVTX ranges (user_annotation), runtime calls each inside a
  // cpu_op, allocator events; a flow start at each launch.
  struct CpuItem {
    Ns ts;
    int kind;  // 0 nvtx, 1 api, 2 alloc, 3 free
    size_t index;
  };
  std::vector<CpuItem> cpu;
  for (size_t i = 0; i < t.nvtx.size(); ++i) cpu.push_back({t.nvtx[i].start, 0, i});
  for (size_t i = 0; i < t.api_calls.size(); ++i) cpu.push_back({t.api_calls[i].start, 1, i});
  for (size_t i = 0; i < t.allocations.size(); ++i) {
    cpu.push_back({t.allocations[i].alloc, 2, i});
    if (t.allocations[i].free != kNoTime) cpu.push_back({t.allocations[i].free, 3, i});
  }
  std::stable_sort(cpu.begin(), cpu.end(), [](const CpuItem& a, const CpuItem& b) { return a.ts < b.ts; });
  uint64_t external = 0;
  for (const CpuItem& c : cpu) {
    if (c.kind == 0) {
      const NvtxRange& r = t.nvtx[c.index];
      if (r.kind == NvtxKind::Mark) {
        o.open("i", "user_annotation", t.str(r.name), r.pid, r.tid, r.start);
        w << ", \"s\": \"t\"";
        o.close();
      } else {
        o.open("X", "user_annotation", t.str(r.name), r.pid, r.tid, r.start);
        o.dur(r.end - r.start);
        o.args_begin();
        w << "\"External id\": " << ++external << ", \"Record function id\": 0";
        o.close_args();
      }
    } else if (c.kind == 1) {
      const ApiCall& a = t.api_calls[c.index];
      std::string_view name = strip_api_version(t.str(a.name));
      ++external;
      o.open("X", "cpu_op", "aten::_op", a.pid, a.tid, a.start - 300);
      o.dur(a.end - a.start + 600);
      o.args_begin();
      w << "\"External id\": " << external << ", \"Record function id\": 0, \"Sequence number\": " << external
        << ", \"Fwd thread id\": 0, \"Ev Idx\": " << external;
      o.close_args();
      o.open("X", a.kind == ApiKind::Driver ? "cuda_driver" : "cuda_runtime", name, a.pid, a.tid, a.start);
      o.dur(a.end - a.start);
      o.args_begin();
      w << "\"External id\": " << external << ", \"cbid\": " << a.cbid << ", \"correlation\": " << a.correlation;
      o.close_args();
      if (name == "cudaLaunchKernel") o.flow("s", a.correlation, a.pid, a.tid, a.start);
    } else {
      const Allocation& m = t.allocations[c.index];
      const bool alloc = c.kind == 2;
      o.open("i", "cpu_instant_event", "[memory]", pid, pid, alloc ? m.alloc : m.free);
      w << ", \"s\": \"t\"";
      o.args_begin();
      w << "\"Total Reserved\": 0, \"Total Allocated\": 0, \"Bytes\": "
        << (alloc ? int64_t(m.bytes) : -int64_t(m.bytes)) << ", \"Addr\": " << m.address
        << ", \"Device Id\": " << m.device << ", \"Device Type\": 1";
      o.close_args();
    }
  }
  // The GPU side in completion order.
  std::vector<GpuActivity> gpu;
  for (size_t i = 0; i < t.kernels.size(); ++i) gpu.push_back({t.kernels[i].end, 0, i});
  for (size_t i = 0; i < t.memcpys.size(); ++i) gpu.push_back({t.memcpys[i].end, 1, i});
  for (size_t i = 0; i < t.memsets.size(); ++i) gpu.push_back({t.memsets[i].end, 2, i});
  for (size_t i = 0; i < t.syncs.size(); ++i) gpu.push_back({t.syncs[i].end, 3, i});
  std::stable_sort(gpu.begin(), gpu.end(), [](const GpuActivity& a, const GpuActivity& b) { return a.end < b.end; });
  for (const GpuActivity& g : gpu) write_gpu_activity(o, t, g);
  o.open("i", "", "Record Window End", 0, 0, std::max<Ns>(base, t.last_time()));
  w << ", \"s\": \"g\"";
  o.close();
  w << "\n  ],\n  \"traceName\": \"rank-0.pt.trace.json\",\n  \"displayTimeUnit\": \"ms\",\n"
       "  \"baseTimeNanoseconds\": "
    << int64_t(base) << "\n}\n";
}

}  // namespace

std::string pytorch_profiler_json(const Trace& t) {
  std::string out;
  {
    Writer w([&](const char* p, size_t n) { out.append(p, n); });
    write_pytorch(t, w);
  }
  return out;
}

void write_pytorch_profiler_json_file(const Trace& t, const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail("cannot write '", path, "': ", std::strerror(errno));
  bool failed = false;
  {
    Writer w([&](const char* p, size_t n) { failed |= std::fwrite(p, 1, n, f.get()) != n; });
    write_pytorch(t, w);
  }
  if (failed || std::fflush(f.get()) != 0) fail("writing '", path, "' failed: ", std::strerror(errno));
}

}  // namespace sl::prof
