// mHC on the GPU (docs/model.md 3.4): hc_pre (RMS + 24 mix logits + sigmoids + Sinkhorn + the
// pre-weighted collapse), hc_post, hc_head, hc_expand, mtp_combine. hc = 4 is baked in (a
// config must keep it: docs/model.md section 11, constraint 4).
//
// The expensive part of hc_pre / hc_head is the mix GEMM m[T, mix] = X[T, 4D] . fn[mix, 4D]^T
// (fn F32, 1.5 MiB for hc_pre at D = 4096). It runs on the tensor cores, exactly enough for
// fp32: fn is split into bf16 hi = bf16(fn) and lo = bf16(fn - hi) (hi + lo carries 16 mantissa
// bits, relative error ~1e-5), stacked as a bf16 [2 mix, 4D] matrix in the stream's scratch, and
// one cuBLAS GEMM (bf16 in, fp32 accumulate and out; X is bf16 already, so exact) gives both
// halves; m = hi part + lo part. (vLLM runs this GEMM in TF32, which is less exact.) Decode
// at T <= 2 skips the split: the backend's GEMV for bf16 x F32 reads fn as it is (memory-bound
// there; fp32 products). Then one
// block per token: the sum of squares of its 4D values, the sigmoids and the Sinkhorn (one
// warp), and the pre-weighted collapse of the streams. Every sum is in a fixed order, so results
// do not depend on scheduling (they do depend on T through cuBLAS's choice of kernel, like any
// GEMM).
#include "model/cuda/cuda_common.cuh"

namespace sl {

using namespace cuda;

namespace {

constexpr int HC = 4;

struct HcArgs {
  const void* X;
  int dtx;
  const float* fn;
  int64_t T, D;
  const float* mm;   // [rows, halves * MIX]: the mix logits (raw dots); halves = 2: hi and lo parts
  int halves;
  const float* scale;
  const float* base;
  int iters;
  float hc_eps, rms_eps;
  void* y;           // [T, D] (hc_pre's y or hc_head's h)
  int dty;
  float* post;       // [T, 4] (hc_pre only)
  float* comb;       // [T, 4, 4] (hc_pre only)
  // hc_pre_norm: also nout[t, :] = rmsnorm(y[t, :], norm_w, norm_eps) (bf16 path only; null:
  // no norm).
  bf16* nout;
  const void* norm_w;
  int dtnw;
  float norm_eps;
  // hc_post_pre_norm (hc-post=fused, the fused decode kernel only): hc_post first writes X (its
  // X_out) from these, all bf16 [T, D] / [T, 4, D], with post and comb as hc_post reads them (the
  // finish then overwrites them with hc_pre's). pf1 set: f = pf1 + pf2 is computed and stored to
  // pf (add_hc_post). Null pres: X is an input.
  const bf16* pres;
  bf16* pf;
  const bf16* pf1;
  const bf16* pf2;
};

// From a token's MIX raw dots and its sum of squares (tot, shared memory): the stream weights
// wts[4] (hc_pre: pre; hc_head: w), and for hc_pre also post[4] and the Sinkhorn-normalised
// comb[16], written to global memory, each part by one full warp. Sinkhorn runs on 16 lanes, one
// comb element C[i][j] per lane (lane & 15 = 4i + j; lanes 16..31 mirror 0..15); row and column
// sums gather the 4 values by shuffles and add them in index order, so every operation rounds as
// in the CPU reference's serial loops.
//
// hc_finish_weights (one warp) writes wts and post; hc_finish_sinkhorn (one warp of its own, so
// that it runs while the other warps collapse the streams: comb is only read by hc_post) writes
// comb.
template <int MIX, bool HEAD>
__device__ void hc_finish_weights(const HcArgs& a, int64_t t, const float* tot, float* wts) {
  const int lane = threadIdx.x & 31;
  const float r = 1.f / sqrtf(tot[MIX] / float(HC * a.D) + a.rms_eps);
  if (lane < HC) wts[lane] = sigmoidf_(tot[lane] * r * a.scale[0] + a.base[lane]) + a.hc_eps;
  if constexpr (!HEAD)
    if (lane >= HC && lane < 2 * HC)
      a.post[t * HC + (lane - HC)] = 2.f * sigmoidf_(tot[lane] * r * a.scale[1] + a.base[lane]);
}

template <int MIX>
__device__ void hc_finish_sinkhorn(const HcArgs& a, int64_t t, const float* tot) {
  const int lane = threadIdx.x & 31;
  const float r = 1.f / sqrtf(tot[MIX] / float(HC * a.D) + a.rms_eps);
  const int e = lane & 15, half = lane & 16;
  const int row0 = half | (e & ~3), col = half | (e & 3);  // first lane of my row / my column
  const float eps = a.hc_eps;
  float c = tot[2 * HC + e] * r * a.scale[2] + a.base[2 * HC + e];
  auto row_val = [&](float v, int q) { return __shfl_sync(0xffffffffu, v, row0 + q); };
  auto col_val = [&](float v, int q) { return __shfl_sync(0xffffffffu, v, col + 4 * q); };
  // Row softmax + eps.
  {
    float mx = row_val(c, 0);
#pragma unroll
    for (int q = 1; q < HC; ++q) mx = fmaxf(mx, row_val(c, q));
    c = expf(c - mx);
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < HC; ++q) sum += row_val(c, q);
    c = c / sum + eps;
  }
  auto cols = [&] {
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < HC; ++q) sum += col_val(c, q);
    c /= sum + eps;
  };
  auto rows = [&] {
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < HC; ++q) sum += row_val(c, q);
    c /= sum + eps;
  };
  cols();
  for (int it = 1; it < a.iters; ++it) {
    rows();
    cols();
  }
  if (lane < HC * HC) a.comb[t * HC * HC + lane] = c;
}

// y[t, d] = sum_s wts[s] * X[t, s, d] for one token, threads striding over d.
__device__ __forceinline__ void hc_collapse(const HcArgs& a, int64_t t, const float* wts, int threads) {
  const int64_t HD = HC * a.D;
  #pragma unroll 4
  for (int64_t d = threadIdx.x; d < a.D; d += threads) {
    float acc = 0.f;
#pragma unroll
    for (int s = 0; s < HC; ++s) acc += wts[s] * ldf(a.X, a.dtx, t * HD + s * a.D + d);
    stf(a.y, a.dty, t * a.D + d, acc);
  }
}

// One element of hc_post's output: post_j * f + sum_i comb_ij * old_i, in this order, so that
// hc_post_kernel and the fused decode kernel under hc_post_pre_norm round alike (bit for bit).
__device__ __forceinline__ float hc_post_mix(float pj, const float (&cj)[HC], float fv, const float (&old)[HC]) {
  float acc = pj * fv;
#pragma unroll
  for (int i = 0; i < HC; ++i) acc += cj[i] * old[i];
  return acc;
}

// fn F32 [n] -> W bf16 [2, n]: W[0] = bf16(fn), W[1] = bf16(fn - W[0]) (one thread per element).
__global__ void split_bf16_kernel(bf16* W, const float* fn, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float f = fn[i];
    const bf16 hi = __float2bfloat16_rn(f);
    W[i] = hi;
    W[n + i] = __float2bfloat16_rn(f - __bfloat162float(hi));
  }
}

// One block (kHcThreads) per token t = t0 + blockIdx.x: the sum of squares of its 4D values
// (block reduction), the MIX raw dots (hi + lo from the GEMM), then warp 0 computes the stream
// weights and post, and the first kHcThreads threads collapse the streams (and, for hc_pre_norm,
// normalise the result) while hc_pre's extra warp runs the Sinkhorn, so that its dependent
// iterations overlap the collapse instead of preceding it. VEC (X and y bf16, D % 8 == 0, 16-byte
// aligned): 16-byte loads, the 4 streams' vectors of one d-range in flight together (the scalar
// path, 256 threads of 2-byte loads, was latency-bound: 17 us per token row on the H200).
constexpr int kHcThreads = 512;      // the threads that load and collapse X
constexpr int kHcSinkhornWarp = 32;  // hc_pre: one more warp, for the Sinkhorn

// The sum over the collapse threads (the first kHcThreads of the block) on named barrier 1, which
// the Sinkhorn warp does not join: the same order as block_sum over kHcThreads threads.
__device__ __forceinline__ float collapse_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  asm volatile("bar.sync 1, %0;" ::"n"(kHcThreads) : "memory");  // red may still be read
  if (lane == 0) red[warp] = v;
  asm volatile("bar.sync 1, %0;" ::"n"(kHcThreads) : "memory");
  float s = 0.f;
  for (int w = 0; w < kHcThreads / 32; ++w) s += red[w];
  return s;
}
constexpr int kHcDecodeSplits = 8;
constexpr int kHcMaxHalves = 8;  // partial sums the finish adds: 2 (hi, lo) or the decode splits
static_assert(kHcDecodeSplits <= kHcMaxHalves, "the finish adds at most kHcMaxHalves partials");

// The rest of a token's finish once tot holds its MIX mix logits and, at tot[MIX], the sum of
// squares of its 4D values (shared memory, after a barrier): warp 0 computes the stream weights
// and post, then the first kHcThreads threads collapse the streams (and, for hc_pre_norm,
// normalise the result) while hc_pre's extra warp runs the Sinkhorn. keep: each thread's X
// vectors from a first pass when `single` (one 8-value vector per stream and thread), else X is
// read again. Call from every thread of the block (kHcThreads, plus the Sinkhorn warp for
// hc_pre); the block ends here.
template <int MIX, bool HEAD, bool VEC>
__device__ __forceinline__ void hc_finish_tail(const HcArgs& a, int64_t t, const float* tot, float* wts, float* red,
                                               const uint4 (&keep)[HC], bool single) {
  const bool loader = threadIdx.x < kHcThreads;
  if (threadIdx.x < 32) hc_finish_weights<MIX, HEAD>(a, t, tot, wts);
  __syncthreads();
  if (!loader) {
    if constexpr (!HEAD) hc_finish_sinkhorn<MIX>(a, t, tot);
    return;
  }
  if constexpr (VEC) {
    // Otherwise the second read of X hits L2 (32 KiB per token at D = 4096). When this kernel
    // wrote X (hc_post_pre_norm), the other blocks' ranges are read from L2 (ld.cg): the L1 of
    // this SM is not coherent with their stores.
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.X) + t * HC * a.D);
    const bool fresh = a.pres != nullptr;
    uint4* yr = reinterpret_cast<uint4*>(static_cast<bf16*>(a.y) + t * a.D);
    float nss = 0.f;                      // hc_pre_norm: sum of squares of the rounded y
    uint4 ykeep = make_uint4(0, 0, 0, 0);  // and this thread's y vector (when single)
    for (int64_t j = threadIdx.x; j < a.D / 8; j += kHcThreads) {
      uint4 v[HC];
#pragma unroll
      for (int s = 0; s < HC; ++s)
        v[s] = single ? keep[s] : fresh ? __ldcg(xr + s * (a.D / 8) + j) : xr[s * (a.D / 8) + j];
      float acc[8] = {};
#pragma unroll
      for (int s = 0; s < HC; ++s) {
        const bf16* e = reinterpret_cast<const bf16*>(&v[s]);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += wts[s] * __bfloat162float(e[q]);
      }
      uint4 o;
      bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
      for (int q = 0; q < 8; ++q) oe[q] = __float2bfloat16_rn(acc[q]);
      yr[j] = o;
      if (a.nout) {
        ykeep = o;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float f = __bfloat162float(oe[q]);
          nss += f * f;
        }
      }
    }
    if (a.nout) {
      // The sub-layer's RMSNorm of the rounded y, as rmsnorm computes it (the sum of squares
      // differs from the separate kernel's only in the order of its fp32 additions). When a
      // thread wrote more than one vector of y, it reads them back (the block's own writes,
      // visible after collapse_sum's barrier).
      nss = collapse_sum(nss, red);
      const float r = 1.f / sqrtf(nss / float(a.D) + a.norm_eps);
      uint4* nr = reinterpret_cast<uint4*>(a.nout + t * a.D);
      for (int64_t j = threadIdx.x; j < a.D / 8; j += kHcThreads) {
        nr[j] = rmsnorm_scale8(single ? ykeep : yr[j], r, a.norm_w, a.dtnw, j);
      }
    }
  } else {
    hc_collapse(a, t, wts, kHcThreads);
  }
}

template <int MIX, bool HEAD, bool VEC>
__global__ __launch_bounds__(kHcThreads + kHcSinkhornWarp) void hc_finish_kernel(HcArgs a, int64_t t0) {
  pdl_enter();
  __shared__ float tot[MIX + 1];
  __shared__ float wts[HC];
  __shared__ float red[32];
  const int64_t t = t0 + blockIdx.x;
  const int64_t HD = HC * a.D;
  float ss = 0.f;
  // D <= 8 * kHcThreads (4096 for the flash width): each thread's 4 vectors stay in registers
  // for the collapse instead of a second read.
  // Only the first kHcThreads threads load and collapse; the Sinkhorn warp (hc_pre) adds 0 to
  // the sums.
  const bool single = a.D / 8 <= int64_t(kHcThreads);
  const bool loader = threadIdx.x < kHcThreads;
  // The mix GEMM's `halves` partial sums (hi and lo parts, or decode's K splits) of this thread's
  // logit, loaded before the pass over X so that their latency hides under it (after the block
  // sum they cost one more round trip per hc_pre).
  float part[kHcMaxHalves];
  if (threadIdx.x < MIX) {
    const float* row = a.mm + int64_t(blockIdx.x) * a.halves * MIX;
#pragma unroll
    for (int h = 0; h < kHcMaxHalves; ++h) part[h] = h < a.halves ? row[h * MIX + threadIdx.x] : 0.f;
  }
  uint4 keep[HC];
  if constexpr (VEC) {
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.X) + t * HD);
    for (int64_t j = threadIdx.x; loader && j < a.D / 8; j += kHcThreads) {
      uint4 v[HC];
#pragma unroll
      for (int s = 0; s < HC; ++s) v[s] = keep[s] = xr[s * (a.D / 8) + j];
#pragma unroll
      for (int s = 0; s < HC; ++s) {
        const bf16* e = reinterpret_cast<const bf16*>(&v[s]);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float f = __bfloat162float(e[q]);
          ss += f * f;
        }
      }
    }
  } else {
    #pragma unroll 4
    for (int64_t c = threadIdx.x; loader && c < HD; c += kHcThreads) {
      const float v = ldf(a.X, a.dtx, t * HD + c);
      ss += v * v;
    }
  }
  ss = block_sum(ss, red);
  if (threadIdx.x < MIX) {
    // The partial sums in order (all loaded first: a loop of dependent load-adds was ~1 us per
    // hc_pre on the H200).
    float v = part[0];
#pragma unroll
    for (int h = 1; h < kHcMaxHalves; ++h)
      if (h < a.halves) v += part[h];
    tot[threadIdx.x] = v;
  }
  if (threadIdx.x == 0) tot[MIX] = ss;
  __syncthreads();
  hc_finish_tail<MIX, HEAD, VEC>(a, t, tot, wts, red, keep, single);
}

// hc_post for one block's range [k0, k0 + Ks) of token t's 4D values of X (within one stream j,
// as Ks divides D): X[t, j, d] = post[t, j] * f[t, d] + sum_i comb[t, i, j] * res[t, i, d] by
// hc_post_mix (as hc_post_kernel), rounded to bf16, stored to X and handed to
// stage(vector index in the range, the 8 rounded values). With pf1, f = pf1 + pf2 (rounded) is
// stored to pf by the blocks of stream 0. The old post and comb are read here, before the token's
// ticket; the finish overwrites them only after every block of the token has taken it.
template <class Stage>
__device__ __forceinline__ void hc_post_range(const HcArgs& a, int64_t t, int64_t k0, int64_t Ks, Stage&& stage) {
  const int64_t Dv = a.D / 8;
  const int j = int(k0 / a.D);
  const int64_t dv0 = (k0 % a.D) / 8;
  const float pj = a.post[t * HC + j];
  float cj[HC];
#pragma unroll
  for (int i = 0; i < HC; ++i) cj[i] = a.comb[t * HC * HC + i * HC + j];
  const uint4* res = reinterpret_cast<const uint4*>(a.pres) + t * HC * Dv;
  uint4* xo = reinterpret_cast<uint4*>(const_cast<void*>(a.X)) + t * HC * Dv + j * Dv;
  for (int64_t v = threadIdx.x; v < Ks / 8; v += blockDim.x) {
    const int64_t dv = dv0 + v;
    uint4 old[HC];
#pragma unroll
    for (int i = 0; i < HC; ++i) old[i] = res[i * Dv + dv];
    float fv[8];
    if (a.pf1) {
      const uint4 u1 = reinterpret_cast<const uint4*>(a.pf1)[t * Dv + dv];
      const uint4 u2 = reinterpret_cast<const uint4*>(a.pf2)[t * Dv + dv];
      const bf16* e1 = reinterpret_cast<const bf16*>(&u1);
      const bf16* e2 = reinterpret_cast<const bf16*>(&u2);
      uint4 fo;
      bf16* fe = reinterpret_cast<bf16*>(&fo);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        fe[q] = __float2bfloat16_rn(__bfloat162float(e1[q]) + __bfloat162float(e2[q]));
        fv[q] = __bfloat162float(fe[q]);
      }
      if (j == 0) reinterpret_cast<uint4*>(a.pf)[t * Dv + dv] = fo;
    } else {
      const uint4 u = reinterpret_cast<const uint4*>(a.pf)[t * Dv + dv];
      const bf16* e = reinterpret_cast<const bf16*>(&u);
#pragma unroll
      for (int q = 0; q < 8; ++q) fv[q] = __bfloat162float(e[q]);
    }
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      float oq[HC];
#pragma unroll
      for (int i = 0; i < HC; ++i) oq[i] = __bfloat162float(reinterpret_cast<const bf16*>(&old[i])[q]);
      oe[q] = __float2bfloat16_rn(hc_post_mix(pj, cj, fv[q], oq));
    }
    xo[dv] = o;
    stage(v, o);
  }
}

// hc-decode=fused (up to kHcFusedMaxTokens tokens, the vector path): the mix GEMV (1-2 tokens) or
// the split tensor-core GEMM (more), and the finish, in one launch.
// Block (z, t) takes the z-th of S equal ranges of token t's 4D values (S = hc-splits; auto: 32
// per token up to 4 tokens, fewer above): it stages them in shared memory as floats, sums their
// squares, and each warp dots them with the rows of fn of its logits (warp w: logits w,
// w + warps, ...), 16-byte loads of fn, a butterfly per logit.
// The MIX dots and the sum of squares go to `part` (the stream's scratch); the last of the token's
// blocks to finish (last_block_to_finish on the token's ticket) adds the splits' values in split
// order into tot and runs the finish (hc_finish_tail), reading X again from L2. The two-kernel
// path sums the logits and the sum of squares in other orders: they agree to fp32 rounding, not
// bit for bit. Under hc_post_pre_norm (a.pres set, hc-post=fused) each block first computes its
// range of X as hc_post (hc_post_range) instead of loading it, so the previous sub-layer's
// hc_post needs no launch of its own.
constexpr int64_t kHcFusedMaxSlice = 4096;  // floats of X per block (16 KiB of shared memory)
constexpr int kHcFusedPre = 4;               // fn loads per lane and logit issued before the X pass
// Up to this many tokens (decode, also batch 8 with drafts to verify): each token's blocks read
// all of fn (1.5 MiB at flash's width, from L2 after the first), which the tensor-core GEMM's
// path (split fn, the GEMM, a split-K reduce when cuBLAS adds one, the finish) is expected to
// beat only at prefill sizes (not timed).
constexpr int64_t kHcFusedMaxTokens = 16;

template <int MIX, bool HEAD>
__global__ __launch_bounds__(kHcThreads + kHcSinkhornWarp) void hc_fused_kernel(HcArgs a, float* part, int* tickets) {
  __shared__ float tot[MIX + 1];
  __shared__ float wts[HC];
  __shared__ float red[32];
  __shared__ __align__(16) float xs[kHcFusedMaxSlice];
  const int z = blockIdx.x, S = gridDim.x;
  const int64_t t = blockIdx.y;
  const int64_t HD = HC * a.D, Ks = HD / S, k0 = z * Ks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t n4 = Ks / 4;  // 16-byte loads per row of fn in the range
  auto fn_row = [&](int m) { return reinterpret_cast<const float4*>(a.fn + int64_t(m) * HD + k0); };
  // 0. The first kHcFusedPre of this lane's loads of fn for the warp's first two logits, issued
  // before pdl_enter: fn is a weight, which no kernel of a step writes, so it may be read while
  // the kernel before is still running (under PDL this block may start before that kernel
  // ends); its latency hides there and under the X pass. Everything else waits in pdl_enter.
  float4 pre[2][kHcFusedPre];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int u = 0; u < kHcFusedPre; ++u) {
      const int m = warp + r * warps;
      const int64_t i = lane + 32 * u;
      pre[r][u] = (m < MIX && i < n4) ? fn_row(m)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  pdl_enter();
  // 1. The range's values (8 per 16-byte load) as floats, and their sum of squares; under
  // hc_post_pre_norm computed first, as hc_post_kernel computes them, and stored to X.
  float ss = 0.f;
  auto stage = [&](int64_t j, const uint4& v) {
    const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float f = __bfloat162float(e[q]);
      xs[8 * j + q] = f;
      ss += f * f;
    }
  };
  if (a.pres) {
    hc_post_range(a, t, k0, Ks, stage);
  } else {
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.X) + t * HD + k0);
    for (int64_t j = threadIdx.x; j < Ks / 8; j += blockDim.x) stage(j, xr[j]);
  }
  ss = block_sum(ss, red);  // its barriers also publish xs
  // 2. The range's dot with each logit's row of fn: lane l takes the 16-byte pieces i = l + 32 u
  // (values 4i .. 4i + 3), so that a warp's loads are contiguous; the first kHcFusedPre pieces of
  // the warp's first two logits are in registers already.
  float* mine = part + (t * S + z) * (MIX + 1);
  auto dot4 = [&](const float4& f, int64_t i) {
    return f.x * xs[4 * i] + f.y * xs[4 * i + 1] + f.z * xs[4 * i + 2] + f.w * xs[4 * i + 3];
  };
  auto logit = [&](int m, const float4 (*head)[kHcFusedPre]) {
    float acc = 0.f;
    int64_t i = lane;
    if (head) {
#pragma unroll
      for (int u = 0; u < kHcFusedPre; ++u, i += 32)
        if (i < n4) acc += dot4((*head)[u], i);
    }
    const float4* fr = fn_row(m);
#pragma unroll 4
    for (; i < n4; i += 32) acc += dot4(fr[i], i);
    acc = warp_sum(acc);
    if (lane == 0) mine[m] = acc;
  };
  if (warp < MIX) logit(warp, &pre[0]);
  if (warp + warps < MIX) logit(warp + warps, &pre[1]);
  for (int m = warp + 2 * warps; m < MIX; m += warps) logit(m, nullptr);
  if (threadIdx.x == 0) mine[MIX] = ss;
  // 3. The token's last block adds the splits in order and finishes.
  if (!last_block_to_finish(tickets + t, S)) return;
  if (threadIdx.x <= MIX) {
    const float* col = part + t * S * (MIX + 1) + threadIdx.x;
    float v = 0.f;
    for (int q = 0; q < S; ++q) v += __ldcg(col + int64_t(q) * (MIX + 1));
    tot[threadIdx.x] = v;
  }
  __syncthreads();
  const uint4 keep[HC] = {};
  hc_finish_tail<MIX, HEAD, true>(a, t, tot, wts, red, keep, false);
}

// Whether the finish takes its 16-byte vector path: bf16 X and y, rows of a multiple of 8, aligned.
bool hc_vec_path(const HcArgs& a, DType xdt) {
  return xdt == DType::BF16 && a.dty == kBF16 && a.D % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(a.X) | reinterpret_cast<uintptr_t>(a.y)) % 16 == 0;
}

// Whether hc-decode=fused's one launch takes the call: decode sizes on the vector path, 4D a
// multiple of the splits' 8-value vectors, each split's range within shared memory.
bool hc_fused_takes(const CudaBackend& be, const HcArgs& a, DType xdt) {
  const int64_t HD = HC * a.D, S = be.variants().hc_splits_for(a.T);
  return a.T <= kHcFusedMaxTokens && hc_vec_path(a, xdt) && be.variants().hc_decode_fused &&
         HD % (8 * S) == 0 && HD / S <= kHcFusedMaxSlice && a.D % (HD / S) == 0 &&  // a range within one stream
         reinterpret_cast<uintptr_t>(a.fn) % 16 == 0;
}

// The fused launch (the caller checked hc_fused_takes); false when the stream has too few
// tickets for a.T tokens (the caller takes another path).
template <int MIX, bool HEAD>
bool launch_hc_fused(CudaBackend& be, const char* op, Stream s, const HcArgs& a) {
  int* tickets = be.tickets(s, op, size_t(a.T));
  if (!tickets) return false;
  cudaStream_t st = be.stream(s, op);
  const int splits = be.variants().hc_splits_for(a.T);
  CudaBackend::Scratch sc = be.scratch(s, op, size_t(a.T) * splits * (MIX + 1) * 4);
  const unsigned threads = kHcThreads + (HEAD ? 0 : kHcSinkhornWarp);
  launch_kernel(op, hc_fused_kernel<MIX, HEAD>, dim3(unsigned(splits), unsigned(a.T)), threads, 0, st, a,
                static_cast<float*>(sc.ptr), tickets);
  CUDA_LAUNCH_CHECK(op, st);
  return true;
}

template <int MIX, bool HEAD>
void launch_hc(CudaBackend& be, const char* op, Stream s, HcArgs a, DType xdt) {
  cudaStream_t st = be.stream(s, op);
  if (a.T == 0) return;
  const int64_t HD = HC * a.D;
  const bool vec = hc_vec_path(a, xdt);
  SL_CHECK(vec || !a.nout, op, ": the fused norm needs the bf16 vector path");
  auto finish = [&](int64_t rows, int64_t t0) {
    const unsigned threads = kHcThreads + (HEAD ? 0 : kHcSinkhornWarp);
    if (vec)
      launch_kernel(op, hc_finish_kernel<MIX, HEAD, true>, unsigned(rows), threads, 0, st, a, t0);
    else
      launch_kernel(op, hc_finish_kernel<MIX, HEAD, false>, unsigned(rows), threads, 0, st, a, t0);
    CUDA_LAUNCH_CHECK(op, st);
  };
  if (hc_fused_takes(be, a, xdt) && launch_hc_fused<MIX, HEAD>(be, op, s, a)) return;
  if (a.T <= 2) {
    // Decode at 1-2 tokens: the mix GEMM straight from the F32 fn (bf16 x F32 -> F32: the
    // backend's decode GEMV, exact fp32 products), no hi/lo split: two launches instead of four
    // (split, GEMM, split-K reduce, finish). Measured on the H200 (flash-6l): 11.6 us per hc_pre
    // at batch 1 against ~14 us split; at batch 8 the GEMV is compute-bound (21 us), so larger
    // T keep the split GEMM on the tensor cores.
    // The fn GEMV split over up to kHcDecodeSplits K ranges (batched, so that ~100 blocks share
    // the 1.5 MiB instead of 24); the finish adds the partials in split order.
    int splits = kHcDecodeSplits;
    while (splits > 1 && HD % (8 * splits) != 0) splits /= 2;
    const bool vec_ok = HD % 8 == 0 && reinterpret_cast<uintptr_t>(a.X) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(a.fn) % 16 == 0;
    CudaBackend::Scratch sc = be.scratch(s, op, size_t(a.T) * splits * MIX * 4);
    float* mm = static_cast<float*>(sc.ptr);
    if (vec_ok) {
      gemv_split_k(be, op, s, mm, a.X, xdt, a.fn, a.T, MIX, HD, splits);
      a.halves = splits;
    } else {
      Tensor xt, ft, ot;
      xt.data = const_cast<void*>(a.X);
      xt.dtype = xdt;
      xt.shape = Shape{a.T, HD};
      ft.data = const_cast<float*>(a.fn);
      ft.dtype = DType::F32;
      ft.shape = Shape{MIX, HD};
      ot.data = mm;
      ot.dtype = DType::F32;
      ot.shape = Shape{a.T, MIX};
      be.gemm(s, ot, xt, ft);
      a.halves = 1;
    }
    a.mm = mm;
    finish(a.T, 0);
    return;
  }
  // Scratch: W (bf16 [2 MIX, HD]) then the GEMM output for a chunk of rows (F32 [rows, 2 MIX]).
  const size_t wbytes = (size_t(2 * MIX) * HD * 2 + 255) / 256 * 256;
  const size_t row_bytes = size_t(2 * MIX) * 4;
  CudaBackend::Scratch sc = be.scratch(s, op, wbytes + row_bytes);
  bf16* W = static_cast<bf16*>(sc.ptr);
  float* mm = reinterpret_cast<float*>(static_cast<char*>(sc.ptr) + wbytes);
  const int64_t chunk = int64_t((sc.bytes - wbytes) / row_bytes);
  launch_kernel(op, split_bf16_kernel, grid_for(MIX * HD, 256), 256, 0, st, W, a.fn, MIX * HD);
  CUDA_LAUNCH_CHECK(op, st);
  Tensor wt;
  wt.data = W;
  wt.dtype = DType::BF16;
  wt.shape = Shape{2 * MIX, HD};
  for (int64_t t0 = 0; t0 < a.T; t0 += chunk) {
    const int64_t rows = std::min(chunk, a.T - t0);
    Tensor xt, ot;
    xt.data = const_cast<char*>(static_cast<const char*>(a.X) + size_t(t0 * HD) * dtype_size(xdt));
    xt.dtype = xdt;
    xt.shape = Shape{rows, HD};
    ot.data = mm;
    ot.dtype = DType::F32;
    ot.shape = Shape{rows, 2 * MIX};
    be.gemm(s, ot, xt, wt);
    a.mm = mm;
    a.halves = 2;
    finish(rows, t0);
  }
}

// X_out[t, j, d] = post[t, j] * f[t, d] + sum_i comb[t, i, j] * res[t, i, d]: one thread per
// (t, d) computes all 4 destinations from the 4 sources it read first (so X_out may alias res),
// each by hc_post_mix.
//
// add_hc_post: with f1 set, f = f1 + f2 is computed here (stored to f in f's dtype, as add
// stores it, and used as rounded) instead of read.
__global__ void hc_post_kernel(void* xo, int dto, void* f, int dtf, const void* res, int dtr, const float* post,
                               const float* comb, int64_t T, int64_t D, const void* f1, int dtf1, const void* f2,
                               int dtf2) {
  pdl_enter();
  const int64_t n = T * D;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / D, d = idx % D;
    float old[HC];
#pragma unroll
    for (int i = 0; i < HC; ++i) old[i] = ldf(res, dtr, (t * HC + i) * D + d);
    float fv;
    if (f1) {
      const float sum = ldf(f1, dtf1, idx) + ldf(f2, dtf2, idx);
      stf(f, dtf, idx, sum);
      fv = dtf == kBF16 ? __bfloat162float(__float2bfloat16_rn(sum)) : sum;
    } else {
      fv = ldf(f, dtf, idx);
    }
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      float cj[HC];
#pragma unroll
      for (int i = 0; i < HC; ++i) cj[i] = comb[t * HC * HC + i * HC + j];
      stf(xo, dto, (t * HC + j) * D + d, hc_post_mix(post[t * HC + j], cj, fv, old));
    }
  }
}

// X[t, s, d] = e[t, d] for every stream s: one thread per (t, d).
__global__ void hc_expand_kernel(void* X, int dtx, const void* e, int dte, int64_t T, int64_t hc, int64_t D) {
  pdl_enter();
  const int64_t n = T * D;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / D, d = idx % D;
    const float v = ldf(e, dte, idx);
    for (int64_t s = 0; s < hc; ++s) stf(X, dtx, (t * hc + s) * D + d, v);
  }
}

// X[t, s, d] = hp[t, s, d] + ep[t, d]: one thread per element of X (X may alias hp).
__global__ void mtp_combine_kernel(void* X, int dtx, const void* hp, int dth, const void* ep, int dte, int64_t T,
                                   int64_t hc, int64_t D) {
  pdl_enter();
  const int64_t n = T * hc * D;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = idx % D, t = idx / (hc * D);
    stf(X, dtx, idx, ldf(hp, dth, idx) + ldf(ep, dte, t * D + d));
  }
}

}  // namespace

namespace {
HcArgs hc_pre_args(const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X, const Tensor& fn,
                   const Tensor& scale, const Tensor& base, int sinkhorn_iters, float hc_eps, float rms_eps) {
  const auto [T, hc, D] =
      checks::validate_hc_pre<OpRules>(y, post, comb, X, fn, scale, base, sinkhorn_iters, {HC, HC});
  HcArgs a{};
  a.X = X.data;
  a.dtx = fcode(X.dtype);
  a.fn = fn.ptr<float>();
  a.T = T;
  a.D = D;
  a.scale = scale.ptr<float>();
  a.base = base.ptr<float>();
  a.iters = sinkhorn_iters;
  a.hc_eps = hc_eps;
  a.rms_eps = rms_eps;
  a.y = y.data;
  a.dty = fcode(y.dtype);
  a.post = post.ptr<float>();
  a.comb = comb.ptr<float>();
  return a;
}
}  // namespace

void CudaBackend::hc_pre(Stream s, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X,
                         const Tensor& fn, const Tensor& scale, const Tensor& base, int sinkhorn_iters, float hc_eps,
                         float rms_eps) {
  const HcArgs a = hc_pre_args(y, post, comb, X, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps);
  launch_hc<(2 + HC) * HC, false>(*this, "hc_pre", s, a, X.dtype);
}

// hc_pre with the sub-layer's RMSNorm folded into the finish kernel (the block that collapses a
// token's streams also normalises the result): one launch instead of two per sub-layer. Shapes
// the vector path does not take (f32 activations, unaligned rows) run the two ops.
namespace {
// hc_pre's arguments with the sub-layer's RMSNorm folded into the finish (a.nout set), or false
// where the finish cannot fold it (not the bf16 vector path, unaligned, out aliasing y).
bool hc_pre_norm_args(HcArgs& a, const Tensor& out, const Tensor& y, const Tensor& X, const Tensor& norm_w,
                      float norm_eps) {
  const auto [rows, dim] = checks::validate_rmsnorm<OpRules>(out, y, norm_w);
  if (!(hc_vec_path(a, X.dtype) && out.dtype == DType::BF16 && rows == a.T && dim == a.D &&
        reinterpret_cast<uintptr_t>(out.data) % 16 == 0 && out.data != y.data))
    return false;
  a.nout = static_cast<bf16*>(out.data);
  a.norm_w = norm_w.empty() ? nullptr : norm_w.data;
  a.dtnw = norm_w.empty() ? kF32 : fcode(norm_w.dtype);
  a.norm_eps = norm_eps;
  return true;
}
}  // namespace

void CudaBackend::hc_pre_norm(Stream s, const Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                              const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                              int sinkhorn_iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps) {
  const char* op = "hc_pre_norm";
  HcArgs a = hc_pre_args(y, post, comb, X, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps);
  if (!hc_pre_norm_args(a, out, y, X, norm_w, norm_eps)) {
    Backend::hc_pre_norm(s, out, y, post, comb, X, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps, norm_w, norm_eps);
    return;
  }
  launch_hc<(2 + HC) * HC, false>(*this, op, s, a, X.dtype);
}

// Under hc-post=fused, at the sizes hc-decode=fused takes with the norm folded, one launch: each
// block of the fused decode kernel first computes its range of X_out (hc_post, and the MoE's sum
// when f1 is given), then goes on as hc_pre_norm's. X_out may not overlap res, nor f overlap f1 or
// f2 (other blocks still read them); everything bf16 and 16-byte aligned. Otherwise the parts.
void CudaBackend::hc_post_pre_norm(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& f1,
                                   const Tensor& f2, const Tensor& res, const Tensor& post, const Tensor& comb,
                                   const Tensor& out, const Tensor& y, const Tensor& fn, const Tensor& scale,
                                   const Tensor& base, int sinkhorn_iters, float hc_eps, float rms_eps,
                                   const Tensor& norm_w, float norm_eps) {
  const char* op = "hc_post_pre_norm";
  const auto parts = [&] {
    Backend::hc_post_pre_norm(s, X_out, f, f1, f2, res, post, comb, out, y, fn, scale, base, sinkhorn_iters, hc_eps,
                              rms_eps, norm_w, norm_eps);
  };
  const bool add = !f1.empty();
  if (add) checks::validate_add<OpRules>(f, f1, f2);
  checks::validate_hc_post<OpRules>(X_out, f, res, post, comb, {HC, HC});
  HcArgs a = hc_pre_args(y, post, comb, X_out, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps);
  if (a.T == 0) return;
  auto vec16 = [](const Tensor& t) {
    return t.dtype == DType::BF16 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  };
  const bool operands_fit = vec16(f) && vec16(res) && !checks::overlaps(X_out, res) &&
                            (!add || (vec16(f1) && vec16(f2) && !checks::overlaps(f, f1) && !checks::overlaps(f, f2)));
  if (!variants().hc_post_fused || !operands_fit || !hc_pre_norm_args(a, out, y, X_out, norm_w, norm_eps) ||
      !hc_fused_takes(*this, a, X_out.dtype))
    return parts();
  a.pres = static_cast<const bf16*>(res.data);
  a.pf = static_cast<bf16*>(f.data);
  a.pf1 = add ? static_cast<const bf16*>(f1.data) : nullptr;
  a.pf2 = add ? static_cast<const bf16*>(f2.data) : nullptr;
  if (!launch_hc_fused<(2 + HC) * HC, false>(*this, op, s, a)) parts();
}

void CudaBackend::hc_head(Stream s, const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale,
                          const Tensor& base, float hc_eps, float rms_eps) {
  const char* op = "hc_head";
  const auto [T, hc, D] = checks::validate_hc_head<OpRules>(h, X, fn, scale, base, {HC, HC});
  HcArgs a{};
  a.X = X.data;
  a.dtx = fcode(X.dtype);
  a.fn = fn.ptr<float>();
  a.T = T;
  a.D = D;
  a.scale = scale.ptr<float>();
  a.base = base.ptr<float>();
  a.iters = 0;
  a.hc_eps = hc_eps;
  a.rms_eps = rms_eps;
  a.y = h.data;
  a.dty = fcode(h.dtype);
  launch_hc<HC, true>(*this, op, s, a, X.dtype);
}

void CudaBackend::hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& res, const Tensor& post,
                          const Tensor& comb) {
  const char* op = "hc_post";
  cudaStream_t st = stream(s, op);
  const auto [T, hc, D] = checks::validate_hc_post<OpRules>(X_out, f, res, post, comb, {HC, HC});
  if (T * D == 0) return;
  launch_kernel(op, hc_post_kernel, grid_for(T * D, 256), 256, 0, st, X_out.data, fcode(X_out.dtype), f.data,
                fcode(f.dtype), res.data, fcode(res.dtype), post.ptr<float>(), comb.ptr<float>(), T, D,
                static_cast<const void*>(nullptr), 0, static_cast<const void*>(nullptr), 0);
  CUDA_LAUNCH_CHECK(op, st);
}

// The MoE sum and the FFN's hc_post in one launch: each thread adds its f1 and f2 element (and
// stores f) before the 4 x 4 mix.
void CudaBackend::add_hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& f1, const Tensor& f2,
                              const Tensor& res, const Tensor& post, const Tensor& comb) {
  const char* op = "add_hc_post";
  cudaStream_t st = stream(s, op);
  checks::validate_add<OpRules>(f, f1, f2);
  const auto [T, hc, D] = checks::validate_hc_post<OpRules>(X_out, f, res, post, comb, {HC, HC});
  if (T * D == 0) return;
  launch_kernel(op, hc_post_kernel, grid_for(T * D, 256), 256, 0, st, X_out.data, fcode(X_out.dtype), f.data,
                fcode(f.dtype), res.data, fcode(res.dtype), post.ptr<float>(), comb.ptr<float>(), T, D, f1.data,
                fcode(f1.dtype), f2.data, fcode(f2.dtype));
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::hc_expand(Stream s, const Tensor& X, const Tensor& e) {
  const char* op = "hc_expand";
  cudaStream_t st = stream(s, op);
  const auto [T, hc, D] = checks::validate_hc_expand<OpRules>(X, e);
  if (T * D == 0) return;
  launch_kernel(op, hc_expand_kernel, grid_for(T * D, 256), 256, 0, st, X.data, fcode(X.dtype), e.data, fcode(e.dtype), T, hc, D);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::mtp_combine(Stream s, const Tensor& X, const Tensor& hp, const Tensor& ep) {
  const char* op = "mtp_combine";
  cudaStream_t st = stream(s, op);
  const auto [T, hc, D] = checks::validate_mtp_combine<OpRules>(X, hp, ep);
  const int64_t n = T * hc * D;
  if (n == 0) return;
  launch_kernel(op, mtp_combine_kernel, grid_for(n, 256), 256, 0, st, X.data, fcode(X.dtype), hp.data, fcode(hp.dtype), ep.data,
                                                        fcode(ep.dtype), T, hc, D);
  CUDA_LAUNCH_CHECK(op, st);
}

}  // namespace sl
