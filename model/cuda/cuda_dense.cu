// Dense math and the small token ops of the CUDA backend: gemm / gemm_grouped (cuBLAS, with a
// SIMT kernel for dtype mixes cuBLAS does not take), rmsnorm, add, rope, swiglu, embed,
// argmax, gather_rows, shift_tokens.
#include <algorithm>
#include <cfloat>
#include <cstdlib>

#include "model/cuda/cuda_common.cuh"

namespace sl {

using namespace cuda;

namespace {

// ================================================================ GEMM fallback kernels
// out[b][m, n] = sum_k a[b][m, k] * w[b][n, k], fp32 accumulation, for dtype mixes that
// cublasGemmEx has no kernel for (e.g. the router: bf16 activations times an F32 gate weight ->
// F32 logits). Batch b (blockIdx.z) offsets a, w, out by their strides (gemm_grouped).

struct GemmArgs {
  void* out;
  const void* a;
  const void* w;
  int64_t M, N, K;
  int64_t lda, ldw, ldo;      // row strides (elements)
  int64_t sa, sw, so;         // batch strides (elements)
  // The two-matrix GEMVs only: the second weight (same K and row stride as w); gemm_swiglu: the
  // SwiGLU clamp; gemm_pair: the second output (columns N .. N + N2 of the launch).
  const void* w3 = nullptr;
  float limit = 0.f;
  void* out2 = nullptr;
  int64_t N2 = 0, ldo2 = 0;
};

// What a GEMV launch computes: out = a . w^T; out = swiglu(a . w^T, a . w3^T) (gemm_swiglu); or
// out = a . w^T and out2 = a . w3^T as one column range (gemm_pair).
enum class GemvMode { Plain, Swiglu, Pair };

// Tiled SIMT kernel: a 64x64 output tile per block of 256 threads, each thread a 4x4 sub-tile;
// K in steps of 16 through shared memory (a and w tiles stored k-major, as fp32). Each w element
// is read from global memory once per 64-row tile of a.
template <class TA, class TW, class TO>
__global__ __launch_bounds__(256) void gemm_nt_tiled_kernel(GemmArgs g) {
  pdl_enter();
  constexpr int BM = 64, BN = 64, BK = 16;
  __shared__ float As[BK][BM + 4];
  __shared__ float Ws[BK][BN + 4];
  const TA* a = static_cast<const TA*>(g.a) + blockIdx.z * g.sa;
  const TW* w = static_cast<const TW*>(g.w) + blockIdx.z * g.sw;
  TO* out = static_cast<TO*>(g.out) + blockIdx.z * g.so;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < g.K; k0 += BK) {
    // 64 rows x 16 k of each operand: 1024 elements, 4 per thread; consecutive threads read
    // consecutive k of one row.
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = tid + 256 * r, row = e / BK, kk = e % BK;
      const int64_t k = k0 + kk;
      const int64_t m = m0 + row, n = n0 + row;
      As[kk][row] = (m < g.M && k < g.K) ? to_f(a[m * g.lda + k]) : 0.f;
      Ws[kk][row] = (n < g.N && k < g.K) ? to_f(w[n * g.ldw + k]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = As[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = Ws[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty * 4 + i;
    if (m >= g.M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx * 4 + j;
      if (n < g.N) out[m * g.ldo + n] = from_f<TO>(acc[i][j]);
    }
  }
}

// Skinny kernel for M <= 16 (decode): one block (8 warps) per output column n and chunk of 8
// rows; the 256 threads stride over K together (coalesced reads of the w row, each w element read
// once per row chunk), butterfly sums per warp, then the 8 warps added in order.
template <class TA, class TW, class TO>
__global__ __launch_bounds__(256) void gemm_nt_skinny_kernel(GemmArgs g) {
  pdl_enter();
  constexpr int MR = 8;
  __shared__ float red[8][MR];
  const TA* a = static_cast<const TA*>(g.a) + blockIdx.z * g.sa;
  const TW* w = static_cast<const TW*>(g.w) + blockIdx.z * g.sw;
  TO* out = static_cast<TO*>(g.out) + blockIdx.z * g.so;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.x, r0 = int64_t(blockIdx.y) * MR;
  const int64_t nr = min(int64_t(MR), g.M - r0);
  float acc[MR] = {};
  const TW* wr = w + n * g.ldw;
  #pragma unroll 4
  for (int64_t k = threadIdx.x; k < g.K; k += 256) {
    const float wv = to_f(wr[k]);
#pragma unroll
    for (int r = 0; r < MR; ++r)
      if (r < nr) acc[r] += to_f(a[(r0 + r) * g.lda + k]) * wv;
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < nr) {
    float s = 0.f;
#pragma unroll
    for (int ww = 0; ww < 8; ++ww) s += red[ww][threadIdx.x];
    out[(r0 + threadIdx.x) * g.ldo + n] = from_f<TO>(s);
  }
}

// ---------------------------------------------------------------- decode GEMV (M <= 8)
// Weight-bandwidth-bound matrix-vector products at decode sizes: the dtype mixes cuBLAS has no
// kernel for (the router: bf16 activations x F32 gate -> F32; the hc mix GEMM, F32 fn), and the
// small bf16 weights at M <= 2 (bf16_gemv_takes). Every weight element is read once with 16-byte
// loads (8 values), several loads in flight per lane, and used for all M rows (a is tiny and
// stays in L1/L2). WPC warps share one output column, each taking a contiguous 1/WPC of K, so
// that a small matrix (wq_a: N = 1024, K = 4096) still puts several warps on every SM; a block
// holds 8 / WPC columns. (At M = 8 it becomes compute-bound: those GEMMs stay on cuBLAS.)
// Sums run in a fixed order (lane k-strides, butterfly, the column's warps in order):
// deterministic, and a row's result does not depend on M.
constexpr int kGemvMaxRows = 8;

//
// SWIGLU (gemm_swiglu): each warp also streams the same column of w3 and the block writes
// out = swiglu(g, u) of the two products, each rounded to the output type first, as the three
// separate ops would store g and u (the two sums run in exactly the plain kernel's order).
//
// Pair (gemm_pair): columns N .. N + N2 are w3's rows and go to out2, so two projections of the
// same input (wq_a and wkv) are one launch; each column is computed exactly as a Plain launch
// of its own matrix would.
template <int WPC, class TA, class TW, class TO, GemvMode MODE = GemvMode::Plain>
__global__ __launch_bounds__(256) void gemv_kernel(GemmArgs g) {
  pdl_enter();
  constexpr bool SWIGLU = MODE == GemvMode::Swiglu;
  constexpr int CPB = 8 / WPC;  // columns per block
  constexpr int NM = SWIGLU ? 2 : 1;  // matrices streamed: w, and w3 with SWIGLU
  __shared__ float red[NM][8][kGemvMaxRows];
  const TA* a = static_cast<const TA*>(g.a) + blockIdx.z * g.sa;
  const TW* w = static_cast<const TW*>(g.w) + blockIdx.z * g.sw;
  TO* out = static_cast<TO*>(g.out) + blockIdx.z * g.so;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t n = int64_t(blockIdx.x) * CPB + warp / WPC;
  int64_t N = g.N, ldo = g.ldo;  // the columns of this warp's matrix, and its output's row stride
  if constexpr (MODE == GemvMode::Pair) {
    if (n >= g.N) {  // the second matrix: its row n - N, written to out2
      n -= g.N;
      w = static_cast<const TW*>(g.w3);
      out = static_cast<TO*>(g.out2);
      N = g.N2;
      ldo = g.ldo2;
    }
  }
  const int part = warp % WPC;
  const int64_t kchunk = g.K / WPC;  // a multiple of 8 (launch_gemv)
  const int M = int(g.M);
  float acc[NM][kGemvMaxRows] = {};
  if (n < N) {
    const TW* wr[NM];
    wr[0] = w + n * g.ldw;
    if constexpr (SWIGLU) wr[NM - 1] = static_cast<const TW*>(g.w3) + blockIdx.z * g.sw + n * g.ldw;
    const int64_t k1 = (part + 1) * kchunk;
#pragma unroll 4
    for (int64_t k = part * kchunk + int64_t(lane) * 8; k < k1; k += 256) {
      float wv[NM][8];
#pragma unroll
      for (int m = 0; m < NM; ++m) load8(wr[m] + k, wv[m]);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r >= M) break;
        float av[8];
        load8(a + r * g.lda + k, av);
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[m][r] += av[q] * wv[m][q];
      }
    }
  }
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) acc[m][r] = warp_sum(acc[m][r]);
  // The column's value of matrix m for row `lane` (its WPC warps added in order).
  float v[NM];
  bool writer;
  if constexpr (WPC == 1) {
    writer = n < N && lane < M;
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      v[m] = 0.f;
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r)
        if (r == lane) v[m] = acc[m][r];
    }
  } else {
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int r = 0; r < kGemvMaxRows; ++r) red[m][warp][r] = acc[m][r];
    __syncthreads();
    writer = part == 0 && n < N && lane < M;
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      v[m] = 0.f;
      if (writer)
#pragma unroll
        for (int ww = 0; ww < WPC; ++ww) v[m] += red[m][warp + ww][lane];
    }
  }
  if (!writer) return;
  if constexpr (SWIGLU) {
    const float gv = fminf(to_f(from_f<TO>(v[0])), g.limit);
    const float uv = fminf(fmaxf(to_f(from_f<TO>(v[1])), -g.limit), g.limit);
    out[int64_t(lane) * ldo + n] = from_f<TO>(gv * sigmoidf_(gv) * uv);
  } else {
    out[int64_t(lane) * ldo + n] = from_f<TO>(v[0]);
  }
}

// Warps per column: more while the grid has fewer than 4 blocks per SM, each warp keeps at least
// 512 values of K, and K splits into 8-value multiples.
int gemv_warps_per_column(int64_t N, int64_t K, int batch, int sms) {
  int wpc = 1;
  while (wpc < 8 && cdiv(N, 8 / wpc) * batch < 4 * int64_t(sms) && K / (2 * wpc) >= 512 && K % (16 * wpc) == 0)
    wpc *= 2;
  return wpc;
}

// A Pair launch covers N + N2 columns and takes the warps per column of that total (wq_a and wkv
// together: 1536 columns).
template <class TA, class TW, class TO, GemvMode MODE = GemvMode::Plain>
void launch_gemv(const char* op, cudaStream_t st, const GemmArgs& g, int batch, int sms) {
  const int64_t cols = g.N + (MODE == GemvMode::Pair ? g.N2 : 0);
  const int wpc = gemv_warps_per_column(cols, g.K, batch, sms);
  const dim3 grid(unsigned(cdiv(cols, 8 / wpc)), 1, unsigned(batch));
  switch (wpc) {
    case 1: launch_kernel(op, gemv_kernel<1, TA, TW, TO, MODE>, grid, 256, 0, st, g); break;
    case 2: launch_kernel(op, gemv_kernel<2, TA, TW, TO, MODE>, grid, 256, 0, st, g); break;
    case 4: launch_kernel(op, gemv_kernel<4, TA, TW, TO, MODE>, grid, 256, 0, st, g); break;
    default: launch_kernel(op, gemv_kernel<8, TA, TW, TO, MODE>, grid, 256, 0, st, g); break;
  }
  CUDA_LAUNCH_CHECK(op, st);
}

// Whether the GEMV path takes this GEMM: few rows, every row and batch offset 16-byte aligned for
// 8-element loads, dtypes it is instantiated for.
bool gemv_fits(const GemmArgs& g, int batch, DType to, DType ta, DType tw) {
  if (g.M < 1 || g.M > kGemvMaxRows || g.K % 8 != 0 || g.N >= (1ll << 31) || batch > 65535) return false;
  if (!(ta == DType::BF16 || ta == DType::F32) || !(tw == DType::BF16 || tw == DType::F32)) return false;
  if (!(to == DType::BF16 || to == DType::F32)) return false;
  auto al = [](const void* p, int64_t ld, int64_t stride, size_t es) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (ld * int64_t(es)) % 16 == 0 && (stride * int64_t(es)) % 16 == 0;
  };
  return al(g.a, g.lda, g.sa, dtype_size(ta)) && al(g.w, g.ldw, g.sw, dtype_size(tw));
}

// Calls f(TA{}, TW{}, TO{}) with the element types (float or bf16) of a, w and out: one place
// that turns run-time dtypes into the kernels' template arguments.
template <class F>
void with_float_types(DType ta, DType tw, DType to, F&& f) {
  auto pick_out = [&](auto a, auto w) {
    if (to == DType::F32) f(a, w, float{});
    else f(a, w, bf16{});
  };
  auto pick_w = [&](auto a) {
    if (tw == DType::F32) pick_out(a, float{});
    else pick_out(a, bf16{});
  };
  if (ta == DType::F32) pick_w(float{});
  else pick_w(bf16{});
}

// bf16 -> f32 of rows [0, rows) of a (row stride lda) into a dense [rows, K] buffer.
__global__ void rows_to_f32_kernel(float* dst, const bf16* src, int64_t rows, int64_t K, int64_t lda) {
  pdl_enter();
  const int64_t n = rows * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[(i / K) * lda + i % K]);
}

template <class TA, class TW, class TO>
void launch_gemm_fallback(const char* op, cudaStream_t st, const GemmArgs& g, int batch) {
  if (g.M <= 16) {
    const dim3 grid{unsigned(g.N), unsigned(cdiv(g.M, 8)), unsigned(batch)};
    launch_kernel(op, gemm_nt_skinny_kernel<TA, TW, TO>, grid, 256, 0, st, g);
  } else {
    const dim3 grid{unsigned(cdiv(g.N, 64)), unsigned(cdiv(g.M, 64)), unsigned(batch)};
    launch_kernel(op, gemm_nt_tiled_kernel<TA, TW, TO>, grid, 256, 0, st, g);
  }
  CUDA_LAUNCH_CHECK(op, st);
}

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

// Whether a bf16 x bf16 GEMM goes to the own GEMV instead of cuBLAS: decode rows (M <= 2) and
// a weight of at most the variant gemv-bf16-max-mb megabytes (default 20: wq_a, wkv, the shared
// expert, the compressor and indexer projections; 0 = cuBLAS for every bf16 GEMM). The GEMV
// launches with PDL (launch_kernel) and needs no split-K reduce kernel; cuBLAS stays ahead on the
// 67 MB projections and the LM head. Measured on the H200 (flash-6l, batch 1, graph): 2.372 ms
// per step at 20 MB, 2.378 at 40, 2.437 at 80, 2.412 with cuBLAS only (round 7, results/).
bool bf16_gemv_takes(const KernelVariants& v, const GemmArgs& g, int batch, DType to, DType ta, DType tw) {
  const double max_bytes = double(v.gemv_bf16_max_mb) * 1e6;
  if (max_bytes <= 0 || ta != DType::BF16 || tw != DType::BF16 || g.M > 2) return false;
  if (double(g.N) * double(g.K) * 2.0 * batch > max_bytes) return false;
  return gemv_fits(g, batch, to, ta, tw);
}

// Row-major out[M, N] = a[M, K] . w[N, K]^T is, read column-major, out^T[N, M] = w . a^T: cuBLAS
// computes C = op(A) op(B) with A = w (column-major [K, N], ld K, transposed -> [N, K]) and
// B = a (column-major [K, M], ld K) and C = out (column-major [N, M], ld N). Batched over the
// groups of gemm_grouped with strides.
static void gemm_any(CudaBackend& be, const char* op, Stream s, const GemmArgs& g, DType to, DType ta, DType tw,
                     int batch) {
  cudaStream_t st = be.stream(s, op);
  if (g.M == 0 || g.N == 0) return;
  be.note_gemm(s, op);
  const bool cublas_ok = (ta == DType::BF16 && tw == DType::BF16 && (to == DType::BF16 || to == DType::F32)) ||
                         (ta == DType::F32 && tw == DType::F32 && to == DType::F32);
  const bool fits_int = g.M < (1ll << 31) && g.N < (1ll << 31) && g.K < (1ll << 31) && g.lda < (1ll << 31) &&
                        g.ldw < (1ll << 31) && g.ldo < (1ll << 31);
  if (cublas_ok && fits_int && g.K > 0 && !bf16_gemv_takes(be.variants(), g, batch, to, ta, tw)) {
    cublasHandle_t h = be.blas(s, op);
    const float alpha = 1.f, beta = 0.f;
    if (batch == 1) {
      CUBLAS_CHECK(op, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(g.N), int(g.M), int(g.K), &alpha, g.w,
                                    cuda_type(tw), int(g.ldw), g.a, cuda_type(ta), int(g.lda), &beta, g.out,
                                    cuda_type(to), int(g.ldo), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      CUBLAS_CHECK(op, cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(g.N), int(g.M), int(g.K), &alpha,
                                                  g.w, cuda_type(tw), int(g.ldw), g.sw, g.a, cuda_type(ta),
                                                  int(g.lda), g.sa, &beta, g.out, cuda_type(to), int(g.ldo), g.so,
                                                  batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (sync_after_launch()) CUDA_LAUNCH_CHECK(op, st);
    return;
  }
  if (ta == DType::BF16 && tw == DType::F32 && to == DType::F32 && batch == 1 && g.M > 16 && fits_int && g.K > 0) {
    // The router (bf16 activations x F32 gate -> F32 logits) at prefill sizes: the activation
    // rows are widened to F32 in the stream's scratch, in chunks, and each chunk is one cuBLAS
    // SGEMM (full fp32, no TF32). Few rows (decode) take the skinny kernel instead.
    CudaBackend::Scratch sc = be.scratch(s, op, size_t(g.K) * 4);
    const int64_t chunk = std::max<int64_t>(1, int64_t(sc.bytes / (size_t(g.K) * 4)));
    float* buf = static_cast<float*>(sc.ptr);
    cublasHandle_t h = be.blas(s, op);
    const float alpha = 1.f, beta = 0.f;
    for (int64_t m0 = 0; m0 < g.M; m0 += chunk) {
      const int64_t mc = std::min(chunk, g.M - m0);
      launch_kernel(op, rows_to_f32_kernel, grid_for(mc * g.K, 256), 256, 0, st, buf, static_cast<const bf16*>(g.a) + m0 * g.lda, mc,
                                                                   g.K, g.lda);
      CUDA_LAUNCH_CHECK(op, st);
      CUBLAS_CHECK(op, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(g.N), int(mc), int(g.K), &alpha, g.w, CUDA_R_32F,
                                    int(g.ldw), buf, CUDA_R_32F, int(g.K), &beta,
                                    static_cast<float*>(g.out) + m0 * g.ldo, CUDA_R_32F, int(g.ldo),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (sync_after_launch()) CUDA_LAUNCH_CHECK(op, st);
    return;
  }
  const bool gemv = g.K > 0 && gemv_fits(g, batch, to, ta, tw);
  with_float_types(ta, tw, to, [&](auto a, auto w, auto o) {
    using TA = decltype(a);
    using TW = decltype(w);
    using TO = decltype(o);
    if (gemv)
      launch_gemv<TA, TW, TO>(op, st, g, batch, be.sm_count());
    else
      launch_gemm_fallback<TA, TW, TO>(op, st, g, batch);
  });
}

namespace cuda {
void gemv_split_k(CudaBackend& be, const char* op, Stream s, float* out, const void* x, DType xdt, const float* w,
                  int64_t T, int64_t N, int64_t K, int splits) {
  SL_CHECK(splits >= 1 && K % (int64_t(8) * splits) == 0 && T <= kGemvMaxRows, op, ": split-K GEMV of K = ", K,
           " in ", splits, " ranges over ", T, " rows is not supported");
  const int64_t Ks = K / splits;
  // Batch z = split z: a and w start Ks further on, out N further on; rows are splits * N apart.
  GemmArgs g{out, x, w, T, N, Ks, K, K, int64_t(splits) * N, Ks, Ks, N};
  cudaStream_t st = be.stream(s, op);
  if (xdt == DType::BF16)
    launch_gemv<bf16, float, float>(op, st, g, splits, be.sm_count());
  else
    launch_gemv<float, float, float>(op, st, g, splits, be.sm_count());
}
}  // namespace cuda

void CudaBackend::gemm(Stream s, const Tensor& out, const Tensor& a, const Tensor& w) {
  const char* op = "gemm";
  const auto [M, N, K] = checks::validate_gemm<OpRules>(out, a, w);
  if (K == 0) {
    fill(s, out, 0.f);
    return;
  }
  GemmArgs g{out.data, a.data, w.data, M, N, K, K, K, N, 0, 0, 0};
  gemm_any(*this, op, s, g, out.dtype, a.dtype, w.dtype, 1);
}

// The shared expert's w1 and w3 GEMMs and their SwiGLU (docs/model.md 6) as one GEMV launch at decode
// sizes (bf16_gemv_takes: M <= 2, small bf16 weights): each warp streams the same column of both
// matrices, and act is written without storing g and u (left untouched). act equals the three
// ops' result bit for bit. Other shapes run the three ops.
void CudaBackend::gemm_swiglu(Stream s, const Tensor& act, const Tensor& g, const Tensor& u, const Tensor& x,
                              const Tensor& w1, const Tensor& w3, float limit) {
  const char* op = "gemm_swiglu";
  const auto [M, N, K] = checks::validate_gemm<OpRules>(g, x, w1);
  checks::validate_gemm<OpRules>(u, x, w3);
  checks::validate_swiglu<OpRules>(act, g, u);
  GemmArgs ga{act.data, x.data, w1.data, M, N, K, K, K, N, 0, 0, 0};
  ga.w3 = w3.data;
  ga.limit = limit;
  const bool fuse = K > 0 && act.dtype == DType::BF16 && g.dtype == DType::BF16 && u.dtype == DType::BF16 &&
                    w3.dtype == w1.dtype && bf16_gemv_takes(variants(), ga, 1, act.dtype, x.dtype, w1.dtype) &&
                    reinterpret_cast<uintptr_t>(w3.data) % 16 == 0;
  if (!fuse) {
    Backend::gemm_swiglu(s, act, g, u, x, w1, w3, limit);
    return;
  }
  note_gemm(s, op);
  launch_gemv<bf16, bf16, bf16, GemvMode::Swiglu>(op, stream(s, op), ga, 1, sm_count());
}

// Two projections of one input (wq_a and wkv; the compressors' wkv and wgate) as one GEMV launch
// at decode sizes: the columns of both matrices in one grid (GemvMode::Pair). Each output equals
// its own gemm's bit for bit only when both would take the same warps per column; it is always
// the same products summed in the same lane and warp order. Other shapes run the two gemms.
void CudaBackend::gemm_pair(Stream s, const Tensor& out1, const Tensor& out2, const Tensor& a, const Tensor& w1,
                            const Tensor& w2) {
  const char* op = "gemm_pair";
  const auto [M, N1, K] = checks::validate_gemm<OpRules>(out1, a, w1);
  const auto [M2, N2, K2] = checks::validate_gemm<OpRules>(out2, a, w2);
  const GemmArgs second{out2.data, a.data, w2.data, M, N2, K, K, K, N2, 0, 0, 0};
  GemmArgs ga{out1.data, a.data, w1.data, M, N1, K, K, K, N1, 0, 0, 0};
  ga.w3 = w2.data;
  ga.out2 = out2.data;
  ga.N2 = N2;
  ga.ldo2 = N2;
  GemmArgs both = ga;  // both matrices' columns: what the GEMV size limit weighs
  both.N = N1 + N2;
  const bool fuse = K > 0 && M == M2 && K == K2 && out1.dtype == out2.dtype && w1.dtype == w2.dtype &&
                    a.dtype == DType::BF16 && w1.dtype == DType::BF16 &&
                    bf16_gemv_takes(variants(), both, 1, out1.dtype, a.dtype, w1.dtype) &&
                    gemv_fits(second, 1, out2.dtype, a.dtype, w2.dtype);
  if (!fuse) {
    Backend::gemm_pair(s, out1, out2, a, w1, w2);
    return;
  }
  cudaStream_t st = stream(s, op);
  note_gemm(s, op);
  if (out1.dtype == DType::F32)
    launch_gemv<bf16, bf16, float, GemvMode::Pair>(op, st, ga, 1, sm_count());
  else
    launch_gemv<bf16, bf16, bf16, GemvMode::Pair>(op, st, ga, 1, sm_count());
}

void CudaBackend::gemm_grouped(Stream s, const Tensor& out, const Tensor& a, const Tensor& w, int groups) {
  const char* op = "gemm_grouped";
  const auto [M, N, K, G] = checks::validate_gemm_grouped<OpRules>(out, a, w, groups);
  if (K == 0) {
    fill(s, out, 0.f);
    return;
  }
  // Group g: out[:, g*N:(g+1)*N] (ld G*N, stride N) = a[:, g*K:(g+1)*K] (ld G*K, stride K)
  //          . w[g*N:(g+1)*N, :]^T (ld K, stride N*K).
  GemmArgs g{out.data, a.data, w.data, M, N, K, G * K, K, G * N, K, N * K, N};
  gemm_any(*this, op, s, g, out.dtype, a.dtype, w.dtype, int(G));
}

// ================================================================ rmsnorm

namespace {

// out[r, i] = w[i] * (x[r, i] * rsq) with rsq = 1/sqrt(mean(x[r]^2) + eps), fp32 statistics.
// TPR threads per row: 32 (a warp per row, 8 rows per 256-thread block) for dim <= 1024, else
// 256 (a block per row). Two passes over the row (the second hits L1/L2); each element is read
// and written by the same thread, so out may alias x.
// 1 / sqrt(mean of squares + eps) of a row whose sum of squares is spread over TPR threads (a
// warp, or the whole block: then every thread of the block must call it).
template <int TPR>
__device__ __forceinline__ float row_rsqrt(float ss, float* red, int64_t dim, float eps) {
  if constexpr (TPR == 32)
    ss = warp_sum(ss);
  else
    ss = block_sum(ss, red);
  return 1.f / sqrtf(ss / float(dim) + eps);
}

// The bf16 fast path (x and out bf16, rows of a multiple of 8 elements, 16-byte aligned): each
// thread loads its VPT 16-byte vectors of the row into registers once, so the statistics pass
// and the write pass read global memory once, and all loads are in flight together. The scalar
// kernel below was latency-bound at decode sizes (8 us for 64 rows of 512 on the H200).
// TPR threads per row, 256 / TPR rows per block (TPR <= 256) or one row per block (TPR = 1024).
//
// One launch may normalise two tensors (rmsnorm_pair: q_norm and kv_norm): blocks below blocks0
// take job j0, the rest j1. With rope.table set, in the jobs marked rope (rmsnorm_rope: the
// per-head q norm, then RoPE; rmsnorm_pair: the key's norm, then RoPE), the rounded normalised
// values of each head's last R dims are rotated as rope_kernel rotates them (x viewed as
// [T, rope.heads, dim]), before the store.
struct NormJob {
  bf16* out;
  const bf16* x;
  const void* w;  // null: no weight
  int dtw;
  int64_t rows, dim;
  float eps;
  bool rope = false;  // the launch's NormRope applies to this job
};
struct NormRope {
  const int32_t* pos = nullptr;
  const float* table = nullptr;  // null: no RoPE
  int64_t heads = 1, R = 0, P = 0;
};

template <int TPR, int VPT>
__global__ __launch_bounds__(TPR > 256 ? TPR : 256) void rmsnorm_bf16_kernel(NormJob j0, NormJob j1,
                                                                              int64_t blocks0, NormRope rope) {
  pdl_enter();
  __shared__ float red[32];
  constexpr int kThreads = TPR > 256 ? TPR : 256;
  const bool second = int64_t(blockIdx.x) >= blocks0;
  const NormJob J = second ? j1 : j0;
  bf16* out = J.out;
  const bf16* x = J.x;
  const void* w = J.w;
  const int dtw = J.dtw;
  const int64_t rows = J.rows, dim = J.dim;
  const float eps = J.eps;
  const int64_t bx = second ? int64_t(blockIdx.x) - blocks0 : int64_t(blockIdx.x);
  const int64_t row = bx * (kThreads / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  const bool active = row < rows;
  const int64_t nvec = dim / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * dim);
  uint4 v[VPT];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t j = lane + int64_t(k) * TPR;
    v[k] = (active && j < nvec) ? xr[j] : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const bf16* e = reinterpret_cast<const bf16*>(&v[k]);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float f = __bfloat162float(e[q]);
      ss += f * f;
    }
  }
  const float r = row_rsqrt<TPR>(ss, red, dim, eps);
  if (!active) return;
  uint4* orow = reinterpret_cast<uint4*>(out + row * dim);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t j = lane + int64_t(k) * TPR;
    if (j >= nvec) break;
    uint4 o = rmsnorm_scale8(v[k], r, w, dtw, j);
    if (J.rope && rope.table && j * 8 >= dim - rope.R) {  // R and dim - R are multiples of 8 (the launcher)
      const int32_t p = rope.pos[row / rope.heads];
      if (p >= 0 && p < rope.P) {
        bf16* oe = reinterpret_cast<bf16*>(&o);
        const int64_t half = rope.R / 2, i0 = (j * 8 - (dim - rope.R)) / 2;
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // the vector's 4 (even, odd) pairs
          const float c = rope.table[int64_t(p) * rope.R + i0 + i];
          const float sn = rope.table[int64_t(p) * rope.R + half + i0 + i];
          const float ev = __bfloat162float(oe[2 * i]), od = __bfloat162float(oe[2 * i + 1]);
          oe[2 * i] = __float2bfloat16_rn(ev * c - od * sn);
          oe[2 * i + 1] = __float2bfloat16_rn(od * c + ev * sn);
        }
      }
    }
    orow[j] = o;
  }
}

template <int TPR>
__global__ __launch_bounds__(256) void rmsnorm_kernel(void* out, int dto, const void* x, int dtx, const void* w,
                                                      int dtw, int64_t rows, int64_t dim, float eps) {
  pdl_enter();
  __shared__ float red[32];
  const int64_t row = int64_t(blockIdx.x) * (256 / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  const bool active = row < rows;
  float ss = 0.f;
  if (active)
    #pragma unroll 4
    for (int64_t i = lane; i < dim; i += TPR) {
      const float v = ldf(x, dtx, row * dim + i);
      ss += v * v;
    }
  const float r = row_rsqrt<TPR>(ss, red, dim, eps);
  if (!active) return;
  #pragma unroll 4
  for (int64_t i = lane; i < dim; i += TPR) {
    const float v = ldf(x, dtx, row * dim + i);
    const float wi = w ? ldf(w, dtw, i) : 1.f;
    stf(out, dto, row * dim + i, wi * (v * r));
  }
}

// out = a + b, elementwise (grid-stride, one element per thread per step).
__global__ void add_kernel(void* out, int dto, const void* a, int dta, const void* b, int dtb, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    stf(out, dto, i, ldf(a, dta, i) + ldf(b, dtb, i));
}

// Interleaved RoPE in place on the last R dims of each [dim] head vector: one thread per
// (token, head, pair). Tokens whose position is outside the table are left unrotated.
__global__ void rope_kernel(void* x, int dtx, const int32_t* pos, const float* table, int64_t T, int64_t heads,
                            int64_t dim, int64_t R, int64_t P, int inverse) {
  pdl_enter();
  const int64_t half = R / 2, n = T * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, t = th / heads;
    const int32_t p = pos[t];
    if (p < 0 || p >= P) continue;
    const float c = table[int64_t(p) * R + i];
    const float sn = inverse ? -table[int64_t(p) * R + half + i] : table[int64_t(p) * R + half + i];
    const int64_t base = th * dim + (dim - R) + 2 * i;
    const float e = ldf(x, dtx, base), o = ldf(x, dtx, base + 1);
    stf(x, dtx, base, e * c - o * sn);
    stf(x, dtx, base + 1, o * c + e * sn);
  }
}

// out = silu(min(g, L)) * clamp(u, -L, L), elementwise.
__global__ void swiglu_kernel(void* out, int dto, const void* g, int dtg, const void* u, int dtu, int64_t n,
                              float limit) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gv = fminf(ldf(g, dtg, i), limit);
    const float uv = fminf(fmaxf(ldf(u, dtu, i), -limit), limit);
    stf(out, dto, i, gv * sigmoidf_(gv) * uv);
  }
}

// out[t, :] = table[ids[t], :] (zeros when zero_pos0 and pos[t] == 0, or the id is outside the
// vocabulary): one block per token row, threads striding over D.
__global__ void embed_kernel(void* out, int dto, const int32_t* ids, const void* table, int dtt, const int32_t* pos,
                             int zero_pos0, int64_t V, int64_t D) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool zero = (zero_pos0 && pos[t] == 0) || id < 0 || id >= V;
  // Eight loads in flight per thread before the stores (a load-store loop waited on every row
  // element in turn: 7.4 us for one 8 KiB row on the H200).
  for (int64_t d0 = threadIdx.x; d0 < D; d0 += 8 * int64_t(blockDim.x)) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t d = d0 + u * int64_t(blockDim.x);
      v[u] = (!zero && d < D) ? ldf(table, dtt, int64_t(id) * D + d) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t d = d0 + u * int64_t(blockDim.x);
      if (d < D) stf(out, dto, t * D + d, v[u]);
    }
  }
}

// argmax of each F32 row, in two small kernels: a single block per row was latency-bound (one
// SM streaming a 129k-entry vocabulary row: ~90 us on the H200), so each row is split over
// kArgmaxBlocks blocks that each reduce a chunk to one 64-bit key, and a second kernel reduces
// a row's keys. The key orders (value, index) as the CPU's serial scan does: the high 32 bits are
// the float mapped to an order-preserving unsigned, the low 32 bits ~index (equal values -> the
// lower index wins). NaN never wins (key 0), and a NaN at index 0 makes the answer 0 (the CPU
// starts from element 0 and nothing compares greater than NaN).
constexpr int kArgmaxBlocks = 32;

__device__ __forceinline__ uint64_t argmax_key(float x, int64_t i) {
  if (isnan(x)) return 0;
  uint32_t u = __float_as_uint(x);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << 32) | uint64_t(0xffffffffu - uint32_t(i));
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// grid (kArgmaxBlocks, rows), 256 threads: part[row * kArgmaxBlocks + b] = best key of chunk b.
__global__ __launch_bounds__(256) void argmax_partial_kernel(uint64_t* part, const float* logits, int64_t V,
                                                             int64_t chunk, int vec4) {
  pdl_enter();
  __shared__ uint64_t red[8];
  const float* row = logits + int64_t(blockIdx.y) * V;
  const int64_t lo = int64_t(blockIdx.x) * chunk, hi = min(V, lo + chunk);
  uint64_t best = 0;
  if (vec4) {  // chunk and V are multiples of 4 and the rows 16-byte aligned
    for (int64_t i = lo + 4 * int64_t(threadIdx.x); i < hi; i += 4 * blockDim.x) {
      const float4 v = *reinterpret_cast<const float4*>(row + i);
      uint64_t k = argmax_key(v.x, i);
      uint64_t k1 = argmax_key(v.y, i + 1), k2 = argmax_key(v.z, i + 2), k3 = argmax_key(v.w, i + 3);
      k = k1 > k ? k1 : k;
      k = k2 > k ? k2 : k;
      k = k3 > k ? k3 : k;
      best = k > best ? k : best;
    }
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      const uint64_t k = argmax_key(row[i], i);
      best = k > best ? k : best;
    }
  }
  best = warp_max_u64(best);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    uint64_t v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0;
    v = warp_max_u64(v);
    if (threadIdx.x == 0) part[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = v;
  }
}

// One warp per row: the best of the row's kArgmaxBlocks keys.
__global__ void argmax_final_kernel(int32_t* out, const uint64_t* part, const float* logits, int64_t V) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  uint64_t v = threadIdx.x < kArgmaxBlocks ? part[r * kArgmaxBlocks + threadIdx.x] : 0;
  v = warp_max_u64(v);
  if (threadIdx.x == 0) {
    const bool first_nan = isnan(logits[r * V]);
    out[r] = (v == 0 || first_nan) ? 0 : int32_t(0xffffffffu - uint32_t(v & 0xffffffffu));
  }
}

// out[i, :] = in[rows[i], :] as raw bytes: one block per output row; 16-byte words when the row
// size and both bases allow, else 4-byte, else single bytes. Rows outside [0, m) give zeros.
__global__ void gather_rows_kernel(char* out, const char* in, const int32_t* rows, int64_t m, int64_t row_bytes,
                                   int width) {
  pdl_enter();
  const int64_t i = blockIdx.x;
  const int32_t r = rows[i];
  const bool ok = r >= 0 && r < m;
  char* dst = out + i * row_bytes;
  const char* src = in + int64_t(ok ? r : 0) * row_bytes;
  if (width == 16) {
    #pragma unroll 4
    for (int64_t b = threadIdx.x; b < row_bytes / 16; b += blockDim.x)
      reinterpret_cast<uint4*>(dst)[b] = ok ? reinterpret_cast<const uint4*>(src)[b] : make_uint4(0, 0, 0, 0);
  } else if (width == 4) {
    #pragma unroll 4
    for (int64_t b = threadIdx.x; b < row_bytes / 4; b += blockDim.x)
      reinterpret_cast<uint32_t*>(dst)[b] = ok ? reinterpret_cast<const uint32_t*>(src)[b] : 0u;
  } else {
    for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) dst[b] = ok ? src[b] : 0;
  }
}

// out[b*T0 + i] = tokens[b*T0 + i + 1] (i < T0-1), sampled[b] (i = T0-1): one thread each.
__global__ void shift_tokens_kernel(int32_t* out, const int32_t* tokens, const int32_t* sampled, int64_t n,
                                    int64_t T0) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / T0, j = i % T0;
    out[i] = j + 1 < T0 ? tokens[i + 1] : sampled[b];
  }
}

}  // namespace

namespace cuda {
void launch_swiglu(const char* op, cudaStream_t st, void* out, int dto, const void* g, int dtg, const void* u,
                   int dtu, int64_t n, float limit) {
  if (n == 0) return;
  launch_kernel(op, swiglu_kernel, grid_for(n, 256), 256, 0, st, out, dto, g, dtg, u, dtu, n, limit);
  CUDA_LAUNCH_CHECK(op, st);
}
}  // namespace cuda

// rmsnorm_bf16_kernel's vector path: bf16 rows of a multiple of 8 values, 16-byte aligned.
static bool bf16_norm_fits(const Tensor& out, const Tensor& x, int64_t dim) {
  return x.dtype == DType::BF16 && out.dtype == DType::BF16 && dim % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(out.data)) % 16 == 0;
}

static NormJob norm_job(const Tensor& out, const Tensor& x, const Tensor& w, int64_t rows, int64_t dim, float eps) {
  return NormJob{static_cast<bf16*>(out.data), static_cast<const bf16*>(x.data), w.empty() ? nullptr : w.data,
                 w.empty() ? kF32 : fcode(w.dtype), rows, dim, eps};
}

void CudaBackend::rmsnorm(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm";
  cudaStream_t st = stream(s, op);
  const auto [rows, dim] = checks::validate_rmsnorm<OpRules>(out, x, w);
  if (rows == 0) return;
  const bool vec = bf16_norm_fits(out, x, dim);
  const NormJob job = norm_job(out, x, w, rows, dim, eps);  // its w and dtw serve the scalar kernels too
  if (vec && dim <= 32 * 8 * 4) {
    const int64_t blocks = cdiv(rows, 8);
    launch_kernel(op, rmsnorm_bf16_kernel<32, 4>, unsigned(blocks), 256, 0, st, job, job, blocks, NormRope{});
  } else if (vec && dim <= 256 * 8 * 4) {
    launch_kernel(op, rmsnorm_bf16_kernel<256, 4>, unsigned(rows), 256, 0, st, job, job, rows, NormRope{});
  } else if (vec && dim <= 1024 * 8 * 4) {
    launch_kernel(op, rmsnorm_bf16_kernel<1024, 4>, unsigned(rows), 1024, 0, st, job, job, rows, NormRope{});
  } else if (dim <= 1024) {
    launch_kernel(op, rmsnorm_kernel<32>, unsigned(cdiv(rows, 8)), 256, 0, st, out.data, fcode(out.dtype), x.data,
                  fcode(x.dtype), job.w, job.dtw, rows, dim, eps);
  } else {
    launch_kernel(op, rmsnorm_kernel<256>, unsigned(rows), 256, 0, st, out.data, fcode(out.dtype), x.data,
                  fcode(x.dtype), job.w, job.dtw, rows, dim, eps);
  }
  CUDA_LAUNCH_CHECK(op, st);
}

// The warp-per-row bf16 path (rows of at most 1024 values), the shape rmsnorm_pair and
// rmsnorm_rope fuse; else they run the separate ops.
static bool warp_norm_fits(const Tensor& out, const Tensor& x, int64_t dim) {
  return bf16_norm_fits(out, x, dim) && dim <= 32 * 8 * 4;
}

// q_norm and kv_norm (two independent row norms) in one launch; the key's RoPE (table given) in
// the same launch under kv-norm-rope=fused, else rope's kernel after it.
void CudaBackend::rmsnorm_pair(Stream s, const Tensor& out1, const Tensor& x1, const Tensor& w1, float eps1,
                               const Tensor& out2, const Tensor& x2, const Tensor& w2, float eps2, const Tensor& pos,
                               const Tensor& table) {
  const char* op = "rmsnorm_pair";
  const auto [rows1, dim1] = checks::validate_rmsnorm<OpRules>(out1, x1, w1);
  const auto [rows2, dim2] = checks::validate_rmsnorm<OpRules>(out2, x2, w2);
  const Tensor out2h = out2.view({rows2, 1, dim2});
  NormRope nr;
  if (!table.empty()) {
    const auto [T, heads, dim, P, R] = checks::validate_rope<OpRules>(out2h, pos, table);
    nr.pos = pos.ptr<int32_t>();
    nr.table = table.ptr<float>();
    nr.R = R;
    nr.P = P;
  }
  const bool fold = nr.table && variants().kv_norm_rope_fused && nr.R % 8 == 0 && nr.R <= dim2;
  if (rows1 == 0 || rows2 == 0 || !warp_norm_fits(out1, x1, dim1) || !warp_norm_fits(out2, x2, dim2)) {
    Backend::rmsnorm_pair(s, out1, x1, w1, eps1, out2, x2, w2, eps2, pos, table);
    return;
  }
  cudaStream_t st = stream(s, op);
  const int64_t blocks1 = cdiv(rows1, 8), blocks2 = cdiv(rows2, 8);
  NormJob j2 = norm_job(out2, x2, w2, rows2, dim2, eps2);
  j2.rope = fold;
  launch_kernel(op, rmsnorm_bf16_kernel<32, 4>, unsigned(blocks1 + blocks2), 256, 0, st,
                norm_job(out1, x1, w1, rows1, dim1, eps1), j2, blocks1, fold ? nr : NormRope{});
  CUDA_LAUNCH_CHECK(op, st);
  if (nr.table && !fold) rope(s, out2h, pos, table, false);
}

// The per-head q norm and the q RoPE in one launch (x [T, heads, dim]).
void CudaBackend::rmsnorm_rope(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps,
                               const Tensor& pos, const Tensor& table) {
  const char* op = "rmsnorm_rope";
  const auto [T, heads, dim, P, R] = checks::validate_rope<OpRules>(out, pos, table);
  SL_CHECK(x.shape == out.shape, op, ": x is ", checks::describe(x), ", out is ", checks::describe(out));
  const Tensor xr = x.view({T * heads, dim}), outr = out.view({T * heads, dim});
  checks::validate_rmsnorm<OpRules>(outr, xr, w);
  const int64_t rows = T * heads;
  if (rows == 0 || !warp_norm_fits(outr, xr, dim) || R % 8 != 0 || R > dim) {
    Backend::rmsnorm_rope(s, out, x, w, eps, pos, table);
    return;
  }
  cudaStream_t st = stream(s, op);
  NormRope rope;
  rope.pos = pos.ptr<int32_t>();
  rope.table = table.ptr<float>();
  rope.heads = heads;
  rope.R = R;
  rope.P = P;
  NormJob job = norm_job(outr, xr, w, rows, dim, eps);
  job.rope = true;
  const int64_t blocks = cdiv(rows, 8);
  launch_kernel(op, rmsnorm_bf16_kernel<32, 4>, unsigned(blocks), 256, 0, st, job, job, blocks, rope);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::add(Stream s, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "add";
  cudaStream_t st = stream(s, op);
  const int64_t n = checks::validate_add<OpRules>(out, a, b);
  if (n == 0) return;
  launch_kernel(op, add_kernel, grid_for(n, 256), 256, 0, st, out.data, fcode(out.dtype), a.data, fcode(a.dtype), b.data,
                                                fcode(b.dtype), n);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::rope(Stream s, const Tensor& x, const Tensor& pos, const Tensor& table, bool inverse) {
  const char* op = "rope";
  cudaStream_t st = stream(s, op);
  const auto [T, heads, dim, P, R] = checks::validate_rope<OpRules>(x, pos, table);
  const int64_t n = T * heads * (R / 2);
  if (n == 0) return;
  launch_kernel(op, rope_kernel, grid_for(n, 256), 256, 0, st, x.data, fcode(x.dtype), pos.ptr<int32_t>(), table.ptr<float>(), T,
                                                 heads, dim, R, P, inverse ? 1 : 0);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::swiglu(Stream s, const Tensor& out, const Tensor& g, const Tensor& u, float limit) {
  const char* op = "swiglu";
  cudaStream_t st = stream(s, op);
  checks::validate_swiglu<OpRules>(out, g, u);
  launch_swiglu(op, st, out.data, fcode(out.dtype), g.data, fcode(g.dtype), u.data, fcode(u.dtype), g.numel(), limit);
}

void CudaBackend::embed(Stream s, const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos,
                        bool zero_pos0) {
  const char* op = "embed";
  cudaStream_t st = stream(s, op);
  const auto [T, V, D] = checks::validate_embed<OpRules>(out, ids, table, pos, zero_pos0);
  if (T == 0) return;
  launch_kernel(op, embed_kernel, unsigned(T), 256, 0, st, out.data, fcode(out.dtype), ids.ptr<int32_t>(), table.data,
                                             fcode(table.dtype), zero_pos0 ? pos.ptr<int32_t>() : nullptr,
                                             zero_pos0 ? 1 : 0, V, D);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::argmax(Stream s, const Tensor& out, const Tensor& logits) {
  const char* op = "argmax";
  cudaStream_t st = stream(s, op);
  const auto [n, V] = checks::validate_argmax<OpRules>(out, logits);
  if (n == 0) return;
  SL_CHECK(V < (int64_t(1) << 32) && n <= 65535, op, ": logits ", describe(logits), " has too many rows or columns");
  auto* part = static_cast<uint64_t*>(scratch(s, op, size_t(n) * kArgmaxBlocks * sizeof(uint64_t)).ptr);
  const int vec4 = (V % 4 == 0 && reinterpret_cast<uintptr_t>(logits.data) % 16 == 0) ? 1 : 0;
  const int64_t chunk = cdiv(cdiv(V, kArgmaxBlocks), 4) * 4;  // a multiple of 4 keeps float4 loads aligned
  launch_kernel(op, argmax_partial_kernel, dim3(kArgmaxBlocks, unsigned(n)), 256, 0, st, part, logits.ptr<float>(), V, chunk, vec4);
  CUDA_LAUNCH_CHECK(op, st);
  launch_kernel(op, argmax_final_kernel, unsigned(n), 32, 0, st, out.ptr<int32_t>(), part, logits.ptr<float>(), V);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::gather_rows(Stream s, const Tensor& out, const Tensor& in, const Tensor& rows) {
  const char* op = "gather_rows";
  cudaStream_t st = stream(s, op);
  const auto [n, m] = checks::validate_gather_rows<OpRules>(out, in, rows);
  const int64_t row_bytes = m ? int64_t(in.bytes()) / m : 0;
  if (n == 0 || row_bytes == 0) return;
  const uintptr_t ab = reinterpret_cast<uintptr_t>(out.data) | reinterpret_cast<uintptr_t>(in.data);
  const int width = (row_bytes % 16 == 0 && ab % 16 == 0) ? 16 : (row_bytes % 4 == 0 && ab % 4 == 0) ? 4 : 1;
  launch_kernel(op, gather_rows_kernel, unsigned(n), 256, 0, st, static_cast<char*>(out.data), static_cast<const char*>(in.data),
                                                   rows.ptr<int32_t>(), m, row_bytes, width);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::shift_tokens(Stream s, const Tensor& out, const Tensor& tokens, const Tensor& sampled) {
  const char* op = "shift_tokens";
  cudaStream_t st = stream(s, op);
  const auto [B, n] = checks::validate_shift_tokens<OpRules>(out, tokens, sampled);
  if (n == 0) return;
  launch_kernel(op, shift_tokens_kernel, grid_for(n, 256), 256, 0, st, out.ptr<int32_t>(), tokens.ptr<int32_t>(),
                                                         sampled.ptr<int32_t>(), n, n / B);
  CUDA_LAUNCH_CHECK(op, st);
}

}  // namespace sl
