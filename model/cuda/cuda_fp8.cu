// FP8 block-scaled GEMM (gemm_fp8, docs/model.md 8): e4m3 weights with one scale per 128 x 128
// block, the activation quantized per row and 128-column group as vLLM does for DeepSeek.
//
//   1-8 rows (a decode step): one kernel of our own that quantizes the activation as it goes and
//   multiplies on the tensor cores (mma.sync e4m3, fp32 accumulation), the weight codes streamed
//   once. Which kernel is the variant fp8-decode: gemm_fp8_mma_kernel (warp: a warp per 8 columns
//   walking K), gemm_fp8_wide_kernel (wide: a block's warps share K and each feeds up to 4 column
//   tiles); auto (the default) picks warp or wide by the column count (a persistent kernel
//   streaming each warp's chunks through a cp.async ring, and an L2 prefetch of each block's
//   weights, measured no faster on the H200 and were removed:
//   results/2026-12-05-h200-stream-kernels). Shapes whose columns are not whole groups of 8 take
//   the GEMV instead:
//   fp8_quantize_kernel writes a_q = e4m3(a / s) * s (exact in bf16) to the stream's scratch and
//   gemv_fp8_kernel decodes 16 codes per lane per load, each block's scale on its partial sum.
//   9 rows or more into bf16: cuBLASLt's block-scaled FP8 GEMM
//   (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F weights, VEC128_32F activations), which the
//   H200 runs for a multiple of 4 rows with the scale layouts measured in
//   results/2026-12-04-h200-fp8-cublaslt: weight scales row-major with each row of K blocks
//   padded to a multiple of 4, activation scales [K / 128, rows]. fp8_quantize_kernel<true>
//   writes the activation's e4m3 codes and that scale layout; rows beyond a multiple of 4 go
//   through the decode path.
// Every path quantizes the activation with the same rule and gives the same products; they differ
// only in the order of fp32 sums. A grouped call (wo_a) runs each group as its own cuBLASLt GEMM
// over strided activations, or the decode kernels with each column reading its group's
// activations. Also here: quantize_fp8 and quantize_mxfp4, which make native weights on the device.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "model/cuda/cuda_common.cuh"

namespace sl {

using namespace cuda;

namespace {

std::atomic<size_t> g_cublaslt_chunks{0}, g_fallbacks{0};  // cuda_fp8_path_counts()

constexpr int kBlk = 128;          // checks::kFp8Block: weight blocks and activation groups
// The GEMV takes at most this many rows at a time: a decode step's rows up to batch 8, and the
// rows past a multiple of 4 that cuBLASLt does not take. At 8 rows its FMAs about match the
// weight bandwidth, and it beats cuBLASLt's block-scaled GEMM, which costs 15-19 us on the H200
// whatever the weight's size below ~20 MB (results/2026-12-04-h200-gemm-fp8).
constexpr int kFp8GemvMaxRows = 8;
// Above this many rows cuBLASLt's tensor cores take the largest multiple of 4.
constexpr int kFp8GemvUpTo = 8;
// Weight loads in flight per lane: four 16-byte loads (64 codes) before any is used.
constexpr int kFp8GemvLoads = 4;

// One warp per (row, 128-column group): 4 values per lane, the group's amax by a butterfly.
// CODES: e4m3 codes [M, K] and scales [K / 128, ld_scale] (cuBLASLt's activation layout); else
// the quantized values a_q as bf16 [M, K].
template <bool CODES>
__global__ __launch_bounds__(256) void fp8_quantize_kernel(void* dst, float* scales, int64_t ld_scale, const void* a,
                                                           int dta, int64_t lda, int64_t M, int64_t K) {
  pdl_enter();
  const int64_t KB = K / kBlk;
  const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= M * KB) return;  // uniform per warp
  const int64_t m = gw / KB, g = gw % KB;
  float v[4], amax = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = ldf(a, dta, m * lda + g * kBlk + lane * 4 + i);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  const float s = fp8_group_scale(amax), r = 1.f / s;  // x * r == x / s exactly (s a power of two)
  const int64_t o = m * K + g * kBlk + lane * 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint8_t c = e4m3_code(v[i] * r);
    if constexpr (CODES)
      static_cast<uint8_t*>(dst)[o + i] = c;
    else
      static_cast<bf16*>(dst)[o + i] = __float2bfloat16_rn(e4m3_value(c) * s);
  }
  if (CODES && lane == 0) scales[g * ld_scale + m] = s;
}

struct Fp8GemvArgs {
  void* out;
  const bf16* aq;        // [M, lda] quantized activation rows (lda = G * K)
  const uint8_t* w;      // [N, K] e4m3 codes (N = G * Ng)
  const float* w_scale;  // [ceil(N / 128), K / 128]
  int64_t M, N, K, ldo, lda, Ng;  // column n reads the K activations of its group n / Ng
  int dto;
};

// WPC warps share one output column, each a contiguous 1/WPC of K; a lane takes 16 codes per
// load, inside one 128-block, so each partial sum gets one block scale, and issues
// kFp8GemvLoads loads (512 codes apart) before using any.
template <int WPC>
__global__ __launch_bounds__(256) void gemv_fp8_kernel(Fp8GemvArgs g) {
  pdl_enter();
  constexpr int CPB = 8 / WPC;
  __shared__ float red[8][kFp8GemvMaxRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = int64_t(blockIdx.x) * CPB + warp / WPC;
  const int part = warp % WPC;
  const int64_t kchunk = g.K / WPC;
  const int M = int(g.M);
  float acc[kFp8GemvMaxRows] = {};
  if (n < g.N) {
    const uint8_t* wr = g.w + n * g.K;
    const float* wsr = g.w_scale + (n / kBlk) * (g.K / kBlk);
    const bf16* ar = g.aq + (n / g.Ng) * g.K;
    const int64_t k1 = (part + 1) * kchunk;
    for (int64_t k0 = part * kchunk + int64_t(lane) * 16; k0 < k1; k0 += 512 * kFp8GemvLoads) {
      uint4 raw[kFp8GemvLoads];
#pragma unroll
      for (int u = 0; u < kFp8GemvLoads; ++u)
        raw[u] = k0 + 512 * u < k1 ? *reinterpret_cast<const uint4*>(wr + k0 + 512 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kFp8GemvLoads; ++u) {
        const int64_t k = k0 + 512 * u;
        if (k >= k1) break;
        const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        float wv[16];
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const __half2_raw r2 =
                __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((words[q] >> (16 * h)) & 0xFFFF), __NV_E4M3);
            const float2 f = __half22float2(__half2(r2));
            wv[q * 4 + h * 2] = f.x;
            wv[q * 4 + h * 2 + 1] = f.y;
          }
        const float ws = wsr[k / kBlk];
#pragma unroll
        for (int r = 0; r < kFp8GemvMaxRows; ++r) {
          if (r >= M) break;
          float av[2][8];
          load8(ar + r * g.lda + k, av[0]);
          load8(ar + r * g.lda + k + 8, av[1]);
          float d = 0.f;
#pragma unroll
          for (int q = 0; q < 16; ++q) d += av[q / 8][q % 8] * wv[q];
          acc[r] += d * ws;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kFp8GemvMaxRows; ++r) acc[r] = warp_sum(acc[r]);
  float v = 0.f;
  bool writer;
  if constexpr (WPC == 1) {
    writer = n < g.N && lane < M;
#pragma unroll
    for (int r = 0; r < kFp8GemvMaxRows; ++r)
      if (r == lane) v = acc[r];
  } else {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kFp8GemvMaxRows; ++r) red[warp][r] = acc[r];
    __syncthreads();
    writer = part == 0 && n < g.N && lane < M;
    if (writer)
#pragma unroll
      for (int ww = 0; ww < WPC; ++ww) v += red[warp + ww][lane];
  }
  if (writer) stf(g.out, g.dto, int64_t(lane) * g.ldo + n, v);
}

// Warps per column as for the bf16 GEMV: more while the grid is small, each warp at least one
// full step of kFp8GemvLoads loads per lane (1024 values of K).
int fp8_warps_per_column(int64_t N, int64_t K, int sms) {
  int wpc = 1;
  while (wpc < 8 && cdiv(N, 8 / wpc) < 4 * int64_t(sms) && K % (512 * kFp8GemvLoads * 2 * wpc) == 0) wpc *= 2;
  return wpc;
}

// The GEMV path for rows [0, M) of a (at most kFp8GemvMaxRows at a time); G groups of N / G
// columns (gemm_fp8's groups), each reading its own K of the row's G * K activations.
void gemm_fp8_gemv(CudaBackend& be, const char* op, Stream s, const Tensor& out, const Tensor& a, const Tensor& w,
                   const Tensor& w_scale, int64_t M, int64_t N, int64_t K, int64_t G) {
  cudaStream_t st = be.stream(s, op);
  const int64_t GK = G * K;
  const CudaBackend::Scratch sc = be.scratch(s, op, size_t(kFp8GemvMaxRows) * GK * 2);
  bf16* aq = static_cast<bf16*>(sc.ptr);
  const int wpc = fp8_warps_per_column(N, K, be.sm_count());
  const dim3 grid(unsigned(cdiv(N, 8 / wpc)));
  const size_t as = dtype_size(a.dtype), os = dtype_size(out.dtype);
  for (int64_t m0 = 0; m0 < M; m0 += kFp8GemvMaxRows) {
    const int64_t rows = std::min<int64_t>(kFp8GemvMaxRows, M - m0);
    round_fp8_rows(op, st, aq, static_cast<const char*>(a.data) + m0 * GK * as, fcode(a.dtype), GK, rows, GK);
    Fp8GemvArgs g{static_cast<char*>(out.data) + m0 * N * os, aq, w.ptr<uint8_t>(), w_scale.ptr<float>(), rows, N, K,
                  N, GK, N / G, fcode(out.dtype)};
    switch (wpc) {
      case 1: launch_kernel(op, gemv_fp8_kernel<1>, grid, 256, 0, st, g); break;
      case 2: launch_kernel(op, gemv_fp8_kernel<2>, grid, 256, 0, st, g); break;
      case 4: launch_kernel(op, gemv_fp8_kernel<4>, grid, 256, 0, st, g); break;
      default: launch_kernel(op, gemv_fp8_kernel<8>, grid, 256, 0, st, g); break;
    }
    CUDA_LAUNCH_CHECK(op, st);
  }
}

// ---------------------------------------------------------------- the tensor-core decode path
// Up to 8 rows in one kernel, the activation quantized inside it: a warp computes 8 output
// columns for the (at most 8) rows with mma.sync m16n8k32 e4m3 (rows 8-15 of the MMA's A are
// unused), K split over WPC warps of a block. Per 128-value chunk of K a thread takes 32
// consecutive weight bytes of its column (B's column = its quad, grp) and the same 32 activations
// of its row (A's row = grp), which it quantizes itself: the chunk's 128 activations are the
// quad's 4 x 32, so the group's amax is two shuffles. The dot product does not care in which
// order it visits K, so MMA j takes bytes [8j, 8j + 8) of every thread's 32 (weights as B, the
// activation codes as A in the same order) instead of the canonical K order; each chunk's four
// MMAs start from zero and their sum is scaled once by the weight block's and the row group's
// scales (c0, c1: row grp, columns 2 tig and 2 tig + 1).

struct Fp8MmaArgs {
  void* out;
  int dto;
  int64_t ldo;
  const void* a;         // [M, lda] activation rows (lda = G * K), bf16 or F32
  int64_t lda;
  const uint8_t* w;      // [N, K] e4m3 codes
  const float* w_scale;  // [ceil(N / 128), K / 128]
  int64_t M, N, K, Ng;   // Ng: columns per group (a multiple of 8)
  // gemm_fp8_pair: columns [N1, N) are a second matrix's (w2, w2_scale, written to out2 with row
  // stride ldo2), numbered from 0 there; N1 = N for one matrix. N1 is a multiple of the columns a
  // warp (warp kernel) or a block (wide kernel) takes, so none straddles it.
  int64_t N1;
  const uint8_t* w2;
  const float* w2_scale;
  void* out2;
  int64_t ldo2;
};

// The matrix of the columns starting at n0 (a warp's or a block's): g itself, or, past N1, g
// redirected to the second matrix with n0 counted from its first column.
__device__ __forceinline__ void fp8_select_matrix(Fp8MmaArgs& g, int64_t& n0) {
  if (n0 < g.N1) {
    g.N = g.N1;
    return;
  }
  n0 -= g.N1;
  g.N -= g.N1;
  g.w = g.w2;
  g.w_scale = g.w2_scale;
  g.out = g.out2;
  g.ldo = g.ldo2;
}

// D += A . B for one m16n8k32 tile of e4m3 operands, fp32 accumulation (sm_89 and later).
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four e4m3 codes, little-endian (the first value in the lowest byte).
__device__ __forceinline__ uint32_t e4m3x4(float x0, float x1, float x2, float x3) {
  return uint32_t(e4m3_code(x0)) | uint32_t(e4m3_code(x1)) << 8 | uint32_t(e4m3_code(x2)) << 16 |
         uint32_t(e4m3_code(x3)) << 24;
}

// A thread's 32 activations of one chunk as raw 16-byte words (bf16: 4, F32: 8).
template <class TA>
struct ActChunk {
  static constexpr int kWords = 32 * int(sizeof(TA)) / 16;
  uint4 raw[kWords];
  __device__ __forceinline__ void load(const TA* p, bool in) {
#pragma unroll
    for (int i = 0; i < kWords; ++i)
      raw[i] = in ? reinterpret_cast<const uint4*>(p)[i] : make_uint4(0, 0, 0, 0);
  }
  // Quantizes the chunk as vLLM quantizes an activation group (the group's 128 values are the
  // quad's 4 x 32, so its amax is two shuffles): aw = the e4m3 codes of x / s, four per word in K
  // order (the first in the lowest byte); returns the group's scale s. x / s is computed as
  // x * (1 / s): s is a power of two, so both are the same correctly rounded value, and the product
  // skips the division's slow path (which a row of zeros, every row past M, takes for each value).
  __device__ __forceinline__ float quantize(uint32_t (&aw)[8]) const {
    float x[32];
#pragma unroll
    for (int q = 0; q < 4; ++q) load8(reinterpret_cast<const TA*>(raw) + 8 * q, *reinterpret_cast<float(*)[8]>(x + 8 * q));
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float s = fp8_group_scale(amax), r = 1.f / s;
#pragma unroll
    for (int i = 0; i < 8; ++i) aw[i] = e4m3x4(x[4 * i] * r, x[4 * i + 1] * r, x[4 * i + 2] * r, x[4 * i + 3] * r);
    return s;
  }
};

// One 128-value chunk of one 8-column tile: the lane's 32 weight codes (w0, w1: bytes [0, 16) and
// [16, 32) of its column's chunk slice) against the 32 activation codes of its row in the same
// order, as four m16n8k32 MMAs from zero. c[0], c[1]: row grp, columns 2 tig and 2 tig + 1. a0 / a2
// carry row grp's bytes (a1 holds them too: whichever of a1 / a2 the layout reads for row grp's
// second K half, it gets them; rows 8-15 are discarded).
__device__ __forceinline__ void chunk_mma(float (&c)[4], const uint32_t (&aw)[8], uint4 w0, uint4 w1) {
  const uint32_t ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  c[0] = c[1] = c[2] = c[3] = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) mma_e4m3(c, aw[2 * j], aw[2 * j + 1], aw[2 * j + 1], 0u, ww[2 * j], ww[2 * j + 1]);
}

// The block's 8 warps' partial sums of NT column tiles (each had a share of K) added up: every
// lane posts its two accumulators per tile, then thread x < 64 NT stores one (tile, row, column).
// Ends with every thread past the barrier; the caller syncs again before reusing `red`.
template <int NT>
__device__ __forceinline__ void sum_warps_and_store(float (&red)[8][NT][64], const float (&acc)[NT][2], int64_t n0,
                                                    const Fp8MmaArgs& g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    red[warp][t][grp * 8 + 2 * tig] = acc[t][0];
    red[warp][t][grp * 8 + 2 * tig + 1] = acc[t][1];
  }
  __syncthreads();
  const int x = threadIdx.x;
  if (x >= NT * 64) return;
  const int t = x / 64, e = x % 64, row = e / 8;
  const int64_t n = n0 + 8 * t + e % 8;
  if (row >= g.M || n >= g.N) return;
  float v = 0.f;
#pragma unroll
  for (int w = 0; w < 8; ++w) v += red[w][t][e];
  stf(g.out, g.dto, int64_t(row) * g.ldo + n, v);
}

template <int WPC, class TA>
__global__ __launch_bounds__(256) void gemm_fp8_mma_kernel(Fp8MmaArgs g) {
  pdl_enter();
  constexpr int GPB = 8 / WPC;  // groups of 8 columns per block
  constexpr int kChunks = 2;    // 128-value chunks of K in flight per thread
  __shared__ float red[8][64];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  int64_t n0 = (int64_t(blockIdx.x) * GPB + warp / WPC) * 8;
  fp8_select_matrix(g, n0);
  const int part = warp % WPC;
  const int64_t KB = g.K / kBlk;
  const int64_t kb0 = part * KB / WPC, kb1 = (part + 1) * KB / WPC;
  float acc0 = 0.f, acc1 = 0.f;
  const bool cols = n0 < g.N;  // uniform per warp: the quad shuffles below need every lane
  const uint8_t* wr = g.w + min(n0 + grp, g.N - 1) * g.K + tig * 32;
  const float* wsr = g.w_scale + (min(n0, g.N - 1) / kBlk) * KB;
  // One step's weights: kChunks chunks of the lane's 32 codes, and their block scales.
  struct Weights {
    uint4 wv[kChunks][2];
    float ws[kChunks];
  };
  auto load_weights = [&](int64_t kb, Weights& w) {
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const bool in = cols && kb + u < kb1;
      const uint4* wp = reinterpret_cast<const uint4*>(wr + (kb + u) * kBlk);
      w.wv[u][0] = in ? wp[0] : make_uint4(0, 0, 0, 0);
      w.wv[u][1] = in ? wp[1] : make_uint4(0, 0, 0, 0);
      w.ws[u] = in ? wsr[kb + u] : 0.f;
    }
  };
  const bool row_ok = grp < g.M;
  const TA* ar = static_cast<const TA*>(g.a) + (row_ok ? grp : 0) * g.lda + (min(n0, g.N - 1) / g.Ng) * g.K + tig * 32;
  auto step = [&](int64_t kb, const Weights& w) {
    ActChunk<TA> act[kChunks];
#pragma unroll
    for (int u = 0; u < kChunks; ++u) act[u].load(ar + (kb + u) * kBlk, kb + u < kb1 && row_ok);
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      if (kb + u >= kb1) break;
      uint32_t aw[8];
      const float s = act[u].quantize(aw);
      float c[4];
      chunk_mma(c, aw, w.wv[u][0], w.wv[u][1]);
      const float f = w.ws[u] * s;
      acc0 += c[0] * f;
      acc1 += c[1] * f;
    }
  };
  if (cols) {
    for (int64_t kb = kb0; kb < kb1; kb += kChunks) {
      Weights w;
      load_weights(kb, w);
      step(kb, w);
    }
  }
  red[warp][grp * 8 + 2 * tig] = acc0;
  red[warp][grp * 8 + 2 * tig + 1] = acc1;
  __syncthreads();
  if (part != 0 || n0 >= g.N || grp >= g.M) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + 2 * tig + h;
    if (n >= g.N) continue;
    float v = 0.f;
#pragma unroll
    for (int ww = 0; ww < WPC; ++ww) v += red[warp + ww][grp * 8 + 2 * tig + h];
    stf(g.out, g.dto, int64_t(grp) * g.ldo + n, v);
  }
}

// The wide decode kernel (fp8-decode=wide; fp8-decode=auto takes it from 4096 columns, where it
// measured faster than gemm_fp8_mma_kernel on the H200: results/2026-12-04-h200-fp8-decode): a
// block takes NT x 8 columns and
// all of K, each of its 8 warps a strided share of K's 128-value chunks (warp w: chunks
// [w CH, w CH + CH), then 8 CH further on), so the block's reads start at once instead of a warp
// walking K alone. Per chunk a warp quantizes its 32 x 8 activations once and feeds them to NT
// MMA column tiles, and each lane has NT x CH x 32 weight bytes in flight before it computes
// (NT x CH = 4: 128 bytes). The same permuted K order and scale rule as gemm_fp8_mma_kernel, so
// both give the same products; the 8 warps' partial sums meet in shared memory.
// MINB: blocks per SM the registers are budgeted for. At 1 (no minimum given to the compiler, as
// measured) the 4-tile kernel takes 134 registers, so an SM holds one block, 8 warps, and Nsight
// Compute found no warp ready 55 % of the time (results/2026-12-05-h200-stream-kernels); variant
// fp8-wide-blocks=2 caps it at 128 for two.
template <int NT, class TA, int MINB>
__global__ __launch_bounds__(256, MINB > 1 ? MINB : 0) void gemm_fp8_wide_kernel(Fp8MmaArgs g) {
  pdl_enter();
  constexpr int CH = 4 / NT;  // 128-value chunks per warp step
  __shared__ float red[8][NT][64];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  int64_t n0 = int64_t(blockIdx.x) * NT * 8;
  fp8_select_matrix(g, n0);
  const int64_t KB = g.K / kBlk;
  const bool row_ok = grp < g.M;
  // The block's columns lie in one activation group and one row of weight blocks (the host picks
  // NT so that 8 NT divides the group width; 8 NT divides 128).
  const TA* ar = static_cast<const TA*>(g.a) + (row_ok ? grp : 0) * g.lda + (n0 / g.Ng) * g.K + tig * 32;
  const float* wsr = g.w_scale + (n0 / kBlk) * KB;
  // Tile t's weight row as a 32-bit offset from tile 0's (fewer registers than NT pointers).
  const int64_t row0 = min(n0 + grp, g.N - 1);
  const uint8_t* wr0 = g.w + row0 * g.K + tig * 32;
  uint32_t woff[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) woff[t] = uint32_t((min(n0 + 8 * t + grp, g.N - 1) - row0) * g.K);
  float acc[NT][2] = {};
  // One step's weights: CH chunks of NT tiles' 32 codes per lane, and the chunks' block scales.
  struct Weights {
    uint4 wv[CH][NT][2];
    float ws[CH];
  };
  auto load_weights = [&](int64_t kb, Weights& w) {
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const bool in = kb + u < KB;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint4* wp = reinterpret_cast<const uint4*>(wr0 + woff[t] + (kb + u) * kBlk);
        w.wv[u][t][0] = in ? __ldg(wp) : make_uint4(0, 0, 0, 0);
        w.wv[u][t][1] = in ? __ldg(wp + 1) : make_uint4(0, 0, 0, 0);
      }
      w.ws[u] = in ? wsr[kb + u] : 0.f;
    }
  };
  auto step = [&](int64_t kb, const Weights& w) {
    ActChunk<TA> act[CH];
#pragma unroll
    for (int u = 0; u < CH; ++u) act[u].load(ar + (kb + u) * kBlk, kb + u < KB && row_ok);
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      if (kb + u >= KB) break;  // uniform per warp
      uint32_t aw[8];
      const float s = act[u].quantize(aw);
      const float f = w.ws[u] * s;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float c[4];
        chunk_mma(c, aw, w.wv[u][t][0], w.wv[u][t][1]);
        acc[t][0] += c[0] * f;
        acc[t][1] += c[1] * f;
      }
    }
  };
  for (int64_t kb = int64_t(warp) * CH; kb < KB; kb += 8 * CH) {
    Weights w;
    load_weights(kb, w);
    step(kb, w);
  }
  sum_warps_and_store<NT>(red, acc, n0, g);
}

// Column tiles per column block of the wide kernel: the most (up to 4) that still
// gives every SM a block and divides the group width.
int fp8_wide_tiles(int64_t N, int64_t Ng, int sms) {
  for (int nt : {4, 2})
    if (Ng % (8 * nt) == 0 && cdiv(N, 8 * nt) >= sms) return nt;
  return 1;
}

template <class TA, int MINB>
void launch_fp8_wide(const char* op, cudaStream_t st, int nt, int64_t N, const Fp8MmaArgs& g) {
  const dim3 grid(unsigned(cdiv(N, 8 * nt)));
  switch (nt) {
    case 4: launch_kernel(op, gemm_fp8_wide_kernel<4, TA, MINB>, grid, 256, 0, st, g); break;
    case 2: launch_kernel(op, gemm_fp8_wide_kernel<2, TA, MINB>, grid, 256, 0, st, g); break;
    default: launch_kernel(op, gemm_fp8_wide_kernel<1, TA, MINB>, grid, 256, 0, st, g); break;
  }
  CUDA_LAUNCH_CHECK(op, st);
}

template <class TA>
void launch_fp8_wide(const char* op, cudaStream_t st, int nt, int64_t N, const Fp8MmaArgs& g, int blocks_per_sm) {
  if (blocks_per_sm >= 2)
    launch_fp8_wide<TA, 2>(op, st, nt, N, g);
  else
    launch_fp8_wide<TA, 1>(op, st, nt, N, g);
}

// Warps per 8-column group: more while the grid is under two blocks per SM and each warp keeps at
// least two chunks of each of its kChunks-wide steps.
int fp8_mma_warps_per_group(int64_t N, int64_t K, int sms) {
  const int64_t groups = cdiv(N, 8), KB = K / kBlk;
  int wpc = 1;
  while (wpc < 8 && cdiv(groups * wpc, 8) < 2 * int64_t(sms) && KB / (2 * wpc) >= 2) wpc *= 2;
  return wpc;
}

template <class TA>
void launch_fp8_mma(const char* op, cudaStream_t st, int wpc, int64_t groups, const Fp8MmaArgs& g) {
  const dim3 grid(unsigned(cdiv(groups, 8 / wpc)));
  switch (wpc) {
    case 1: launch_kernel(op, gemm_fp8_mma_kernel<1, TA>, grid, 256, 0, st, g); break;
    case 2: launch_kernel(op, gemm_fp8_mma_kernel<2, TA>, grid, 256, 0, st, g); break;
    case 4: launch_kernel(op, gemm_fp8_mma_kernel<4, TA>, grid, 256, 0, st, g); break;
    default: launch_kernel(op, gemm_fp8_mma_kernel<8, TA>, grid, 256, 0, st, g); break;
  }
  CUDA_LAUNCH_CHECK(op, st);
}

// The decode kernel a call of N columns runs under the variant: auto takes the wide kernel from
// 4096 columns (wq_b, wo_a, wo_b, the shared expert's w2, indexer.wq_b: 9-27 % faster than the
// warp kernel in one bench_kernels run at 28a5429) and the warp kernel below (wq_a, wkv, the
// shared expert's w1: equal or up to 22 % faster).
Fp8Decode fp8_decode_kernel(Fp8Decode v, int64_t N) {
  if (v != Fp8Decode::Auto) return v;
  return N >= 4096 ? Fp8Decode::Wide : Fp8Decode::Warp;
}

// Rows [0, M) of a on the tensor-core decode path, 8 rows per launch. N and the group width must
// be multiples of 8 (gemm_fp8 checks before calling).
// One decode launch of up to 8 rows, the kernel chosen for g's width under the variant (bf: bf16
// activations, else F32). The wide kernel's column tiles shrink until no block crosses g.N1 (a
// pair's second matrix; for one matrix N1 = N, a multiple of the tiles already).
void launch_fp8_decode(CudaBackend& be, const char* op, cudaStream_t st, const Fp8MmaArgs& g, bool bf) {
  if (fp8_decode_kernel(be.variants().fp8_decode, g.N) == Fp8Decode::Wide) {
    int nt = fp8_wide_tiles(g.N, g.Ng, be.sm_count());
    while (nt > 1 && g.N1 % (8 * nt) != 0) nt /= 2;
    const int bps = be.variants().fp8_wide_blocks;
    if (bf)
      launch_fp8_wide<bf16>(op, st, nt, g.N, g, bps);
    else
      launch_fp8_wide<float>(op, st, nt, g.N, g, bps);
  } else {
    const int wpc = fp8_mma_warps_per_group(g.N, g.K, be.sm_count());
    if (bf)
      launch_fp8_mma<bf16>(op, st, wpc, cdiv(g.N, 8), g);
    else
      launch_fp8_mma<float>(op, st, wpc, cdiv(g.N, 8), g);
  }
}

void gemm_fp8_mma(CudaBackend& be, const char* op, Stream s, const Tensor& out, const Tensor& a, const Tensor& w,
                  const Tensor& w_scale, int64_t M, int64_t N, int64_t K, int64_t G) {
  cudaStream_t st = be.stream(s, op);
  const size_t as = dtype_size(a.dtype), os = dtype_size(out.dtype);
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const Fp8MmaArgs g{static_cast<char*>(out.data) + m0 * N * os, fcode(out.dtype), N,
                       static_cast<const char*>(a.data) + m0 * G * K * as, G * K, w.ptr<uint8_t>(), w_scale.ptr<float>(),
                       std::min<int64_t>(8, M - m0), N, K, N / G, N, nullptr, nullptr, nullptr, 0};
    launch_fp8_decode(be, op, st, g, a.dtype == DType::BF16);
  }
}

// One decode launch for the columns of both matrices of a pair; the kernel is chosen for the
// pair's total width. False when the shapes do not allow it (the caller runs two gemm_fp8).
bool gemm_fp8_pair_mma(CudaBackend& be, const char* op, Stream s, const Tensor& out1, const Tensor& out2,
                       const Tensor& a, const Tensor& w1, const Tensor& w1_scale, const Tensor& w2,
                       const Tensor& w2_scale, int64_t M, int64_t N1, int64_t N2, int64_t K) {
  const int64_t N = N1 + N2;
  if (M < 1 || M > kFp8GemvUpTo || N == 0 || N1 % 8 != 0 || N2 % 8 != 0) return false;
  const Fp8MmaArgs g{out1.data, fcode(out1.dtype), N1, a.data, K, w1.ptr<uint8_t>(), w1_scale.ptr<float>(),
                     M, N, K, N, N1, w2.ptr<uint8_t>(), w2_scale.ptr<float>(), out2.data, N2};
  launch_fp8_decode(be, op, be.stream(s, op), g, a.dtype == DType::BF16);
  return true;
}

#define LT_CHECK(op, call)                                                                           \
  do {                                                                                               \
    const cublasStatus_t lt_st_ = (call);                                                            \
    SL_CHECK(lt_st_ == CUBLAS_STATUS_SUCCESS, op, ": ", #call, " failed: ", cublasGetStatusName(lt_st_)); \
  } while (0)

// A cuBLASLt FP8 GEMM of one shape: descriptors and the algorithm cuBLASLt's heuristic picked,
// made once per (N, K, rows, workspace) and kept for the process (creating them and asking the
// heuristic costs tens of microseconds of host time, more than the GEMM at decode sizes).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// The plan for D[N, c] = W[N, K] . X[c, K]^T, or null when cuBLASLt has no algorithm for it. X's
// rows are G * K apart and D's columns G * N apart (one group of a grouped gemm_fp8). The
// heuristic wants the scale pointers set (without them it finds no algorithm): those of the call
// that makes the plan; later calls set their own.
const LtPlan* lt_plan(const char* op, const CudaBackend::LtCall& lt, int64_t N, int64_t K, int64_t c, int64_t G,
                      const void* sa, const void* sb) {
  static std::mutex mu;
  static std::map<std::array<int64_t, 5>, std::unique_ptr<LtPlan>> plans;  // null: no algorithm
  std::lock_guard<std::mutex> lock(mu);
  const std::array<int64_t, 5> key{N, K, c, G, int64_t(lt.workspace_bytes)};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  auto p = std::make_unique<LtPlan>();
  LT_CHECK(op, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
  LT_CHECK(op, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
  LT_CHECK(op, cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, uint64_t(K), uint64_t(N), K));
  LT_CHECK(op, cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, uint64_t(K), uint64_t(c), G * K));
  LT_CHECK(op, cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, uint64_t(N), uint64_t(c), G * N));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(op, cublasLtMatmulPreferenceCreate(&pref));
  size_t ws_bytes = lt.workspace_bytes;
  const cublasStatus_t ps =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const cublasStatus_t hs =
      ps == CUBLAS_STATUS_SUCCESS ? cublasLtMatmulAlgoGetHeuristic(lt.handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &heur, &found) : ps;
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->d);
    plans[key] = nullptr;
    return nullptr;
  }
  p->algo = heur.algo;
  return (plans[key] = std::move(p)).get();
}

// The cuBLASLt path over `rows` rows (a multiple of 4) starting at row m0, in chunks that fit the
// scratch; G groups of N columns (N a multiple of 128 when G > 1, so that each group's weight
// scales are whole rows of blocks), one cuBLASLt call per group. Returns false, having run
// nothing, when cuBLASLt has no algorithm for the shape.
bool gemm_fp8_cublaslt(CudaBackend& be, const char* op, Stream s, const Tensor& out, const Tensor& a, const Tensor& w,
                       const Tensor& w_scale, int64_t rows, int64_t N, int64_t K, int64_t G) {
  cudaStream_t st = be.stream(s, op);
  const CudaBackend::LtCall lt = be.lt(s, op);
  const int64_t KB = K / kBlk, NB = cdiv(G * N, kBlk), KB4 = cdiv(KB, 4) * 4, GK = G * K;
  const size_t wsc_bytes = KB4 == KB ? 0 : size_t(NB * KB4) * 4;
  const CudaBackend::Scratch sc = be.scratch(s, op, wsc_bytes + size_t(4) * (GK + G * KB * 4));
  // Rows per chunk: a multiple of 4 whose codes and scales fit beside the padded weight scales.
  int64_t chunk = int64_t((sc.bytes - wsc_bytes) / size_t(GK + G * KB * 4)) / 4 * 4;
  chunk = std::min(chunk, rows);
  char* base = static_cast<char*>(sc.ptr);
  const float* wscale = w_scale.ptr<float>();
  if (wsc_bytes) {  // each row of K blocks padded to a multiple of 4 (the padding is never read)
    CUDA_CHECK(op, cudaMemcpy2DAsync(base, size_t(KB4) * 4, wscale, size_t(KB) * 4, size_t(KB) * 4, size_t(NB),
                                     cudaMemcpyDeviceToDevice, st));
    wscale = reinterpret_cast<const float*>(base);
  }
  uint8_t* codes = reinterpret_cast<uint8_t*>(base + wsc_bytes);
  float* ascale = reinterpret_cast<float*>(base + wsc_bytes + size_t(chunk) * GK);

  bool ok = true;
  for (int64_t m0 = 0; m0 < rows && ok; m0 += chunk) {
    const int64_t c = std::min(chunk, rows - m0);
    // The scale pointers change from call to call (each weight has its own; the activation's live
    // in this stream's scratch): set on the plan's descriptor, which cublasLtMatmul reads at the call.
    const LtPlan* plan = lt_plan(op, lt, N, K, c, G, wscale, ascale);
    if (!plan) {
      SL_CHECK(m0 == 0, op, ": cuBLASLt has no FP8 algorithm for ", c, " rows after running ", m0);
      ok = false;
      break;
    }
    // The activation's codes [c, G * K] and scales [G * K / 128, c]: group g's are the K columns
    // at g * K (rows G * K apart) and the c * K / 128 scales at g * KB * c.
    launch_kernel(op, fp8_quantize_kernel<true>, dim3(unsigned(cdiv(c * G * KB * 32, 256))), 256, 0, st,
                  static_cast<void*>(codes), ascale, c,
                  static_cast<const void*>(static_cast<const char*>(a.data) + m0 * GK * dtype_size(a.dtype)),
                  fcode(a.dtype), GK, c, GK);
    CUDA_LAUNCH_CHECK(op, st);
    for (int64_t g = 0; g < G; ++g) {
      const void* sa = wscale + (g * N / kBlk) * KB4;
      const void* sb = ascale + g * KB * c;
      LT_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
      LT_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
      const float alpha = 1.f, beta = 0.f;
      void* d = static_cast<bf16*>(out.data) + m0 * G * N + g * N;
      LT_CHECK(op, cublasLtMatmul(lt.handle, plan->desc, &alpha, w.ptr<uint8_t>() + g * N * K, plan->a, codes + g * K,
                                  plan->b, &beta, d, plan->d, d, plan->d, &plan->algo, lt.workspace, lt.workspace_bytes,
                                  st));
    }
    ++g_cublaslt_chunks;
  }
  return ok;
}

}  // namespace

void CudaBackend::gemm_fp8(Stream s, const Tensor& out, const Tensor& a, const Tensor& w, const Tensor& w_scale,
                           int groups) {
  const char* op = "gemm_fp8";
  const auto [M, N, K, G] = checks::validate_gemm_fp8<OpRules>(out, a, w, w_scale, groups);
  stream(s, op);
  if (M == 0 || N == 0) return;
  check_aligned(op, "w", w.data, 16);
  check_aligned(op, "a", a.data, 16);
  note_gemm(s, op);
  // cuBLASLt's tensor cores above kFp8GemvUpTo rows into bf16, over the largest multiple of 4;
  // the rest (a decode step's rows) on the GEMV. A grouped call needs groups of whole 128-row
  // weight blocks for cuBLASLt (the tiny configs' wo_a has 64-row groups: all on the GEMV).
  int64_t done = 0;
  if (M > kFp8GemvUpTo && out.dtype == DType::BF16 && N % 16 == 0 && (G == 1 || N % kBlk == 0)) {
    if (gemm_fp8_cublaslt(*this, op, s, out, a, w, w_scale, M / 4 * 4, N, K, G))
      done = M / 4 * 4;
    else
      ++g_fallbacks;
  }
  if (done < M) {
    const size_t as = dtype_size(a.dtype), os = dtype_size(out.dtype);
    Tensor a_rest = a, out_rest = out;
    a_rest.data = static_cast<char*>(a.data) + done * G * K * as;
    out_rest.data = static_cast<char*>(out.data) + done * G * N * os;
    // The tensor-core decode path needs whole 8-column groups inside each weight group; the GEMV
    // takes any shape.
    if ((G * N) % 8 == 0 && N % 8 == 0)
      gemm_fp8_mma(*this, op, s, out_rest, a_rest, w, w_scale, M - done, G * N, K, G);
    else
      gemm_fp8_gemv(*this, op, s, out_rest, a_rest, w, w_scale, M - done, G * N, K, G);
  }
}

// Two projections of one input (wq_a and wkv; the shared expert's w1 and w3) as one decode launch
// under the variant fp8-pair=on: both matrices' columns in one grid, each warp (warp kernel) or
// block (wide kernel) on one matrix, the same products as two gemm_fp8 calls. Other shapes, more
// than 8 rows, and the variant off (the default until a GPU has timed it) run the two gemm_fp8.
void CudaBackend::gemm_fp8_pair(Stream s, const Tensor& out1, const Tensor& out2, const Tensor& a, const Tensor& w1,
                                const Tensor& w1_scale, const Tensor& w2, const Tensor& w2_scale) {
  const char* op = "gemm_fp8_pair";
  const auto [M, N1, K, G1] = checks::validate_gemm_fp8<OpRules>(out1, a, w1, w1_scale, 1);
  const auto [M2, N2, K2, G2] = checks::validate_gemm_fp8<OpRules>(out2, a, w2, w2_scale, 1);
  stream(s, op);
  if (variants().fp8_pair && M == M2 && K == K2 && out1.dtype == out2.dtype && !overlaps(out1, out2)) {
    check_aligned(op, "w1", w1.data, 16);
    check_aligned(op, "w2", w2.data, 16);
    check_aligned(op, "a", a.data, 16);
    note_gemm(s, op);
    if (gemm_fp8_pair_mma(*this, op, s, out1, out2, a, w1, w1_scale, w2, w2_scale, M, N1, N2, K)) return;
  }
  Backend::gemm_fp8_pair(s, out1, out2, a, w1, w1_scale, w2, w2_scale);
}

// ---------------------------------------------------------------- the native formats' quantizers
// (quantize_fp8, quantize_mxfp4): the same rules and float operations as core/fp8.cpp, so the
// codes and scales equal the host's bit for bit (the GPU tests compare them byte by byte).

namespace {

// One block per 128 x 128 tile of src [rows, cols]: the tile's amax, its power-of-two scale, then
// every code. 256 threads: a thread takes columns threadIdx.x % 128 of every other row.
__global__ __launch_bounds__(256) void quantize_fp8_kernel(uint8_t* codes, float* scale, const float* src,
                                                           int64_t rows, int64_t cols) {
  pdl_enter();
  __shared__ float red[8];
  const int64_t r0 = int64_t(blockIdx.y) * kBlk, c = int64_t(blockIdx.x) * kBlk + (threadIdx.x & 127);
  const int64_t r1 = min(rows, r0 + kBlk);
  const int half = threadIdx.x >> 7;
  float amax = 0.f;
  if (c < cols)
    for (int64_t r = r0 + half; r < r1; r += 2) amax = fmaxf(amax, fabsf(src[r * cols + c]));
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = red[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) amax = fmaxf(amax, red[i]);
  const float s = fp8_group_scale(amax);
  if (threadIdx.x == 0) scale[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = s;
  if (c < cols)
    for (int64_t r = r0 + half; r < r1; r += 2) codes[r * cols + c] = e4m3_code(src[r * cols + c] / s);
}

// e2m1 of x: the nearest of the eight magnitudes, a tie to the even code; saturating; NaN -> 0.
__device__ __forceinline__ uint8_t e2m1_code(float x) {
  if (isnan(x)) return 0;
  const uint8_t sign = signbit(x) ? 8 : 0;
  const float a = fabsf(x);
  if (a >= 6.f) return sign | 7;
  const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  int best = 0;
#pragma unroll
  for (int c = 1; c < 8; ++c) {
    const float d = fabsf(a - mags[c]), db = fabsf(a - mags[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return sign | uint8_t(best);
}

// One thread per 32 consecutive values of a row: the MX scale 2^(floor(log2 amax) - 2), then 16
// bytes of packed codes.
__global__ __launch_bounds__(256) void quantize_mxfp4_kernel(uint8_t* packed, uint8_t* scales, const float* src,
                                                             int64_t groups) {
  pdl_enter();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const float* v = src + g * 32;
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  int exp = 0;
  if (amax > 0.f && isfinite(amax)) {
    int e = 0;
    frexpf(amax, &e);
    exp = max(-127, min(127, e - 1 - 2));
  }
  scales[g] = uint8_t(exp + 127);
  for (int i = 0; i < 32; i += 2)
    packed[g * 16 + i / 2] = uint8_t(e2m1_code(ldexpf(v[i], -exp)) | e2m1_code(ldexpf(v[i + 1], -exp)) << 4);
}

}  // namespace

void CudaBackend::quantize_fp8(Stream s, const Tensor& codes, const Tensor& scale, const Tensor& src) {
  const char* op = "quantize_fp8";
  cudaStream_t st = stream(s, op);
  const auto [rows, cols] = checks::validate_quantize_fp8<OpRules>(codes, scale, src);
  if (rows == 0) return;
  const dim3 grid(unsigned(cdiv(cols, kBlk)), unsigned(cdiv(rows, kBlk)));
  SL_CHECK(cdiv(rows, kBlk) <= 65535, op, ": ", rows, " rows is more than this kernel's grid takes");
  launch_kernel(op, quantize_fp8_kernel, grid, 256, 0, st, codes.ptr<uint8_t>(), scale.ptr<float>(), src.ptr<float>(),
                rows, cols);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::quantize_mxfp4(Stream s, const Tensor& packed, const Tensor& scales, const Tensor& src) {
  const char* op = "quantize_mxfp4";
  cudaStream_t st = stream(s, op);
  const auto [rows, cols] = checks::validate_quantize_mxfp4<OpRules>(packed, scales, src);
  const int64_t groups = rows * (cols / 32);
  if (groups == 0) return;
  launch_kernel(op, quantize_mxfp4_kernel, dim3(unsigned(cdiv(groups, 256))), 256, 0, st, packed.ptr<uint8_t>(),
                scales.ptr<uint8_t>(), src.ptr<float>(), groups);
  CUDA_LAUNCH_CHECK(op, st);
}

Fp8PathCounts cuda_fp8_path_counts() { return {g_cublaslt_chunks.load(), g_fallbacks.load()}; }

void cuda::round_fp8_rows(const char* op, cudaStream_t st, bf16* dst, const void* a, int dta, int64_t lda, int64_t M,
                          int64_t K) {
  if (M == 0) return;
  launch_kernel(op, fp8_quantize_kernel<false>, dim3(unsigned(cdiv(M * (K / kBlk) * 32, 256))), 256, 0, st,
                static_cast<void*>(dst), static_cast<float*>(nullptr), int64_t(0), a, dta, lda, M, K);
  CUDA_LAUNCH_CHECK(op, st);
}

}  // namespace sl
