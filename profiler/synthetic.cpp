#include "profiler/synthetic.h"

#include <random>
#include <string>
#include <vector>

namespace sl::prof {

size_t TraceBuilder::kernel(uint32_t stream, Ns start, Ns end, std::string_view name, Ns launch_start,
                            Ns launch_end) {
  Kernel k;
  k.start = start;
  k.end = end;
  k.stream = stream;
  k.name = t_.intern(name);
  k.pid = pid_;
  k.context = 1;
  k.correlation = next_correlation();
  k.grid[0] = 132;
  k.block[0] = 128;
  k.registers = 32;
  if (launch_start >= 0) api("cudaLaunchKernel_v7000", launch_start, launch_end < 0 ? launch_start + 1 : launch_end, k.correlation);
  t_.kernels.push_back(k);
  return t_.kernels.size() - 1;
}

size_t TraceBuilder::memcpy(uint32_t stream, Ns start, Ns end, uint64_t bytes, MemcpyKind kind, Ns launch_start,
                            Ns launch_end) {
  Memcpy m;
  m.start = start;
  m.end = end;
  m.stream = stream;
  m.bytes = bytes;
  m.kind = kind;
  m.src_kind = kind == MemcpyKind::HtoD ? MemoryKind::Pageable : MemoryKind::Device;
  m.dst_kind = kind == MemcpyKind::DtoH ? MemoryKind::Pageable : MemoryKind::Device;
  m.pid = pid_;
  m.context = 1;
  m.correlation = next_correlation();
  if (launch_start >= 0) api("cudaMemcpyAsync_v3020", launch_start, launch_end < 0 ? launch_start + 1 : launch_end, m.correlation);
  t_.memcpys.push_back(m);
  return t_.memcpys.size() - 1;
}

size_t TraceBuilder::memset(uint32_t stream, Ns start, Ns end, uint64_t bytes, Ns launch_start, Ns launch_end) {
  Memset m;
  m.start = start;
  m.end = end;
  m.stream = stream;
  m.bytes = bytes;
  m.mem_kind = MemoryKind::Device;
  m.pid = pid_;
  m.context = 1;
  m.correlation = next_correlation();
  if (launch_start >= 0) api("cudaMemsetAsync_v3020", launch_start, launch_end < 0 ? launch_start + 1 : launch_end, m.correlation);
  t_.memsets.push_back(m);
  return t_.memsets.size() - 1;
}

size_t TraceBuilder::api(std::string_view name, Ns start, Ns end, uint32_t correlation) {
  ApiCall a;
  a.start = start;
  a.end = end;
  a.name = t_.intern(name);
  a.correlation = correlation ? correlation : next_correlation();
  a.pid = pid_;
  a.tid = tid_;
  t_.api_calls.push_back(a);
  return t_.api_calls.size() - 1;
}

size_t TraceBuilder::nvtx(std::string_view name, Ns start, Ns end, std::string_view domain) {
  NvtxRange r;
  r.start = start;
  r.end = end;
  r.name = t_.intern(name);
  r.domain = domain.empty() ? 0 : t_.intern(domain);
  r.pid = pid_;
  r.tid = tid_;
  r.end_tid = tid_;
  t_.nvtx.push_back(r);
  return t_.nvtx.size() - 1;
}

size_t TraceBuilder::stream(uint32_t id, int priority, Ns created, Ns destroyed, std::string_view name) {
  Stream s;
  s.id = id;
  s.context = 1;
  s.pid = pid_;
  s.priority = priority;
  s.created = created;
  s.destroyed = destroyed;
  s.flags = 2;
  s.name = name.empty() ? 0 : t_.intern(name);
  t_.streams.push_back(s);
  return t_.streams.size() - 1;
}

void TraceBuilder::record_and_wait(uint32_t event, uint32_t on_stream, uint32_t waiting_stream, Ns at) {
  CudaEventRecord e;
  e.ts = at;
  e.correlation = next_correlation();
  e.context = 1;
  e.stream = on_stream;
  e.event = event;
  e.pid = pid_;
  t_.cuda_events.push_back(e);
  Sync s;
  s.start = at;
  s.end = at;
  s.correlation = next_correlation();
  s.stream = waiting_stream;
  s.context = 1;
  s.event = event;
  s.pid = pid_;
  s.type = SyncType::StreamWaitEvent;
  t_.syncs.push_back(s);
}

Trace make_synthetic_trace(const SyntheticOptions& o) {
  Trace t;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> jitter(0, 400);
  const uint32_t pid = 4242, tid = 4242;
  const uint32_t main_stream = 7;
  Ns now = 1'000'000'000;  // CUPTI-like absolute clock
  uint32_t corr = 0;

  Device d;
  d.id = 0;
  d.name = "Synthetic H200";
  d.compute_major = 9;
  d.sm_count = 132;
  d.total_memory = int64_t(141) << 30;
  t.devices.push_back(d);
  Context c;
  c.id = 1;
  c.pid = pid;
  t.contexts.push_back(c);
  Stream ms;
  ms.id = main_stream;
  ms.context = 1;
  ms.pid = pid;
  ms.name = t.intern("main");
  t.streams.push_back(ms);
  for (uint32_t a = 0; a < o.aux_streams; ++a) {
    Stream s;
    s.id = main_stream + 1 + a;
    s.context = 1;
    s.pid = pid;
    s.priority = -1;
    s.flags = 2;
    s.created = now - 100'000 + a * 30'000;
    s.name = t.intern("aux" + std::to_string(a));
    t.streams.push_back(s);
  }
  std::vector<StrId> names;
  for (const char* n : {"gemm_bf16_128x128", "rmsnorm", "rope", "compressor_gemm", "indexer_topk", "sparse_attention",
                        "moe_router", "expert_gemm", "ncclDevKernel_AllReduce", "Memcpy DtoD"})
    names.push_back(t.intern(n));
  const StrId launch = t.intern("cudaLaunchKernel_v7000");
  const StrId record = t.intern("cudaEventRecord_v3020");
  const StrId wait = t.intern("cudaStreamWaitEvent_v3020");
  const StrId step_name = t.intern("step");
  std::vector<StrId> layer_names;
  for (uint32_t l = 0; l < o.layers; ++l) layer_names.push_back(t.intern("L" + std::to_string(l)));

  // Per layer: 6 main kernels + 2 per aux stream, each with a launch call (2 events each),
  // plus fork and join event records and waits per aux stream (8 events), an NVTX range.
  const size_t per_layer = (6 + 2 * o.aux_streams) * 2 + 8 * o.aux_streams + 1;
  const size_t per_step = per_layer * o.layers + 1 + 4;  // + step range + memcpy/memset/alloc/free
  const size_t steps = std::max<size_t>(1, o.target_events / per_step);
  t.kernels.reserve(steps * o.layers * (6 + 2 * o.aux_streams));
  t.api_calls.reserve(steps * o.layers * (6 + 4 * o.aux_streams + 2 * o.aux_streams));
  t.nvtx.reserve(steps * (o.layers + 1));

  Ns gpu_main = now + 5'000;
  uint32_t event_id = 1;
  for (size_t s = 0; s < steps; ++s) {
    Ns step_start = now;
    Memcpy mc;
    mc.start = gpu_main;
    mc.end = gpu_main + 2'000;
    gpu_main = mc.end;
    mc.bytes = 1 << 20;
    mc.kind = MemcpyKind::HtoD;
    mc.src_kind = MemoryKind::Pinned;
    mc.dst_kind = MemoryKind::Device;
    mc.stream = main_stream;
    mc.context = 1;
    mc.pid = pid;
    mc.correlation = ++corr;
    t.memcpys.push_back(mc);
    Memset mz;
    mz.start = gpu_main;
    mz.end = gpu_main + 500;
    gpu_main = mz.end;
    mz.bytes = 4096;
    mz.stream = main_stream;
    mz.context = 1;
    mz.pid = pid;
    mz.correlation = ++corr;
    mz.mem_kind = MemoryKind::Device;
    t.memsets.push_back(mz);
    Allocation al;
    al.address = 0x7f0000000000ull + s * 4096;
    al.bytes = 1 << 20;
    al.alloc = now;
    al.free = now + 50'000;
    al.pid = pid;
    al.context = 1;
    t.allocations.push_back(al);

    for (uint32_t l = 0; l < o.layers; ++l) {
      Ns layer_start = now;
      // Fork: record on main, aux waits.
      std::vector<Ns> aux_ready(o.aux_streams, gpu_main);
      for (uint32_t a = 0; a < o.aux_streams; ++a) {
        uint32_t ev = event_id++;
        ApiCall r;
        r.start = now;
        r.end = now + 800;
        r.name = record;
        r.correlation = ++corr;
        r.pid = pid;
        r.tid = tid;
        t.api_calls.push_back(r);
        CudaEventRecord e;
        e.ts = gpu_main;
        e.correlation = r.correlation;
        e.context = 1;
        e.stream = main_stream;
        e.event = ev;
        e.pid = pid;
        t.cuda_events.push_back(e);
        now += 1'000;
        ApiCall w = r;
        w.start = now;
        w.end = now + 600;
        w.name = wait;
        w.correlation = ++corr;
        t.api_calls.push_back(w);
        Sync sy;
        sy.start = gpu_main;
        sy.end = gpu_main;
        sy.correlation = w.correlation;
        sy.stream = main_stream + 1 + a;
        sy.context = 1;
        sy.event = ev;
        sy.pid = pid;
        sy.type = SyncType::StreamWaitEvent;
        t.syncs.push_back(sy);
        now += 800;
      }
      // Launches: interleave main and aux kernels.
      std::vector<Ns> aux_gpu(aux_ready);
      for (uint32_t i = 0; i < 6 + 2 * o.aux_streams; ++i) {
        // The aux kernels are launched first (they start as soon as the fork event fires), then
        // the main-stream chain of six.
        bool on_main = i >= 2 * o.aux_streams;
        uint32_t a = on_main ? 0 : i / 2;
        ApiCall call;
        call.start = now;
        call.end = now + 2'500 + jitter(rng);
        call.name = launch;
        call.correlation = ++corr;
        call.pid = pid;
        call.tid = tid;
        t.api_calls.push_back(call);
        Kernel k;
        k.correlation = call.correlation;
        k.name = names[(i + l) % names.size()];
        k.pid = pid;
        k.context = 1;
        k.grid[0] = 132;
        k.block[0] = 256;
        k.registers = 96;
        k.static_smem = 1024;
        k.dynamic_smem = 64 * 1024;
        Ns dur = 4'000 + 50 * jitter(rng);
        if (on_main) {
          k.stream = main_stream;
          k.start = std::max(gpu_main, call.end + 1'000);
          k.end = k.start + dur;
          gpu_main = k.end;
        } else {
          k.stream = main_stream + 1 + a;
          k.start = std::max(aux_gpu[a], call.end + 1'000);
          k.end = k.start + dur / 2;
          aux_gpu[a] = k.end;
        }
        k.queued = call.end;
        k.submitted = call.end + 200;
        t.kernels.push_back(k);
        now = call.end + 200;
      }
      // Join: record an event on each aux stream, the main stream waits on it.
      for (uint32_t a = 0; a < o.aux_streams; ++a) {
        uint32_t ev = event_id++;
        ApiCall r;
        r.start = now;
        r.end = now + 800;
        r.name = record;
        r.correlation = ++corr;
        r.pid = pid;
        r.tid = tid;
        t.api_calls.push_back(r);
        CudaEventRecord e;
        e.ts = aux_gpu[a];
        e.correlation = r.correlation;
        e.context = 1;
        e.stream = main_stream + 1 + a;
        e.event = ev;
        e.pid = pid;
        t.cuda_events.push_back(e);
        now += 1'000;
        ApiCall w = r;
        w.start = now;
        w.end = now + 600;
        w.name = wait;
        w.correlation = ++corr;
        t.api_calls.push_back(w);
        Sync sy;
        sy.start = aux_gpu[a];
        sy.end = aux_gpu[a];
        sy.correlation = w.correlation;
        sy.stream = main_stream;
        sy.context = 1;
        sy.event = ev;
        sy.pid = pid;
        sy.type = SyncType::StreamWaitEvent;
        t.syncs.push_back(sy);
        now += 800;
        gpu_main = std::max(gpu_main, aux_gpu[a]);
      }
      NvtxRange lr;
      lr.start = layer_start;
      lr.end = now;
      lr.name = layer_names[l];
      lr.pid = pid;
      lr.tid = tid;
      t.nvtx.push_back(lr);
    }
    NvtxRange sr;
    sr.start = step_start;
    sr.end = now;
    sr.name = step_name;
    sr.pid = pid;
    sr.tid = tid;
    t.nvtx.push_back(sr);
    now = std::max(now, gpu_main - 20'000);  // the host runs a little ahead of the GPU
  }
  t.finalize();
  return t;
}

Trace make_sample_trace() {
  Trace t;
  const Ns T = 1'700'000'000'000'000'000;  // ns since some epoch, like cuptiGetTimestamp
  const uint32_t pid = 3141, tid = 3141, tid2 = 3142;
  t.session_start_utc_ns = 1'760'000'000'000'000'000;
  t.metadata["tool"] = "streamlab test";
  t.metadata["policy"] = "shared";
  t.counts.dropped = 0;
  t.counts.overhead_records = 1;
  t.counts.buffers = 3;
  t.counts.buffer_bytes = 3 << 20;
  Device d;
  d.id = 0;
  d.name = "NVIDIA H200";
  d.uuid = "GPU-00000000-1111-2222-3333-444444444444";
  d.compute_major = 9;
  d.compute_minor = 0;
  d.sm_count = 132;
  d.total_memory = int64_t(143771) << 20;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.regs_per_block = 65536;
  d.regs_per_sm = 65536;
  d.warp_size = 32;
  d.smem_per_block = 49152;
  d.smem_per_sm = 233472;
  d.smem_per_block_optin = 232448;
  d.l2_cache_size = 52428800;
  d.clock_rate_khz = 1980000;
  d.memory_bandwidth = 4'800'000'000'000;
  t.devices.push_back(d);
  Context c;
  c.id = 1;
  c.device = 0;
  c.pid = pid;
  c.null_stream = 7;
  c.created = T - 5'000'000;
  t.contexts.push_back(c);
  t.processes.push_back({pid, "streamlab \"run\""});
  t.threads.push_back({pid, tid, "main"});
  t.threads.push_back({pid, tid2, "loader\\thread"});
  auto stream = [&](uint32_t id, int prio, Ns created, Ns destroyed, const char* name) {
    Stream s;
    s.id = id;
    s.context = 1;
    s.pid = pid;
    s.priority = prio;
    s.flags = id == 7 ? 1 : 2;
    s.is_null = id == 7;
    s.created = created;
    s.destroyed = destroyed;
    s.name = name ? t.intern(name) : 0;
    t.streams.push_back(s);
  };
  stream(7, 0, kNoTime, kNoTime, "main");
  stream(13, -1, T - 60'000, kNoTime, "aux0");
  stream(14, -1, T - 30'000, T + 900'000, nullptr);
  stream(15, 0, T - 10'000, T + 950'000, "aux.idle");  // created, never used

  uint32_t corr = 100;
  auto api = [&](const char* name, Ns s, Ns e, uint32_t cr, uint32_t cbid, ApiKind kind = ApiKind::Runtime,
                 uint32_t th = 3141) {
    ApiCall a;
    a.start = s;
    a.end = e;
    a.name = t.intern(name);
    a.correlation = cr;
    a.cbid = cbid;
    a.pid = pid;
    a.tid = th;
    a.kind = kind;
    t.api_calls.push_back(a);
  };
  auto kernel = [&](uint32_t stream_id, Ns s, Ns e, const char* name, uint32_t cr) {
    Kernel k;
    k.start = s;
    k.end = e;
    k.stream = stream_id;
    k.name = t.intern(name);
    k.correlation = cr;
    k.context = 1;
    k.pid = pid;
    k.grid[0] = 264;
    k.grid[1] = 2;
    k.block[0] = 128;
    k.block[1] = 2;
    k.registers = 168;
    k.static_smem = 16384;
    k.dynamic_smem = 98304;
    k.queued = s - 9'000;
    k.submitted = s - 4'000;
    t.kernels.push_back(k);
    return t.kernels.size() - 1;
  };
  // Step range and nested layer ranges (push/pop) in the default domain, a start/end range and a
  // mark in the "streamlab" domain.
  auto nvtx = [&](const char* name, Ns s, Ns e, NvtxKind kind, const char* domain, uint32_t th = 3141) {
    NvtxRange r;
    r.start = s;
    r.end = e;
    r.name = t.intern(name);
    r.domain = domain ? t.intern(domain) : 0;
    r.kind = kind;
    r.pid = pid;
    r.tid = th;
    r.end_tid = th;
    r.color = kind == NvtxKind::PushPop ? 0xFF00FF00u : 0;
    r.category = kind == NvtxKind::StartEnd ? 3 : 0;
    t.nvtx.push_back(r);
  };
  nvtx("step", T, T + 400'000, NvtxKind::PushPop, nullptr);
  nvtx("L0", T + 1'000, T + 150'000, NvtxKind::PushPop, nullptr);
  nvtx("L1", T + 150'000, T + 300'000, NvtxKind::PushPop, nullptr);
  nvtx("prefetch", T + 20'000, T + 600'000, NvtxKind::StartEnd, "streamlab", tid2);
  nvtx("fork", T + 2'000, T + 2'000, NvtxKind::Mark, "streamlab");

  // L0: memcpy, fork, main + aux kernels (overlapping), join.
  uint32_t c_cpy = ++corr;
  api("cudaMemcpyAsync_v3020", T + 1'500, T + 4'000, c_cpy, 41);
  Memcpy m;
  m.start = T + 10'000;
  m.end = T + 14'000;
  m.bytes = 4 << 20;
  m.kind = MemcpyKind::HtoD;
  m.src_kind = MemoryKind::Pinned;
  m.dst_kind = MemoryKind::Device;
  m.stream = 7;
  m.context = 1;
  m.pid = pid;
  m.correlation = c_cpy;
  t.memcpys.push_back(m);
  uint32_t c_set = ++corr;
  api("cudaMemsetAsync_v3020", T + 4'500, T + 6'000, c_set, 51);
  Memset z;
  z.start = T + 14'000;  // touches the memcpy
  z.end = T + 15'000;
  z.bytes = 65536;
  z.value = 0;
  z.stream = 7;
  z.context = 1;
  z.pid = pid;
  z.mem_kind = MemoryKind::Device;
  z.correlation = c_set;
  t.memsets.push_back(z);
  uint32_t c_rec = ++corr;
  api("cudaEventRecord_v3020", T + 6'500, T + 7'500, c_rec, 135);
  CudaEventRecord ev;
  ev.ts = T + 15'000;
  ev.correlation = c_rec;
  ev.context = 1;
  ev.stream = 7;
  ev.event = 1;
  ev.pid = pid;
  t.cuda_events.push_back(ev);
  uint32_t c_wait = ++corr;
  api("cudaStreamWaitEvent_v3020", T + 8'000, T + 9'000, c_wait, 147);
  Sync w;
  w.start = T + 15'000;
  w.end = T + 15'000;
  w.correlation = c_wait;
  w.stream = 13;
  w.context = 1;
  w.event = 1;
  w.pid = pid;
  w.type = SyncType::StreamWaitEvent;
  t.syncs.push_back(w);
  uint32_t c1 = ++corr;
  api("cudaLaunchKernel_v7000", T + 10'000, T + 13'000, c1, 211);
  kernel(7, T + 16'000, T + 60'000, "void deepgemm::fp8_gemm<128, 128>(float const*, __nv_bfloat16*, int)", c1);
  uint32_t c2 = ++corr;
  api("cudaLaunchKernel_v7000", T + 14'000, T + 17'000, c2, 211);
  kernel(13, T + 20'000, T + 45'000, "indexer_topk<\"k\\2048\">", c2);
  uint32_t c3 = ++corr;
  api("cuLaunchKernel", T + 18'000, T + 19'500, c3, 307, ApiKind::Driver);
  kernel(14, T + 45'000, T + 70'000, "compressor_kv", c3);  // touches the aux0 kernel's end
  uint32_t c4 = ++corr;
  api("cudaLaunchKernel_v7000", T + 20'000, T + 22'000, c4, 211);
  kernel(7, T + 60'000, T + 61'000, "rmsnorm", c4);  // touches the GEMM
  // Join: main waits on aux0 and aux1.
  for (uint32_t s : {13u, 14u}) {
    uint32_t cr = ++corr;
    api("cudaEventRecord_v3020", T + 23'000, T + 23'500, cr, 135);
    CudaEventRecord e2;
    e2.ts = s == 13 ? T + 45'000 : T + 70'000;
    e2.correlation = cr;
    e2.context = 1;
    e2.stream = s;
    e2.event = 1 + s;
    e2.pid = pid;
    t.cuda_events.push_back(e2);
    uint32_t cw = ++corr;
    api("cudaStreamWaitEvent_v3020", T + 24'000, T + 24'500, cw, 147);
    Sync w2 = w;
    w2.start = w2.end = e2.ts;
    w2.correlation = cw;
    w2.stream = 7;
    w2.event = 1 + s;
    if (s == 14) {  // as a PyTorch (Kineto) trace gives it: the recording stream and record call
      w2.event_stream = s;
      w2.event_record_correlation = cr;
    }
    t.syncs.push_back(w2);
  }
  // L1: a CUDA graph launch: one correlation id, three kernels on two streams.
  uint32_t cg = ++corr;
  api("cudaGraphLaunch_v10000", T + 160'000, T + 170'000, cg, 311);
  for (int i = 0; i < 3; ++i) {
    size_t k = kernel(i == 1 ? 13 : 7, T + 175'000 + i * 20'000, T + 190'000 + i * 20'000, "graph_node_kernel", cg);
    t.kernels[k].graph_id = 9;
    t.kernels[k].graph_node_id = 1000 + i;
    t.kernels[k].queued = kNoTime;
    t.kernels[k].submitted = kNoTime;
  }
  // A kernel on aux0 that starts exactly when the graph's last main-stream kernel ends with no
  // wait between the streams: a suspected false dependency.
  uint32_t cf = ++corr;
  api("cudaLaunchKernel_v7000", T + 172'000, T + 174'000, cf, 211);
  kernel(13, T + 230'000, T + 240'000, "late_aux", cf);
  // Host syncs of every type.
  uint32_t cs = ++corr;
  api("cudaStreamSynchronize_v3020", T + 250'000, T + 260'000, cs, 131);
  Sync s1;
  s1.start = T + 250'500;
  s1.end = T + 259'500;
  s1.correlation = cs;
  s1.stream = 7;
  s1.context = 1;
  s1.pid = pid;
  s1.type = SyncType::StreamSynchronize;
  t.syncs.push_back(s1);
  uint32_t ce = ++corr;
  api("cudaEventSynchronize_v3020", T + 261'000, T + 262'000, ce, 138);
  Sync s2 = s1;
  s2.start = T + 261'100;
  s2.end = T + 261'900;
  s2.correlation = ce;
  s2.stream = kNoStream;
  s2.event = 15;
  s2.type = SyncType::EventSynchronize;
  t.syncs.push_back(s2);
  uint32_t cd = ++corr;
  api("cudaDeviceSynchronize_v3020", T + 263'000, T + 270'000, cd, 165);
  Sync s3 = s1;
  s3.start = T + 263'100;
  s3.end = T + 269'900;
  s3.correlation = cd;
  s3.stream = kNoStream;
  s3.type = SyncType::ContextSynchronize;
  t.syncs.push_back(s3);
  // An API call on the second thread, inside the start/end range.
  api("cudaMalloc_v3020", T + 30'000, T + 80'000, ++corr, 20, ApiKind::Runtime, tid2);
  // Allocations: one freed inside the window, one not.
  Allocation a1;
  a1.address = 0x7f1200000000ull;
  a1.bytes = 64 << 20;
  a1.alloc = T + 40'000;
  a1.free = T + 350'000;
  a1.correlation = corr;
  a1.context = 1;
  a1.pid = pid;
  t.allocations.push_back(a1);
  Allocation a2 = a1;
  a2.address = 0x7f1300000000ull;
  a2.bytes = 8 << 20;
  a2.alloc = T + 100'000;
  a2.free = kNoTime;
  a2.stream = 13;
  a2.from_pool = 1;
  t.allocations.push_back(a2);
  CounterSample cnt;
  cnt.ts = T + 5'000;
  cnt.value = 0.25;
  cnt.name = t.intern("SM occupancy");
  cnt.pid = 0;
  t.counters.push_back(cnt);
  cnt.ts = T + 200'000;
  cnt.value = 0.875;
  t.counters.push_back(cnt);
  Overhead ov;
  ov.start = T + 300'000;
  ov.end = T + 301'500;
  ov.kind = 1;
  ov.object_kind = 2;
  ov.object_id = tid;
  ov.pid = pid;
  t.overheads.push_back(ov);
  t.base_time = T;
  t.finalize();
  return t;
}

}  // namespace sl::prof
