#include "profiler/cupti/cupti_session.h"

#include <cerrno>
#include <cstdio>

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "profiler/cupti/cupti_decode.h"

namespace sl::prof {

namespace {

void cupti_check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  fail("CUPTI call ", call, " failed: ", s ? s : "unknown error", " (CUptiResult ", int(r), ")");
}
#define SL_CUPTI(call) cupti_check((call), #call)

void cuda_check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
    fail(call, " failed: ", cudaGetErrorString(e), " (no usable GPU: streamlab can trace only on a machine with one)");
  fail(call, " failed: ", cudaGetErrorString(e));
}

const char* api_name_of(ApiKind kind, uint32_t cbid) {
  const char* name = nullptr;
  CUpti_CallbackDomain d = kind == ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  if (cuptiGetCallbackName(d, cbid, &name) != CUPTI_SUCCESS) return nullptr;
  return name;
}

Ns now_ns() {
  uint64_t ts = 0;
  SL_CUPTI(cuptiGetTimestamp(&ts));
  return Ns(ts);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiSession::instance().on_buffer_requested(buffer, size, max_records);
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  CuptiSession::instance().on_buffer_completed(ctx, stream, buffer, size, valid);
}

void CUPTIAPI resource_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) CuptiSession::instance().on_resource(cbid, data);
}

}  // namespace

struct CuptiSession::Impl {
  SessionOptions opts;
  std::mutex mu;  // guards everything below (CUPTI calls the callbacks from its own threads)
  std::vector<uint8_t*> free_buffers;
  size_t allocated = 0;
  uint64_t pool_exhausted = 0;
  std::unique_ptr<Trace> trace;
  std::unique_ptr<CuptiDecoder> decoder;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::string callback_error;  // first error inside a callback (cannot throw through CUPTI)
  Ns window_start = kNoTime;
  std::vector<CUpti_ActivityKind> enabled;

  void new_decoder(Ns window) {
    auto t = std::make_unique<Trace>();
    if (trace) {
      // Keep what the window cannot re-learn: devices, contexts, streams, thread names.
      t->devices = trace->devices;
      t->contexts = trace->contexts;
      for (const auto& s : trace->streams) {
        Stream c = s;
        c.name = s.name ? t->intern(trace->str(s.name)) : 0;
        t->streams.push_back(c);
      }
      t->threads = trace->threads;
      t->processes = trace->processes;
    }
    DecodeOptions d;
    d.pid = uint32_t(getpid());
    d.window_start = window;
    d.api_name = &api_name_of;
    trace = std::move(t);
    decoder = std::make_unique<CuptiDecoder>(*trace, d);
  }
};

CuptiSession& CuptiSession::instance() {
  static CuptiSession s;
  return s;
}

std::string CuptiSession::cupti_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiGetTimestamp), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

void CuptiSession::reexec_with_nvtx_injection(char** argv, const char* program) {
  if (nvtx_injection_configured() || std::getenv("STREAMLAB_NO_REEXEC") || !argv) return;
  const std::string lib = cupti_library_path();
  if (lib.empty()) return;
  setenv("NVTX_INJECTION64_PATH", lib.c_str(), 1);
  setenv("STREAMLAB_NO_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "%s: warning: could not re-execute with NVTX_INJECTION64_PATH (%s); NVTX ranges will be "
                       "missing from the trace\n", program, std::strerror(errno));
}

bool CuptiSession::nvtx_injection_configured() {
  const char* p = std::getenv("NVTX_INJECTION64_PATH");
  return p && *p;
}

SessionState CuptiSession::start(const SessionOptions& opts) {
  if (state_ != SessionState::Off) return state_;
  impl_ = std::make_unique<Impl>();
  impl_->opts = opts;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->new_decoder(kNoTime);
    impl_->trace->processes.push_back({uint32_t(getpid()), "streamlab"});
  }

  // The resource subscriber first: it is where another tool's subscription shows up.
  CUptiResult r = cuptiSubscribe(&impl_->subscriber, reinterpret_cast<CUpti_CallbackFunc>(&resource_callback), nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    state_ = SessionState::NvtxOnly;
    message_ =
        "another CUPTI subscriber is active in this process (running under nsys or ncu?): streamlab's own CUPTI "
        "tracing is off; the program still emits its NVTX ranges, which that tool records";
    impl_->subscriber = nullptr;
    return state_;
  }
  if (r != CUPTI_SUCCESS) {
    const char* rs = nullptr;
    cuptiGetResultString(r, &rs);
    fail("CUPTI call cuptiSubscribe(resource callbacks) failed: ", rs ? rs : "unknown error", " (CUptiResult ", int(r),
         "); CUPTI cannot start without a GPU and its driver");
  }
  SL_CUPTI(cuptiEnableDomain(1, impl_->subscriber, CUPTI_CB_DOMAIN_RESOURCE));

  // Latency timestamps must be requested before CUDA initializes.
  if (opts.latency_timestamps) SL_CUPTI(cuptiActivityEnableLatencyTimestamps(1));

  static bool callbacks_registered = false;  // once per process, never per session
  if (!callbacks_registered) {
    SL_CUPTI(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
    callbacks_registered = true;
  }
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    for (size_t i = 0; i < opts.preallocated_buffers && i < opts.max_buffers; ++i) {
      auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, opts.buffer_bytes));
      if (!b) fail("cannot allocate ", opts.buffer_bytes, " bytes for a CUPTI buffer");
      impl_->free_buffers.push_back(b);
      impl_->allocated++;
    }
  }

  auto enable = [&](CUpti_ActivityKind kind, const char* name, bool optional) {
    CUptiResult e = cuptiActivityEnable(kind);
    if (e == CUPTI_SUCCESS) {
      impl_->enabled.push_back(kind);
      return;
    }
    if (optional && (e == CUPTI_ERROR_NOT_COMPATIBLE || e == CUPTI_ERROR_NOT_SUPPORTED || e == CUPTI_ERROR_INVALID_KIND)) {
      message_ += std::string(message_.empty() ? "" : "; ") + name + " records not available on this system";
      return;
    }
    if (e == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      state_ = SessionState::NvtxOnly;
      message_ = "another CUPTI client holds the activity API (running under nsys or ncu?): streamlab's own CUPTI "
                 "tracing is off; the program still emits its NVTX ranges";
      return;
    }
    std::string call = std::string("cuptiActivityEnable(") + name + ")";
    cupti_check(e, call.c_str());
  };
  enable(CUPTI_ACTIVITY_KIND_DEVICE, "CUPTI_ACTIVITY_KIND_DEVICE", true);
  enable(CUPTI_ACTIVITY_KIND_CONTEXT, "CUPTI_ACTIVITY_KIND_CONTEXT", true);
  enable(CUPTI_ACTIVITY_KIND_STREAM, "CUPTI_ACTIVITY_KIND_STREAM", true);
  enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", false);
  enable(CUPTI_ACTIVITY_KIND_MEMCPY, "CUPTI_ACTIVITY_KIND_MEMCPY", false);
  enable(CUPTI_ACTIVITY_KIND_MEMSET, "CUPTI_ACTIVITY_KIND_MEMSET", false);
  if (opts.runtime_api) enable(CUPTI_ACTIVITY_KIND_RUNTIME, "CUPTI_ACTIVITY_KIND_RUNTIME", false);
  if (opts.driver_api) enable(CUPTI_ACTIVITY_KIND_DRIVER, "CUPTI_ACTIVITY_KIND_DRIVER", false);
  enable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", true);
  if (opts.cuda_events) enable(CUPTI_ACTIVITY_KIND_CUDA_EVENT, "CUPTI_ACTIVITY_KIND_CUDA_EVENT", true);
  if (opts.memory) enable(CUPTI_ACTIVITY_KIND_MEMORY2, "CUPTI_ACTIVITY_KIND_MEMORY2", true);
  if (opts.nvtx) {
    enable(CUPTI_ACTIVITY_KIND_MARKER, "CUPTI_ACTIVITY_KIND_MARKER", true);
    enable(CUPTI_ACTIVITY_KIND_MARKER_DATA, "CUPTI_ACTIVITY_KIND_MARKER_DATA", true);
    enable(CUPTI_ACTIVITY_KIND_NAME, "CUPTI_ACTIVITY_KIND_NAME", true);
  }
  enable(CUPTI_ACTIVITY_KIND_OVERHEAD, "CUPTI_ACTIVITY_KIND_OVERHEAD", true);
  if (state_ == SessionState::NvtxOnly) {
    for (auto k : impl_->enabled) cuptiActivityDisable(k);  // best effort: we are not tracing
    return state_;
  }

  // Noisy runtime calls: disabled at the source.
  for (uint32_t cbid = 1; opts.runtime_api && cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name) continue;
    std::string base(strip_api_version(name));
    for (const auto& n : noisy_runtime_api_names())
      if (n == base) {
        std::string call = "cuptiActivityEnableRuntimeApi(" + std::string(name) + ", 0)";
        cupti_check(cuptiActivityEnableRuntimeApi(cbid, 0), call.c_str());
      }
  }
  if (opts.nvtx && !nvtx_injection_configured())
    message_ += std::string(message_.empty() ? "" : "; ") +
                "NVTX_INJECTION64_PATH is not set: NVTX ranges will not reach CUPTI (set it to " +
                cupti_library_path() + ")";
  state_ = SessionState::Tracing;
  return state_;
}

void CuptiSession::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  Impl* im = impl_.get();
  if (!im) {
    *buffer = nullptr;
    *size = 0;
    return;
  }
  std::lock_guard<std::mutex> lk(im->mu);
  if (im->free_buffers.empty() && im->allocated < im->opts.max_buffers) {
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, im->opts.buffer_bytes));
    if (b) {
      im->free_buffers.push_back(b);
      im->allocated++;
    }
  }
  if (im->free_buffers.empty()) {
    // The cap is reached: CUPTI drops records until a buffer comes back (counted as dropped).
    im->pool_exhausted++;
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = im->free_buffers.back();
  im->free_buffers.pop_back();
  *size = im->opts.buffer_bytes;
}

void CuptiSession::on_buffer_completed(void* ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Impl* im = impl_.get();
  if (!im || !buffer) return;
  std::lock_guard<std::mutex> lk(im->mu);
  if (valid > 0) im->decoder->decode_buffer(buffer, valid, &cuptiActivityGetNextRecord);
  size_t dropped = 0;
  CUptiResult r = cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(ctx), stream, &dropped);
  if (r != CUPTI_SUCCESS && im->callback_error.empty()) {
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    im->callback_error = std::string("CUPTI call cuptiActivityGetNumDroppedRecords failed: ") + (s ? s : "?");
  }
  im->decoder->add_dropped(dropped);
  im->free_buffers.push_back(buffer);
}

void CuptiSession::on_resource(uint32_t cbid, const void* data) {
  Impl* im = impl_.get();
  if (!im || !data) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  uint64_t ts = 0;
  uint32_t ctx = 0, dev = 0, sid = 0;
  auto note = [&](CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return true;
    std::lock_guard<std::mutex> lk(im->mu);
    if (im->callback_error.empty()) {
      const char* s = nullptr;
      cuptiGetResultString(r, &s);
      im->callback_error = std::string("CUPTI call ") + call + " failed in the resource callback: " + (s ? s : "?");
    }
    return false;
  };
  if (!note(cuptiGetTimestamp(&ts), "cuptiGetTimestamp")) return;
  if (!note(cuptiGetContextId(rd->context, &ctx), "cuptiGetContextId")) return;
  std::lock_guard<std::mutex> lk(im->mu);
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_CONTEXT_CREATED:
      if (cuptiGetDeviceId(rd->context, &dev) != CUPTI_SUCCESS) dev = 0;
      im->decoder->on_context_created(ctx, dev, Ns(ts));
      break;
    case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
      im->decoder->on_context_destroyed(ctx, Ns(ts));
      break;
    case CUPTI_CBID_RESOURCE_STREAM_CREATED:
      if (cuptiGetStreamIdEx(rd->context, rd->resourceHandle.stream, 0, &sid) == CUPTI_SUCCESS)
        im->decoder->on_stream_created(ctx, sid, Ns(ts));
      break;
    case CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING:
      if (cuptiGetStreamIdEx(rd->context, rd->resourceHandle.stream, 0, &sid) == CUPTI_SUCCESS)
        im->decoder->on_stream_destroyed(ctx, sid, Ns(ts));
      break;
    default:
      break;
  }
}

void CuptiSession::begin_window() {
  if (state_ != SessionState::Tracing) return;
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (end of warm-up)");
  SL_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  Ns start = now_ns();
  std::lock_guard<std::mutex> lk(impl_->mu);
  uint64_t discarded = impl_->trace->event_count();
  RecordCounts before = impl_->trace->counts;
  impl_->new_decoder(start);
  impl_->trace->counts.warmup_discarded = before.warmup_discarded + discarded;
  impl_->trace->counts.dropped = before.dropped;  // drops during warm-up still matter
  impl_->window_start = start;
}

Trace CuptiSession::end_window() {
  if (state_ != SessionState::Tracing) fail("CUPTI tracing is not active: ", message_.empty() ? "start() was not called" : message_);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (end of the traced window)");
  SL_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  Ns end = now_ns();
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (!impl_->callback_error.empty()) fail(impl_->callback_error);
  impl_->trace->counts.pool_exhausted += impl_->pool_exhausted;
  impl_->pool_exhausted = 0;
  impl_->decoder->finish(end);
  Trace out = std::move(*impl_->trace);
  out.metadata["cupti_library"] = cupti_library_path();
  out.metadata["nvtx_injection"] = nvtx_injection_configured() ? "on" : "off";
  // Ready for another window.
  impl_->trace = std::make_unique<Trace>();
  impl_->trace->devices = out.devices;
  impl_->trace->contexts = out.contexts;
  impl_->trace->threads = out.threads;
  impl_->trace->processes = out.processes;
  for (const auto& s : out.streams) {
    Stream c = s;
    c.name = s.name ? impl_->trace->intern(out.str(s.name)) : 0;
    impl_->trace->streams.push_back(c);
  }
  impl_->new_decoder(end);
  return out;
}

RecordCounts CuptiSession::counts_so_far() {
  if (!impl_) return {};
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->trace->counts;
}

void CuptiSession::stop() {
  if (!impl_) return;
  if (state_ == SessionState::Tracing) {
    for (auto k : impl_->enabled) cuptiActivityDisable(k);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  if (impl_->subscriber) {
    SL_CUPTI(cuptiUnsubscribe(impl_->subscriber));
    impl_->subscriber = nullptr;
  }
  state_ = SessionState::Off;
  std::lock_guard<std::mutex> lk(impl_->mu);
  for (auto* b : impl_->free_buffers) std::free(b);
  impl_->free_buffers.clear();
}

}  // namespace sl::prof
