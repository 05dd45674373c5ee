// CudaBackend: the arena, streams (each with its cuBLAS handle and workspace), events, NVTX
// annotations, host <-> device copies, initialisation (init_uniform / fill / copy) and the
// error helpers of cuda_check.h.
#include <cuda_fp8.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/communicator.h"
#include "model/cuda/nccl_communicator.h"
#include "core/rng.h"
#include "model/cuda/cuda_common.cuh"

namespace sl {

// ================================================================ error helpers (cuda_check.h)
namespace cuda {

namespace {
thread_local std::vector<std::string> t_ranges;
}

std::string range_path() {
  std::string s;
  for (const std::string& r : t_ranges) s += (s.empty() ? "" : "/") + r;
  return s;
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("STREAMLAB_CUDA_SYNC");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Process-wide (launch_kernel has no backend at hand): set by each CudaBackend's constructor.
std::atomic<bool> g_pdl{true};
bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_?";
  }
}

static std::string where(const std::string& op) {
  const std::string path = range_path();
  return path.empty() ? op : op + " [" + path + "]";
}

void fail_cuda(const std::string& op, const char* call, cudaError_t e, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  // A kernel fault is sticky and reported by whichever call comes next: say so.
  const bool sticky = e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorIllegalInstruction ||
                      e == cudaErrorMisalignedAddress || e == cudaErrorHardwareStackError ||
                      e == cudaErrorAssert;
  fail("CUDA error in ", where(op), ": ", call, " returned ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
       ") at ", base ? base + 1 : file, ":", line,
       sticky ? "; a kernel faulted, possibly in an earlier op: rerun with STREAMLAB_CUDA_SYNC=1 or under "
                "compute-sanitizer to find it"
              : "");
}

void fail_cublas(const std::string& op, const char* call, cublasStatus_t s, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  fail("cuBLAS error in ", where(op), ": ", call, " returned ", cublas_status_name(s), " at ", base ? base + 1 : file,
       ":", line);
}

void check_launch(const std::string& op, cudaStream_t stream, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail_cuda(op, "kernel launch (cudaGetLastError)", e, file, line);
  if (sync_after_launch()) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &cap);
    if (cap == cudaStreamCaptureStatusNone) {
      e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) fail_cuda(op, "cudaStreamSynchronize after the launch (STREAMLAB_CUDA_SYNC)", e, file, line);
    }
  }
}

}  // namespace cuda

using namespace cuda;

// ================================================================ availability, factory

bool cuda_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device found";
    return false;
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  if (p.major < 9) {
    if (why)
      *why = std::string("device 0 (") + p.name + ") is sm_" + std::to_string(p.major) + std::to_string(p.minor) +
             "; streamlab's CUDA backend is built for sm_90";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt) { return std::make_unique<CudaBackend>(opt); }

// ================================================================ construction

CudaBackend::CudaBackend(const CudaBackendOptions& opt) : opt_(opt) {
  g_pdl.store(opt.variants.pdl, std::memory_order_relaxed);
  const char* op = "cuda backend init";
  std::string why;
  SL_CHECK(cuda_available(&why), "CUDA backend: no usable device: ", why);
  CUDA_CHECK(op, cudaSetDevice(opt.device));
  cudaDeviceProp p{};
  CUDA_CHECK(op, cudaGetDeviceProperties(&p, opt.device));
  sm_count_ = p.multiProcessorCount;
  smem_optin_ = p.sharedMemPerBlockOptin;
  CUDA_CHECK(op, cudaDeviceGetStreamPriorityRange(&prio_least_, &prio_greatest_));
  nvtx_ = nvtxDomainCreateA("streamlab");

  if (opt_.arena_bytes > 0) {
    // One fixed arena, reserved up front.
    Chunk c;
    c.size = opt_.arena_bytes;
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&c.base), c.size);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t fr = 0, tot = 0;
      cudaMemGetInfo(&fr, &tot);
      fail("CUDA backend: cannot reserve the arena of ", opt_.arena_bytes, " bytes (", cudaGetErrorString(e), "; ",
           fr, " of ", tot, " bytes free)");
    }
    chunks_.push_back(c);
    reserved_bytes_ = c.size;
  }

  // Stream 0: the backend's own non-blocking "main" stream.
  streams_.push_back(make_stream_rec("main", 0));
  main_blas_bound_ = streams_[0].stream;
}

CudaBackend::~CudaBackend() {
  // Never throws: errors during teardown are ignored (the process may be exiting after a fault).
  cudaDeviceSynchronize();
  for (auto& [slot, g] : graphs_) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    if (g.graph) cudaGraphDestroy(g.graph);
  }
  for (StreamRec& r : streams_)
    if (r.live) release_stream_rec(r);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (Chunk& c : chunks_) cudaFree(c.base);
  if (nvtx_) nvtxDomainDestroy(nvtx_);
  if (lt_) cublasLtDestroy(lt_);
  cudaGetLastError();
}

// ================================================================ memory
// The arena: with opt.arena_bytes > 0 one cudaMalloc of that size up front; with 0 (default)
// chunks of max(1 GiB, request) reserved lazily, first fit. Allocations are bump-allocated at
// 256-byte alignment and never freed (the model allocates everything once, at construction), so
// the high-water mark is the bytes handed out. Each allocation is zeroed (cudaMemsetAsync on the
// main stream, then a sync of that stream, so that work on any other stream sees zeros).

void* CudaBackend::arena_take(size_t bytes, const std::string& name) {
  const size_t need = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  for (Chunk& c : chunks_) {
    if (c.size - c.used >= need) {
      void* p = c.base + c.used;
      c.used += need;
      used_bytes_ += need;
      return p;
    }
  }
  if (opt_.arena_bytes > 0)
    fail("alloc '", name, "': the CUDA arena of ", opt_.arena_bytes, " bytes is exhausted (", used_bytes_,
         " bytes in use, ", need, " more needed); raise CudaBackendOptions::arena_bytes or pass 0 (grow on demand)");
  Chunk c;
  c.size = std::max<size_t>(need, size_t(1) << 30);
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&c.base), c.size);
  if (e != cudaSuccess && c.size > need) {  // retry with exactly what is needed
    cudaGetLastError();
    c.size = need;
    e = cudaMalloc(reinterpret_cast<void**>(&c.base), c.size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    fail("alloc '", name, "': out of device memory reserving ", c.size, " bytes (", cudaGetErrorString(e), "; ",
         used_bytes_, " bytes allocated so far, ", fr, " of ", tot, " bytes free on the device)");
  }
  c.used = need;
  chunks_.push_back(c);
  reserved_bytes_ += c.size;
  used_bytes_ += need;
  return c.base;
}

Tensor CudaBackend::alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) {
  for (int i = 0; i < shape.n; ++i)
    SL_CHECK(shape[i] >= 0, "alloc '", name, "': negative dimension in shape ", shape.str());
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  void* p = arena_take(bytes, name);
  const std::string op = "alloc '" + name + "'";
  const size_t padded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  CUDA_CHECK(op, cudaMemsetAsync(p, 0, padded, streams_[0].stream));
  CUDA_CHECK(op, cudaStreamSynchronize(streams_[0].stream));

  BufferRec b;
  b.name = name;
  b.bytes = bytes;
  b.kind = kind;
  buffers_.push_back(std::move(b));
  bytes_by_kind_[size_t(kind)] += bytes;

  Tensor t;
  t.data = p;
  t.dtype = dtype;
  t.shape = shape;
  t.buffer = int(buffers_.size()) - 1;
  return t;
}

std::string CudaBackend::buffer_name(int buffer) const {
  SL_CHECK(buffer >= 0 && size_t(buffer) < buffers_.size(), "buffer_name: no buffer with id ", buffer, " (",
           buffers_.size(), " allocated)");
  return buffers_[size_t(buffer)].name;
}

void CudaBackend::upload(Stream s, const Tensor& dst, const void* host, size_t bytes) {
  const char* op = "upload";
  cudaStream_t st = stream(s, op);
  SL_CHECK(!dst.empty(), "upload: dst is missing (empty tensor)");
  SL_CHECK(bytes <= dst.bytes(), "upload: ", bytes, " bytes do not fit dst ", describe(dst), " (", dst.bytes(),
           " bytes)");
  if (!bytes) return;
  // From pageable memory: the copy is staged by the driver; the sync makes the host buffer
  // reusable on return.
  CUDA_CHECK(op, cudaMemcpyAsync(dst.data, host, bytes, cudaMemcpyHostToDevice, st));
  CUDA_CHECK(op, cudaStreamSynchronize(st));
}

void CudaBackend::download(void* host, const Tensor& src, size_t bytes) {
  const char* op = "download";
  SL_CHECK(!src.empty(), "download: src is missing (empty tensor)");
  SL_CHECK(bytes <= src.bytes(), "download: ", bytes, " bytes requested from src ", describe(src), " (", src.bytes(),
           " bytes)");
  CUDA_CHECK(op, cudaDeviceSynchronize());
  if (bytes) CUDA_CHECK(op, cudaMemcpy(host, src.data, bytes, cudaMemcpyDeviceToHost));
}

size_t CudaBackend::available_bytes() const {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  size_t in_arena = 0;  // reserved by the arena but not handed out yet
  for (const Chunk& c : chunks_) in_arena += c.size - c.used;
  return free_b + in_arena;
}

MemoryStats CudaBackend::memory() const {
  MemoryStats m;
  m.weights_bytes = bytes_by_kind_[size_t(AllocKind::Weight)];
  m.activations_bytes = bytes_by_kind_[size_t(AllocKind::Activation)] + bytes_by_kind_[size_t(AllocKind::Cache)] +
                        bytes_by_kind_[size_t(AllocKind::Workspace)];
  m.peak_bytes = used_bytes_;  // nothing is freed: the high-water mark is what was handed out
  m.library_bytes = library_bytes_;
  m.blas_handles = blas_handles_;
  m.blas_workspaces = blas_workspaces_;
  m.streams_created = streams_created_;
  return m;
}

// ================================================================ streams and events
// Stream ids index streams_; a destroyed stream's id is never reused. Each stream owns a cuBLAS
// handle bound to it and a 32 MiB workspace (library_bytes), plus an 8 MiB op scratch from the
// arena; see cuda_backend_impl.h.

// The cuBLAS workspace size of every (handle, stream): PyTorch's 32 MiB on Hopper.
// Tuning experiments: the variant cublas-workspace-kb overrides it (0: none, which rules out
// cuBLAS's split-K kernels and their reduce kernels).
// A workspace may be first needed inside a graph capture (a pool stream whose first GEMM is in
// the captured step): cudaMalloc is not enqueued work, so it is allowed there in relaxed capture
// mode, as PyTorch's allocator does it.
void* CudaBackend::alloc_blas_workspace(const std::string& op, cudaStream_t capture_check) {
  const size_t bytes = opt_.variants.cublas_workspace_bytes;
  if (!bytes) return nullptr;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CUDA_CHECK(op, cudaStreamIsCapturing(capture_check, &cap));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cap != cudaStreamCaptureStatusNone) CUDA_CHECK(op, cudaThreadExchangeStreamCaptureMode(&mode));
  void* ws = nullptr;
  const cudaError_t e = cudaMalloc(&ws, bytes);
  if (cap != cudaStreamCaptureStatusNone) CUDA_CHECK(op, cudaThreadExchangeStreamCaptureMode(&mode));
  CUDA_CHECK(op + " (cuBLAS workspace)", e);
  library_bytes_ += bytes;
  ++blas_workspaces_;
  return ws;
}

void CudaBackend::give_scratch(StreamRec& r, const std::string& op) {
  // The op scratch comes from the arena (zeroed, like every allocation).
  const std::string sname = r.name + ".scratch";
  // The tickets follow the scratch, in the same allocation, and start at zero with it.
  const size_t bytes = kScratchBytes + kTickets * sizeof(int);
  r.scratch = arena_take(bytes, sname);
  CUDA_CHECK(op, cudaMemsetAsync(r.scratch, 0, bytes, r.stream));
  CUDA_CHECK(op, cudaStreamSynchronize(r.stream));
  BufferRec b;
  b.name = sname;
  b.bytes = bytes;
  b.kind = AllocKind::Workspace;
  buffers_.push_back(std::move(b));
  bytes_by_kind_[size_t(AllocKind::Workspace)] += bytes;
}

CudaBackend::StreamRec CudaBackend::make_stream_rec(const std::string& name, int priority, bool pool) {
  const std::string op = "create_stream '" + name + "'";
  StreamRec r;
  r.name = name;
  r.pool = pool;
  // Clamp to the device's range ([greatest, least] = [-5, 0] on Hopper; lower = higher priority).
  const int prio = std::min(std::max(priority, prio_greatest_), prio_least_);
  CUDA_CHECK(op, cudaStreamCreateWithPriority(&r.stream, cudaStreamNonBlocking, prio));
  nvtxNameCudaStreamA(r.stream, name.c_str());
  r.live = true;
  if (pool) return r;  // a bare stream until drawn (claim_stream) and until its first GEMM
  CUBLAS_CHECK(op, cublasCreate(&r.blas));
  ++blas_handles_;
  CUBLAS_CHECK(op, cublasSetStream(r.blas, r.stream));
  // Split-K reductions of bf16-output GEMMs stay in fp32 (the default allows bf16 partial sums,
  // which would add a rounding per split in the small-M decode GEMMs).
  CUBLAS_CHECK(op, cublasSetMathMode(r.blas, cublasMath_t(CUBLAS_DEFAULT_MATH |
                                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  r.blas_ws_bytes = opt_.variants.cublas_workspace_bytes;
  r.blas_ws = alloc_blas_workspace(op, r.stream);
  CUBLAS_CHECK(op, cublasSetWorkspace(r.blas, r.blas_ws, r.blas_ws_bytes));
  give_scratch(r, op);
  return r;
}

void CudaBackend::release_stream_rec(StreamRec& r) {
  // Best effort (also runs from the destructor): no throwing.
  if (r.stream) cudaStreamSynchronize(r.stream);
  if (r.blas) {
    cublasDestroy(r.blas);
    --blas_handles_;
  }
  if (r.blas_ws) {
    cudaFree(r.blas_ws);
    library_bytes_ -= r.blas_ws_bytes;
    --blas_workspaces_;
  }
  if (r.stream == main_blas_bound_) main_blas_bound_ = nullptr;
  if (r.stream) cudaStreamDestroy(r.stream);
  r = StreamRec{};  // the arena scratch stays reserved (the arena never frees)
}

Stream CudaBackend::create_stream(const std::string& name, int priority) {
  streams_.push_back(make_stream_rec(name, priority));
  ++streams_created_;
  return Stream{int(streams_.size()) - 1};
}

Stream CudaBackend::create_pool_stream(const std::string& name, int priority) {
  streams_.push_back(make_stream_rec(name, priority, true));
  ++streams_created_;
  return Stream{int(streams_.size()) - 1};
}

void CudaBackend::claim_stream(Stream s, const std::string& roles) {
  const std::string op = "claim_stream '" + roles + "'";
  stream(s, op.c_str());
  StreamRec& r = streams_[size_t(s.id)];
  nvtxNameCudaStreamA(r.stream, roles.c_str());  // the trace shows every role drawn onto it
  if (!r.scratch) give_scratch(r, op);
}

void CudaBackend::note_gemm(Stream s, const char* op) {
  stream(s, op);
  StreamRec& r = streams_[size_t(s.id)];
  if (!r.pool || r.blas_ws || !opt_.variants.cublas_workspace_bytes) return;
  r.blas_ws_bytes = opt_.variants.cublas_workspace_bytes;
  r.blas_ws = alloc_blas_workspace(std::string(op) + " on '" + r.name + "'", r.stream);
}

void CudaBackend::destroy_stream(Stream s) {
  SL_CHECK(s.id != 0, "destroy_stream: the main stream (0) cannot be destroyed");
  stream(s, "destroy_stream");
  StreamRec& r = streams_[size_t(s.id)];
  CUDA_CHECK("destroy_stream", cudaStreamSynchronize(r.stream));
  release_stream_rec(r);
}

CudaBackend::LtCall CudaBackend::lt(Stream s, const char* op) {
  stream(s, op);
  note_gemm(s, op);  // a pool stream gets its workspace at its first GEMM
  if (!lt_) CUBLAS_CHECK(op, cublasLtCreate(&lt_));
  const StreamRec& r = streams_[size_t(s.id)];
  // Pool streams share the main handle but each has its own workspace (note_gemm).
  return LtCall{lt_, r.blas_ws, r.blas_ws ? r.blas_ws_bytes : 0};
}

cudaStream_t CudaBackend::stream(Stream s, const char* op) const {
  SL_CHECK(s.id >= 0 && size_t(s.id) < streams_.size() && streams_[size_t(s.id)].live, op, ": stream ", s.id,
           " does not exist (never created or destroyed)");
  return streams_[size_t(s.id)].stream;
}

cublasHandle_t CudaBackend::blas(Stream s, const char* op) {
  stream(s, op);
  StreamRec& r = streams_[size_t(s.id)];
  if (!r.pool && s.id != 0) return r.blas;
  // The main stream's handle serves the main stream and every pool stream: rebind it (stream and
  // that stream's workspace) when the last GEMM ran elsewhere. Host-side calls only.
  note_gemm(s, op);
  StreamRec& m = streams_[0];
  if (main_blas_bound_ != r.stream) {
    CUBLAS_CHECK(op, cublasSetStream(m.blas, r.stream));
    CUBLAS_CHECK(op, cublasSetWorkspace(m.blas, r.blas_ws, r.blas_ws_bytes));
    main_blas_bound_ = r.stream;
  }
  return m.blas;
}

CudaBackend::Scratch CudaBackend::scratch(Stream s, const char* op, size_t need) const {
  stream(s, op);
  SL_CHECK(need <= kScratchBytes, op, ": needs ", need, " bytes of per-stream scratch, more than the ", kScratchBytes,
           " reserved per stream (batch too large for this op's temporary)");
  SL_CHECK(streams_[size_t(s.id)].scratch, op, ": stream '", streams_[size_t(s.id)].name,
           "' has no scratch yet (a pool stream not yet drawn)");
  return Scratch{streams_[size_t(s.id)].scratch, kScratchBytes};
}

int* CudaBackend::tickets(Stream s, const char* op, size_t count) const {
  stream(s, op);
  SL_CHECK(streams_[size_t(s.id)].scratch, op, ": stream '", streams_[size_t(s.id)].name,
           "' has no scratch yet (a pool stream not yet drawn)");
  if (count > kTickets) return nullptr;
  return reinterpret_cast<int*>(static_cast<char*>(streams_[size_t(s.id)].scratch) + kScratchBytes);
}

Event CudaBackend::create_event(const std::string& name) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK("create_event '" + name + "'", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  events_.push_back(e);
  event_names_.push_back(name);
  return Event{int(events_.size()) - 1};
}

void CudaBackend::record(Event e, Stream s) {
  SL_CHECK(e.id >= 0 && size_t(e.id) < events_.size(), "record: event ", e.id, " does not exist");
  CUDA_CHECK("record '" + event_names_[size_t(e.id)] + "'", cudaEventRecord(events_[size_t(e.id)], stream(s, "record")));
}

void CudaBackend::wait(Stream s, Event e) {
  SL_CHECK(e.id >= 0 && size_t(e.id) < events_.size(), "wait: event ", e.id, " does not exist");
  CUDA_CHECK("wait '" + event_names_[size_t(e.id)] + "'",
             cudaStreamWaitEvent(stream(s, "wait"), events_[size_t(e.id)], 0));
}

// Timing marks are events with timing on, in the same table as the dependency events (so the
// destructor frees them). Inside a stream capture an ordinary record only adds a dependency;
// cudaEventRecordExternal makes it an event-record node that fires at every replay.
Event CudaBackend::create_timing_mark(const std::string& name) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK("create_timing_mark '" + name + "'", cudaEventCreateWithFlags(&e, cudaEventDefault));
  events_.push_back(e);
  event_names_.push_back(name);
  return Event{int(events_.size()) - 1};
}

void CudaBackend::record_timing_mark(Event e, Stream s) {
  SL_CHECK(e.id >= 0 && size_t(e.id) < events_.size(), "record_timing_mark: event ", e.id, " does not exist");
  const unsigned flags = capturing_slot_ >= 0 ? cudaEventRecordExternal : cudaEventRecordDefault;
  CUDA_CHECK("record_timing_mark '" + event_names_[size_t(e.id)] + "'",
             cudaEventRecordWithFlags(events_[size_t(e.id)], stream(s, "record_timing_mark"), flags));
}

double CudaBackend::elapsed_ms(Event from, Event to) {
  for (Event e : {from, to})
    SL_CHECK(e.id >= 0 && size_t(e.id) < events_.size(), "elapsed_ms: event ", e.id, " does not exist");
  float ms = 0;
  CUDA_CHECK("elapsed_ms '" + event_names_[size_t(from.id)] + "' -> '" + event_names_[size_t(to.id)] + "'",
             cudaEventElapsedTime(&ms, events_[size_t(from.id)], events_[size_t(to.id)]));
  return double(ms);
}

void CudaBackend::synchronize() { CUDA_CHECK("synchronize", cudaDeviceSynchronize()); }

// NVTX v3, domain "streamlab". The names are also kept on a host stack so that errors say
// where in the model they happened.
void CudaBackend::range_push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_, &a);
  t_ranges.emplace_back(name ? name : "");
}

void CudaBackend::range_pop() {
  nvtxDomainRangePop(nvtx_);
  if (!t_ranges.empty()) t_ranges.pop_back();
}

// ================================================================ CUDA graphs

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void CudaBackend::graph_begin_capture(int slot) {
  const std::string op = "graph_begin_capture(" + std::to_string(slot) + ")";
  SL_CHECK(capturing_slot_ < 0, op, ": graph ", capturing_slot_, " is still being captured");
  capture_t0_ = now_ms();
  CUDA_CHECK(op, cudaStreamBeginCapture(streams_[0].stream, cudaStreamCaptureModeThreadLocal));
  capturing_slot_ = slot;
}

Backend::GraphStats CudaBackend::graph_end_capture(int slot) {
  const std::string op = "graph_end_capture(" + std::to_string(slot) + ")";
  SL_CHECK(capturing_slot_ == slot, op, ": no capture of graph ", slot, " is in progress");
  capturing_slot_ = -1;
  GraphRec g;
  // An op that failed mid-capture leaves the capture invalidated: this reports it.
  CUDA_CHECK(op, cudaStreamEndCapture(streams_[0].stream, &g.graph));
  GraphStats st;
  st.capture_ms = now_ms() - capture_t0_;
  CUDA_CHECK(op, cudaGraphGetNodes(g.graph, nullptr, &st.nodes));
  CUDA_CHECK(op, cudaGraphGetEdges(g.graph, nullptr, nullptr, nullptr, &st.edges));
  const double t1 = now_ms();
  cudaError_t e = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(g.graph);
    fail_cuda(op, "cudaGraphInstantiate(&exec, graph, 0)", e, __FILE__, __LINE__);
  }
  st.instantiate_ms = now_ms() - t1;
  auto it = graphs_.find(slot);
  if (it != graphs_.end()) {  // re-capture of a slot: the old graph goes
    CUDA_CHECK(op, cudaStreamSynchronize(streams_[0].stream));
    cudaGraphExecDestroy(it->second.exec);
    cudaGraphDestroy(it->second.graph);
  }
  graphs_[slot] = g;
  return st;
}

void CudaBackend::graph_replay(int slot) {
  const std::string op = "graph_replay(" + std::to_string(slot) + ")";
  auto it = graphs_.find(slot);
  SL_CHECK(it != graphs_.end(), op, ": graph ", slot, " was never captured");
  CUDA_CHECK(op, cudaGraphLaunch(it->second.exec, streams_[0].stream));
  if (sync_after_launch()) CUDA_LAUNCH_CHECK(op, streams_[0].stream);
}

// ================================================================ initialisation kernels

namespace {

// One thread per element (grid-stride). uniform_pm1 is the host's function compiled for the
// device; the scale and offset are applied as two separately rounded operations (__fmul_rn /
// __fadd_rn are never contracted into an FMA), exactly as the CPU does, so F32 values are
// bit-identical and BF16 values are the same round-to-nearest-even of them.
__global__ void init_uniform_kernel(void* t, int dt, int64_t n, uint64_t seed, uint64_t key, float scale, float offset) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = uniform_pm1(seed, key, uint64_t(i));
    const float v = __fadd_rn(__fmul_rn(scale, u), offset);
    stf(t, dt, i, v);
  }
}

// One thread per element (grid-stride); F32 / BF16 / I32.
__global__ void fill_kernel(void* t, int kind, int64_t n, float value) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (kind == 2)
      static_cast<int32_t*>(t)[i] = int32_t(value);
    else
      stf(t, kind, i, value);
  }
}

// round_fp8_blocks: one warp per (row, block), a block of at most 1024 values (32 per lane), the
// block's amax by a butterfly; the same float operations as the CPU reference (core/fp8.h).
// With pos (entries mode), warp w's row is the entry token w / nb completed, or none.
__global__ void round_fp8_blocks_kernel(void* t, int dt, int64_t rows, int64_t D, int64_t cols, int block,
                                        const int32_t* pos, const int32_t* seq, int ratio, int64_t B, int64_t n) {
  pdl_enter();
  const int64_t nb = cols / block;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= rows * nb) return;  // uniform per warp
  int64_t row = w / nb;
  if (pos) {
    const int32_t p = pos[row], b = seq[row];
    if (p < 0 || (int64_t(p) + 1) % ratio != 0) return;
    const int64_t j = p / ratio;
    if (b < 0 || b >= B || j >= n) return;  // (the CPU reference refuses such a step)
    row = b * n + j;
  }
  // The rest of the row (the rope dims) as the cache keeps it, bf16: rounded by the row's first
  // block's warp (already so in a bf16 t).
  if (dt == kF32 && w % nb == 0)
    for (int64_t c = cols + lane; c < D; c += 32)
      stf(t, dt, row * D + c, __bfloat162float(__float2bfloat16(ldf(t, dt, row * D + c))));
  const int64_t o = row * D + (w % nb) * block;
  float v[32];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int c = lane + 32 * i;
    v[i] = c < block ? ldf(t, dt, o + c) : 0.f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  // The smallest power of two >= max(amax, 1e-4) / 448 (never an all-zero group here).
  const float sc = fp8_group_scale(fmaxf(amax, 1e-4f));
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int c = lane + 32 * i;
    if (c >= block) break;
    stf(t, dt, o + c, e4m3_value(e4m3_code(v[i] / sc)) * sc);
  }
}

// shard_routing: one thread per (token, slot) pair.
__global__ void shard_routing_kernel(int32_t* ids_out, float* weights_out, const int32_t* ids, const float* weights,
                                     int64_t n, int64_t first, int64_t count) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    const bool mine = id >= first && id < first + count;
    ids_out[i] = mine ? int32_t(id - first) : 0;
    weights_out[i] = mine ? weights[i] : 0.f;
  }
}

}  // namespace

void CudaBackend::round_fp8_blocks(Stream s, const Tensor& t, int64_t cols, int64_t block, const Tensor& pos,
                                   const Tensor& seq, int ratio) {
  const char* op = "round_fp8_blocks";
  cudaStream_t st = stream(s, op);
  const checks::RoundFp8Dims d = checks::validate_round_fp8_blocks<OpRules>(t, cols, block, pos, seq, ratio);
  SL_CHECK(block <= 1024, op, ": blocks of ", block, " values: this kernel takes at most 1024");
  const int64_t rows = pos.empty() ? d.rows : d.T;  // entries mode: one candidate row per token
  const int64_t warps = rows * (cols / block);
  if (warps == 0) return;
  launch_kernel(op, round_fp8_blocks_kernel, dim3(unsigned(cdiv(warps * 32, 256))), 256, 0, st, t.data,
                fcode(t.dtype), rows, d.D, cols, int(block), pos.empty() ? nullptr : pos.ptr<int32_t>(),
                seq.empty() ? nullptr : seq.ptr<int32_t>(), ratio, d.B, d.n);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::shard_routing(Stream s, const Tensor& ids_out, const Tensor& weights_out, const Tensor& ids,
                                const Tensor& weights, int64_t first, int64_t count) {
  const char* op = "shard_routing";
  cudaStream_t st = stream(s, op);
  const auto [T, k] = checks::validate_shard_routing<OpRules>(ids_out, weights_out, ids, weights, first, count);
  const int64_t n = T * k;
  if (n == 0) return;
  launch_kernel(op, shard_routing_kernel, grid_for(n, 256), 256, 0, st, ids_out.ptr<int32_t>(),
                weights_out.ptr<float>(), ids.ptr<int32_t>(), weights.ptr<float>(), n, first, count);
  CUDA_LAUNCH_CHECK(op, st);
}

// The all-to-all scheme needs NCCL's all-to-all between GPUs: not driven yet.
void CudaBackend::moe_experts_all_to_all(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids,
                                         const Tensor& weights, const Tensor& w1, const Tensor& w2, const Tensor& w3,
                                         float swiglu_limit) {
  const char* op = "moe_experts_all_to_all";
  stream(s, op);
  fail(op, ": the CUDA backend has no all-to-all exchange yet (its ranks sum over NCCL in the all-gather scheme; "
       "the CPU backend runs the all-to-all scheme)");
}

// One rank needs no communication; several sum over NCCL on the op's stream (the model's comm
// stream), so the sum overlaps whatever the other streams run, as in a serving stack.
void CudaBackend::all_reduce_sum(Stream s, const Tensor& t) {
  const char* op = "all_reduce_sum";
  cudaStream_t st = stream(s, op);
  const int64_t n = checks::validate_all_reduce_sum<OpRules>(t);
  Communicator* comm = communicator();
  if (!comm || comm->world() == 1) return;
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm);
  SL_CHECK(nccl, op, ": a model split over ", comm->world(), " ranks on the CUDA backend needs an NCCL communicator "
           "(one process per GPU: --rank-launch processes or --gpus N)");
  nccl->all_reduce_sum_device(t.data, size_t(n), t.dtype, st);
}

void CudaBackend::init_uniform(Stream s, const Tensor& t, uint64_t seed, uint64_t key, float scale, float offset) {
  const char* op = "init_uniform";
  cudaStream_t st = stream(s, op);
  check_float(op, "t", t);
  const int64_t n = t.numel();
  if (n == 0) return;
  launch_kernel(op, init_uniform_kernel, grid_for(n, 256), 256, 0, st, t.data, fcode(t.dtype), n, seed, key, scale, offset);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::fill(Stream s, const Tensor& t, float value) {
  const char* op = "fill";
  cudaStream_t st = stream(s, op);
  check_present(op, "t", t);
  int kind = 0;
  switch (t.dtype) {
    case DType::F32: kind = kF32; break;
    case DType::BF16: kind = kBF16; break;
    case DType::I32: kind = 2; break;
    default: fail("fill: t is ", describe(t), ", expected f32, bf16 or i32");
  }
  const int64_t n = t.numel();
  if (n == 0) return;
  launch_kernel(op, fill_kernel, grid_for(n, 256), 256, 0, st, t.data, kind, n, value);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::copy(Stream s, const Tensor& dst, const Tensor& src) {
  const char* op = "copy";
  cudaStream_t st = stream(s, op);
  check_present(op, "dst", dst);
  check_present(op, "src", src);
  SL_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy: dst ", describe(dst), " and src ",
           describe(src), " differ in dtype or element count");
  const size_t bytes = src.bytes();
  if (bytes == 0 || dst.data == src.data) return;
  if (!overlaps(dst, src)) {
    CUDA_CHECK(op, cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, st));
    return;
  }
  // Overlapping views of one buffer (memmove semantics). Through the scratch when it fits, else
  // in pieces no longer than the distance between the two ranges, ordered so that no piece
  // reads bytes an earlier piece wrote.
  if (bytes <= kScratchBytes) {
    Scratch sc = scratch(s, op, bytes);
    CUDA_CHECK(op, cudaMemcpyAsync(sc.ptr, src.data, bytes, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(op, cudaMemcpyAsync(dst.data, sc.ptr, bytes, cudaMemcpyDeviceToDevice, st));
    return;
  }
  char* d = static_cast<char*>(dst.data);
  const char* sp = static_cast<const char*>(src.data);
  const size_t dist = size_t(d > sp ? d - sp : sp - d);
  const size_t piece = std::min(dist, kScratchBytes);
  if (d < sp) {
    for (size_t off = 0; off < bytes; off += piece)
      CUDA_CHECK(op, cudaMemcpyAsync(d + off, sp + off, std::min(piece, bytes - off), cudaMemcpyDeviceToDevice, st));
  } else {
    for (size_t end = bytes; end > 0;) {
      const size_t len = std::min(piece, end);
      end -= len;
      CUDA_CHECK(op, cudaMemcpyAsync(d + end, sp + end, len, cudaMemcpyDeviceToDevice, st));
    }
  }
}

}  // namespace sl
