// Private to model/cuda: the CudaBackend class and the host-side helpers its op files share.
//
// File layout (one op group per file):
//   cuda_backend.cu    the class: arena, streams (+ their cuBLAS handles), events, NVTX,
//                      upload/download, init_uniform/fill/copy, error helpers
//   cuda_dense.cu      gemm, gemm_grouped (cuBLAS; a SIMT kernel for mixed dtypes), rmsnorm, add,
//                      rope, rmsnorm_pair, rmsnorm_rope, swiglu, gemm_pair, gemm_swiglu, embed, argmax, gather_rows, shift_tokens
//   cuda_mhc.cu        hc_pre, hc_pre_norm, hc_post, add_hc_post, hc_post_pre_norm, hc_head, hc_expand,
//                      mtp_combine
//   cuda_attention.cu  swa_insert, compressor_save, compressor_pool, indexer_topk,
//                      sparse_attention
//   cuda_moe.cu        route, moe_experts (device-side permutation + grouped tensor-core GEMM),
//                      moe_experts_mxfp4 (the GEMV on MXFP4 weights), moe_workspace_bytes
//   cuda_speculative.cu  verify_tokens, accept_drafts, cache_rollback
//   cuda_fp8.cu        gemm_fp8, gemm_fp8_pair (activation quantize + FP8 GEMV; cuBLASLt block-scaled FP8
//                      at prefill)
//
// Memory model. Everything lives in one arena (see CudaBackend::alloc). Nothing is allocated
// inside a forward step: the model preallocates every buffer at construction, and the ops only
// use the tensors they are given plus the per-stream scratch below (also allocated up front, by
// create_stream). This keeps every op CUDA-graph capturable (no host synchronisation either:
// ops never read device memory on the host; indices are validated on the device, where an
// out-of-range position / sequence / id is skipped rather than reported).
//
// Per-stream resources (they grow with the number of streams, which is what the stream-policy
// memory comparison measures):
//   - one cuBLAS handle, cublasSetStream'ed once to its stream, with its own 32 MiB workspace
//     (cublasSetWorkspace; PyTorch's size on Hopper). Reported as MemoryStats::library_bytes.
//     Pool streams (the torch stream source) have no handle: their GEMMs use the main stream's
//     handle rebound to them, with a 32 MiB workspace per stream allocated at its first GEMM op,
//     as PyTorch does (one handle per thread, one workspace per (handle, stream)).
//     Every handle has the same workspace size, so cuBLAS picks the same algorithm whatever
//     stream a GEMM runs on: results are bit-identical across stream policies.
//   - an 8 MiB op scratch from the arena (AllocKind::Workspace, named "<stream>.scratch"): small
//     device temporaries of ops on that stream (partial sums of the split hc reductions, the
//     "last writer wins" claims of the ring-cache inserts, split-KV partials of the decode
//     attention, staging of overlapping copies). Ops on one stream run in order, so they can
//     share it; ops on different streams never do. Beside it, 4 KiB of tickets: counters that
//     are zero between kernels (the fused hc_pre / hc_head count their finished blocks there).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/op_checks.h"

namespace sl::cuda {

// ---------------------------------------------------------------- argument checks (host side)
// Shapes and dtypes only: device memory is never read on the host. The shared helpers
// (model/op_checks.h), bound to the arena's rule that a zero-size tensor may have no data.

constexpr auto kPresence = checks::Presence::DataOrZeroSize;
using checks::describe;
using checks::overlaps;
inline constexpr auto& check_present = checks::check_present<kPresence>;
inline constexpr auto& check_dtype = checks::check_dtype<kPresence>;
inline constexpr auto& check_float = checks::check_float<kPresence>;
inline constexpr auto& check_ndim = checks::check_ndim<kPresence>;
inline constexpr auto& check_shape = checks::check_shape<kPresence>;
inline constexpr auto& check_numel = checks::check_numel<kPresence>;
inline constexpr auto& check_i32 = checks::check_i32<kPresence>;
inline constexpr auto& check_f32 = checks::check_f32<kPresence>;
// The per-op validators' rules: activations and weights f32 or bf16, the tensor-core
// operands (attention, indexer, experts) bf16.
using OpRules = checks::Rules<kPresence, checks::Floats::F32OrBF16, checks::Floats::BF16, /*packed_kv=*/true>;
// CUDA only: the vectorised kernels load 16-byte rows.
inline void check_aligned(const char* op, const char* arg, const void* p, size_t align) {
  SL_CHECK(reinterpret_cast<uintptr_t>(p) % align == 0, op, ": ", arg, " is not ", align,
           "-byte aligned (a view at an odd offset); this kernel needs aligned rows");
}

// Device-side dtype codes for kernels that take "f32 or bf16" at run time.
enum : int { kF32 = 0, kBF16 = 1 };
inline int fcode(DType t) { return t == DType::BF16 ? kBF16 : kF32; }

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads, int max_blocks = 132 * 16) {
  int64_t b = cdiv(n, threads);
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return unsigned(b);
}

}  // namespace sl::cuda

namespace sl {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& opt);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  DType act_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }
  // Packed FP8 KV caches under variant fp8-kv=packed, else the bf16 emulation (the default).
  bool packed_kv_caches() const override { return variants().fp8_kv_packed; }

  // memory (cuda_backend.cu)
  Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) override;
  std::string buffer_name(int buffer) const override;
  void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) override;
  void download(void* host, const Tensor& src, size_t bytes) override;
  MemoryStats memory() const override;
  size_t available_bytes() const override;

  // streams and events (cuda_backend.cu)
  Stream create_stream(const std::string& name, int priority) override;
  Stream create_pool_stream(const std::string& name, int priority) override;
  void claim_stream(Stream s, const std::string& roles) override;
  void destroy_stream(Stream s) override;
  Event create_event(const std::string& name) override;
  void record(Event e, Stream s) override;
  void wait(Stream s, Event e) override;
  Event create_timing_mark(const std::string& name) override;
  void record_timing_mark(Event e, Stream s) override;
  double elapsed_ms(Event from, Event to) override;
  void synchronize() override;
  // CUDA graphs: stream capture on the main stream (thread-local mode); the aux streams join the
  // capture through the policy's fork events and must have joined back before the end.
  void graph_begin_capture(int slot) override;
  GraphStats graph_end_capture(int slot) override;
  void graph_replay(int slot) override;
  void range_push(const char* name) override;
  void range_pop() override;

  // The ops, fused ones included (model/ops.def; the file implementing each: the list at the
  // top).
#define SL_OP(name, params, args, ...) void name(Stream s, SL_UNPAREN params) override;
#include "model/ops.def"
#undef SL_OP
  size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const override;

  // ---------------------------------------------------------------- for the op files
  cudaStream_t stream(Stream s, const char* op) const;  // checked lookup
  // The cuBLAS handle for a GEMM on `s`, bound to `s` and to the workspace of (handle, s). An
  // engine stream has its own handle; the main stream's handle doubles as the thread's handle
  // that pool streams share (PyTorch's one handle per thread, rebound per call).
  cublasHandle_t blas(Stream s, const char* op);
  // A GEMM op is about to run on `s`: a pool stream gets its (handle, stream) workspace now, at
  // its first GEMM, as PyTorch allocates it (whether or not our kernel choice then calls cuBLAS).
  void note_gemm(Stream s, const char* op);
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Scratch scratch(Stream s, const char* op, size_t need) const;  // throws if `need` does not fit
  // The stream's tickets: kTickets int32 counters beside its scratch, zero whenever no kernel of
  // that stream runs. A kernel may count on them (the last of several blocks to finish a piece of
  // work takes a ticket and sees it is the last) only if it leaves every counter it used at zero
  // again, so that the next kernel on the stream, or the next replay of a graph, finds them so.
  // Null when `count` exceeds kTickets (the caller takes a path without them).
  int* tickets(Stream s, const char* op, size_t count) const;
  // cuBLASLt (the FP8 GEMMs): the backend's one handle (created at first use) and the cuBLAS
  // workspace of (handle, s), which cuBLASLt calls on `s` share with the cuBLAS GEMMs there.
  struct LtCall {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };
  LtCall lt(Stream s, const char* op);
  int sm_count() const { return sm_count_; }
  const KernelVariants& variants() const { return opt_.variants; }

  size_t smem_optin() const { return smem_optin_; }

  // Per-stream op scratch and cuBLAS workspace sizes (documented in the header comment).
  static constexpr size_t kScratchBytes = size_t(8) << 20;
  static constexpr size_t kTickets = 1024;

 private:
  struct StreamRec {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void* blas_ws = nullptr;  // cudaMalloc'ed separately (library memory, not the arena)
    size_t blas_ws_bytes = 0;
    void* scratch = nullptr;  // from the arena
    std::string name;
    bool live = false;
    bool pool = false;        // a pool stream: no handle of its own (create_pool_stream)
  };
  struct Chunk {
    char* base = nullptr;
    size_t size = 0, used = 0;
  };
  struct BufferRec {
    std::string name;
    size_t bytes = 0;
    AllocKind kind = AllocKind::Activation;
  };

  void* arena_take(size_t bytes, const std::string& name);
  StreamRec make_stream_rec(const std::string& name, int priority, bool pool = false);
  void give_scratch(StreamRec& r, const std::string& op);
  void* alloc_blas_workspace(const std::string& op, cudaStream_t capture_check);
  void release_stream_rec(StreamRec& r);

  CudaBackendOptions opt_;
  int sm_count_ = 0;
  size_t smem_optin_ = 0;
  int prio_least_ = 0, prio_greatest_ = 0;

  std::vector<Chunk> chunks_;
  std::vector<BufferRec> buffers_;
  std::array<size_t, 4> bytes_by_kind_{};
  size_t used_bytes_ = 0, reserved_bytes_ = 0;
  size_t library_bytes_ = 0;
  size_t blas_handles_ = 0, blas_workspaces_ = 0, streams_created_ = 0;
  cudaStream_t main_blas_bound_ = nullptr;  // the stream the main handle is bound to now

  std::vector<StreamRec> streams_;  // index = Stream::id; 0 = "main"
  struct GraphRec {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  std::map<int, GraphRec> graphs_;  // by slot
  int capturing_slot_ = -1;
  double capture_t0_ = 0;  // ms, steady clock
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> event_names_;
  nvtxDomainHandle_t nvtx_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
};

}  // namespace sl
