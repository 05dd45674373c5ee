// MoE on the GPU (docs/model.md 6): routing, and the routed experts as a device-side permutation
// plus one launch per expert matrix over all experts. Nothing here reads device memory on the
// host, so the whole MoE is CUDA-graph capturable.
//
// moe_experts, for P = T * k (token, slot) pairs:
//   1. moe_permute_kernel (one block): counts per expert, exclusive scans -> each expert's row
//      range and first BM-row tile, the expert of every tile (tile_expert); a stable scatter
//      (pairs keep token order within an expert): src_row[row] = token, inv[pair] = row.
//   2. Prefill (P > 64): moe_gemm_kernel for w1 and w3 in one launch (gathering x rows through
//      src_row). A block is one (expert, BM-row tile) x 64 output columns of w1 or of w3; it
//      reads its expert from tile_expert (device memory) and exits if past the last tile, so
//      the host needs no counts. K streams through a 4-stage cp.async pipeline; each expert
//      weight byte is read once per row tile. Then SwiGLU with clamp on the permuted rows, and
//      moe_gemm_kernel for w2 -> y (F32).
//   3. Decode (P <= 64: a row or two per expert, memory-bound on the expert weights):
//      moe_gemv_kernel, one warp per (tile of <= 4 rows, output column), for w1 and w3 together
//      with the SwiGLU fused, then for w2 -> y (F32). (A split-K tensor-core path for decode was
//      measured 4-5 % slower per decode step and 12-27 % slower per MoE on the H200 and removed:
//      results/2026-12-04-h200-kernel-workbench.)
//   4. moe_combine_kernel: out[t] = sum_{i < k} weights[t, i] * y[inv[t*k + i]], in slot order.
// moe_experts_mxfp4 (the checkpoint's MXFP4 experts) runs steps 1 and 4 at every size, with step
// 3 on the tensor cores (moe_fp4_mma_kernel: 8-row tiles, e2m1 decoded to bf16 in registers, each
// 32-value group's MMAs scaled as they are summed), or (variant mxfp4-mma=off) the GEMV of step 3
// decoding e2m1 through fp16. With fp8_act (W4A8) the same kernels multiply activations rounded
// to FP8 first (x before step 2 or 3, h after the SwiGLU; exact in bf16), what an FP8 product
// multiplies: sm_90's mma.sync has no FP8 form with e2m1 weights, so an FP8 MMA would convert them
// to f16 anyway.
// Every output element is a fixed-order fp32 sum that does not depend on which other rows share
// its tile: results do not depend on scheduling.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/e2m1_bits.h"

namespace sl {

using namespace cuda;
using namespace nvcuda;

namespace {

inline size_t al256(size_t n) { return (n + 255) / 256 * 256; }

// Decode: at most this many (token, expert) pairs run on the GEMV.
constexpr int64_t kGemvMaxPairs = 64;

// The workspace of moe_experts (256-byte aligned sections).
struct MoeLayout {
  size_t counts = 0, offsets = 0, tiles = 0, tile_expert = 0, src_row = 0, inv = 0, h1 = 0, h3 = 0, y = 0, total = 0;
  MoeLayout(int64_t P, int64_t D, int64_t F, int64_t E) {
    size_t at = 0;
    auto take = [&](size_t bytes) {
      const size_t here = at;
      at += al256(bytes);
      return here;
    };
    counts = take(size_t(E) * 4);        // I32 [E]     rows per expert
    offsets = take(size_t(E + 1) * 4);   // I32 [E+1]   first row of each expert
    tiles = take(size_t(E + 1) * 4);     // I32 [E+1]   first BM-row tile of each expert
    tile_expert = take(size_t(P + E + 1) * 4);  // I32 [tiles] expert of each BM-row tile
    src_row = take(size_t(P) * 4);       // I32 [P]     row -> token
    inv = take(size_t(P) * 4);           // I32 [P]     pair t*k+i -> row (-1: invalid id)
    h1 = take(size_t(P * F) * 2);        // BF16 [P, F] w1 x, then the SwiGLU output
    h3 = take(size_t(P * F) * 2);        // BF16 [P, F] w3 x
    y = take(size_t(P * D) * 4);         // F32 [P, D]  w2 (...)
    total = at;
  }
};

// ================================================================ routing

// One block (256 threads) per token; its E scores and keys live in shared memory. s =
// sqrt(softplus(z)); hash layers take ids from tid2eid[token]; otherwise k rounds of a block
// argmax over the untaken keys s + bias (per thread, then butterfly per warp, then the 8 warps in
// order; ties -> lower index; NaN counts as -inf). Thread 0 then normalises the chosen unbiased
// scores in slot order and scales them.
struct RouteArgs {
  int32_t* ids;
  float* weights;
  const float* logits;
  const float* bias;     // may be null
  const int32_t* tid2eid;  // may be null
  const int32_t* tokens;
  int64_t T, V;
  int E, k;
  float scaling;
};

__device__ __forceinline__ bool route_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// Candidate e with key v (NaN counts as -inf) against the best so far.
__device__ __forceinline__ void route_consider(float v, int e, float& bv, int& bi) {
  if (v != v) v = -INFINITY;
  if (route_better(v, e, bv, bi)) {
    bv = v;
    bi = e;
  }
}

// The warp's best (key, expert) in every lane: a butterfly, exact because route_better is a
// strict total order.
__device__ __forceinline__ void warp_route_best(float& bv, int& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (route_better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// The score s = sqrt(softplus(z)) of one logit, and its selection key s + bias.
__device__ __forceinline__ void route_score(const RouteArgs& a, int64_t t, int e, float* sc, float* ky) {
  const float z = a.logits[t * a.E + e];
  const float s = sqrtf(z > 20.f ? z : log1pf(expf(z)));
  sc[e] = s;
  ky[e] = s + (a.bias ? a.bias[e] : 0.f);
}

// One thread: the chosen experts' unbiased scores normalised in slot order and scaled.
__device__ __forceinline__ void route_finish(const RouteArgs& a, int64_t t, const float* sc, const int* chosen) {
  float sum = 0.f;
  for (int i = 0; i < a.k; ++i) {
    const int id = chosen[i];
    sum += (id >= 0 && id < a.E) ? sc[id] : 0.f;
  }
  if (sum <= 0.f) sum = 1.f;
  for (int i = 0; i < a.k; ++i) {
    const int id = chosen[i];
    a.ids[t * a.k + i] = id;
    a.weights[t * a.k + i] = (id >= 0 && id < a.E) ? sc[id] / sum * a.scaling : 0.f;
  }
}

// A hashed layer's experts of token t, slot i.
__device__ __forceinline__ int route_hashed(const RouteArgs& a, int64_t t, int i) {
  const int32_t tok = a.tokens[t];
  return (tok >= 0 && tok < a.V) ? a.tid2eid[int64_t(tok) * a.k + i] : -1;
}

__global__ __launch_bounds__(256) void route_kernel(RouteArgs a) {
  pdl_enter();
  extern __shared__ float route_smem[];
  __shared__ int chosen[64];
  __shared__ float wv[8];
  __shared__ int wi[8];
  float* sc = route_smem;
  float* ky = sc + a.E;
  unsigned char* taken = reinterpret_cast<unsigned char*>(ky + a.E);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t t = blockIdx.x;
  for (int e = tid; e < a.E; e += 256) {
    route_score(a, t, e, sc, ky);
    taken[e] = 0;
  }
  __syncthreads();
  if (a.tid2eid) {
    if (tid < a.k) chosen[tid] = route_hashed(a, t, tid);
  } else {
    for (int i = 0; i < a.k; ++i) {
      float bv = -INFINITY;
      int bi = INT_MAX;
      for (int e = tid; e < a.E; e += 256)
        if (!taken[e]) route_consider(ky[e], e, bv, bi);
      warp_route_best(bv, bi);
      if (lane == 0) {
        wv[warp] = bv;
        wi[warp] = bi;
      }
      __syncthreads();
      if (tid == 0) {
        float b = wv[0];
        int ix = wi[0];
        for (int w = 1; w < 8; ++w)
          if (route_better(wv[w], wi[w], b, ix)) {
            b = wv[w];
            ix = wi[w];
          }
        chosen[i] = ix == INT_MAX ? -1 : ix;
        if (ix != INT_MAX) taken[ix] = 1;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (tid == 0) route_finish(a, t, sc, chosen);
}

// ================================================================ permutation

// One block of 1024 threads (E <= 1024). Counts (shared-memory integer atomics), two block scans
// (rows and BM-row tiles per expert), then a stable scatter in chunks of 1024 pairs: a pair's rank
// among the chunk's earlier pairs of its expert is counted directly (shared-memory broadcast
// reads), and each expert's running base advances by its count in the chunk.
__global__ __launch_bounds__(1024) void moe_permute_kernel(const int32_t* ids, int64_t P, int k, int E, int BM,
                                                          int* counts, int* offsets, int* tiles, int* tile_expert,
                                                          int* src_row, int* inv) {
  pdl_enter();
  extern __shared__ int perm_smem[];
  int* cnt = perm_smem;  // [E]
  int* base = cnt + E;   // [E]
  __shared__ int cid[1024];
  __shared__ int wsum[32];
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < P; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  const int c = tid < E ? cnt[tid] : 0;
  int total_rows = 0, total_tiles = 0;
  const int off = block_excl_scan<1024>(c, wsum, &total_rows);
  const int toff = block_excl_scan<1024>((c + BM - 1) / BM, wsum, &total_tiles);
  if (tid < E) {
    counts[tid] = c;
    offsets[tid] = off;
    tiles[tid] = toff;
    base[tid] = off;
    for (int j = 0; j < (c + BM - 1) / BM; ++j) tile_expert[toff + j] = tid;
  }
  if (tid == 0) {
    offsets[E] = total_rows;
    tiles[E] = total_tiles;
  }
  __syncthreads();
  for (int64_t c0 = 0; c0 < P; c0 += 1024) {
    const int64_t i = c0 + tid;
    int e = i < P ? ids[i] : -1;
    if (e < 0 || e >= E) e = -1;
    cid[tid] = e;
    __syncthreads();
    if (e >= 0) {
      int rank = 0;
      for (int j = 0; j < tid; ++j) rank += cid[j] == e;
      const int dst = base[e] + rank;
      src_row[dst] = int(i / k);
      inv[i] = dst;
    } else if (i < P) {
      inv[i] = -1;
    }
    __syncthreads();
    if (c0 + 1024 < P) {
      for (int e2 = tid; e2 < E; e2 += blockDim.x) {
        int n = 0;
        for (int j = 0; j < 1024; ++j) n += cid[j] == e2;
        base[e2] += n;
      }
      __syncthreads();
    }
  }
}

// ================================================================ grouped GEMM

// a * b as bf16x2 (the MXFP4 decodes' scale multiply).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r =
      __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// A word of 8 e2m1 codes (model/cuda/e2m1_bits.h) as 4 bf16 pairs times 2^-126: by shifts, or
// with MUL (mxfp4-decode=shift-quad) by one multiply in place of two shifts (the same bits).
template <bool MUL>
__device__ __forceinline__ void pairs_2m126(uint32_t w, uint32_t (&p)[4]) {
  if constexpr (MUL)
    e2m1::pairs_times_2m126_mul(w, p);
  else
    e2m1::pairs_times_2m126(w, p);
}

// The same pairs times their group's scale: the 2^-126 decode, the first factor, and where
// `second` (scales above 128; f.second is 1 for the others) the second.
template <bool MUL = false>
__device__ __forceinline__ void scaled_pairs(uint32_t w, const e2m1::Bf16Scale& f, bool second, uint32_t (&p)[4]) {
  pairs_2m126<MUL>(w, p);
#pragma unroll
  for (int j = 0; j < 4; ++j) p[j] = bf16x2_mul(p[j], f.first);
  if (second) {
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = bf16x2_mul(p[j], f.second);
  }
}


struct MoeGemmArgs {
  void* out;             // [P, N] (bf16 or f32), permuted rows
  const bf16* A;         // rows of K values
  const int* a_rows;     // permuted row -> A row (null: identity)
  int64_t lda;
  const void* W;         // [E, N, K] bf16; FP4: packed e2m1 [E, N, K / 2]
  const uint8_t* Ws;     // FP4: e8m0 scales [E, N, K / 32] of W
  int N, K, E;
  const int* counts;
  const int* offsets;
  const int* tiles;
  const int* tile_expert;  // expert of each tile (written by moe_permute_kernel)
  // A second matrix on the same A rows (w3 beside w1), or null: blocks with blockIdx.y >= N / GBN
  // compute W_b into out_b. One launch for both fills the GPU better than two.
  const void* W_b;
  const uint8_t* Ws_b;   // FP4: its scales
  void* out_b;
};

constexpr int GBN = 64, GBK = 64, GSTAGES = 4, GLDS = GBK + 8;

// FP4 (the MXFP4 experts at prefill, variant mxfp4-prefill=gemm): the weight stages hold packed
// bytes (GBN x GBK / 2), decoded into one bf16 tile just before its MMAs.
__host__ __device__ constexpr size_t moe_gemm_smem(int BM, bool fp4 = false) {
  return size_t(GSTAGES) * BM * GLDS * 2 +
         (fp4 ? size_t(GBN) * GLDS * 2 + size_t(GSTAGES) * GBN * (GBK / 2) : size_t(GSTAGES) * GBN * GLDS * 2) +
         size_t(BM) * (GBN + 4) * 4;
}

// 128 threads (4 warps). Tile = BM rows of one expert x 64 columns; K in steps of 64 through a
// 4-stage cp.async pipeline (rows past the expert's count are zero-filled, never read). Each warp
// owns BM/16 of the (BM/16 x 4) 16x16 accumulator fragments, all in one fragment row (so its A
// fragment is loaded once per k-step). Epilogue through shared memory, rows past the count
// dropped.
// FP4: W is MXFP4 (packed e2m1, e8m0 scales per 32). A stage then carries the tile's packed bytes
// (32 per column, a 16-byte cp.async per thread) and, after it lands, the block decodes it into
// one bf16 tile (thread t: column t / 2, values [32 (t % 2), +32), one MX group, by the shift
// decode of model/cuda/e2m1_bits.h) before the MMAs read it: each weight is decoded once per
// BM-row tile instead of once per 8 rows as in moe_fp4_mma_kernel. The thread's scale byte for a
// stage is loaded when the stage is issued and kept in a 3-deep register queue until its decode.
template <int BM, class OutT, bool FP4 = false>
__global__ __launch_bounds__(128) void moe_gemm_kernel(MoeGemmArgs g) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char gemm_smem[];
  bf16* As = reinterpret_cast<bf16*>(gemm_smem);
  bf16* Bs = As + size_t(GSTAGES) * BM * GLDS;  // FP4: the one decoded tile
  uint8_t* Bp = reinterpret_cast<uint8_t*>(Bs + size_t(FP4 ? 1 : GSTAGES) * GBN * GLDS);  // FP4: packed stages
  float* Cs = reinterpret_cast<float*>(Bp + (FP4 ? size_t(GSTAGES) * GBN * (GBK / 2) : 0));
  constexpr int FPW = BM / 16;  // fragments per warp (1..4)
  const int tid = threadIdx.x, warp = tid >> 5;
  const int bx = blockIdx.x;
  // Both loads in flight together (a binary search over the tile starts was 8 dependent global
  // loads, several microseconds of every block's start at decode sizes). The grid never exceeds
  // the tile_expert array; entries past the last tile are stale and not used.
  const int e = g.tile_expert[bx];
  if (bx >= g.tiles[g.E]) return;
  const int mt = bx - g.tiles[e];
  const int row0 = g.offsets[e] + mt * BM;
  const int rows = min(BM, g.counts[e] - mt * BM);
  const bool second = g.W_b && int(blockIdx.y) * GBN >= g.N;
  const int n0 = (second ? int(blockIdx.y) * GBN - g.N : int(blockIdx.y) * GBN);
  const bf16* Wb = static_cast<const bf16*>(second ? g.W_b : g.W) + (int64_t(e) * g.N + n0) * g.K;
  const int KT = g.K / GBK;  // k-tiles
  // FP4: this thread's column of the tile and half of a k-tile (one MX group), its packed bytes
  // and scales in global memory.
  const int fr = tid >> 1, fh = tid & 1;
  const uint8_t* Wp = static_cast<const uint8_t*>(second ? g.W_b : g.W) + (int64_t(e) * g.N + n0 + fr) * (g.K / 2);
  const uint8_t* Wsc = FP4 ? (second ? g.Ws_b : g.Ws) + (int64_t(e) * g.N + n0 + fr) * (g.K / 32) + fh : nullptr;

  auto load_stage = [&](int s, int kt) {
    const int k0 = kt * GBK;
    bf16* as = As + size_t(s) * BM * GLDS;
    bf16* bs = Bs + size_t(s) * GBN * GLDS;
    for (int c = tid; c < BM * 8; c += 128) {
      const int r = c >> 3, cc = c & 7;
      const bool ok = r < rows;
      const bf16* src = g.A;
      if (ok) {
        const int64_t ar = g.a_rows ? int64_t(g.a_rows[row0 + r]) : int64_t(row0 + r);
        src = g.A + ar * g.lda + k0 + cc * 8;
      }
      cp_async16(as + r * GLDS + cc * 8, src, ok ? 16 : 0);
    }
    if constexpr (FP4) {
      cp_async16(Bp + size_t(s) * GBN * (GBK / 2) + fr * (GBK / 2) + fh * 16, Wp + k0 / 2 + fh * 16, 16);
    } else {
      for (int c = tid; c < GBN * 8; c += 128) {
        const int r = c >> 3, cc = c & 7;
        cp_async16(bs + r * GLDS + cc * 8, Wb + int64_t(r) * g.K + k0 + cc * 8, 16);
      }
    }
  };
  // FP4: the scale bytes of the stages in flight, oldest first (k-tile kt's group fh).
  uint32_t sq[GSTAGES - 1] = {};
  auto scale_of = [&](int kt) { return kt < KT ? uint32_t(__ldg(Wsc + kt * (GBK / 32))) : 127u; };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FPW];
#pragma unroll
  for (int f = 0; f < FPW; ++f) wmma::fill_fragment(acc[f], 0.f);
  const int fm = (warp * FPW) / 4;  // the warp's fragment row
  const int fn0 = (warp * FPW) % 4;

#pragma unroll
  for (int s = 0; s < GSTAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
    if constexpr (FP4) sq[s] = scale_of(s);
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<GSTAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; FP4: every warp is done with Bs
    const int s = kt % GSTAGES;
    const bf16* as = As + size_t(s) * BM * GLDS;
    const bf16* bs = Bs + size_t(FP4 ? 0 : s) * GBN * GLDS;
    if constexpr (FP4) {
      const uint4 pk = *reinterpret_cast<const uint4*>(Bp + size_t(s) * GBN * (GBK / 2) + fr * (GBK / 2) + fh * 16);
      const e2m1::Bf16Scale f = e2m1::scale_factors(sq[0]);
#pragma unroll
      for (int i = 0; i < GSTAGES - 2; ++i) sq[i] = sq[i + 1];
      sq[GSTAGES - 2] = scale_of(kt + GSTAGES - 1);
      const uint32_t words[4] = {pk.x, pk.y, pk.z, pk.w};
      uint4* dst = reinterpret_cast<uint4*>(Bs + fr * GLDS + fh * 32);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t p[4];
        scaled_pairs(words[q], f, f.two, p);
        dst[q] = make_uint4(p[0], p[1], p[2], p[3]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < GBK / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> af;
      wmma::load_matrix_sync(af, as + fm * 16 * GLDS + kk * 16, GLDS);
#pragma unroll
      for (int f = 0; f < FPW; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bfr;
        wmma::load_matrix_sync(bfr, bs + (fn0 + f) * 16 * GLDS + kk * 16, GLDS);
        wmma::mma_sync(acc[f], af, bfr, acc[f]);
      }
    }
    const int nk = kt + GSTAGES - 1;
    if (nk < KT) load_stage(nk % GSTAGES, nk);
    cp_async_commit();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int f = 0; f < FPW; ++f)
    wmma::store_matrix_sync(Cs + fm * 16 * (GBN + 4) + (fn0 + f) * 16, acc[f], GBN + 4, wmma::mem_row_major);
  __syncthreads();
  OutT* out = static_cast<OutT*>(second ? g.out_b : g.out);
  for (int i = tid; i < BM * GBN; i += 128) {
    const int r = i / GBN, c = i % GBN;
    if (r < rows) out[int64_t(row0 + r) * g.N + n0 + c] = from_f<OutT>(Cs[r * (GBN + 4) + c]);
  }
}

template <int BM, class OutT, bool FP4 = false>
void launch_moe_gemm(const char* op, cudaStream_t st, const MoeGemmArgs& g, int64_t P, size_t optin) {
  const int64_t max_tiles = cdiv(P, BM) + std::min<int64_t>(P, g.E);
  const size_t smem = moe_gemm_smem(BM, FP4);
  allow_smem(op, moe_gemm_kernel<BM, OutT, FP4>, smem, optin);
  const dim3 grid{unsigned(max_tiles), unsigned((g.W_b ? 2 : 1) * g.N / GBN), 1u};
  launch_kernel(op, moe_gemm_kernel<BM, OutT, FP4>, grid, 128, smem, st, g);
  CUDA_LAUNCH_CHECK(op, st);
}

// ---------------------------------------------------------------- decode GEMV
// Decode (P <= kGemvMaxPairs pairs): the permute step cuts each expert's rows into
// tiles of kGemvRows, and one warp computes one output column n of one tile: its lanes stride K
// with 16-byte loads of the expert's weight row, the tile's x rows (tiny, L1/L2) alongside, then a
// butterfly. Each weight byte is read once per tile, in 512-byte runs per warp instruction, with
// no tensor-core tiles padded from 1 row to 16. PAIR: the warp computes column n of w1 and of w3 and
// writes h = swiglu(w1 x, w3 x) as bf16, so the SwiGLU step needs no kernel; otherwise the F32
// column of y. Sums run in a fixed order: deterministic, independent of other rows.
constexpr int kGemvRows = 4;

struct MoeGemvArgs {
  void* out;           // PAIR: bf16 h [P, N]; else F32 y [P, N] (permuted rows)
  const bf16* A;       // rows of K values
  const int* a_rows;   // permuted row -> A row (null: identity)
  int64_t lda;
  const void* W;       // [E, N, K] bf16 (w1, or w2); MXFP4: packed e2m1 [E, N, K / 2]
  const void* W3;      // the same for w3 (PAIR)
  const uint8_t* Ws;   // MXFP4: e8m0 scales [E, N, K / 32] of W
  const uint8_t* W3s;  // ... of W3
  int N, K, E;
  const int* counts;
  const int* offsets;
  const int* tiles;
  const int* tile_expert;
  float limit;         // SwiGLU clamp (PAIR)
  int bf16_in;         // PAIR: w1 x and w3 x rounded to bf16 before the SwiGLU (W4A8)
};

// One output element of an expert step: PAIR, h = swiglu(w1 x, w3 x) with the clamp, as bf16;
// else the w2 sum as F32. g.bf16_in (W4A8): w1 x and w3 x rounded to bf16 first, as the grouped
// GEMM path stores them and the CPU reference rounds them: h is then rounded to FP8, where a
// difference of one bf16 step may land on the other side of an e4m3 rounding boundary.
template <bool PAIR>
__device__ __forceinline__ void store_expert_out(const MoeGemvArgs& g, int64_t o, float w1x, float w3x) {
  if constexpr (PAIR) {
    if (g.bf16_in) {
      w1x = __bfloat162float(__float2bfloat16_rn(w1x));
      w3x = __bfloat162float(__float2bfloat16_rn(w3x));
    }
    const float gv = fminf(w1x, g.limit);
    const float uv = fminf(fmaxf(w3x, -g.limit), g.limit);
    static_cast<bf16*>(g.out)[o] = __float2bfloat16_rn(gv * sigmoidf_(gv) * uv);
  } else {
    static_cast<float*>(g.out)[o] = w1x;
  }
}

// The K slices' partial sums, when KS warps of a block (warps w .. w + KS - 1, w a multiple of
// KS) share an output tile: each warp's V values per matrix through shared memory, summed in
// slice order into slice 0's acc. False for the other slices, whose work is done.
template <int KS, int NM, int V>
__device__ __forceinline__ bool sum_k_slices(float (&acc)[NM][V], float (&red)[8][32][V * NM]) {
  if constexpr (KS > 1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < NM; ++j)
#pragma unroll
      for (int h = 0; h < V; ++h) red[warp][lane][V * j + h] = acc[j][h];
    __syncthreads();
    if (warp % KS != 0) return false;
#pragma unroll
    for (int j = 0; j < NM; ++j)
#pragma unroll
      for (int h = 0; h < V; ++h) {
        float v = 0.f;
#pragma unroll
        for (int ss = 0; ss < KS; ++ss) v += red[warp + ss][lane][V * j + h];
        acc[j][h] = v;
      }
  }
  return true;
}

// MXFP4 decoding without a table or a branch: an e2m1 code s e1 e0 m placed in an fp16 as
// s << 15 | e1 e0 m << 9 is exactly the e2m1 value times 2^-14, subnormals included (e = 0:
// m * 2^-15; e > 0: (1 + m / 2) * 2^(e - 15)). So 8 codes of a 32-bit word (the even element in
// each byte's low nibble) become 4 half2 with one byte permute and three logic ops per pair, and
// the 2^14 goes into the group's scale: weight = fp16 * 2^(scale - 127 + 14).
__device__ __forceinline__ void decode_e2m1x8(uint32_t w, float (&v)[8]) {
  const uint32_t w4 = w >> 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // Code 2j (low nibble of byte j) to bits 0-3, code 2j + 1 (its high nibble) to bits 16-19;
    // the other bits are never selected below.
    const uint32_t x = __byte_perm(w, w4, 0x0400 + j * 0x0101);
    const uint32_t h = ((x << 9) & 0x0E000E00u) | ((x << 12) & 0x80008000u);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

// The factor of a group's partial sum: 2^(scale - 127) times decode_e2m1x8's 2^14.
__device__ __forceinline__ float fp4_group_factor(uint8_t scale) {
  const int e = int(scale) - 127 + 14 + 127;  // a biased fp32 exponent
  return e >= 1 && e <= 254 ? __uint_as_float(uint32_t(e) << 23) : ldexpf(1.f, int(scale) - 113);
}

// NW weight rows per warp, streamed together (more loads in flight per lane): PAIR, row n of w1
// and of w3; otherwise NW consecutive output columns of w2 (K = F is short). FP4: the weights are
// MXFP4 (moe_experts_mxfp4), 4 bytes per 8 values instead of 16.
template <bool PAIR, int NW, bool FP4 = false>
__global__ __launch_bounds__(256) void moe_gemv_kernel(MoeGemvArgs g) {
  pdl_enter();
  static_assert(!PAIR || NW == 2, "PAIR streams w1 and w3");
  const int bx = blockIdx.x;
  const int e = g.tile_expert[bx];
  if (bx >= g.tiles[g.E]) return;
  const int mt = bx - g.tiles[e];
  const int row0 = g.offsets[e] + mt * kGemvRows;
  const int rows = min(kGemvRows, g.counts[e] - mt * kGemvRows);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wi = int(blockIdx.y) * 8 + warp;  // the warp's index over the columns
  const int n0 = PAIR ? wi : wi * NW;         // its first output column
  if (n0 >= g.N) return;
  const bf16* arow[kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    const int pr = row0 + min(r, rows - 1);  // rows past the count repeat the last (never stored)
    arow[r] = g.A + (g.a_rows ? int64_t(g.a_rows[pr]) : int64_t(pr)) * g.lda;
  }
  // Each streamed row: its matrix (and scales) and its row index over all experts.
  const void* wm[NW];
  const uint8_t* wsm[NW];
  int64_t wrow[NW];
#pragma unroll
  for (int j = 0; j < NW; ++j) {
    wm[j] = PAIR && j == 1 ? g.W3 : g.W;
    wsm[j] = PAIR && j == 1 ? g.W3s : g.Ws;
    wrow[j] = PAIR ? int64_t(e) * g.N + n0 : int64_t(e) * g.N + min(n0 + j, g.N - 1);
  }
  float acc[NW][kGemvRows] = {};
  if constexpr (FP4) {
    // A lane takes 32 consecutive weights of a row per load (16 bytes of e2m1 pairs, one scale),
    // kFp4Loads loads per row (1024 values apart) issued before any is decoded, so that a warp
    // has its whole row (K <= 4096) in flight at once; the group's scale multiplies its partial
    // sum once.
    constexpr int kFp4Loads = 4;
    for (int k0 = lane * 32; k0 < g.K; k0 += 1024 * kFp4Loads) {
      uint4 raw[NW][kFp4Loads];
      uint8_t sc[NW][kFp4Loads];
#pragma unroll
      for (int u = 0; u < kFp4Loads; ++u) {
        const int k = k0 + 1024 * u;
#pragma unroll
        for (int j = 0; j < NW; ++j) {
          const bool in = k < g.K;
          raw[j][u] = in ? *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(wm[j]) + wrow[j] * (g.K / 2) + k / 2)
                         : make_uint4(0, 0, 0, 0);
          sc[j][u] = in ? wsm[j][wrow[j] * (g.K / 32) + k / 32] : uint8_t(0);
        }
      }
#pragma unroll
      for (int u = 0; u < kFp4Loads; ++u) {
        const int k = k0 + 1024 * u;
        if (k >= g.K) break;
        float part[NW][kGemvRows] = {};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float wv[NW][8];
#pragma unroll
          for (int j = 0; j < NW; ++j) {
            const uint32_t word = q == 0 ? raw[j][u].x : q == 1 ? raw[j][u].y : q == 2 ? raw[j][u].z : raw[j][u].w;
            decode_e2m1x8(word, wv[j]);
          }
#pragma unroll
          for (int r = 0; r < kGemvRows; ++r) {
            if (r >= rows) break;
            float av[8];
            load8(arow[r] + k + 8 * q, av);
#pragma unroll
            for (int j = 0; j < NW; ++j)
#pragma unroll
              for (int i = 0; i < 8; ++i) part[j][r] += av[i] * wv[j][i];
          }
        }
#pragma unroll
        for (int j = 0; j < NW; ++j) {
          const float f = fp4_group_factor(sc[j][u]);
#pragma unroll
          for (int r = 0; r < kGemvRows; ++r) acc[j][r] += f * part[j][r];
        }
      }
    }
  } else {
    // A lane takes 8 consecutive bf16 weights (16 bytes) of a row per step.
#pragma unroll 4
    for (int k = lane * 8; k < g.K; k += 32 * 8) {
      float wv[NW][8];
#pragma unroll
      for (int j = 0; j < NW; ++j) load8(static_cast<const bf16*>(wm[j]) + wrow[j] * g.K + k, wv[j]);
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        if (r >= rows) break;
        float av[8];
        load8(arow[r] + k, av);
#pragma unroll
        for (int j = 0; j < NW; ++j)
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[j][r] += av[q] * wv[j][q];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NW; ++j)
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) acc[j][r] = warp_sum(acc[j][r]);
  if (lane < rows) {
    float v[NW];
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      v[j] = 0.f;
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r)
        if (r == lane) v[j] = acc[j][r];
    }
    const int64_t o = int64_t(row0 + lane) * g.N + n0;
    if constexpr (PAIR) {
      const float gv = fminf(v[0], g.limit);
      const float uv = fminf(fmaxf(v[1], -g.limit), g.limit);
      static_cast<bf16*>(g.out)[o] = __float2bfloat16_rn(gv * sigmoidf_(gv) * uv);
    } else {
#pragma unroll
      for (int j = 0; j < NW; ++j)
        if (n0 + j < g.N) static_cast<float*>(g.out)[o + j] = v[j];
    }
  }
}

// ---------------------------------------------------------------- MXFP4 on the tensor cores
// moe_experts_mxfp4's GEMMs: tiles of up to 8 rows of one expert, 8 output columns per warp, with
// mma.sync m16n8k16 bf16 (rows 8-15 of the MMA's A unused) on weights decoded from e2m1 to bf16
// in registers with their group's scale already in the exponent. Per 128-value chunk of K a
// thread loads one MX group, the 16 packed bytes [16 tig, 16 tig + 16) of its column (B's column
// = its quad, grp), and the 32 activations at the same positions of its row (A's row = grp); the
// dot product visits K in that order on both operands, so MMA j takes values [4j, 4j + 4) of every
// thread's group. K is split over KS warps of a block when the grid would be small; PAIR computes
// w1 and w3 together and writes h = swiglu(w1 x, w3 x).
constexpr int kFp4TileRows = 8;
constexpr int kFp4Chunks = 2;  // 128-value chunks of K in flight per thread

// D += A . B, one m16n8k16 tile of bf16 operands, fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The bf16 of each e2m1 magnitude {0, 0.5, 1, 1.5, 2, 3, 4, 6} times the group's scale 2^(s - 127),
// as byte-permute tables: the high bytes of magnitudes 0-3 and 4-7, then the low bytes. A
// magnitude (1 + f) 2^E scaled is exponent field E + s and mantissa f, so only the exponent's
// bits depend on s: 2 <= s <= 252 keeps every value normal (smaller scales are taken as 2^-125:
// weights below 1e-37).
struct Bf16Table {
  uint32_t hi03, hi47, lo03, lo47;
  __device__ __forceinline__ explicit Bf16Table(uint32_t s) {
    s = max(s, 2u);
    const uint32_t h1 = (s - 1) >> 1, h2 = s >> 1, h4 = (s + 1) >> 1, h6 = (s >> 1) + 1;
    hi03 = h1 << 8 | h2 * 0x01010000u;
    hi47 = h4 * 0x00000101u | h6 * 0x01010000u;
    // Low bytes: the exponent's last bit (bit 7) and the mantissa's first (bit 6).
    lo03 = (s & 1) ? 0xC0800000u : 0x40008000u;
    lo47 = (s & 1) ? 0xC0804000u : 0x4000C080u;
  }
};

// 8 e2m1 codes (4 packed bytes, the even element in each byte's low nibble) as 4 scaled bf16
// pairs in element order: each magnitude's two bytes looked up with one byte permute per 4 codes,
// interleaved into pairs, and the sign bits moved to bits 15 and 31.
__device__ __forceinline__ void decode_e2m1x8_bf16(uint32_t w, const Bf16Table& t, uint32_t (&p)[4]) {
  const uint32_t m = w & 0x77777777u;  // magnitudes: selector nibbles 0-7
  const uint32_t h0 = __byte_perm(t.hi03, t.hi47, m), l0 = __byte_perm(t.lo03, t.lo47, m);
  const uint32_t h1 = __byte_perm(t.hi03, t.hi47, m >> 16), l1 = __byte_perm(t.lo03, t.lo47, m >> 16);
  p[0] = __byte_perm(l0, h0, 0x5140);
  p[1] = __byte_perm(l0, h0, 0x7362);
  p[2] = __byte_perm(l1, h1, 0x5140);
  p[3] = __byte_perm(l1, h1, 0x7362);
  // Byte q of s << 4 has the even code's sign in bit 7, byte q of s the odd code's.
  const uint32_t s = w & 0x88888888u, s4 = s << 4;
#pragma unroll
  for (int q = 0; q < 4; ++q) p[q] |= __byte_perm(s4, s, uint32_t((4 + q) << 12 | q << 4)) & 0x80008000u;
}

// One MX group of one 8-column tile: the lane's 16 packed bytes (32 e2m1 values of its column,
// scale `scale`) decoded to bf16 and multiplied with the 32 activations of its row at the same K
// positions (a[q]: values [8q, 8q + 8)), two m16n8k16 MMAs per 8 values, accumulated into c. a0 / a2
// carry row grp's two K halves (a1 repeats the second: rows 8-15 are unused whichever of a1 / a2
// the layout reads).
__device__ __forceinline__ void mx_group_mma(float (&c)[4], uint4 w, uint8_t scale, const uint4 (&a)[4]) {
  const Bf16Table t(scale);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t b[4];
    decode_e2m1x8_bf16(words[q], t, b);
    mma_bf16(c, a[q].x, a[q].y, a[q].y, 0u, b[0], b[1]);
    mma_bf16(c, a[q].z, a[q].w, a[q].w, 0u, b[2], b[3]);
  }
}

// mxfp4-decode=shift: the same operands with a third of the integer work per weight (Nsight
// Compute found the byte-permute table decode above keeping the ALU pipe 74 % busy at 30 % of the
// DRAM bandwidth, results/2026-12-05-h200-stream-kernels). Each pair is one byte permute and one
// three-input LOP3 (two shifts beside them, which the compiler may put on the FMA pipe;
// model/cuda/e2m1_bits.h, checked bit for bit on the host), the value times 2^-126, and one bf16x2
// multiply by 2^(scale - 1) makes it the operand mx_group_mma makes. Scales above 128 (weights
// above 8) need a second multiply: a warp vote skips it when no lane's group has one. The scale
// is per lane (its own column and group), so the multiply sits before the MMA, not after it.
__device__ __forceinline__ void mx_group_mma_shift(float (&c)[4], uint4 w, uint8_t scale, const uint4 (&a)[4]) {
  const e2m1::Bf16Scale f = e2m1::scale_factors(scale);
  // Every lane of the warp is here (the callers' loops are uniform per warp).
  const bool second = __any_sync(0xFFFFFFFFu, f.two);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t b[4];
    scaled_pairs(words[q], f, second, b);
    mma_bf16(c, a[q].x, a[q].y, a[q].y, 0u, b[0], b[1]);
    mma_bf16(c, a[q].z, a[q].w, a[q].w, 0u, b[2], b[3]);
  }
}

// mxfp4-decode=shift-quad: the shift decode, and each MMA takes a loaded activation vector
// (x, y, z, w: value pairs [0, 2), [2, 4), [4, 6), [6, 8) of 8) as its A quad as it is, with no
// register copies (the SASS of mx_group_mma_shift shows about 4.8 IMAD moves per MMA building
// {x, y, y, 0}). A's rows 0-7 then carry x and z, rows 8-15 (otherwise unused) y and w, for the
// same token grp. One MMA multiplies that quad with the weight pairs at x's and z's positions
// into c[0..3] (rows 0-7 correct), a second with those at y's and w's into c[4..7] (rows 8-15
// correct); each MMA's other half multiplies mismatched positions and is never read. The
// token's output is c[h] + c[6 + h] (mx_group_out). The same products as the shift decode,
// summed in two accumulators instead of one; the pairs come from pairs_times_2m126_mul (one
// multiply where the shift decode shifts twice).
__device__ __forceinline__ void mx_group_mma_shift_quad(float (&c)[8], uint4 w, uint8_t scale, const uint4 (&a)[4]) {
  const e2m1::Bf16Scale f = e2m1::scale_factors(scale);
  const bool second = __any_sync(0xFFFFFFFFu, f.two);  // every lane of the warp is here
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float(&lo)[4] = *reinterpret_cast<float(*)[4]>(&c[0]);
  float(&hi)[4] = *reinterpret_cast<float(*)[4]>(&c[4]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t b[4];
    scaled_pairs<true>(words[q], f, second, b);
    mma_bf16(lo, a[q].x, a[q].y, a[q].z, a[q].w, b[0], b[2]);
    mma_bf16(hi, a[q].x, a[q].y, a[q].z, a[q].w, b[1], b[3]);
  }
}

// Accumulators per MMA tile of the decode (shift-quad keeps two) and the lane's output h of them.
template <Mxfp4Decode DEC>
constexpr int kMxAcc = DEC == Mxfp4Decode::ShiftQuad ? 8 : 4;
template <Mxfp4Decode DEC>
__device__ __forceinline__ float mx_group_out(const float (&c)[kMxAcc<DEC>], int h) {
  if constexpr (DEC == Mxfp4Decode::ShiftQuad)
    return c[h] + c[6 + h];
  else
    return c[h];
}

// One MX group through the decode the variant names.
template <Mxfp4Decode DEC>
__device__ __forceinline__ void mx_group(float (&c)[kMxAcc<DEC>], uint4 w, uint8_t scale, const uint4 (&a)[4]) {
  if constexpr (DEC == Mxfp4Decode::ShiftQuad)
    mx_group_mma_shift_quad(c, w, scale, a);
  else if constexpr (DEC == Mxfp4Decode::Shift)
    mx_group_mma_shift(c, w, scale, a);
  else
    mx_group_mma(c, w, scale, a);
}

// Block blockIdx.x's tile of up to kFp4TileRows rows of one expert (the permute's tile table);
// false for a block past the tiles the routing produced (the grid reserves the most there can be).
struct Fp4Tile {
  int expert, row0, rows;
};
__device__ __forceinline__ bool fp4_tile(const MoeGemvArgs& g, Fp4Tile& t) {
  const int bx = blockIdx.x;
  if (bx >= g.tiles[g.E]) return false;
  t.expert = g.tile_expert[bx];
  const int mt = bx - g.tiles[t.expert];
  t.row0 = g.offsets[t.expert] + mt * kFp4TileRows;
  t.rows = min(kFp4TileRows, g.counts[t.expert] - mt * kFp4TileRows);
  return true;
}

// A warp's share of a K-sliced MXFP4 block: the first output column of its tile (W columns; a
// block is 8 / KS tiles, each taken by KS consecutive warps) and its K slice [k_lo, k_hi).
struct Fp4WarpSlice {
  int n0, k_lo, k_hi;
};
template <int KS, int W>
__device__ __forceinline__ Fp4WarpSlice fp4_warp_slice(const MoeGemvArgs& g) {
  const int warp = threadIdx.x >> 5;
  const int Kc = g.K / KS;  // a multiple of 128 (the host checks)
  const int k_lo = (warp % KS) * Kc;
  return {(int(blockIdx.y) * (8 / KS) + warp / KS) * W, k_lo, k_lo + Kc};
}

// The end of an 8-row kernel (8 token rows x 8 columns per warp MMA): the K slices' partial sums
// met (sum_k_slices), then the lane's outputs (row grp, columns n0 + 2 tig + h) stored where in range.
template <bool PAIR, int KS, Mxfp4Decode DEC, int NM>
__device__ __forceinline__ void store_row_tile(const MoeGemvArgs& g, const float (&c)[NM][kMxAcc<DEC>],
                                               float (&red)[8][32][2 * NM], int n0, int row0, int rows) {
  const int lane = threadIdx.x & 31, grp = lane >> 2, tig = lane & 3;
  float acc[NM][2];
#pragma unroll
  for (int j = 0; j < NM; ++j) acc[j][0] = mx_group_out<DEC>(c[j], 0), acc[j][1] = mx_group_out<DEC>(c[j], 1);
  if (!sum_k_slices<KS>(acc, red)) return;
  if (n0 >= g.N || grp >= rows) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = n0 + 2 * tig + h;
    if (n >= g.N) continue;
    store_expert_out<PAIR>(g, int64_t(row0 + grp) * g.N + n, acc[0][h], acc[NM - 1][h]);
  }
}

// The 16 packed bytes of a lane's MX group (mxfp4-load, model/kernel_variants.h): an ordinary
// load (plain, which also fills L1), or a read-only one that leaves L1 to the activations
// (noalloc: a weight is read once per tile, a tile's activations by every warp of its K slice).
// The same bytes either way. (Asking the L2 for 256 bytes per miss on top, the next chunks of the
// row, was slower on an H100: results/2026-12-07-h100-mxfp4-load.)
template <Mxfp4Load LD>
__device__ __forceinline__ uint4 load_fp4_group(const uint8_t* p) {
  if constexpr (LD == Mxfp4Load::Plain) {
    return *reinterpret_cast<const uint4*>(p);
  } else {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
  }
}

// MINB (mxfp4-mma-blocks=3, shift-quad only): registers budgeted for 3 blocks per SM (at most 80;
// w1 + w3 takes 94 unbudgeted, which leaves an SM 2 blocks, 16 warps).
// LD: how the packed weights are loaded (mxfp4-load; shift-quad with MINB 0 only).
template <bool PAIR, int KS, Mxfp4Decode DEC, int MINB = 0, Mxfp4Load LD = Mxfp4Load::Plain>
__global__ __launch_bounds__(256, MINB) void moe_fp4_mma_kernel(MoeGemvArgs g) {
  constexpr int NM = PAIR ? 2 : 1;  // weight matrices streamed (w1 and w3, or w2)
  __shared__ float red[8][32][2 * NM];
  pdl_enter();
  Fp4Tile tile;
  if (!fp4_tile(g, tile)) return;  // uniform per block
  const int e = tile.expert, row0 = tile.row0, rows = tile.rows;
  const int lane = threadIdx.x & 31, grp = lane >> 2, tig = lane & 3;
  const auto [n0, k_lo, k_hi] = fp4_warp_slice<KS, 8>(g);
  float c[NM][kMxAcc<DEC>] = {};
  if (n0 < g.N) {
    // The loads stay predicated: a lane whose row is past the tile loads no activations (most
    // tiles of a batch-8 step hold 1-2 rows). Loading every chunk and row unpredicated, which
    // drops the register clears (517 -> 492 instructions per 32 MMAs), made the experts at 8
    // tokens 3.7 % slower on an H200 (results/2026-12-07-h200-mxfp4-loop).
    const bool row_ok = grp < rows;
    const int pr = row0 + (row_ok ? grp : 0);
    const bf16* arow = g.A + (g.a_rows ? int64_t(g.a_rows[pr]) : int64_t(pr)) * g.lda + tig * 32;
    const int64_t wrow = int64_t(e) * g.N + min(n0 + grp, g.N - 1);  // this thread's B column
    const uint8_t* wm[NM];
    const uint8_t* sm[NM];
#pragma unroll
    for (int j = 0; j < NM; ++j) {
      wm[j] = static_cast<const uint8_t*>(j == 0 ? g.W : g.W3) + wrow * (g.K / 2) + tig * 16;
      sm[j] = (j == 0 ? g.Ws : g.W3s) + wrow * (g.K / 32) + tig;
    }
    for (int k0 = k_lo; k0 < k_hi; k0 += 128 * kFp4Chunks) {
      uint4 wv[NM][kFp4Chunks], av[kFp4Chunks][4];
      uint8_t sc[NM][kFp4Chunks];
#pragma unroll
      for (int u = 0; u < kFp4Chunks; ++u) {
        const int k = k0 + 128 * u;
        const bool in = k < k_hi;
#pragma unroll
        for (int j = 0; j < NM; ++j) {
          wv[j][u] = in ? load_fp4_group<LD>(wm[j] + k / 2) : make_uint4(0, 0, 0, 0);
          sc[j][u] = in ? sm[j][k / 32] : uint8_t(127);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
          av[u][i] = in && row_ok ? reinterpret_cast<const uint4*>(arow + k)[i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kFp4Chunks; ++u) {
        if (k0 + 128 * u >= k_hi) break;
#pragma unroll
        for (int j = 0; j < NM; ++j) {
          mx_group<DEC>(c[j], wv[j][u], sc[j][u], av[u]);
        }
      }
    }
  }
  store_row_tile<PAIR, KS, DEC>(g, c, red, n0, row0, rows);
}

// (Measured on the H200 and removed, results/2026-12-05-h200-stream-kernels: a persistent kernel
// streaming each warp's chunks through a cp.async ring, 1.3-1.6x slower, and an L2 prefetch of
// each block's expert rows, 1.2x slower. ncu: moe_fp4_mma_kernel is bound by the ALU pipe that
// decodes e2m1, 74 % busy at 30 % of the DRAM bandwidth, not by memory latency. A decode by lookup
// in a shared-memory table, one copy per lane, was 1.2x slower end to end: it moved the bound to
// the L1 / shared-memory path, results/2026-12-05-h200-mxfp4-lut. With the shift-quad decode,
// streaming each warp's chunks through a cp.async ring again (4 stages for this kernel, 3 for the
// swapped one, the same products) was slower still on an H100: the experts 231.0 -> 299.0 us at 8
// tokens and 63.6 -> 67.9 us at 1, steps 12.2 % and 3.8 % slower; as was W4A8 on the FP8 wgmma
// with the codes turned into e4m3 operands, 13-16 % slower than these kernels on FP8-rounded
// activations; results/2026-12-07-h100-ring-and-wgmma.)
//
// The wide variant (mxfp4-wide=on; off by default: 3 % faster than moe_fp4_mma_kernel at 1 token,
// 9 % slower at 8, results/2026-12-04-h200-fp8-decode): a block takes one tile of rows and NT x 8
// columns, each of its 8 warps a strided share of K's 128-value chunks (warp w: chunks
// [w CH, w CH + CH), then 8 CH further on), so every warp of the block reads at once; a warp's
// activation chunk feeds NT column tiles of each streamed matrix, and a lane has NT x NM x CH
// groups of 16 packed bytes in flight before it decodes any. The same decode and MMAs as
// moe_fp4_mma_kernel; the 8 warps' partial sums meet in shared memory.
template <bool PAIR, int NT, Mxfp4Decode DEC>
__global__ __launch_bounds__(256) void moe_fp4_wide_kernel(MoeGemvArgs g) {
  pdl_enter();
  constexpr int NM = PAIR ? 2 : 1;
  constexpr int CH = 4 / (NT * NM) > 0 ? 4 / (NT * NM) : 1;  // chunks per warp step
  __shared__ float red[8][NM][NT][64];
  Fp4Tile tile;
  if (!fp4_tile(g, tile)) return;  // uniform per block
  const int e = tile.expert, row0 = tile.row0, rows = tile.rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane >> 2, tig = lane & 3;
  const int n0 = int(blockIdx.y) * NT * 8;
  const bool row_ok = grp < rows;
  const int pr = row0 + (row_ok ? grp : 0);
  const bf16* arow = g.A + (g.a_rows ? int64_t(g.a_rows[pr]) : int64_t(pr)) * g.lda + tig * 32;
  const uint8_t* wm[NM][NT];
  const uint8_t* sm[NM][NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int64_t wrow = int64_t(e) * g.N + min(n0 + 8 * t + grp, g.N - 1);  // this thread's B column
#pragma unroll
    for (int j = 0; j < NM; ++j) {
      wm[j][t] = static_cast<const uint8_t*>(j == 0 ? g.W : g.W3) + wrow * (g.K / 2) + tig * 16;
      sm[j][t] = (j == 0 ? g.Ws : g.W3s) + wrow * (g.K / 32) + tig;
    }
  }
  float c[NM][NT][kMxAcc<DEC>] = {};
  for (int k0 = warp * CH * 128; k0 < g.K; k0 += 8 * CH * 128) {
    uint4 wv[CH][NM][NT], av[CH][4];
    uint8_t sc[CH][NM][NT];
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int k = k0 + 128 * u;
      const bool in = k < g.K;
#pragma unroll
      for (int j = 0; j < NM; ++j)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          wv[u][j][t] = in ? __ldg(reinterpret_cast<const uint4*>(wm[j][t] + k / 2)) : make_uint4(0, 0, 0, 0);
          sc[u][j][t] = in ? sm[j][t][k / 32] : uint8_t(127);
        }
#pragma unroll
      for (int i = 0; i < 4; ++i)
        av[u][i] = in && row_ok ? reinterpret_cast<const uint4*>(arow + k)[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      if (k0 + 128 * u >= g.K) break;  // uniform per warp
#pragma unroll
      for (int j = 0; j < NM; ++j)
#pragma unroll
        for (int t = 0; t < NT; ++t) mx_group<DEC>(c[j][t], wv[u][j][t], sc[u][j][t], av[u]);
    }
  }
#pragma unroll
  for (int j = 0; j < NM; ++j)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      red[warp][j][t][grp * 8 + 2 * tig] = mx_group_out<DEC>(c[j][t], 0);
      red[warp][j][t][grp * 8 + 2 * tig + 1] = mx_group_out<DEC>(c[j][t], 1);
    }
  __syncthreads();
  // Thread i < 64 NT finishes one (tile, row, column): the 8 warps' sums of each matrix.
  const int i = threadIdx.x;
  if (i >= NT * 64) return;
  const int t = i / 64, ei = i % 64, row = ei / 8;
  const int n = n0 + 8 * t + ei % 8;
  if (row >= rows || n >= g.N) return;
  float v[NM];
#pragma unroll
  for (int j = 0; j < NM; ++j) {
    v[j] = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) v[j] += red[w][j][t][ei];
  }
  store_expert_out<PAIR>(g, int64_t(row0 + row) * g.N + n, v[0], v[NM - 1]);
}

// Column tiles per warp of the wide kernel: the most (up to 4 / NM) that still gives every SM two
// blocks at the tile count the call reserves.
int fp4_wide_tiles(int64_t max_tiles, int64_t N, int nm, int sms) {
  for (int nt = 4 / nm; nt > 1; nt /= 2)
    if (max_tiles * cdiv(N, 8 * nt) >= 2 * int64_t(sms)) return nt;
  return 1;
}

template <bool PAIR, Mxfp4Decode DEC>
void launch_fp4_wide_dec(const char* op, cudaStream_t st, int nt, dim3 grid, const MoeGemvArgs& v) {
  switch (nt) {
    case 4: launch_kernel(op, moe_fp4_wide_kernel<PAIR, PAIR ? 2 : 4, DEC>, grid, 256, 0, st, v); break;
    case 2: launch_kernel(op, moe_fp4_wide_kernel<PAIR, 2, DEC>, grid, 256, 0, st, v); break;
    default: launch_kernel(op, moe_fp4_wide_kernel<PAIR, 1, DEC>, grid, 256, 0, st, v); break;
  }
}

template <bool PAIR>
void launch_fp4_wide(const char* op, cudaStream_t st, int64_t max_tiles, const MoeGemvArgs& v, int sms,
                     Mxfp4Decode dec) {
  const int nt = fp4_wide_tiles(max_tiles, v.N, PAIR ? 2 : 1, sms);
  const dim3 grid{unsigned(max_tiles), unsigned(cdiv(v.N, 8 * nt)), 1u};
  if (dec == Mxfp4Decode::ShiftQuad)
    launch_fp4_wide_dec<PAIR, Mxfp4Decode::ShiftQuad>(op, st, nt, grid, v);
  else if (dec == Mxfp4Decode::Shift)
    launch_fp4_wide_dec<PAIR, Mxfp4Decode::Shift>(op, st, nt, grid, v);
  else
    launch_fp4_wide_dec<PAIR, Mxfp4Decode::Table>(op, st, nt, grid, v);
  CUDA_LAUNCH_CHECK(op, st);
}

// mxfp4-swap=on: the same products with the weights as the MMA's A operand ("swap AB", as
// mixed-input GEMMs do for few rows). moe_fp4_mma_kernel feeds 8 token rows as A, of which a
// decode tile fills at most 8 of the MMA's 16, so half of each MMA is wasted and every A
// fragment {x, y, y, 0} is copied into a register quad first (the SASS shows about 4.8 IMAD moves
// per MMA beside the decode). Here a warp's MMA is 16 output features x 8 tokens: A = 16 features'
// decoded weights (every row used), B = the tokens' activations, whose two registers per MMA are
// an aligned pair of the loaded uint4 as they are. Lane (grp, tig) decodes features grp and
// grp + 8 of its MX group (the 16 packed bytes [16 tig, 16 tig + 16) of the 128-value chunk) with
// the shift decode, and holds token grp's 32 activations at the same K positions; MMA 2q + h
// takes values [8q + 4h, 8q + 4h + 4) of every lane's group. K splits over KS warps as in
// moe_fp4_mma_kernel; a block is 8 / KS feature tiles of 16.
constexpr int kFp4SwapFeatures = 16;
// mxfp4-swap=auto takes the swapped kernel up to this many token-expert pairs (a decode step of 1-2
// tokens at k = 6-8).
constexpr int64_t kSwapAutoMaxPairs = 16;

// The end of a swapped kernel (16 features x 8 tokens per warp MMA): the K slices' partial sums
// met (sum_k_slices), then c[j][2f + h], feature n0 + grp + 8 f and token 2 tig + h of the tile,
// stored where both are in range.
template <bool PAIR, int KS, int NM>
__device__ __forceinline__ void store_swapped_tile(const MoeGemvArgs& g, float (&c)[NM][4],
                                                   float (&red)[8][32][4 * NM], int n0, int row0, int rows) {
  if (!sum_k_slices<KS>(c, red)) return;
  if (n0 >= g.N) return;
  const int lane = threadIdx.x & 31, grp = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int f = 0; f < 2; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + grp + 8 * f, r = 2 * tig + h;
      if (n >= g.N || r >= rows) continue;
      store_expert_out<PAIR>(g, int64_t(row0 + r) * g.N + n, c[0][2 * f + h], c[NM - 1][2 * f + h]);
    }
}

// One 128-value chunk of one matrix in the swapped layout: the lane's MX groups of features grp
// and grp + 8 (w[0], w[1]; scales sc) decoded by the shift decode and multiplied with its token's
// 32 activations at the same K positions (a[q]: values [8q, 8q + 8)), into c (feature grp + 8 f,
// token 2 tig + h at c[2 f + h]). Every lane of the warp must be here (the scale vote).
template <bool MUL>
__device__ __forceinline__ void swap_group_mma(float (&c)[4], const uint4 (&w)[2], const uint8_t (&sc)[2],
                                               const uint4 (&a)[4]) {
  const e2m1::Bf16Scale f0 = e2m1::scale_factors(sc[0]), f1 = e2m1::scale_factors(sc[1]);
  const bool second = __any_sync(0xFFFFFFFFu, f0.two || f1.two);
  const uint32_t w0[4] = {w[0].x, w[0].y, w[0].z, w[0].w};
  const uint32_t w1[4] = {w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // Features grp and grp + 8: pairs of values 8q .. 8q + 7. (Not two scaled_pairs calls: one
    // branch for both second multiplies compiles to 0.15 fewer instructions per weight.)
    uint32_t lo[4], hi[4];
    pairs_2m126<MUL>(w0[q], lo);
    pairs_2m126<MUL>(w1[q], hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = bf16x2_mul(lo[i], f0.first);
      hi[i] = bf16x2_mul(hi[i], f1.first);
    }
    if (second) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[i] = bf16x2_mul(lo[i], f0.second);
        hi[i] = bf16x2_mul(hi[i], f1.second);
      }
    }
    mma_bf16(c, lo[0], hi[0], lo[1], hi[1], a[q].x, a[q].y);
    mma_bf16(c, lo[2], hi[2], lo[3], hi[3], a[q].z, a[q].w);
  }
}

// MUL (mxfp4-decode=shift-quad): the pairs by one multiply (pairs_2m126).
// LD: how the packed weights are loaded (mxfp4-load; with MUL only).
template <bool PAIR, int KS, bool MUL, Mxfp4Load LD = Mxfp4Load::Plain>
__global__ __launch_bounds__(256) void moe_fp4_swap_kernel(MoeGemvArgs g) {
  constexpr int NM = PAIR ? 2 : 1;  // weight matrices streamed (w1 and w3, or w2)
  constexpr int CH = PAIR ? 1 : 2;  // 128-value chunks in flight: 64 packed bytes per lane either way
  __shared__ float red[8][32][4 * NM];
  pdl_enter();
  Fp4Tile tile;
  if (!fp4_tile(g, tile)) return;  // uniform per block
  const int e = tile.expert, row0 = tile.row0, rows = tile.rows;
  const int lane = threadIdx.x & 31, grp = lane >> 2, tig = lane & 3;
  const auto [n0, k_lo, k_hi] = fp4_warp_slice<KS, kFp4SwapFeatures>(g);
  float c[NM][4] = {};
  if (n0 < g.N) {
    const bool row_ok = grp < rows;  // this lane's token
    const int pr = row0 + (row_ok ? grp : 0);
    const bf16* arow = g.A + (g.a_rows ? int64_t(g.a_rows[pr]) : int64_t(pr)) * g.lda + tig * 32;
    const uint8_t* wm[NM][2];
    const uint8_t* sm[NM][2];
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const int64_t wrow = int64_t(e) * g.N + min(n0 + grp + 8 * f, g.N - 1);  // features grp, grp + 8
#pragma unroll
      for (int j = 0; j < NM; ++j) {
        wm[j][f] = static_cast<const uint8_t*>(j == 0 ? g.W : g.W3) + wrow * (g.K / 2) + tig * 16;
        sm[j][f] = (j == 0 ? g.Ws : g.W3s) + wrow * (g.K / 32) + tig;
      }
    }
    for (int k0 = k_lo; k0 < k_hi; k0 += 128 * CH) {
      uint4 wv[CH][NM][2], av[CH][4];
      uint8_t sc[CH][NM][2];
#pragma unroll
      for (int u = 0; u < CH; ++u) {
        const int k = k0 + 128 * u;
        const bool in = k < k_hi;
#pragma unroll
        for (int j = 0; j < NM; ++j)
#pragma unroll
          for (int f = 0; f < 2; ++f) {
            wv[u][j][f] = in ? load_fp4_group<LD>(wm[j][f] + k / 2) : make_uint4(0, 0, 0, 0);
            sc[u][j][f] = in ? sm[j][f][k / 32] : uint8_t(127);
          }
#pragma unroll
        for (int i = 0; i < 4; ++i)
          av[u][i] = in && row_ok ? reinterpret_cast<const uint4*>(arow + k)[i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < CH; ++u) {
        if (k0 + 128 * u >= k_hi) break;  // uniform per warp
#pragma unroll
        for (int j = 0; j < NM; ++j) swap_group_mma<MUL>(c[j], wv[u][j], sc[u][j], av[u]);
      }
    }
  }
  store_swapped_tile<PAIR, KS>(g, c, red, n0, row0, rows);
}

// K slices per block of 8 warps whose output tiles are `tile_cols` wide: enough warps for the grid
// to fill the GPU when few tiles run (decode), each slice whole 128-value chunks.
int fp4_mma_k_slices(int64_t max_tiles, int64_t N, int64_t K, int sms, int tile_cols) {
  int ks = 1;
  while (ks < 8 && max_tiles * cdiv(N, 8 * tile_cols / ks) < 4 * int64_t(sms) && K % (128 * 2 * ks) == 0 &&
         K / (2 * ks) >= 128 * kFp4Chunks)
    ks *= 2;
  return ks;
}

// f(std::integral_constant<int, KS>{}) for the K-slice count ks (1, 2, 4, else 8) that
// fp4_mma_k_slices chose: the kernels take it as a template argument.
template <class F>
void with_k_slices(int ks, F&& f) {
  switch (ks) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

template <bool PAIR, Mxfp4Decode DEC, int MINB = 0, Mxfp4Load LD = Mxfp4Load::Plain>
void launch_fp4_mma_ks(const char* op, cudaStream_t st, int ks, dim3 grid, const MoeGemvArgs& v) {
  with_k_slices(ks, [&](auto KS) { launch_kernel(op, moe_fp4_mma_kernel<PAIR, KS, DEC, MINB, LD>, grid, 256, 0, st, v); });
}

template <bool PAIR>
void launch_fp4_mma(const char* op, cudaStream_t st, int64_t max_tiles, const MoeGemvArgs& v, int sms,
                    Mxfp4Decode dec, int blocks_per_sm, Mxfp4Load ld) {
  const int ks = fp4_mma_k_slices(max_tiles, v.N, v.K, sms, 8);
  const dim3 grid{unsigned(max_tiles), unsigned(cdiv(v.N, 8 * (8 / ks))), 1u};
  if (dec == Mxfp4Decode::ShiftQuad && blocks_per_sm >= 3)
    launch_fp4_mma_ks<PAIR, Mxfp4Decode::ShiftQuad, 3>(op, st, ks, grid, v);
  else if (dec == Mxfp4Decode::ShiftQuad && ld == Mxfp4Load::NoAlloc)
    launch_fp4_mma_ks<PAIR, Mxfp4Decode::ShiftQuad, 0, Mxfp4Load::NoAlloc>(op, st, ks, grid, v);
  else if (dec == Mxfp4Decode::ShiftQuad)
    launch_fp4_mma_ks<PAIR, Mxfp4Decode::ShiftQuad>(op, st, ks, grid, v);
  else if (dec == Mxfp4Decode::Shift)
    launch_fp4_mma_ks<PAIR, Mxfp4Decode::Shift>(op, st, ks, grid, v);
  else
    launch_fp4_mma_ks<PAIR, Mxfp4Decode::Table>(op, st, ks, grid, v);
  CUDA_LAUNCH_CHECK(op, st);
}

template <bool PAIR, bool MUL, Mxfp4Load LD = Mxfp4Load::Plain>
void launch_fp4_swap_ks(const char* op, cudaStream_t st, int ks, dim3 grid, const MoeGemvArgs& v) {
  with_k_slices(ks, [&](auto KS) { launch_kernel(op, moe_fp4_swap_kernel<PAIR, KS, MUL, LD>, grid, 256, 0, st, v); });
}

// The swapped kernel's K slices: mxfp4-swap-ks's count (halved until each slice is whole
// 128-value chunks), or fp4_mma_k_slices's choice under auto (0).
int fp4_swap_k_slices(int forced, int64_t max_tiles, int64_t N, int64_t K, int sms) {
  if (forced == 0) return fp4_mma_k_slices(max_tiles, N, K, sms, kFp4SwapFeatures);
  int ks = forced;
  while (ks > 1 && K % (128 * ks) != 0) ks /= 2;
  return ks;
}

template <bool PAIR>
void launch_fp4_swap(const char* op, cudaStream_t st, int64_t max_tiles, const MoeGemvArgs& v, int sms,
                     Mxfp4Decode dec, Mxfp4Load ld, int forced_ks) {
  const int ks = fp4_swap_k_slices(forced_ks, max_tiles, v.N, v.K, sms);
  const dim3 grid{unsigned(max_tiles), unsigned(cdiv(v.N, kFp4SwapFeatures * (8 / ks))), 1u};
  if (dec == Mxfp4Decode::ShiftQuad && ld == Mxfp4Load::NoAlloc)
    launch_fp4_swap_ks<PAIR, true, Mxfp4Load::NoAlloc>(op, st, ks, grid, v);
  else if (dec == Mxfp4Decode::ShiftQuad)
    launch_fp4_swap_ks<PAIR, true>(op, st, ks, grid, v);
  else
    launch_fp4_swap_ks<PAIR, false>(op, st, ks, grid, v);
  CUDA_LAUNCH_CHECK(op, st);
}

// out[t, d] = sum_{i < k} weights[t, i] * y[inv[t*k + i], d] (fp32, slot order). Grid
// (T, D / 256): the block first stages the token's k rows and weights in shared memory, then one
// thread per d.
__global__ __launch_bounds__(256) void moe_combine_kernel(void* out, int dto, const float* y, const int* inv,
                                                          const float* weights, int k, int64_t D) {
  pdl_enter();
  __shared__ int ri[64];
  __shared__ float rw[64];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    ri[threadIdx.x] = inv[t * k + threadIdx.x];
    rw[threadIdx.x] = weights[t * k + threadIdx.x];
  }
  __syncthreads();
  const int64_t d = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float acc = 0.f;
  if (k <= 8) {
    // Decode: the k rows' loads all in flight, then the sum in slot order.
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (i < k && ri[i] >= 0) ? y[int64_t(ri[i]) * D + d] : 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < k && ri[i] >= 0) acc += rw[i] * v[i];
    stf(out, dto, t * D + d, acc);
    return;
  }
  for (int i = 0; i < k; ++i)
    if (ri[i] >= 0) acc += rw[i] * y[int64_t(ri[i]) * D + d];
  stf(out, dto, t * D + d, acc);
}

// One expert matrix for the GEMV: the weights (bf16, or packed e2m1) and, for MXFP4, the scales.
struct ExpertMatrix {
  const void* w;
  const uint8_t* scales;
};

// The two GEMM steps of the routed experts as kernel arguments, read from the permutation in the
// workspace: up, h1 = swiglu(w1 x, w3 x) over the gathered token rows (N = F, K = D), and down,
// y = w2 h1 in F32 over the permuted rows (N = D, K = F).
struct ExpertSteps {
  MoeGemvArgs up, down;
};

ExpertSteps expert_steps(const MoeLayout& L, char* ws, const Tensor& x, int64_t D, int64_t E, int64_t F,
                         float swiglu_limit, ExpertMatrix w1, ExpertMatrix w2, ExpertMatrix w3) {
  MoeGemvArgs v{};
  v.counts = reinterpret_cast<const int*>(ws + L.counts);
  v.offsets = reinterpret_cast<const int*>(ws + L.offsets);
  v.tiles = reinterpret_cast<const int*>(ws + L.tiles);
  v.tile_expert = reinterpret_cast<const int*>(ws + L.tile_expert);
  v.E = int(E);
  v.limit = swiglu_limit;
  ExpertSteps st{v, v};
  bf16* h1 = reinterpret_cast<bf16*>(ws + L.h1);
  st.up.out = h1;
  st.up.A = static_cast<const bf16*>(x.data);
  st.up.a_rows = reinterpret_cast<const int*>(ws + L.src_row);
  st.up.lda = D;
  st.up.W = w1.w;
  st.up.Ws = w1.scales;
  st.up.W3 = w3.w;
  st.up.W3s = w3.scales;
  st.up.N = int(F);
  st.up.K = int(D);
  st.down.out = ws + L.y;
  st.down.A = h1;
  st.down.lda = F;
  st.down.W = w2.w;
  st.down.Ws = w2.scales;
  st.down.N = int(D);
  st.down.K = int(F);
  return st;
}

// out = the weighted combine of the k expert rows of each token (moe_combine_kernel).
void launch_moe_combine(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, const Tensor& out,
                        const Tensor& weights, int64_t T, int64_t k, int64_t D) {
  launch_kernel(op, moe_combine_kernel, dim3{unsigned(T), unsigned(cdiv(D, 256)), 1u}, 256, 0, st, out.data,
                fcode(out.dtype), reinterpret_cast<const float*>(ws + L.y), reinterpret_cast<const int*>(ws + L.inv),
                weights.ptr<float>(), int(k), D);
  CUDA_LAUNCH_CHECK(op, st);
}

// The decode GEMV path, after the permute: h1 = swiglu(w1 x, w3 x) over the gathered token rows,
// y = w2 h1 (F32), then out = the weighted combine. FP4: MXFP4 weights (moe_experts_mxfp4).
template <bool FP4>
void moe_gemv_path(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, int64_t T, int64_t D, int64_t E,
                   int64_t F, int64_t k, float swiglu_limit, const Tensor& out, const Tensor& x, const Tensor& weights,
                   ExpertMatrix w1, ExpertMatrix w2, ExpertMatrix w3) {
  const int64_t P = T * k;
  const int64_t max_tiles = cdiv(P, kGemvRows) + std::min<int64_t>(P, E);
  const ExpertSteps es = expert_steps(L, ws, x, D, E, F, swiglu_limit, w1, w2, w3);
  launch_kernel(op, moe_gemv_kernel<true, 2, FP4>, dim3{unsigned(max_tiles), unsigned(cdiv(F, 8)), 1u}, 256, 0, st,
                es.up);
  CUDA_LAUNCH_CHECK(op, st);
  // Two output columns per warp (1 was 4-6 % slower on the H200, 4 no faster).
  constexpr int kW2Cols = 2;
  const dim3 g2{unsigned(max_tiles), unsigned(cdiv(D, 8 * kW2Cols)), 1u};
  launch_kernel(op, moe_gemv_kernel<false, kW2Cols, FP4>, g2, 256, 0, st, es.down);
  CUDA_LAUNCH_CHECK(op, st);
  launch_moe_combine(op, st, L, ws, out, weights, T, k, D);
}

// What both expert ops require beyond their validators: the kernels' limits, a workspace of the
// layout's size, aligned operands. Returns the workspace layout.
MoeLayout check_moe_call(const char* op, int64_t T, int64_t D, int64_t E, int64_t F, int64_t k, const Tensor& x,
                         std::initializer_list<std::pair<const char*, const Tensor*>> weights,
                         const Tensor& workspace) {
  SL_CHECK(E >= 1 && E <= 1024, op, ": E = ", E, " experts; the CUDA backend supports 1..1024");
  SL_CHECK(k <= 64, op, ": k = ", k, " experts per token; the CUDA backend supports at most 64");
  SL_CHECK(T * k < (int64_t(1) << 31), op, ": too many (token, expert) pairs");
  const MoeLayout L(T * k, D, F, E);
  check_dtype(op, "workspace", workspace, DType::U8);
  SL_CHECK(workspace.bytes() >= L.total, op, ": workspace ", describe(workspace), " is smaller than the ", L.total,
           " bytes moe_workspace_bytes(", T, ", ", k, ", ", D, ", ", F, ", ", E, ") asks for");
  check_aligned(op, "x", x.data, 16);
  for (const auto& [name, t] : weights) check_aligned(op, name, t->data, 16);
  check_aligned(op, "workspace", workspace.data, 256);
  return L;
}

// Step 1: the permutation of the P = T * k (token, slot) pairs by expert into BM-row tiles.
void launch_moe_permute(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, const Tensor& ids, int64_t P,
                        int64_t k, int64_t E, int BM, size_t smem_optin) {
  const size_t psmem = size_t(2) * E * 4;
  allow_smem(op, moe_permute_kernel, psmem, smem_optin);
  launch_kernel(op, moe_permute_kernel, 1, 1024, psmem, st, ids.ptr<int32_t>(), P, int(k), int(E), BM,
                reinterpret_cast<int*>(ws + L.counts), reinterpret_cast<int*>(ws + L.offsets),
                reinterpret_cast<int*>(ws + L.tiles), reinterpret_cast<int*>(ws + L.tile_expert),
                reinterpret_cast<int*>(ws + L.src_row), reinterpret_cast<int*>(ws + L.inv));
  CUDA_LAUNCH_CHECK(op, st);
}

}  // namespace

// ================================================================ ops

void CudaBackend::route(Stream s, const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
                        const Tensor& tid2eid, const Tensor& tokens, float scaling) {
  const char* op = "route";
  cudaStream_t st = stream(s, op);
  const auto [T, E, k, V, hashed] = checks::validate_route<OpRules>(ids, weights, logits, bias, tid2eid, tokens);
  SL_CHECK(k <= 64, op, ": k = ", k, " experts per token; the CUDA backend supports at most 64");
  SL_CHECK(E <= 2048, op, ": E = ", E, " experts; the CUDA backend supports at most 2048");
  if (T == 0) return;
  RouteArgs a{ids.ptr<int32_t>(),
              weights.ptr<float>(),
              logits.ptr<float>(),
              (!hashed && !bias.empty()) ? bias.ptr<float>() : nullptr,
              hashed ? tid2eid.ptr<int32_t>() : nullptr,
              hashed ? tokens.ptr<int32_t>() : nullptr,
              T,
              V,
              int(E),
              int(k),
              scaling};
  const size_t smem = size_t(2) * E * 4 + size_t(E);
  allow_smem(op, route_kernel, smem, smem_optin());
  launch_kernel(op, route_kernel, unsigned(T), 256, smem, st, a);
  CUDA_LAUNCH_CHECK(op, st);
}

size_t CudaBackend::moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const {
  return MoeLayout(tokens * k, D, F, E).total;
}

// W4A8's two roundings, shared by the grouped-GEMM and the tensor-core paths; the values are
// exact in bf16, so bf16 products multiply what an FP8 product multiplies.
// x rounded to FP8 groups into y's space (free until w2 writes it: T rows of D bf16 take at most
// half of P rows of D F32); returns the rounded rows.
static const bf16* round_fp8_experts_input(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, const Tensor& x,
                                           int64_t T, int64_t D) {
  bf16* xq = reinterpret_cast<bf16*>(ws + L.y);
  round_fp8_rows(op, st, xq, x.data, fcode(x.dtype), D, T, D);
  return xq;
}
// h (the SwiGLU output, P rows of F in h1) rounded to FP8 groups in place, before w2.
static void round_fp8_experts_hidden(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, int64_t P, int64_t F) {
  bf16* h1 = reinterpret_cast<bf16*>(ws + L.h1);
  round_fp8_rows(op, st, h1, h1, kBF16, F, P, F);
}

// The grouped-GEMM steps after the permutation (P > kGemvMaxPairs): w1 x and w3 x in one launch,
// SwiGLU in place, w2 -> y (F32), then the combine into out. FP4: the matrices are MXFP4.
// FP8_ACT (W4A8): x and h rounded to FP8 groups first (round_fp8_experts_*).
template <bool FP4, bool FP8_ACT = false>
void moe_gemm_path(const char* op, cudaStream_t st, const MoeLayout& L, char* ws, int64_t T, int64_t D, int64_t E,
                   int64_t F, int64_t k, int64_t P, int BM, float swiglu_limit, const Tensor& out, const Tensor& x,
                   const Tensor& weights, ExpertMatrix w1, ExpertMatrix w2, ExpertMatrix w3, size_t optin) {
  int* counts = reinterpret_cast<int*>(ws + L.counts);
  int* offsets = reinterpret_cast<int*>(ws + L.offsets);
  int* tiles = reinterpret_cast<int*>(ws + L.tiles);
  int* src_row = reinterpret_cast<int*>(ws + L.src_row);
  int* inv = reinterpret_cast<int*>(ws + L.inv);
  bf16* h1 = reinterpret_cast<bf16*>(ws + L.h1);
  bf16* h3 = reinterpret_cast<bf16*>(ws + L.h3);
  float* y = reinterpret_cast<float*>(ws + L.y);
  MoeGemmArgs g{};
  g.counts = counts;
  g.offsets = offsets;
  g.tiles = tiles;
  g.tile_expert = reinterpret_cast<const int*>(ws + L.tile_expert);
  g.E = int(E);
  // w1 x, w3 x over the gathered token rows.
  g.A = FP8_ACT ? round_fp8_experts_input(op, st, L, ws, x, T, D) : static_cast<const bf16*>(x.data);
  g.a_rows = src_row;
  g.lda = D;
  g.N = int(F);
  g.K = int(D);
  // w1 and w3 in one launch (W_b), then SwiGLU with clamp on the permuted rows, in place into h1.
  g.W = w1.w;
  g.Ws = w1.scales;
  g.out = h1;
  g.W_b = w3.w;
  g.Ws_b = w3.scales;
  g.out_b = h3;
  if (BM == 16)
    launch_moe_gemm<16, bf16, FP4>(op, st, g, P, optin);
  else
    launch_moe_gemm<64, bf16, FP4>(op, st, g, P, optin);
  launch_swiglu(op, st, h1, kBF16, h1, kBF16, h3, kBF16, P * F, swiglu_limit);
  if constexpr (FP8_ACT) round_fp8_experts_hidden(op, st, L, ws, P, F);
  // y = w2 h1 (contiguous permuted rows), F32.
  g.A = h1;
  g.a_rows = nullptr;
  g.lda = F;
  g.N = int(D);
  g.K = int(F);
  g.W = w2.w;
  g.Ws = w2.scales;
  g.out = y;
  g.W_b = nullptr;
  g.Ws_b = nullptr;
  g.out_b = nullptr;
  if (BM == 16)
    launch_moe_gemm<16, float, FP4>(op, st, g, P, optin);
  else
    launch_moe_gemm<64, float, FP4>(op, st, g, P, optin);
  launch_kernel(op, moe_combine_kernel, dim3{unsigned(T), unsigned(cdiv(D, 256)), 1u}, 256, 0, st, out.data,
                fcode(out.dtype), y, inv, weights.ptr<float>(), int(k), D);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::moe_experts(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                              const Tensor& w1, const Tensor& w2, const Tensor& w3, float swiglu_limit,
                              const Tensor& workspace) {
  const char* op = "moe_experts";
  cudaStream_t st = stream(s, op);
  const auto [T, D, E, F, k] = checks::validate_moe_experts<OpRules>(out, x, ids, weights, w1, w2, w3);
  SL_CHECK(D % 64 == 0 && F % 64 == 0, op, ": D = ", D, " and F = ", F,
           " must be multiples of 64 (the grouped GEMM's tiles)");
  const MoeLayout L = check_moe_call(op, T, D, E, F, k, x, {{"w1", &w1}, {"w2", &w2}, {"w3", &w3}}, workspace);
  if (T == 0) return;

  const int64_t P = T * k;
  char* ws = static_cast<char*>(workspace.data);

  // Decode runs on the GEMV; otherwise the row tile height is 16 when experts get a few rows
  // each, else 64.
  const bool gemv_mode = P <= kGemvMaxPairs;
  const int BM = gemv_mode ? kGemvRows : P <= 4 * E ? 16 : 64;

  launch_moe_permute(op, st, L, ws, ids, P, k, E, BM, smem_optin());

  if (gemv_mode) {
    moe_gemv_path<false>(op, st, L, ws, T, D, E, F, k, swiglu_limit, out, x, weights, {w1.data, nullptr},
                         {w2.data, nullptr}, {w3.data, nullptr});
    return;
  }

  moe_gemm_path<false>(op, st, L, ws, T, D, E, F, k, P, BM, swiglu_limit, out, x, weights, {w1.data, nullptr},
                       {w2.data, nullptr}, {w3.data, nullptr}, smem_optin());
}

// The MXFP4 experts at every token count (prefill included), reading 4.25 bits per weight
// instead of 16: on the tensor cores (moe_fp4_mma_kernel, 8-row tiles; D and F multiples of 128),
// or with the variant mxfp4-mma=off the expert GEMV (4-row tiles) decoding e2m1 through fp16.
void CudaBackend::moe_experts_mxfp4(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids,
                                    const Tensor& weights, const Tensor& w1, const Tensor& w1_scale, const Tensor& w2,
                                    const Tensor& w2_scale, const Tensor& w3, const Tensor& w3_scale,
                                    float swiglu_limit, bool fp8_act, const Tensor& workspace) {
  const char* op = "moe_experts_mxfp4";
  cudaStream_t st = stream(s, op);
  const auto [T, D, E, F, k] = checks::validate_moe_experts_mxfp4<OpRules>(out, x, ids, weights, w1, w1_scale, w2,
                                                                           w2_scale, w3, w3_scale, fp8_act);
  const MoeLayout L = check_moe_call(op, T, D, E, F, k, x, {{"w1", &w1}, {"w2", &w2}, {"w3", &w3}}, workspace);
  if (T == 0) return;
  char* ws = static_cast<char*>(workspace.data);
  const ExpertMatrix m1{w1.data, w1_scale.ptr<uint8_t>()}, m2{w2.data, w2_scale.ptr<uint8_t>()},
      m3{w3.data, w3_scale.ptr<uint8_t>()};
  const int64_t P = T * k;
  // mxfp4-prefill=gemm (auto: from kMxfp4GemmAutoRowsPerExpert pairs per expert): past decode
  // sizes, the grouped GEMM with the MXFP4 tiles decoded in shared memory (a weight decoded once
  // per 16- or 64-row tile), as moe_experts runs bf16; W4A8 on rows rounded to FP8 first.
  if (variants().mxfp4_prefill_takes_gemm(P, E) && P > kGemvMaxPairs && D % 64 == 0 && F % 64 == 0) {
    const int BM = P <= 4 * E ? 16 : 64;
    launch_moe_permute(op, st, L, ws, ids, P, k, E, BM, smem_optin());
    if (fp8_act)
      moe_gemm_path<true, true>(op, st, L, ws, T, D, E, F, k, P, BM, swiglu_limit, out, x, weights, m1, m2, m3,
                                smem_optin());
    else
      moe_gemm_path<true>(op, st, L, ws, T, D, E, F, k, P, BM, swiglu_limit, out, x, weights, m1, m2, m3,
                          smem_optin());
    return;
  }
  // The tensor-core path takes K in chunks of 128 (a thread's MX group of each): other sizes, and
  // the variant mxfp4-mma=off, run the GEMV (W4A8's D and F are multiples of 128, and it has no
  // GEMV).
  if (!fp8_act && (!variants().mxfp4_mma || D % 128 != 0 || F % 128 != 0)) {
    launch_moe_permute(op, st, L, ws, ids, P, k, E, kGemvRows, smem_optin());
    moe_gemv_path<true>(op, st, L, ws, T, D, E, F, k, swiglu_limit, out, x, weights, m1, m2, m3);
    return;
  }
  launch_moe_permute(op, st, L, ws, ids, P, k, E, kFp4TileRows, smem_optin());
  const int64_t max_tiles = cdiv(P, kFp4TileRows) + std::min<int64_t>(P, E);
  ExpertSteps es = expert_steps(L, ws, x, D, E, F, swiglu_limit, m1, m2, m3);
  // W4A8 on the mma.sync kernels: x rounded to FP8 groups, w1 x and w3 x to bf16 before the
  // SwiGLU (as the grouped GEMM stores them), h rounded to FP8 groups before w2.
  if (fp8_act) {
    es.up.A = round_fp8_experts_input(op, st, L, ws, x, T, D);
    es.up.bf16_in = 1;
  }
  const Mxfp4Decode dec = variants().mxfp4_decode;
  // mxfp4-swap=auto: the swapped kernel up to kSwapAutoMaxPairs pairs (measured faster at 1
  // token, slower at 8: results/2026-12-05-h100-decode-candidates).
  const Mxfp4Swap sw = variants().mxfp4_swap;
  const bool swap = sw == Mxfp4Swap::On || (sw == Mxfp4Swap::Auto && P <= kSwapAutoMaxPairs);
  auto step = [&](auto pair, const MoeGemvArgs& v) {
    constexpr bool PAIR = decltype(pair)::value;
    if (swap)
      launch_fp4_swap<PAIR>(op, st, max_tiles, v, sm_count(), dec, variants().mxfp4_load, variants().mxfp4_swap_ks);
    else if (variants().mxfp4_wide)
      launch_fp4_wide<PAIR>(op, st, max_tiles, v, sm_count(), dec);
    else
      launch_fp4_mma<PAIR>(op, st, max_tiles, v, sm_count(), dec, variants().mxfp4_mma_blocks,
                           variants().mxfp4_load);
  };
  step(std::true_type{}, es.up);
  if (fp8_act) round_fp8_experts_hidden(op, st, L, ws, P, F);
  step(std::false_type{}, es.down);
  launch_moe_combine(op, st, L, ws, out, weights, T, k, D);
}

}  // namespace sl
