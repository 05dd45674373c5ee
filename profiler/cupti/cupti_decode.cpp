#include "profiler/cupti/cupti_decode.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

namespace sl::prof {

const std::vector<std::string>& noisy_runtime_api_names() {
  static const std::vector<std::string> names = {
      "cudaGetDevice",          "cudaSetDevice",           "cudaGetLastError",        "cudaPeekAtLastError",
      "cudaGetDeviceCount",     "cudaDeviceGetAttribute",  "cudaGetDeviceProperties", "cudaDriverGetVersion",
      "cudaRuntimeGetVersion",  "cudaStreamIsCapturing",   "cudaStreamGetCaptureInfo", "cudaPointerGetAttributes",
      "cudaFuncGetAttributes",  "cudaThreadExchangeStreamCaptureMode", "cudaGetFuncBySymbol",
      "cudaDeviceGetStreamPriorityRange", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
      "cudaStreamGetPriority",  "cudaStreamGetFlags",      "cudaEventQuery",          "cudaStreamQuery",
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
      "cudaFuncSetAttribute",   "cudaDeviceGetLimit",      "cudaMemGetInfo",          "cudaGetExportTable"};
  return names;
}

CuptiDecoder::CuptiDecoder(Trace& t, DecodeOptions o) : t_(t), o_(o) {
  if (o_.filter_noisy_api)
    for (const auto& n : noisy_runtime_api_names()) noisy_.insert(n);
}

bool CuptiDecoder::discard_warmup(Ns start) {
  if (o_.window_start != kNoTime && start < o_.window_start) {
    t_.counts.warmup_discarded++;
    return true;
  }
  return false;
}

bool CuptiDecoder::check_times(Ns start, Ns end) {
  if (start == 0 || end == 0) {
    t_.counts.zero_timestamps++;
    return false;
  }
  if (end < start) t_.counts.end_before_start++;
  return true;
}

StrId CuptiDecoder::kernel_name(const char* name) {
  if (!name) {
    t_.counts.invalid_records++;
    return t_.intern("(unnamed kernel)");
  }
  auto it = name_cache_.find(name);
  if (it != name_cache_.end()) return it->second;
  StrId id;
  int status = -1;
  char* dem = o_.demangle ? abi::__cxa_demangle(name, nullptr, nullptr, &status) : nullptr;
  if (dem && status == 0)
    id = t_.intern(dem);
  else
    id = t_.intern(name);
  std::free(dem);
  name_cache_.emplace(name, id);
  return id;
}

StrId CuptiDecoder::api_name(ApiKind kind, uint32_t cbid) {
  uint64_t key = (uint64_t(kind) << 32) | cbid;
  auto it = api_cache_.find(key);
  if (it != api_cache_.end()) return it->second;
  const char* n = o_.api_name ? o_.api_name(kind, cbid) : nullptr;
  std::string s = n ? std::string(n)
                    : (kind == ApiKind::Runtime ? "cudaRuntime_cbid" : "cuDriver_cbid") + std::to_string(cbid);
  StrId id = (kind == ApiKind::Runtime && noisy_.count(std::string(strip_api_version(s)))) ? kNoId : t_.intern(s);
  api_cache_.emplace(key, id);
  return id;
}

Stream& CuptiDecoder::stream(uint32_t context, uint32_t id) {
  if (Stream* s = t_.find_stream(id)) return *s;
  Stream s;
  s.id = id;
  s.context = context;
  s.pid = o_.pid;
  for (const auto& c : t_.contexts)
    if (c.id == context) s.device = c.device;
  auto nm = stream_names_.find((uint64_t(context) << 32) | id);
  if (nm != stream_names_.end()) s.name = t_.intern(nm->second);
  t_.streams.push_back(s);
  return t_.streams.back();
}

void CuptiDecoder::decode(const CUpti_Activity* r) {
  if (!r) {
    t_.counts.invalid_records++;
    return;
  }
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_KERNEL:
      // Serializing kernel tracing erases the overlap streamlab measures; never enabled.
      t_.counts.invalid_records++;
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      memset(*reinterpret_cast<const CUpti_ActivityMemset4*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      api(*reinterpret_cast<const CUpti_ActivityAPI*>(r), ApiKind::Runtime);
      break;
    case CUPTI_ACTIVITY_KIND_DRIVER:
      api(*reinterpret_cast<const CUpti_ActivityAPI*>(r), ApiKind::Driver);
      break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      sync(*reinterpret_cast<const CUpti_ActivitySynchronization2*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_CUDA_EVENT:
      cuda_event(*reinterpret_cast<const CUpti_ActivityCudaEvent2*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      memory(*reinterpret_cast<const CUpti_ActivityMemory4*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_MARKER:
      marker(*reinterpret_cast<const CUpti_ActivityMarker2*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_MARKER_DATA:
      marker_data(*reinterpret_cast<const CUpti_ActivityMarkerData2*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_NAME:
      name(*reinterpret_cast<const CUpti_ActivityName*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      overhead(*reinterpret_cast<const CUpti_ActivityOverhead3*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_CONTEXT:
      context(*reinterpret_cast<const CUpti_ActivityContext3*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_DEVICE:
      device(*reinterpret_cast<const CUpti_ActivityDevice5*>(r));
      break;
    case CUPTI_ACTIVITY_KIND_STREAM:
      stream_record(*reinterpret_cast<const CUpti_ActivityStream*>(r));
      break;
    default:
      t_.counts.unknown_kinds++;
      break;
  }
}

size_t CuptiDecoder::decode_buffer(uint8_t* buffer, size_t valid_size, NextRecordFn next) {
  size_t n = 0;
  CUpti_Activity* rec = nullptr;
  t_.counts.buffers++;
  t_.counts.buffer_bytes += valid_size;
  while (true) {
    CUptiResult r = next(buffer, valid_size, &rec);
    if (r == CUPTI_SUCCESS) {
      decode(rec);
      ++n;
    } else {
      if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) t_.counts.invalid_records++;  // a corrupt buffer ends here
      break;
    }
  }
  return n;
}

void CuptiDecoder::kernel(const CUpti_ActivityKernel10& r) {
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  Kernel k;
  k.start = s;
  k.end = e;
  k.queued = r.queued ? Ns(r.queued) : kNoTime;
  k.submitted = r.submitted ? Ns(r.submitted) : kNoTime;
  k.graph_node_id = r.graphNodeId;
  k.graph_id = r.graphId;
  k.name = kernel_name(r.name);
  k.correlation = r.correlationId;
  k.stream = r.streamId;
  k.context = r.contextId;
  k.device = uint16_t(r.deviceId);
  k.pid = o_.pid;
  k.grid[0] = uint32_t(r.gridX);
  k.grid[1] = uint32_t(r.gridY);
  k.grid[2] = uint32_t(r.gridZ);
  k.block[0] = uint16_t(r.blockX);
  k.block[1] = uint16_t(r.blockY);
  k.block[2] = uint16_t(r.blockZ);
  k.registers = r.registersPerThread;
  k.launch_type = r.launchType;
  k.static_smem = uint32_t(r.staticSharedMemory);
  k.dynamic_smem = uint32_t(r.dynamicSharedMemory);
  if (r.gridX <= 0 || r.blockX <= 0) t_.counts.invalid_records++;
  stream(r.contextId, r.streamId).device = r.deviceId;
  t_.kernels.push_back(k);
}

void CuptiDecoder::memcpy(const CUpti_ActivityMemcpy6& r) {
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  Memcpy m;
  m.start = s;
  m.end = e;
  m.bytes = r.bytes;
  m.graph_node_id = r.graphNodeId;
  m.graph_id = r.graphId;
  m.correlation = r.correlationId;
  m.stream = r.streamId;
  m.context = r.contextId;
  m.device = uint16_t(r.deviceId);
  m.pid = o_.pid;
  m.kind = r.copyKind <= 10 ? MemcpyKind(r.copyKind) : MemcpyKind::Unknown;
  m.src_kind = r.srcKind <= 7 ? MemoryKind(r.srcKind) : MemoryKind::Unknown;
  m.dst_kind = r.dstKind <= 7 ? MemoryKind(r.dstKind) : MemoryKind::Unknown;
  m.flags = r.flags;
  stream(r.contextId, r.streamId).device = r.deviceId;
  t_.memcpys.push_back(m);
}

void CuptiDecoder::memset(const CUpti_ActivityMemset4& r) {
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  Memset m;
  m.start = s;
  m.end = e;
  m.bytes = r.bytes;
  m.value = r.value;
  m.graph_node_id = r.graphNodeId;
  m.graph_id = r.graphId;
  m.correlation = r.correlationId;
  m.stream = r.streamId;
  m.context = r.contextId;
  m.device = uint16_t(r.deviceId);
  m.pid = o_.pid;
  m.mem_kind = r.memoryKind <= 7 ? MemoryKind(r.memoryKind) : MemoryKind::Unknown;
  m.flags = uint8_t(r.flags);
  stream(r.contextId, r.streamId).device = r.deviceId;
  t_.memsets.push_back(m);
}

void CuptiDecoder::api(const CUpti_ActivityAPI& r, ApiKind kind) {
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  StrId n = api_name(kind, r.cbid);
  if (n == kNoId) return;  // filtered
  ApiCall a;
  a.start = s;
  a.end = e;
  a.name = n;
  a.cbid = r.cbid;
  a.correlation = r.correlationId;
  a.pid = r.processId;
  a.tid = r.threadId;
  a.return_value = int32_t(r.returnValue);
  a.kind = kind;
  t_.api_calls.push_back(a);
}

void CuptiDecoder::sync(const CUpti_ActivitySynchronization2& r) {
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  Sync y;
  y.start = s;
  y.end = e;
  y.correlation = r.correlationId;
  y.stream = r.streamId;  // CUPTI_SYNCHRONIZATION_INVALID_VALUE == kNoStream for context syncs
  y.context = r.contextId;
  y.event = r.cudaEventId;
  y.pid = o_.pid;
  y.type = uint32_t(r.type) <= 4 ? SyncType(r.type) : SyncType::Unknown;
  for (const auto& c : t_.contexts)
    if (c.id == r.contextId) y.device = uint16_t(c.device);
  t_.syncs.push_back(y);
}

void CuptiDecoder::cuda_event(const CUpti_ActivityCudaEvent2& r) {
  Ns ts = r.deviceTimestamp ? Ns(r.deviceTimestamp) : kNoTime;
  if (ts != kNoTime && discard_warmup(ts)) return;
  CudaEventRecord e;
  e.ts = ts;
  e.correlation = r.correlationId;
  e.context = r.contextId;
  e.stream = r.streamId;
  e.event = r.eventId;
  e.device = uint16_t(r.deviceId);
  e.pid = o_.pid;
  t_.cuda_events.push_back(e);
}

void CuptiDecoder::memory(const CUpti_ActivityMemory4& r) {
  Ns ts = Ns(r.timestamp);
  if (ts == 0) {
    t_.counts.zero_timestamps++;
    return;
  }
  if (r.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
      r.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
    t_.counts.invalid_records++;
    return;
  }
  MemRec m;
  m.ts = ts;
  m.address = r.address;
  m.bytes = r.bytes;
  m.correlation = r.correlationId;
  m.context = r.contextId;
  m.stream = r.streamId;
  m.pid = r.processId ? r.processId : o_.pid;
  m.device = uint16_t(r.deviceId);
  m.kind = uint32_t(r.memoryKind) <= 7 ? MemoryKind(r.memoryKind) : MemoryKind::Unknown;
  m.release = r.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  m.pool = r.memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID;
  memory_.push_back(m);
}

void CuptiDecoder::marker(const CUpti_ActivityMarker2& r) {
  Ns ts = Ns(r.timestamp);
  if (ts == 0) {
    t_.counts.zero_timestamps++;
    return;
  }
  uint32_t pid = o_.pid, tid = 0;
  if (r.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || r.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS) {
    pid = r.objectId.pt.processId;
    tid = r.objectId.pt.threadId;
  }
  if (r.flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
    if (discard_warmup(ts)) return;
    NvtxRange n;
    n.start = n.end = ts;
    n.name = t_.intern(r.name ? r.name : "");
    n.domain = r.domain && *r.domain ? t_.intern(r.domain) : 0;
    n.kind = NvtxKind::Mark;
    n.pid = pid;
    n.tid = n.end_tid = tid;
    t_.nvtx.push_back(n);
    return;
  }
  if (r.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
    MarkerStart st{ts, t_.intern(r.name ? r.name : ""), r.domain && *r.domain ? t_.intern(r.domain) : StrId(0), pid, tid};
    auto early = early_ends_.find(r.id);
    if (early != early_ends_.end()) {
      // The end arrived first (out-of-order buffers).
      open_markers_[r.id] = st;
      MarkerEnd e = early->second;
      early_ends_.erase(early);
      CUpti_ActivityMarker2 end_rec{};
      end_rec.kind = CUPTI_ACTIVITY_KIND_MARKER;
      end_rec.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
      end_rec.timestamp = uint64_t(e.ts);
      end_rec.id = r.id;
      end_rec.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
      end_rec.objectId.pt.processId = e.pid;
      end_rec.objectId.pt.threadId = e.tid;
      marker(end_rec);
      return;
    }
    open_markers_[r.id] = st;
    return;
  }
  if (r.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
    auto it = open_markers_.find(r.id);
    if (it == open_markers_.end()) {
      early_ends_[r.id] = {ts, pid, tid};
      return;
    }
    MarkerStart st = it->second;
    open_markers_.erase(it);
    if (discard_warmup(st.ts)) return;
    NvtxRange n;
    n.start = st.ts;
    n.end = ts;
    if (n.end < n.start) t_.counts.end_before_start++;
    n.name = st.name;
    n.domain = st.domain;
    n.pid = st.pid;
    n.tid = st.tid;
    n.end_tid = tid;
    // CUPTI does not tell push/pop from start/end ranges: a range that ends on its own thread is
    // treated as push/pop (nesting depth computed by Trace::finalize).
    n.kind = tid == st.tid ? NvtxKind::PushPop : NvtxKind::StartEnd;
    auto d = marker_data_.find(r.id);
    if (d != marker_data_.end()) {
      n.color = d->second.first;
      n.category = d->second.second;
      marker_data_.erase(d);
    }
    closed_markers_[r.id] = t_.nvtx.size();
    t_.nvtx.push_back(n);
    return;
  }
  // Sync markers (acquire / release) are not ranges streamlab uses.
}

void CuptiDecoder::marker_data(const CUpti_ActivityMarkerData2& r) {
  // Data may arrive before or after its range was closed.
  auto c = closed_markers_.find(r.id);
  if (c != closed_markers_.end()) {
    t_.nvtx[c->second].color = r.color;
    t_.nvtx[c->second].category = r.category;
    return;
  }
  marker_data_[r.id] = {r.color, r.category};
}

void CuptiDecoder::name(const CUpti_ActivityName& r) {
  if (!r.name) return;
  if (r.objectKind == CUPTI_ACTIVITY_OBJECT_STREAM) {
    uint32_t ctx = r.objectId.dcs.contextId, id = r.objectId.dcs.streamId;
    stream_names_[(uint64_t(ctx) << 32) | id] = r.name;
    stream(ctx, id).name = t_.intern(r.name);
  } else if (r.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) {
    t_.threads.push_back({r.objectId.pt.processId, r.objectId.pt.threadId, r.name});
  } else if (r.objectKind == CUPTI_ACTIVITY_OBJECT_DEVICE) {
    for (auto& d : t_.devices)
      if (d.id == r.objectId.dcs.deviceId && d.name.empty()) d.name = r.name;
  }
}

void CuptiDecoder::overhead(const CUpti_ActivityOverhead3& r) {
  t_.counts.overhead_records++;
  Ns s = Ns(r.start), e = Ns(r.end);
  if (!check_times(s, e) || discard_warmup(s)) return;
  Overhead o;
  o.start = s;
  o.end = e;
  o.kind = uint32_t(r.overheadKind);
  o.object_kind = uint32_t(r.objectKind);
  o.object_id = (r.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || r.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS)
                    ? r.objectId.pt.threadId
                    : r.objectId.dcs.deviceId;
  o.pid = (r.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || r.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS)
              ? r.objectId.pt.processId
              : o_.pid;
  t_.overheads.push_back(o);
}

void CuptiDecoder::context(const CUpti_ActivityContext3& r) {
  for (auto& c : t_.contexts)
    if (c.id == r.contextId) {
      c.device = r.deviceId;
      c.null_stream = r.nullStreamId;
      return;
    }
  Context c;
  c.id = r.contextId;
  c.device = r.deviceId;
  c.pid = o_.pid;
  c.null_stream = r.nullStreamId;
  t_.contexts.push_back(c);
  stream(r.contextId, r.nullStreamId).is_null = 1;
}

void CuptiDecoder::device(const CUpti_ActivityDevice5& r) {
  Device* d = nullptr;
  for (auto& x : t_.devices)
    if (x.id == r.id) d = &x;
  if (!d) {
    t_.devices.emplace_back();
    d = &t_.devices.back();
    d->id = r.id;
  }
  if (r.name) d->name = r.name;
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(r.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d->uuid = uuid;
  d->compute_major = int(r.computeCapabilityMajor);
  d->compute_minor = int(r.computeCapabilityMinor);
  d->sm_count = int(r.numMultiprocessors);
  d->total_memory = int64_t(r.globalMemorySize);
  d->max_threads_per_block = int(r.maxThreadsPerBlock);
  d->max_threads_per_sm = int(r.maxWarpsPerMultiprocessor * r.numThreadsPerWarp);
  d->regs_per_block = int(r.maxRegistersPerBlock);
  d->regs_per_sm = int(r.maxRegistersPerMultiprocessor);
  d->warp_size = int(r.numThreadsPerWarp);
  d->smem_per_block = r.maxSharedMemoryPerBlock;
  d->smem_per_sm = r.maxSharedMemoryPerMultiprocessor;
  d->l2_cache_size = r.l2CacheSize;
  d->clock_rate_khz = r.coreClockRate;
  d->memory_bandwidth = int64_t(r.globalMemoryBandwidth) * 1000;  // CUPTI: KB/s
}

void CuptiDecoder::stream_record(const CUpti_ActivityStream& r) {
  Stream& s = stream(r.contextId, r.streamId);
  s.priority = int32_t(r.priority);
  s.flags = r.flag == CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING ? 2 : r.flag == CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT ? 1 : 0;
  if (r.flag == CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL) s.is_null = 1;
}

void CuptiDecoder::on_context_created(uint32_t ctx, uint32_t device, Ns ts) {
  for (auto& c : t_.contexts)
    if (c.id == ctx) {
      c.created = ts;
      c.device = device;
      return;
    }
  Context c;
  c.id = ctx;
  c.device = device;
  c.pid = o_.pid;
  c.created = ts;
  t_.contexts.push_back(c);
}

void CuptiDecoder::on_context_destroyed(uint32_t ctx, Ns ts) {
  for (auto& c : t_.contexts)
    if (c.id == ctx) c.destroyed = ts;
}

void CuptiDecoder::on_stream_created(uint32_t ctx, uint32_t id, Ns ts) {
  Stream& s = stream(ctx, id);
  s.created = ts;
  s.destroyed = kNoTime;  // stream ids are not reused within a context, but be safe
}

void CuptiDecoder::on_stream_destroyed(uint32_t ctx, uint32_t id, Ns ts) { stream(ctx, id).destroyed = ts; }

void CuptiDecoder::finish(Ns window_end) {
  // Markers still open at the end of the window: keep them open to the window end.
  for (auto& [id, st] : open_markers_) {
    if (discard_warmup(st.ts)) continue;
    NvtxRange n;
    n.start = st.ts;
    n.end = window_end != kNoTime ? std::max(window_end, st.ts) : st.ts;
    n.name = st.name;
    n.domain = st.domain;
    n.pid = st.pid;
    n.tid = n.end_tid = st.tid;
    n.kind = NvtxKind::StartEnd;
    t_.nvtx.push_back(n);
  }
  open_markers_.clear();
  // Ends whose start never arrived (started before tracing or dropped).
  t_.counts.invalid_records += early_ends_.size();
  early_ends_.clear();
  marker_data_.clear();
  closed_markers_.clear();

  // Allocations: pair ALLOCATION / RELEASE records by (pid, address) in time order.
  std::stable_sort(memory_.begin(), memory_.end(), [](const MemRec& a, const MemRec& b) {
    return a.ts < b.ts || (a.ts == b.ts && a.release && !b.release);
  });
  std::map<std::pair<uint32_t, uint64_t>, size_t> live;
  for (const MemRec& m : memory_) {
    auto key = std::make_pair(m.pid, m.address);
    if (!m.release) {
      if (o_.window_start != kNoTime && m.ts < o_.window_start) {
        // Allocated during warm-up: remember it (a release in the window closes it) but mark it
        // as allocated before the window.
        Allocation a;
        a.address = m.address;
        a.bytes = m.bytes;
        a.alloc = kNoTime;
        a.correlation = m.correlation;
        a.context = m.context;
        a.stream = m.stream;
        a.pid = m.pid;
        a.device = m.device;
        a.kind = m.kind;
        a.from_pool = m.pool;
        live[key] = t_.allocations.size();
        t_.allocations.push_back(a);
        continue;
      }
      Allocation a;
      a.address = m.address;
      a.bytes = m.bytes;
      a.alloc = m.ts;
      a.correlation = m.correlation;
      a.context = m.context;
      a.stream = m.stream;
      a.pid = m.pid;
      a.device = m.device;
      a.kind = m.kind;
      a.from_pool = m.pool;
      live[key] = t_.allocations.size();
      t_.allocations.push_back(a);
    } else {
      auto it = live.find(key);
      if (it != live.end()) {
        t_.allocations[it->second].free = m.ts;
        live.erase(it);
      } else if (o_.window_start == kNoTime || m.ts >= o_.window_start) {
        Allocation a;  // allocated before tracing started
        a.address = m.address;
        a.bytes = m.bytes;
        a.alloc = kNoTime;
        a.free = m.ts;
        a.pid = m.pid;
        a.device = m.device;
        a.context = m.context;
        a.kind = m.kind;
        t_.allocations.push_back(a);
      }
    }
  }
  // Warm-up allocations released during the warm-up leave no trace.
  t_.allocations.erase(std::remove_if(t_.allocations.begin(), t_.allocations.end(),
                                      [&](const Allocation& a) {
                                        return a.alloc == kNoTime && a.free != kNoTime && o_.window_start != kNoTime &&
                                               a.free < o_.window_start;
                                      }),
                       t_.allocations.end());
  memory_.clear();
  if (o_.window_start != kNoTime && t_.base_time == kNoTime) t_.base_time = o_.window_start;
  t_.finalize();
}

}  // namespace sl::prof
