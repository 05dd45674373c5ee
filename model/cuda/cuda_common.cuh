// Private to model/cuda: device helpers shared by the kernel files (dtype-agnostic loads and
// stores, deterministic warp / block reductions, cp.async), and the few launchers one op file
// borrows from another.
//
// Determinism: every reduction here combines values in a fixed order (butterfly shuffles, then
// warps in index order). There are no floating-point atomics anywhere in the backend, so a
// kernel's result depends only on its inputs and launch shape, never on scheduling.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "model/cuda/cuda_backend_impl.h"

namespace sl::cuda {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------- launches (programmatic dependent launch)
// Every kernel of this backend is launched through launch_kernel and begins with pdl_enter().
// With PDL on (the default; STREAMLAB_PDL=0 turns it off), a kernel may be scheduled while the
// kernel before it on its stream is still finishing; its blocks then wait in pdl_enter until that
// grid has completed and its writes are visible (griddepcontrol.wait), so every kernel still sees
// plain stream order: results are unchanged, only the launch latency between two dependent
// kernels is hidden (at decode a step is ~370 kernels of a few microseconds each). cuBLAS kernels,
// event waits and copies keep full serialisation. On a launch without PDL both instructions are
// no-ops.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// True unless STREAMLAB_PDL=0 (read once).
bool pdl_enabled();

// kernel<<<grid, block, smem, st>>>(args...) with the PDL launch attribute; a launch error names
// the op. Follow with CUDA_LAUNCH_CHECK as after any launch.
template <class... KArgs, class... Args>
void launch_kernel(const char* op, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                   Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  CUDA_CHECK(op, cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// ---------------------------------------------------------------- dynamic shared memory
// Raises a kernel's dynamic shared-memory limit to `bytes` (above the 48 KiB every kernel gets)
// before its first launch at that size; `optin` is the device's per-block opt-in maximum. Kept
// per kernel and guarded: ops may be issued from several host threads. A shape that needs more
// than the device allows is an error naming the op, not a failed launch.
template <class K>
void allow_smem(const char* op, K* kernel, size_t bytes, size_t optin) {
  SL_CHECK(bytes <= optin, op, ": needs ", bytes, " bytes of shared memory per block; the device allows ", optin,
           " (shape too large for this kernel)");
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<const void*, size_t> raised;
  std::lock_guard<std::mutex> lock(mu);
  size_t& cur = raised[reinterpret_cast<const void*>(kernel)];
  if (bytes > cur) {
    CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    cur = bytes;
  }
}

// ---------------------------------------------------------------- run-time dtype loads/stores
// `dt` is kF32 or kBF16 (uniform across the grid, so the branch costs nothing measurable in the
// memory-bound kernels that use these).
__device__ __forceinline__ float ldf(const void* p, int dt, int64_t i) {
  return dt == kBF16 ? __bfloat162float(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void stf(void* p, int dt, int64_t i, float v) {
  if (dt == kBF16)
    static_cast<bf16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

template <class T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f<bf16>(bf16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// Eight consecutive values (16-byte aligned: one 16-byte load for bf16, two for F32) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]);
template <>
__device__ __forceinline__ void load8<bf16>(const bf16* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const bf16* e = reinterpret_cast<const bf16*>(&u);
#pragma unroll
  for (int q = 0; q < 8; ++q) v[q] = __bfloat162float(e[q]);
}
template <>
__device__ __forceinline__ void load8<float>(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// ---------------------------------------------------------------- reductions (fixed order)
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `red` is 32 floats of shared memory. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < nw; ++w) t += red[w];
  return t;
}

__device__ __forceinline__ float sigmoidf_(float z) { return 1.f / (1.f + expf(-z)); }

// x as an e4m3 code (round to nearest even, saturating to +-448), and a code's value: the one
// conversion every FP8 quantizer of this backend uses, so they all make the same codes.
__device__ __forceinline__ uint8_t e4m3_code(float x) {
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_value(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

// An FP8 activation group's scale: the smallest power of two >= amax / 448, 1 for an all-zero or
// non-finite amax (core/fp8.h fp8_group_scale, the same float operations).
__device__ __forceinline__ float fp8_group_scale(float amax) {
  if (!(amax > 0.f) || !isfinite(amax)) return 1.f;
  int e = 0;
  const float f = frexpf(amax / 448.f, &e);
  const int exp = max(-127, min(127, f == 0.5f ? e - 1 : e));
  return ldexpf(1.f, exp);
}

// ---------------------------------------------------------------- the last block to finish
// For a piece of work shared by `blocks` blocks, each of which has written its part to global
// memory: call from every thread of each of them, after its writes. `ticket` (one of the stream's
// tickets, CudaBackend::tickets: zero when the launch starts) counts the finished blocks; true in
// the block that finishes last, which resets the ticket to zero (every other block has counted
// by then, so the next kernel on the stream, or the next replay, finds it so) and may then read
// every block's part, through L2 (__ldcg: its L1 must not answer for lines other SMs wrote). The
// fences order each block's writes before its count and the last block's reads after it (the
// CUDA samples' threadFenceReduction). Contains barriers.
__device__ __forceinline__ bool last_block_to_finish(int* ticket, int blocks) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool mine = atomicAdd(ticket, 1) == blocks - 1;
    if (mine) {
      *ticket = 0;
      __threadfence();
    }
    last = mine;
  }
  __syncthreads();
  return last != 0;
}

// The RMSNorm store of 8 bf16 values (elements j*8 .. j*8+7 of a row): bf16(w * (x * r)), with
// r = 1 / sqrt(mean of squares + eps) and w (dtype dtw) null for no weight. One formula for
// rmsnorm and the norms fused into other kernels, so that they round alike.
__device__ __forceinline__ uint4 rmsnorm_scale8(uint4 x, float r, const void* w, int dtw, int64_t j) {
  const bf16* e = reinterpret_cast<const bf16*>(&x);
  uint4 o;
  bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float wi = w ? ldf(w, dtw, j * 8 + q) : 1.f;
    oe[q] = __float2bfloat16_rn(wi * (__bfloat162float(e[q]) * r));
  }
  return o;
}

// ---------------------------------------------------------------- cp.async (sm_80+)
// 16-byte global -> shared copy; src_bytes < 16 zero-fills the rest (0 = pure zero fill, and
// the source is then not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------- shared launchers
// out[i] = silu(min(g, L)) * clamp(u, -L, L) over n elements (cuda_dense.cu; also used by
// moe_experts on its permuted rows).
void launch_swiglu(const char* op, cudaStream_t st, void* out, int dto, const void* g, int dtg, const void* u,
                   int dtu, int64_t n, float limit);

// dst[m, :] = rows of a (dta kF32 or kBF16, row stride lda) rounded as gemm_fp8 rounds its
// activations: per 128-column group e4m3(x / s) * s, s the smallest power of two >= amax / 448;
// bf16 [M, K] (exact). dst may be a itself (lda = K): each value is read before it is written, by
// the same thread (cuda_fp8.cu; also used by moe_experts_mxfp4's W4A8 prefill).
void round_fp8_rows(const char* op, cudaStream_t st, bf16* dst, const void* a, int dta, int64_t lda, int64_t M,
                    int64_t K);

// out[t, s, n] = sum_{k in split s} x[t, k] * w[n, k] for K split in `splits` equal ranges (K %
// (8 * splits) == 0; x bf16 or F32, w F32, out F32 [T, splits, N]): the decode GEMV batched over
// the K ranges (cuda_dense.cu), for small-N weights that would otherwise occupy a few SMs.
void gemv_split_k(CudaBackend& be, const char* op, Stream s, float* out, const void* x, DType xdt, const float* w,
                  int64_t T, int64_t N, int64_t K, int splits);

// ---------------------------------------------------------------- block scan
// Exclusive prefix sum of v over a block of kThreads threads (in thread order); *total gets the
// block's sum. wsum: kThreads / 32 ints of shared memory. All threads must call. Integer sums in
// a fixed order: the same result on every run.
template <int kThreads>
__device__ __forceinline__ int block_excl_scan(int v, int* wsum, int* total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) wsum[warp] = x;
  __syncthreads();
  if (warp == 0) {  // inclusive scan of the warp sums
    int w = lane < kWarps ? wsum[lane] : 0;
#pragma unroll
    for (int o = 1; o < kWarps; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kWarps) wsum[lane] = w;
  }
  __syncthreads();
  const int excl = x - v + (warp > 0 ? wsum[warp - 1] : 0);
  *total = wsum[kWarps - 1];
  __syncthreads();
  return excl;
}


}  // namespace sl::cuda
