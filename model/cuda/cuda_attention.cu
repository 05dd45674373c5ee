// Attention-side ops on the GPU (docs/model.md 5): the sliding-window cache insert, the compressor
// (state save + pooling into compressed entries), the lightning indexer's scoring and top-k,
// and the sparse attention with sink.
//
// Ring caches carry a position tag per slot (-1 = empty); a reader uses a slot only if its tag
// is exactly the position it wants, as on the CPU. Inserts follow the CPU's program order:
// when two tokens of one batch map to the same slot, the later token (in batch order) wins.
// That is made deterministic with integer claims (atomicMax of the token index per slot, in the
// stream's scratch), then a write pass where only each slot's winner writes; at decode (<= 64
// tokens) the write pass instead checks the later tokens itself (slot_winner).
//
// Sparse attention: a tensor-core kernel (16 heads share each key tile), and at T <= 2 a
// CUDA-core decode kernel with an fp32 softmax; both split the candidates over blocks when the
// grid would leave SMs idle, and attn_combine_kernel merges the splits.
#include <mma.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>

#include "model/attention_candidates.h"
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kv_fp8_cache.cuh"

namespace sl {

using namespace cuda;
using namespace nvcuda;

namespace {

constexpr float kNegInf = -INFINITY;
// The most KV splits one attention call merges (attn_combine_kernel: a split per lane of one warp,
// 16 partials in flight per output value).
constexpr int kAttnMaxSplits = 16;

__host__ __device__ __forceinline__ size_t align128(size_t n) { return (n + 127) / 128 * 128; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ================================================================ ring inserts

// winner[b, slot] = max token index t claiming that slot (integer atomics: the result is the
// same whatever the order). One thread per token.
__global__ void ring_claim_kernel(int* winner, const int32_t* pos, const int32_t* seq, int64_t T, int64_t B,
                                  int64_t cap) {
  pdl_enter();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < T; t += int64_t(gridDim.x) * blockDim.x) {
    const int32_t p = pos[t], b = seq[t];
    if (p < 0 || b < 0 || b >= B) continue;
    atomicMax(&winner[int64_t(b) * cap + p % cap], int(t));
  }
}

// Whether token t writes its slot b * cap + p % cap: the last token claiming a slot wins. With a
// winner table (ring_claim_kernel), a lookup; without (decode: at most kScanMaxTokens tokens),
// the block scans the later tokens for the same slot instead, which saves the table's memset and
// the claim kernel (two of the three launches of a ring insert). Call from all threads.
constexpr int64_t kScanMaxTokens = 64;

__device__ __forceinline__ bool slot_winner(int64_t t, int64_t T, const int32_t* pos, const int32_t* seq,
                                            const int* winner, int64_t slot, int64_t B, int64_t cap) {
  if (winner) return winner[slot] == int(t);
  bool later = false;
  for (int64_t u = t + 1 + threadIdx.x; u < T; u += blockDim.x) {
    const int32_t p = pos[u], b = seq[u];
    if (p >= 0 && b >= 0 && b < B && int64_t(b) * cap + p % cap == slot) later = true;
  }
  return !__syncthreads_or(later);
}

// One block per token: the slot's winner copies its row and sets the tag. A packed FP8 cache
// (nope > 0: U8 entries of `bytes` bytes, kv_fp8_cache.cuh) gets the row quantized instead.
__global__ void swa_write_kernel(void* cache, int dtc, int32_t* tags, const void* k, int dtk, const int32_t* pos,
                                 const int32_t* seq, const int* winner, int64_t B, int64_t cap, int64_t d, int64_t T,
                                 int64_t nope, int64_t bytes) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int32_t p = pos[t], b = seq[t];
  if (p < 0 || b < 0 || b >= B) return;
  const int64_t slot = int64_t(b) * cap + p % cap;
  if (!slot_winner(t, T, pos, seq, winner, slot, B, cap)) return;
  if (nope > 0) {
    block_pack_kv_entry(static_cast<uint8_t*>(cache) + slot * bytes,
                        [&](int64_t c) { return ldf(k, dtk, t * d + c); }, nope, d - nope, bytes);
    if (threadIdx.x == 0) tags[slot] = p;
    return;
  }
  // Four loads in flight per thread before the stores.
  for (int64_t c0 = threadIdx.x; c0 < d; c0 += 4 * int64_t(blockDim.x)) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t c = c0 + u * int64_t(blockDim.x);
      v[u] = c < d ? ldf(k, dtk, t * d + c) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t c = c0 + u * int64_t(blockDim.x);
      if (c < d) stf(cache, dtc, slot * d + c, v[u]);
    }
  }
  if (threadIdx.x == 0) tags[slot] = p;
}

// One block per token: the winner writes u, g + ape[p % ratio] and the tag.
__global__ void compressor_save_kernel(float* su, float* sg, int32_t* tags, const float* u, const float* g,
                                       const float* ape, const int32_t* pos, const int32_t* seq, const int* winner,
                                       int64_t B, int64_t S, int64_t cd, int ratio, int64_t T) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int32_t p = pos[t], b = seq[t];
  if (p < 0 || b < 0 || b >= B) return;
  const int64_t slot = int64_t(b) * S + p % S;
  if (!slot_winner(t, T, pos, seq, winner, slot, B, S)) return;
  const float* ap = ape + int64_t(p % ratio) * cd;
  // Four elements' loads in flight per thread before the stores.
  for (int64_t c0 = threadIdx.x; c0 < cd; c0 += 4 * int64_t(blockDim.x)) {
    float vu[4], vg[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t c = c0 + q * int64_t(blockDim.x);
      vu[q] = c < cd ? u[t * cd + c] : 0.f;
      vg[q] = c < cd ? g[t * cd + c] + ap[c] : 0.f;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t c = c0 + q * int64_t(blockDim.x);
      if (c < cd) {
        su[slot * cd + c] = vu[q];
        sg[slot * cd + c] = vg[q];
      }
    }
  }
  if (threadIdx.x == 0) tags[slot] = p;
}

// ================================================================ compressor pooling

struct PoolArgs {
  void* entries;
  int dte;
  const float* su;
  const float* sg;
  const int32_t* tags;
  const void* norm_w;
  int dtw;
  const float* table;
  const int32_t* pos;
  const int32_t* seq;
  int64_t T, B, S, cd, d, n_max, P, R;
  int ratio, overlap;
  float eps;
  // Packed FP8 entries (U8 rows of `bytes`): nope > 0 KV entries, 0 indexer keys; -1 floats.
  // round_bf16: pack the entry as a bf16 cache would hold it (the activation dtype), so that a
  // packed cache holds exactly the values of an emulated one (round_fp8_blocks on bf16 entries).
  int64_t nope, bytes;
  int round_bf16;
};

// One block (256 threads) per token; only tokens completing a block ((pos+1) % ratio == 0) do
// work. Candidates (<= 256): overlap = the previous block through channels [0, d) and the
// current block through [d, 2d); tag-checked, absent ones skipped (all absent: the entry is left
// unchanged, as on the CPU). Per channel (a thread per channel, coalesced over channels): max,
// then exp-weighted sum over the candidates in order. Then RMSNorm over d (block reduction) and
// RoPE of the last R dims at position j * ratio, in shared memory, and one store of the entry.
__global__ __launch_bounds__(256) void compressor_pool_kernel(PoolArgs a) {
  pdl_enter();
  extern __shared__ float pool_smem[];
  float* es = pool_smem;                                  // [d]
  int* cslot = reinterpret_cast<int*>(es + a.d);          // [256] slot row (b*S + q%S) or -1
  int* coff = cslot + 256;                                // [256] channel offset (0 or d)
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const int32_t p = a.pos[t], b = a.seq[t];
  if (p < 0 || b < 0 || b >= a.B || (int64_t(p) + 1) % a.ratio != 0) return;
  const int64_t j = p / a.ratio;
  if (j >= a.n_max || j * a.ratio >= a.P) return;
  const int ncand = (a.overlap ? 2 : 1) * a.ratio;
  bool ok = false;
  if (threadIdx.x < ncand) {
    const int i = threadIdx.x;
    int64_t q;
    int off;
    if (a.overlap && i < a.ratio) {
      q = (j - 1) * a.ratio + i;
      off = 0;
    } else {
      q = j * a.ratio + (a.overlap ? i - a.ratio : i);
      off = a.overlap ? int(a.d) : 0;
    }
    ok = q >= 0 && a.tags[int64_t(b) * a.S + q % a.S] == q;
    cslot[i] = ok ? int(int64_t(b) * a.S + q % a.S) : -1;
    coff[i] = off;
  }
  const int n = __syncthreads_count(ok);
  if (n == 0) return;
  #pragma unroll 4
  for (int64_t ch = threadIdx.x; ch < a.d; ch += blockDim.x) {
    float mx = kNegInf;
    #pragma unroll 4
    for (int i = 0; i < ncand; ++i)
      if (cslot[i] >= 0) mx = fmaxf(mx, a.sg[int64_t(cslot[i]) * a.cd + coff[i] + ch]);
    float den = 0.f, acc = 0.f;
    #pragma unroll 4
    for (int i = 0; i < ncand; ++i) {
      if (cslot[i] < 0) continue;
      const int64_t at = int64_t(cslot[i]) * a.cd + coff[i] + ch;
      const float w = expf(a.sg[at] - mx);
      den += w;
      acc += w * a.su[at];
    }
    es[ch] = acc / den;
  }
  float ss = 0.f;
  for (int64_t ch = threadIdx.x; ch < a.d; ch += blockDim.x) ss += es[ch] * es[ch];
  ss = block_sum(ss, red);  // contains the barrier that makes es visible
  const float r = 1.f / sqrtf(ss / float(a.d) + a.eps);
  for (int64_t ch = threadIdx.x; ch < a.d; ch += blockDim.x) es[ch] = ldf(a.norm_w, a.dtw, ch) * (es[ch] * r);
  __syncthreads();
  const int64_t half = a.R / 2;
  const float* ang = a.table + j * a.ratio * a.R;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const int64_t at = a.d - a.R + 2 * i;
    const float c = ang[i], s = ang[half + i];
    const float e = es[at], o = es[at + 1];
    es[at] = e * c - o * s;
    es[at + 1] = o * c + e * s;
  }
  __syncthreads();
  if (a.nope < 0) {
    for (int64_t ch = threadIdx.x; ch < a.d; ch += blockDim.x)
      stf(a.entries, a.dte, (int64_t(b) * a.n_max + j) * a.d + ch, es[ch]);
    return;
  }
  uint8_t* e = static_cast<uint8_t*>(a.entries) + (int64_t(b) * a.n_max + j) * a.bytes;
  const auto value = [&](int64_t ch) { return a.round_bf16 ? __bfloat162float(__float2bfloat16_rn(es[ch])) : es[ch]; };
  if (a.nope > 0)
    block_pack_kv_entry(e, value, a.nope, a.d - a.nope, a.bytes);
  else if (threadIdx.x < 32)
    warp_pack_indexer_key(e, value, a.d);
}

// ================================================================ indexer scoring + top-k

struct IdxArgs {
  int32_t* sel;
  const bf16* q;
  const void* w;
  int dtw;
  const bf16* keys;
  const uint8_t* keys8;  // packed FP8 keys (U8 rows of di + 4 bytes) instead of keys; else null
  const int32_t* pos;
  const int32_t* seq;
  int64_t T, B, n_max;
  int Hi, HP, di, ld, K, Kp, ratio;
  float wscale;
  float* scores;        // split mode: [T, n_max] in the stream's scratch
  int tiles_per_block;  // split mode
};

// Total order key of a score: larger float -> larger key; -0 counts as +0 (the CPU's == ties
// them); NaN sorts below everything.
__device__ __forceinline__ unsigned score_key(float f) {
  if (f != f) return 0u;
  const unsigned u = f == 0.f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Scoring of the causal keys j in [j_begin, j_end) (j < n_c) for token t, by one block of 256
// threads (8 warps): the token's Hi query heads (padded to HP, a multiple of 16) sit in shared
// memory; the keys stream through in tiles of 64 rows (16-byte loads; each key row read once);
// tensor cores (WMMA bf16, fp32 accumulate) give the [HP x 64] logits, and 64 threads reduce
// score[j] = sum_h w_h * relu(logit) over h in order into sc[j]. Ends with a barrier.
// Shared memory at `smem`: Qs [HP][ld] bf16, Ks [64][ld] bf16, Sp [HP][64] f32, wv [HP] f32.
__host__ __device__ inline size_t idx_score_smem(int HP, int ld) {
  return align128(size_t(HP) * ld * 2) + align128(size_t(64) * ld * 2) + align128(size_t(HP) * 64 * 4) +
         align128(size_t(HP) * 4);
}
// Shared memory of the selection: sortb [Kp] u64, hist [256] u32, misc [16] i32.
__host__ __device__ inline size_t idx_select_smem(int Kp) { return align128(size_t(Kp) * 8) + align128(256 * 4) + 128; }

__device__ void idx_score(const IdxArgs& a, unsigned char* smem, int64_t t, int32_t b, int64_t n_c, int64_t j_begin,
                          int64_t j_end, float* sc) {
  unsigned char* ptr = smem;
  bf16* Qs = reinterpret_cast<bf16*>(ptr);
  ptr += align128(size_t(a.HP) * a.ld * 2);
  bf16* Ks = reinterpret_cast<bf16*>(ptr);
  ptr += align128(size_t(64) * a.ld * 2);
  float* Sp = reinterpret_cast<float*>(ptr);
  ptr += align128(size_t(a.HP) * 64 * 4);
  float* wv = reinterpret_cast<float*>(ptr);
  const int tid = threadIdx.x, warp = tid >> 5;
  const int cpr = a.di / 8;  // 16-byte chunks per row
  #pragma unroll 4
  for (int e = tid; e < a.HP * cpr; e += 256) {
    const int r = e / cpr, c = e % cpr;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < a.Hi) v = reinterpret_cast<const uint4*>(a.q + (t * a.Hi + r) * a.di)[c];
    *reinterpret_cast<uint4*>(Qs + r * a.ld + c * 8) = v;
  }
  for (int h = tid; h < a.HP; h += 256) wv[h] = h < a.Hi ? ldf(a.w, a.dtw, t * a.Hi + h) * a.wscale : 0.f;
  __syncthreads();
  const int nfr = (a.HP / 16) * 4;
  const int64_t jend = min64(j_end, n_c);
  for (int64_t j0 = j_begin; j0 < jend; j0 += 64) {
    if (a.keys8) {
      // Packed FP8 keys, 4 codes per load, staged as bf16 (exact: kv_fp8_cache.cuh).
      const int wpr = a.di / 4, kb = a.di + int(kvfp8::kScaleBytes);
      #pragma unroll 4
      for (int e = tid; e < 64 * wpr; e += 256) {
        const int r = e / wpr, c = e % wpr;
        const int64_t j = j0 + r;
        uint2 v = make_uint2(0, 0);
        if (j < jend) {
          const uint8_t* key = a.keys8 + (int64_t(b) * a.n_max + j) * kb;
          const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(key) + c);
          const float sc = __ldg(reinterpret_cast<const float*>(key + a.di));
          bf16 h[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) h[q] = __float2bfloat16_rn(e4m3_value(uint8_t(w >> (8 * q))) * sc);
          v = *reinterpret_cast<const uint2*>(h);
        }
        *reinterpret_cast<uint2*>(Ks + r * a.ld + c * 4) = v;
      }
    } else {
      #pragma unroll 4
      for (int e = tid; e < 64 * cpr; e += 256) {
        const int r = e / cpr, c = e % cpr;
        const int64_t j = j0 + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < jend) v = __ldg(reinterpret_cast<const uint4*>(a.keys + (int64_t(b) * a.n_max + j) * a.di) + c);
        *reinterpret_cast<uint4*>(Ks + r * a.ld + c * 8) = v;
      }
    }
    __syncthreads();
    for (int f = warp; f < nfr; f += 8) {
      const int fm = f / 4, fn = f % 4;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> af;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bfr;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < a.di / 16; ++kk) {
        wmma::load_matrix_sync(af, Qs + fm * 16 * a.ld + kk * 16, a.ld);
        wmma::load_matrix_sync(bfr, Ks + fn * 16 * a.ld + kk * 16, a.ld);
        wmma::mma_sync(acc, af, bfr, acc);
      }
      wmma::store_matrix_sync(Sp + fm * 16 * 64 + fn * 16, acc, 64, wmma::mem_row_major);
    }
    __syncthreads();
    if (tid < 64 && j0 + tid < jend) {
      float s = 0.f;
      for (int h = 0; h < a.Hi; ++h) s += wv[h] * fmaxf(Sp[h * 64 + tid], 0.f);
      sc[j0 + tid] = s;
    }
    // The next tile's loads touch Ks only; Sp is rewritten after the barrier that follows them.
  }
  __syncthreads();
}

// Top-k of sc[0..n_c) for token t, by one block of 256 threads: if n_c <= K all are taken; else
// a 4-pass 8-bit radix select finds the K-th largest score key, and an ordered compaction takes
// every key above it plus the lowest-index keys equal to it. The taken (key, index) pairs are
// bitonic-sorted (score descending, index ascending) and written, padded with -1.
__device__ void idx_select(const IdxArgs& a, unsigned char* smem, int64_t t, int64_t n_c, const float* sc) {
  unsigned char* ptr = smem;
  unsigned long long* sortb = reinterpret_cast<unsigned long long*>(ptr);
  ptr += align128(size_t(a.Kp) * 8);
  unsigned* hist = reinterpret_cast<unsigned*>(ptr);
  ptr += align128(256 * 4);
  int* misc = reinterpret_cast<int*>(ptr);  // [0..7] scan partials, [8..9] radix results
  const int tid = threadIdx.x;
  const int take = int(min64(a.K, n_c));
  if (n_c > a.K) {
    unsigned prefix = 0, mask = 0;
    int remaining = a.K;
    for (int shift = 24; shift >= 0; shift -= 8) {
      hist[tid] = 0;
      __syncthreads();
            // Warp-aggregated counting (scores crowd into few bins in the first passes).
      for (int64_t j0 = 0; j0 < n_c; j0 += 256) {
        const int64_t j = j0 + tid;
        const unsigned u = j < n_c ? score_key(sc[j]) : 0u;
        const bool in = j < n_c && (u & mask) == prefix;
        const unsigned bin = in ? ((u >> shift) & 255u) : 256u;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (in && __ffs(peers) - 1 == (tid & 31)) atomicAdd(&hist[bin], unsigned(__popc(peers)));
      }
      __syncthreads();
      if (tid < 32) {
        // Find the bin holding the remaining-th largest key: lane l sums bins 255-8l .. 248-8l
        // (descending), a warp scan of the lane sums, the first lane reaching `remaining`
        // walks its 8 bins.
        int h[8], local = 0;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          h[q] = int(hist[255 - 8 * tid - q]);
          local += h[q];
        }
        int incl = local;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, incl, o);
          if (tid >= o) incl += y;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, incl >= remaining);
        if (tid == __ffs(hit) - 1) {
          int cum = incl - local;
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            if (cum + h[q] >= remaining) {
              misc[8] = 255 - 8 * tid - q;
              misc[9] = remaining - cum;
              break;
            }
            cum += h[q];
          }
        }
      }
      __syncthreads();
      prefix |= unsigned(misc[8]) << shift;
      mask |= 0xFFu << shift;
      remaining = misc[9];
    }
    // Keys > prefix are all taken; `remaining` of the keys == prefix, lowest indices first. Each
    // thread owns a contiguous index range; two block scans place its picks in index order.
    const int64_t per = (n_c + 255) / 256;
    const int64_t jlo = min64(n_c, tid * per), jhi = min64(n_c, jlo + per);
    int my_gt = 0, my_eq = 0;
    for (int64_t j = jlo; j < jhi; ++j) {
      const unsigned u = score_key(sc[j]);
      my_gt += u > prefix;
      my_eq += u == prefix;
    }
    int tot = 0;
    const int eq_before = block_excl_scan<256>(my_eq, misc, &tot);
    const int take_eq = max(0, min(my_eq, remaining - eq_before));
    int at = block_excl_scan<256>(my_gt + take_eq, misc, &tot);
    int eq_taken = 0;
    for (int64_t j = jlo; j < jhi; ++j) {
      const unsigned u = score_key(sc[j]);
      if (u > prefix || (u == prefix && eq_taken++ < take_eq))
        sortb[at++] = (static_cast<unsigned long long>(u) << 32) | (0xFFFFFFFFull - unsigned(j));
    }
  } else {
    for (int64_t j = tid; j < n_c; j += 256)
      sortb[j] = (static_cast<unsigned long long>(score_key(sc[j])) << 32) | (0xFFFFFFFFull - unsigned(j));
  }
  int np2 = 2;
  while (np2 < take) np2 <<= 1;
  for (int i = take + tid; i < np2; i += 256) sortb[i] = 0ull;  // below any real key
  __syncthreads();
  // Bitonic sort, descending, of np2 (<= Kp) elements.
  for (int size = 2; size <= np2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < np2 / 2; i += 256) {
        const int lo = 2 * stride * (i / stride) + (i % stride), hi = lo + stride;
        const unsigned long long x = sortb[lo], y = sortb[hi];
        const bool desc = (lo & size) == 0;
        if (desc ? x < y : x > y) {
          sortb[lo] = y;
          sortb[hi] = x;
        }
      }
      __syncthreads();
    }
  }
  for (int i = tid; i < a.K; i += 256)
    a.sel[t * a.K + i] = i < take ? int32_t(0xFFFFFFFFull - (sortb[i] & 0xFFFFFFFFull)) : -1;
}

__device__ __forceinline__ int64_t idx_nc(const IdxArgs& a, int64_t t, int32_t* b_out) {
  const int32_t p = a.pos[t], b = a.seq[t];
  *b_out = b;
  const bool ok = p >= 0 && b >= 0 && b < a.B;
  return ok ? min64(compressed_entries_seen(p, a.ratio), a.n_max) : 0;
}

// Fused (many tokens): one block per token scores all its causal keys into shared memory and
// selects. Shared memory: scoring | sc [n_max] | selection.
__global__ __launch_bounds__(256) void indexer_topk_kernel(IdxArgs a) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char idx_smem[];
  const int64_t t = blockIdx.x;
  int32_t b;
  const int64_t n_c = idx_nc(a, t, &b);
  const size_t s1 = idx_score_smem(a.HP, a.ld);
  float* sc = reinterpret_cast<float*>(idx_smem + s1);
  unsigned char* sel_smem = idx_smem + s1 + align128(size_t(a.n_max) * 4);
  idx_score(a, idx_smem, t, b, n_c, 0, n_c, sc);
  idx_select(a, sel_smem, t, n_c, sc);
}

// Split (decode: few tokens): the causal keys of token blockIdx.y are scored by gridDim.x blocks,
// each a contiguous range of `tiles_per_block` 64-key tiles, into a.scores [T, n_max] (the
// stream's scratch); then indexer_select_kernel selects.
__global__ __launch_bounds__(256) void indexer_score_kernel(IdxArgs a) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char idx_smem[];
  const int64_t t = blockIdx.y;
  int32_t b;
  const int64_t n_c = idx_nc(a, t, &b);
  const int64_t jb = int64_t(blockIdx.x) * a.tiles_per_block * 64;
  if (jb >= n_c) return;
  idx_score(a, idx_smem, t, b, n_c, jb, jb + int64_t(a.tiles_per_block) * 64, a.scores + t * a.n_max);
}

__global__ __launch_bounds__(256) void indexer_select_kernel(IdxArgs a) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char idx_smem[];
  const int64_t t = blockIdx.x;
  int32_t b;
  const int64_t n_c = idx_nc(a, t, &b);
  float* sc = reinterpret_cast<float*>(idx_smem);
  #pragma unroll 4
  for (int64_t j = threadIdx.x; j < n_c; j += 256) sc[j] = a.scores[t * a.n_max + j];
  __syncthreads();
  idx_select(a, idx_smem + align128(size_t(a.n_max) * 4), t, n_c, sc);
}

// ================================================================ sparse attention

constexpr int AHG = 16;   // heads per block (the WMMA M dimension; fewer heads are zero-padded)
constexpr int AKT = 32;   // keys per tile
constexpr int ACH = 512;  // candidates per chunk (scores of a chunk are held in shared memory)

struct AttnArgs {
  bf16* o;
  const bf16* q;
  // The caches: bf16 rows of Dh values, or (nope > 0) packed FP8 KV entries of entry_bytes bytes
  // (kv_fp8_cache.cuh), read back to the same values.
  const void* swa;
  const int32_t* swa_tags;
  const void* comp;
  int64_t entry_bytes;
  int nope;
  const int32_t* sel;
  const float* sink;
  const int32_t* pos;
  const int32_t* seq;
  // Split-KV partials: [T, HP, nsplit] x (Dh values, m, l), merged by attn_combine_kernel;
  // null = no split.
  float* part;
  int64_t T, B, cap, n_max;
  int H, HP, Dh, ld, ldS, ldP, Ksel, window, mode, ratio, nsplit;
  float scale;
};

struct AttnSmem {
  bf16* Qs;  // [16][ld]
  bf16* Ks;  // [AKT][ld]
  float* Sp; // [4][16][AKT]
  float* S;  // [16][ldS]
  bf16* P;   // [16][ldP]
  float* rowm;
  float* rowl;
  float* rowa;
  const void** cptr;  // [ACH] the chunk's candidate rows (null: absent), bf16 or packed entries
};

__host__ __device__ inline size_t attn_smem_bytes(int Dh) {
  const size_t ld = size_t(Dh) + 8, ldS = size_t(Dh > ACH ? Dh : ACH), ldP = ACH + 8;
  size_t n = 0;
  n += (16 * ld * 2 + 127) / 128 * 128;
  n += (AKT * ld * 2 + 127) / 128 * 128;
  n += (4 * 16 * AKT * 4 + 127) / 128 * 128;
  n += (16 * ldS * 4 + 127) / 128 * 128;
  n += (16 * ldP * 2 + 127) / 128 * 128;
  n += 3 * 16 * 4 + 128;
  n += ACH * 8 + 128;
  return n;
}

// A token's candidate list, shared by both sparse-attention kernels: nwin window positions from
// p0 (model/attention_candidates.h), then the compressed entries (All: every entry complete at p,
// at most n_max; Selected: the Ksel picks of the indexer); ntot in all. None for a padding token
// (p < 0) or a sequence outside the batch.
struct AttnCandidates {
  int64_t nwin = 0, p0 = 0, ntot = 0;
};
__device__ __forceinline__ AttnCandidates attn_candidates(const AttnArgs& a, int32_t p, int32_t b) {
  AttnCandidates c;
  if (p < 0 || b < 0 || b >= a.B) return c;
  c.nwin = window_length(p, a.window);
  c.p0 = window_first_position(p, a.window);
  const int64_t ncomp = a.mode == 1 ? min64(compressed_entries_seen(p, a.ratio), a.n_max) : a.mode == 2 ? a.Ksel : 0;
  c.ntot = c.nwin + ncomp;
  return c;
}

// The chunk's candidate rows: candidate i (of the token's list) is, for i < nwin, the window
// position p0 + i (tag-checked); after that a compressed entry (All: j = i - nwin; Selected:
// j = sel[t, i - nwin]). cptr[i - c0] = its key row, or null when absent. All threads; ends with
// a barrier.
__device__ __forceinline__ void attn_chunk_rows(const AttnArgs& a, const AttnSmem& sm, int64_t t, int32_t b,
                                                int64_t p0, int64_t nwin, int64_t c0, int nc, int ncp) {
  #pragma unroll 4
  for (int r = threadIdx.x; r < ncp; r += blockDim.x) {
    const void* ptr = nullptr;
    if (r < nc) {
      const int64_t i = c0 + r;
      // A row's bytes: Dh bf16 values, or one packed entry.
      const int64_t row_bytes = a.nope > 0 ? a.entry_bytes : int64_t(a.Dh) * 2;
      if (i < nwin) {
        const int64_t qp = p0 + i, slot = int64_t(b) * a.cap + qp % a.cap;
        if (a.swa_tags[slot] == qp) ptr = static_cast<const unsigned char*>(a.swa) + slot * row_bytes;
      } else {
        const int64_t i2 = i - nwin;
        const int64_t j = a.mode == 1 ? i2 : int64_t(a.sel[t * a.Ksel + i2]);
        if (j >= 0 && j < a.n_max)
          ptr = static_cast<const unsigned char*>(a.comp) + (int64_t(b) * a.n_max + j) * row_bytes;
      }
    }
    sm.cptr[r] = ptr;
  }
  __syncthreads();
}

// Loads the AKT key rows cptr[k0 .. k0 + AKT) into Ks, 8 values per load (absent rows are
// zeros); packed FP8 entries are decoded to bf16 on the way (exact).
__device__ __forceinline__ void attn_load_tile(const AttnArgs& a, const AttnSmem& sm, int k0) {
  const int cpr = a.Dh / 8;
  #pragma unroll 4
  for (int e = threadIdx.x; e < AKT * cpr; e += blockDim.x) {
    const int r = e / cpr, cc = e % cpr;
    const void* row = sm.cptr[k0 + r];
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row && a.nope > 0) {
      float f[8];
      load_kv_values<8>(static_cast<const uint8_t*>(row), int64_t(cc) * 8, a.nope, a.Dh - a.nope, f);
      bf16 h[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) h[q] = __float2bfloat16_rn(f[q]);
      v = *reinterpret_cast<const uint4*>(h);
    } else if (row) {
      v = __ldg(reinterpret_cast<const uint4*>(row) + cc);
    }
    *reinterpret_cast<uint4*>(sm.Ks + r * a.ld + cc * 8) = v;
  }
  __syncthreads();
}

// One block (256 threads, 8 warps) per (16-head group, token, KV split). All heads of the group
// share every key tile: per chunk of up to 512 candidates,
//   pass 1: S[16 x chunk] = scale * Q K^T on tensor cores (each warp: one 16-key half of the
//           32-key tile over a quarter of Dh; the 4 quarter partials are added in order);
//   softmax: per head row (a warp per 2 rows) the chunk max, online rescale of the running
//           (m, l), P = exp(S - m) rounded to bf16 (l sums the rounded values);
//   pass 2: O[16 x Dh] += P K on tensor cores (each warp owns Dh/8 output columns as FPW 16x16
//           accumulator fragments, kept in registers across tiles and chunks).
// Keys are values (K = V), so each key row is read twice per head group (once per pass, the
// second mostly from L2). The sink adds exp(sink - m) to the denominator only. With nsplit > 1
// (decode: few tokens) the candidates are split over blockIdx.z and the unnormalised (O, m, l)
// go to a.part for attn_combine_kernel.
template <int FPW>
__global__ __launch_bounds__(256, 2) void sparse_attention_kernel(AttnArgs a) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char attn_smem[];
  unsigned char* ptr = attn_smem;
  AttnSmem sm;
  sm.Qs = reinterpret_cast<bf16*>(ptr);
  ptr += align128(size_t(16) * a.ld * 2);
  sm.Ks = reinterpret_cast<bf16*>(ptr);
  ptr += align128(size_t(AKT) * a.ld * 2);
  sm.Sp = reinterpret_cast<float*>(ptr);
  ptr += align128(size_t(4) * 16 * AKT * 4);
  sm.S = reinterpret_cast<float*>(ptr);
  ptr += align128(size_t(16) * a.ldS * 4);
  sm.P = reinterpret_cast<bf16*>(ptr);
  ptr += align128(size_t(16) * a.ldP * 2);
  sm.rowm = reinterpret_cast<float*>(ptr);
  sm.rowl = sm.rowm + 16;
  sm.rowa = sm.rowl + 16;
  ptr += 128 * 2;
  sm.cptr = reinterpret_cast<const void**>(ptr);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h0 = blockIdx.x * AHG;
  const int64_t t = blockIdx.y;
  const int z = blockIdx.z;
  const int32_t p = a.pos[t], b = a.seq[t];
  const AttnCandidates cand = attn_candidates(a, p, b);
  const int64_t nwin = cand.nwin, p0 = cand.p0, ntot = cand.ntot;
  // This block's candidate range.
  int64_t cb = 0, ce = ntot;
  if (a.nsplit > 1) {
    const int64_t per = (((ntot + a.nsplit - 1) / a.nsplit) + AKT - 1) / AKT * AKT;
    cb = min64(ntot, z * per);
    ce = min64(ntot, cb + per);
  }

  const int cpr = a.Dh / 8;
  #pragma unroll 4
  for (int e = tid; e < 16 * cpr; e += 256) {
    const int r = e / cpr, c = e % cpr;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (h0 + r < a.H) v = reinterpret_cast<const uint4*>(a.q + (t * a.H + h0 + r) * a.Dh)[c];
    *reinterpret_cast<uint4*>(sm.Qs + r * a.ld + c * 8) = v;
  }
  if (tid < 16) {
    // Unsplit: the running max starts at the sink (M = max(max_j s_j, sink)). Split: at -inf; the
    // combine kernel brings the sink in.
    sm.rowm[tid] = (a.nsplit > 1 || h0 + tid >= a.H) ? kNegInf : a.sink[h0 + tid];
    sm.rowl[tid] = 0.f;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FPW];
#pragma unroll
  for (int f = 0; f < FPW; ++f) wmma::fill_fragment(acc[f], 0.f);
  __syncthreads();

  const int nsteps = a.Dh / 16;
  for (int64_t c0 = cb; c0 < ce; c0 += ACH) {
    const int nc = int(min64(ACH, ce - c0));
    const int ncp = (nc + AKT - 1) / AKT * AKT;
    attn_chunk_rows(a, sm, t, b, p0, nwin, c0, nc, ncp);
    // ---- pass 1: scores
    for (int k0 = 0; k0 < ncp; k0 += AKT) {
      attn_load_tile(a, sm, k0);
      {
        const int nf = warp & 1, part = warp >> 1;
        const int kb = part * nsteps / 4, ke = (part + 1) * nsteps / 4;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> af;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bfr;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
        wmma::fill_fragment(sacc, 0.f);
        for (int kk = kb; kk < ke; ++kk) {
          wmma::load_matrix_sync(af, sm.Qs + kk * 16, a.ld);
          wmma::load_matrix_sync(bfr, sm.Ks + nf * 16 * a.ld + kk * 16, a.ld);
          wmma::mma_sync(sacc, af, bfr, sacc);
        }
        wmma::store_matrix_sync(sm.Sp + part * 16 * AKT + nf * 16, sacc, AKT, wmma::mem_row_major);
      }
      __syncthreads();
      for (int e = tid; e < 16 * AKT; e += 256) {
        const int r = e / AKT, n = e % AKT;
        const float s = ((sm.Sp[r * AKT + n] + sm.Sp[16 * AKT + r * AKT + n]) +
                         (sm.Sp[2 * 16 * AKT + r * AKT + n] + sm.Sp[3 * 16 * AKT + r * AKT + n])) *
                        a.scale;
        sm.S[r * a.ldS + k0 + n] = sm.cptr[k0 + n] ? s : kNegInf;
      }
      __syncthreads();
    }
    // ---- softmax over the chunk, online across chunks
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = warp * 2 + rr;
      float mx = kNegInf;
      for (int i = lane; i < nc; i += 32) mx = fmaxf(mx, sm.S[r * a.ldS + i]);
      mx = warp_max(mx);
      const float m_old = sm.rowm[r];
      const float m_new = fmaxf(m_old, mx);
      const float alpha = m_new == kNegInf ? 1.f : expf(m_old - m_new);
      float sum = 0.f;
      for (int i = lane; i < ncp; i += 32) {
        const float s = i < nc ? sm.S[r * a.ldS + i] : kNegInf;
        const bf16 pb = __float2bfloat16_rn(s == kNegInf ? 0.f : expf(s - m_new));
        sm.P[r * a.ldP + i] = pb;
        sum += __bfloat162float(pb);
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        sm.rowl[r] = sm.rowl[r] * alpha + sum;
        sm.rowm[r] = m_new;
        sm.rowa[r] = alpha;
      }
    }
    __syncthreads();
    if (c0 > cb) {
      // Rescale the running O by alpha (per head row) through shared memory (S is free now).
#pragma unroll
      for (int f = 0; f < FPW; ++f) {
        const int cf = warp * FPW + f;
        if (cf * 16 < a.Dh) wmma::store_matrix_sync(sm.S + cf * 16, acc[f], a.ldS, wmma::mem_row_major);
      }
      __syncthreads();
      for (int e = tid; e < 16 * a.Dh; e += 256) {
        const int r = e / a.Dh, d = e % a.Dh;
        sm.S[r * a.ldS + d] *= sm.rowa[r];
      }
      __syncthreads();
#pragma unroll
      for (int f = 0; f < FPW; ++f) {
        const int cf = warp * FPW + f;
        if (cf * 16 < a.Dh) wmma::load_matrix_sync(acc[f], sm.S + cf * 16, a.ldS, wmma::mem_row_major);
      }
      __syncthreads();
    }
    // ---- pass 2: O += P K
    for (int k0 = 0; k0 < ncp; k0 += AKT) {
      attn_load_tile(a, sm, k0);
#pragma unroll
      for (int f = 0; f < FPW; ++f) {
        const int cf = warp * FPW + f;
        if (cf * 16 >= a.Dh) continue;
#pragma unroll
        for (int ks = 0; ks < AKT / 16; ++ks) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> af;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bfr;
          wmma::load_matrix_sync(af, sm.P + k0 + ks * 16, a.ldP);
          wmma::load_matrix_sync(bfr, sm.Ks + ks * 16 * a.ld + cf * 16, a.ld);
          wmma::mma_sync(acc[f], af, bfr, acc[f]);
        }
      }
      __syncthreads();
    }
  }

  // ---- epilogue
#pragma unroll
  for (int f = 0; f < FPW; ++f) {
    const int cf = warp * FPW + f;
    if (cf * 16 < a.Dh) wmma::store_matrix_sync(sm.S + cf * 16, acc[f], a.ldS, wmma::mem_row_major);
  }
  __syncthreads();
  if (a.nsplit > 1) {
    // Unnormalised partials for the combine kernel.
    const int64_t rec = a.Dh + 2;
    for (int e = tid; e < 16 * (a.Dh + 2); e += 256) {
      const int r = e / (a.Dh + 2), d = e % (a.Dh + 2);
      float* dst = a.part + ((t * a.HP + h0 + r) * a.nsplit + z) * rec;
      dst[d] = d < a.Dh ? sm.S[r * a.ldS + d] : (d == a.Dh ? sm.rowm[r] : sm.rowl[r]);
    }
    return;
  }
  for (int e = tid; e < 16 * a.Dh; e += 256) {
    const int r = e / a.Dh, d = e % a.Dh, h = h0 + r;
    if (h >= a.H) continue;
    const float M = sm.rowm[r];
    float den = sm.rowl[r];
    if (M != kNegInf) den += expf(a.sink[h] - M);
    const float v = den == 0.f ? 0.f : sm.S[r * a.ldS + d] / den;
    a.o[(t * a.H + h) * a.Dh + d] = __float2bfloat16_rn(v);
  }
}

// ---------------------------------------------------------------- decode attention
// Few tokens (decode): the tensor-core kernel above spends ~16 us per layer on barriers and
// dependent loads for ~40 candidates per block. Here one block (8 warps) takes a group of DHPB
// heads of one token and one KV split. Per chunk of up to DCH candidates the block resolves the
// row pointers once (attn_chunk_rows); each warp then takes every 8th candidate, DCB rows at a
// time (each lane holds DPL = Dh / 32 values of a row, all DCB loads in flight), and per head
// computes the scores (lane partial dots, butterfly) and folds the rows into its running softmax
// state (m, l, o) in fp32 (P is not rounded to bf16). The 8 warps' states merge in warp order
// through shared memory; the block writes split partials for attn_combine_kernel, or with one
// split the normalised output with the sink. Every sum is in a fixed order: deterministic.
constexpr int DHPB = 4, DCH = 256, DCB = 2;
// Measured on the H200 (flash-6l): at batch 1 (T = 1) 15 us per layer against 19 us + the same
// combine for the tensor-core kernel; at batch 8 (T = 8) the tensor cores win (16 heads share
// each key tile), so only T <= 2 comes here.
constexpr int64_t kDecodeAttnMaxTokens = 2;

__host__ __device__ inline size_t attn_decode_smem_bytes(int Dh) {
  return size_t(8) * DHPB * Dh * 4      // wo: each warp's o per head
         + size_t(DHPB) * Dh * 4        // qs: the heads' queries as float
         + size_t(8) * DHPB * 2 * 4     // wm, wl
         + size_t(DCH) * sizeof(void*); // cptr
}

template <int DPL>
__global__ __launch_bounds__(256, 2) void sparse_attention_decode_kernel(AttnArgs a) {
  pdl_enter();
  constexpr int Dh = DPL * 32;
  extern __shared__ __align__(16) unsigned char dec_smem[];
  float* wo = reinterpret_cast<float*>(dec_smem);  // [8][DHPB][Dh]
  float* qs = wo + 8 * DHPB * Dh;                  // [DHPB][Dh]
  float* wm = qs + DHPB * Dh;                      // [8][DHPB]
  float* wl = wm + 8 * DHPB;                       // [8][DHPB]
  AttnSmem sm{};
  sm.cptr = reinterpret_cast<const void**>(wl + 8 * DHPB);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h0 = blockIdx.x * DHPB;
  const int64_t t = blockIdx.y;
  const int z = blockIdx.z;
  const int32_t p = a.pos[t], b = a.seq[t];
  const AttnCandidates cand = attn_candidates(a, p, b);
  const int64_t nwin = cand.nwin, p0 = cand.p0, ntot = cand.ntot;
  const int64_t per = (ntot + a.nsplit - 1) / a.nsplit;
  const int64_t cb = min64(ntot, z * per), ce = min64(ntot, cb + per);

  for (int e = tid; e < DHPB * Dh; e += 256) {
    const int r = e / Dh, d = e % Dh;
    qs[e] = h0 + r < a.H ? __bfloat162float(a.q[(t * a.H + h0 + r) * Dh + d]) : 0.f;
  }
  __syncthreads();
  float m[DHPB], l[DHPB], o[DHPB][DPL];
#pragma unroll
  for (int h = 0; h < DHPB; ++h) {
    m[h] = kNegInf;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[h][i] = 0.f;
  }

  for (int64_t c0 = cb; c0 < ce; c0 += DCH) {
    const int nc = int(min64(DCH, ce - c0));
    attn_chunk_rows(a, sm, t, b, p0, nwin, c0, nc, nc);
    for (int i0 = warp * DCB; i0 < nc; i0 += 8 * DCB) {
      // DCB rows in flight (absent or past the chunk: zeros, masked below).
      float kv[DCB][DPL];
      bool ok[DCB];
#pragma unroll
      for (int c = 0; c < DCB; ++c) {
        const void* rowp = (i0 + c < nc) ? sm.cptr[i0 + c] : nullptr;
        const bf16* row = static_cast<const bf16*>(rowp);
        ok[c] = rowp != nullptr;
        if (a.nope > 0) {
          // A packed FP8 entry: the lane's DPL values lie in one scale block or in the rope part.
#pragma unroll
          for (int j = 0; j < DPL; ++j) kv[c][j] = 0.f;
          if (rowp) load_kv_values<DPL>(static_cast<const uint8_t*>(rowp), int64_t(lane) * DPL, a.nope, Dh - a.nope, kv[c]);
        } else if constexpr (DPL % 8 == 0) {
#pragma unroll
          for (int v = 0; v < DPL / 8; ++v) {
            uint4 u = make_uint4(0, 0, 0, 0);
            if (row) u = __ldg(reinterpret_cast<const uint4*>(row + lane * DPL) + v);
            const bf16* e = reinterpret_cast<const bf16*>(&u);
#pragma unroll
            for (int j = 0; j < 8; ++j) kv[c][v * 8 + j] = __bfloat162float(e[j]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < DPL; ++j) kv[c][j] = row ? __bfloat162float(row[lane * DPL + j]) : 0.f;
        }
      }
#pragma unroll
      for (int h = 0; h < DHPB; ++h) {
        float sc[DCB];
        float mx = m[h];
        const float* qh = qs + h * Dh + lane * DPL;  // the lane's query values (shared memory)
#pragma unroll
        for (int c = 0; c < DCB; ++c) {
          float acc = 0.f;
#pragma unroll
          for (int j = 0; j < DPL; ++j) acc += qh[j] * kv[c][j];
          sc[c] = ok[c] ? warp_sum(acc) * a.scale : kNegInf;
          mx = fmaxf(mx, sc[c]);
        }
        if (mx == kNegInf) continue;  // nothing present yet for this head
        const float alpha = expf(m[h] - mx);  // m = -inf: 0
        l[h] *= alpha;
#pragma unroll
        for (int j = 0; j < DPL; ++j) o[h][j] *= alpha;
#pragma unroll
        for (int c = 0; c < DCB; ++c) {
          const float pc = ok[c] ? expf(sc[c] - mx) : 0.f;
          l[h] += pc;
#pragma unroll
          for (int j = 0; j < DPL; ++j) o[h][j] += pc * kv[c][j];
        }
        m[h] = mx;
      }
    }
    __syncthreads();  // cptr is rewritten by the next chunk
  }

  // Merge the 8 warps' states in warp order.
#pragma unroll
  for (int h = 0; h < DHPB; ++h) {
#pragma unroll
    for (int j = 0; j < DPL; ++j) wo[(warp * DHPB + h) * Dh + lane * DPL + j] = o[h][j];
    if (lane == 0) {
      wm[warp * DHPB + h] = m[h];
      wl[warp * DHPB + h] = l[h];
    }
  }
  __syncthreads();
  // Per head: M = max over warps, each warp's factor e^(m_w - M) (into wm), the denominator.
  __shared__ float Ms[DHPB], dens[DHPB];
  if (tid < DHPB) {
    float M = kNegInf;
    for (int w = 0; w < 8; ++w) M = fmaxf(M, wm[w * DHPB + tid]);
    float den = 0.f;
    for (int w = 0; w < 8; ++w) {
      const float mw = wm[w * DHPB + tid];
      const float f = (M == kNegInf || mw == kNegInf) ? 0.f : expf(mw - M);
      wm[w * DHPB + tid] = f;
      den += f * wl[w * DHPB + tid];
    }
    Ms[tid] = M;
    dens[tid] = den;
  }
  __syncthreads();
  const int64_t rec = Dh + 2;
  for (int e = tid; e < DHPB * Dh; e += 256) {
    const int r = e / Dh, d = e % Dh, h = h0 + r;
    if (h >= a.H) continue;
    const float M = Ms[r], den = dens[r];
    float acc = 0.f;
    for (int w = 0; w < 8; ++w) acc += wm[w * DHPB + r] * wo[(w * DHPB + r) * Dh + d];
    if (a.nsplit > 1) {
      float* dst = a.part + ((t * a.HP + h) * a.nsplit + z) * rec;
      dst[d] = acc;
      if (d == 0) {
        dst[Dh] = M;
        dst[Dh + 1] = den;
      }
    } else {
      // The sink joins the denominator: M' = max(M, sink).
      const float sink = a.sink[h];
      const float Mp = fmaxf(M, sink);
      const float f = M == kNegInf ? 0.f : expf(M - Mp);
      const float dn = den * f + expf(sink - Mp);
      a.o[(t * a.H + h) * Dh + d] = __float2bfloat16_rn(dn == 0.f ? 0.f : acc * f / dn);
    }
  }
}

// Split-KV combine: one block per (head h, token t). The nsplit (<= 16) partials (O_z, m_z, l_z)
// are merged in split order: M = max(sink, m_z), w_z = e^(m_z - M),
// o = sum_z w_z O_z / (sum_z w_z l_z + e^(sink - M)). The first warp takes the weights (a split
// per lane), then the block's threads share the Dh outputs. The partials, each read once, are
// loaded through L2 (__ldcg).
__global__ void attn_combine_kernel(AttnArgs a) {
  pdl_enter();
  __shared__ float wz[16];
  __shared__ float den_s;
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t rec = a.Dh + 2;
  const float* base = a.part + (t * a.HP + h) * a.nsplit * rec;
  // Each thread's partials of its first value are loaded before the split weights are known (the
  // launch gives a thread per value: attn_combine_threads), so that they and warp 0's m and l
  // loads are one round trip to L2 instead of two.
  auto load = [&](int d, float (&v)[16]) {
#pragma unroll
    for (int z = 0; z < 16; ++z) v[z] = z < a.nsplit ? __ldcg(base + z * rec + d) : 0.f;
  };
  float v[16];
  if (int(threadIdx.x) < a.Dh) load(threadIdx.x, v);
  if (threadIdx.x < 32) {
    const int z = threadIdx.x;
    const float mz = z < a.nsplit ? __ldcg(base + z * rec + a.Dh) : kNegInf;
    const float lz = z < a.nsplit ? __ldcg(base + z * rec + a.Dh + 1) : 0.f;
    const float sink = a.sink[h];
    float M = sink;
    for (int q = 0; q < a.nsplit; ++q) M = fmaxf(M, __shfl_sync(0xffffffffu, mz, q));
    const float w = (mz == kNegInf) ? 0.f : expf(mz - M);
    if (z < a.nsplit) wz[z] = w;
    float den = M != kNegInf ? expf(sink - M) : 0.f;
    for (int q = 0; q < a.nsplit; ++q) den += __shfl_sync(0xffffffffu, w, q) * __shfl_sync(0xffffffffu, lz, q);
    if (z == 0) den_s = den;
  }
  __syncthreads();
  const float den = den_s;
  for (int d = threadIdx.x; d < a.Dh; d += blockDim.x) {
    if (d != int(threadIdx.x)) load(d, v);  // (Dh past the launch's threads)
    float acc = 0.f;  // the sum in split order
#pragma unroll
    for (int z = 0; z < 16; ++z)
      if (z < a.nsplit) acc += wz[z] * v[z];
    a.o[(t * a.H + h) * a.Dh + d] = __float2bfloat16_rn(den == 0.f ? 0.f : acc / den);
  }
}

// attn_combine_kernel's block: a thread per output value (Dh <= 512, sparse_attention's limit).
unsigned attn_combine_threads(int64_t Dh) { return unsigned(std::min<int64_t>(512, (Dh + 31) / 32 * 32)); }


}  // namespace

// ================================================================ ops

void CudaBackend::swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                             const Tensor& seq) {
  const char* op = "swa_insert";
  cudaStream_t st = stream(s, op);
  const auto [B, cap, d, T, nope] = checks::validate_swa_insert<OpRules>(cache, tags, k, pos, seq);
  if (T == 0) return;
  int* winner = nullptr;
  if (T > kScanMaxTokens) {
    const size_t need = size_t(B * cap) * sizeof(int);
    winner = static_cast<int*>(scratch(s, op, need).ptr);
    CUDA_CHECK(op, cudaMemsetAsync(winner, 0xFF, need, st));
    launch_kernel(op, ring_claim_kernel, grid_for(T, 256), 256, 0, st, winner, pos.ptr<int32_t>(), seq.ptr<int32_t>(),
                  T, B, cap);
    CUDA_LAUNCH_CHECK(op, st);
  }
  // nope > 0: a packed FP8 cache (fcode does not apply to its U8 entries).
  launch_kernel(op, swa_write_kernel, unsigned(T), 128, 0, st, cache.data, nope > 0 ? kF32 : fcode(cache.dtype),
                tags.ptr<int32_t>(), k.data, fcode(k.dtype), pos.ptr<int32_t>(), seq.ptr<int32_t>(), winner, B, cap, d,
                T, nope, cache.dim(2));
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::compressor_save(Stream s, const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                                  const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                                  const Tensor& seq, int ratio) {
  const char* op = "compressor_save";
  cudaStream_t st = stream(s, op);
  const auto [B, S, cd, T] =
      checks::validate_compressor_save<OpRules>(state_u, state_g, state_tags, u, g, ape, pos, seq, ratio);
  if (T == 0) return;
  int* winner = nullptr;
  if (T > kScanMaxTokens) {
    const size_t need = size_t(B * S) * sizeof(int);
    winner = static_cast<int*>(scratch(s, op, need).ptr);
    CUDA_CHECK(op, cudaMemsetAsync(winner, 0xFF, need, st));
    launch_kernel(op, ring_claim_kernel, grid_for(T, 256), 256, 0, st, winner, pos.ptr<int32_t>(), seq.ptr<int32_t>(),
                  T, B, S);
    CUDA_LAUNCH_CHECK(op, st);
  }
  launch_kernel(op, compressor_save_kernel, unsigned(T), 256, 0, st, state_u.ptr<float>(), state_g.ptr<float>(),
                state_tags.ptr<int32_t>(), u.ptr<float>(), g.ptr<float>(), ape.ptr<float>(), pos.ptr<int32_t>(),
                seq.ptr<int32_t>(), winner, B, S, cd, ratio, T);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::compressor_pool(Stream s, const Tensor& entries, const Tensor& state_u, const Tensor& state_g,
                                  const Tensor& state_tags, const Tensor& norm_w, const Tensor& table,
                                  const Tensor& pos, const Tensor& seq, int ratio, bool overlap, float rms_eps) {
  const char* op = "compressor_pool";
  cudaStream_t st = stream(s, op);
  const auto [B, S, cd, c, d, n_max, P, R, T, nope] = checks::validate_compressor_pool<OpRules>(
      entries, state_u, state_g, state_tags, norm_w, table, pos, seq, ratio, overlap);
  if (T == 0) return;
  // Packed indexer keys: the scale sits after di codes; a 4-byte store wants di % 4 == 0.
  SL_CHECK(nope != 0 || d % 4 == 0, op, ": packed FP8 indexer keys of ", d, " values: this kernel takes a multiple of 4");
  PoolArgs a{entries.data, nope >= 0 ? kF32 : fcode(entries.dtype), state_u.ptr<float>(), state_g.ptr<float>(),
             state_tags.ptr<int32_t>(), norm_w.data, fcode(norm_w.dtype), table.ptr<float>(), pos.ptr<int32_t>(),
             seq.ptr<int32_t>(), T, B, S, cd, d, n_max, P, R, ratio, overlap ? 1 : 0, rms_eps, nope, entries.dim(2),
             act_dtype() == DType::BF16 ? 1 : 0};
  const size_t smem = size_t(d) * 4 + 2 * 256 * 4;
  allow_smem(op, compressor_pool_kernel, smem, smem_optin());
  launch_kernel(op, compressor_pool_kernel, unsigned(T), 256, smem, st, a);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                               const Tensor& pos, const Tensor& seq, int ratio) {
  const char* op = "indexer_topk";
  cudaStream_t st = stream(s, op);
  const auto [T, Hi, di, B, n_max, K] = checks::validate_indexer_topk<OpRules>(sel, q, w, keys, pos, seq, ratio);
  SL_CHECK(di % 16 == 0 && di <= 1024, op, ": q ", describe(q), " head dim ", di,
           " must be a multiple of 16 (tensor-core tiles) and at most 1024");
  check_aligned(op, "q", q.data, 16);
  check_aligned(op, "keys", keys.data, 16);
  if (T == 0 || K == 0) return;
  IdxArgs a{};
  a.sel = sel.ptr<int32_t>();
  a.q = static_cast<const bf16*>(q.data);
  a.w = w.data;
  a.dtw = fcode(w.dtype);
  const bool packed = keys.dtype == DType::U8;  // packed FP8 keys (the validator checked their width)
  a.keys = packed ? nullptr : static_cast<const bf16*>(keys.data);
  a.keys8 = packed ? static_cast<const uint8_t*>(keys.data) : nullptr;
  a.pos = pos.ptr<int32_t>();
  a.seq = seq.ptr<int32_t>();
  a.T = T;
  a.B = B;
  a.n_max = n_max;
  a.Hi = int(Hi);
  a.HP = int(cdiv(Hi, 16) * 16);
  a.di = int(di);
  a.ld = int(di) + 8;
  a.K = int(K);
  int Kp = 2;
  while (Kp < K) Kp <<= 1;
  a.Kp = Kp;
  a.ratio = ratio;
  a.wscale = float(1.0 / std::sqrt(double(di) * double(Hi)));
  const size_t s_score = idx_score_smem(a.HP, a.ld), s_sel = idx_select_smem(Kp);
  const size_t s_sc = align128(size_t(n_max) * 4);
  // Few tokens (decode): one block per token would stream all its keys through one SM; split
  // the scoring over several blocks per token (scores through the stream's scratch).
  const size_t score_bytes = size_t(T) * size_t(n_max) * 4;
  if (T < 2 * sm_count() && n_max > 128 && score_bytes <= kScratchBytes) {
    const int64_t tiles = cdiv(n_max, 64);
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(cdiv(2 * sm_count(), T), cdiv(tiles, 2)));
    a.tiles_per_block = int(cdiv(tiles, splits));
    a.scores = static_cast<float*>(scratch(s, op, score_bytes).ptr);
    allow_smem(op, indexer_score_kernel, s_score, smem_optin());
    launch_kernel(op, indexer_score_kernel, dim3{unsigned(cdiv(tiles, a.tiles_per_block)), unsigned(T), 1u}, 256, s_score, st, a);
    CUDA_LAUNCH_CHECK(op, st);
    allow_smem(op, indexer_select_kernel, s_sc + s_sel, smem_optin());
    launch_kernel(op, indexer_select_kernel, unsigned(T), 256, s_sc + s_sel, st, a);
    CUDA_LAUNCH_CHECK(op, st);
    return;
  }
  allow_smem(op, indexer_topk_kernel, s_score + s_sc + s_sel, smem_optin());
  launch_kernel(op, indexer_topk_kernel, unsigned(T), 256, s_score + s_sc + s_sel, st, a);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa,
                                   const Tensor& swa_tags, const Tensor& comp, const Tensor& sel, const Tensor& sink,
                                   const Tensor& pos, const Tensor& seq, int window, CompressedKeys mode, int ratio) {
  const char* op = "sparse_attention";
  cudaStream_t st = stream(s, op);
  const auto [T, H, Dh, B, cap, n_max, K] = checks::validate_sparse_attention<OpRules>(
      o, q, swa, swa_tags, comp, sel, sink, pos, seq, window, mode, ratio);
  SL_CHECK(Dh % 16 == 0 && Dh <= 512, op, ": q ", describe(q), " head dim ", Dh,
           " must be a multiple of 16 and at most 512");
  SL_CHECK(!overlaps(o, q), op, ": o may not alias q (the CUDA kernel reads q while other blocks write o)");
  if (mode != CompressedKeys::None) check_aligned(op, "comp", comp.data, 16);
  check_aligned(op, "q", q.data, 16);
  check_aligned(op, "swa", swa.data, 16);
  if (T == 0 || H == 0) return;

  AttnArgs a{};
  a.o = static_cast<bf16*>(o.data);
  a.q = static_cast<const bf16*>(q.data);
  a.swa = swa.data;
  a.swa_tags = swa_tags.ptr<int32_t>();
  a.comp = mode == CompressedKeys::None ? nullptr : comp.data;
  // Packed FP8 caches: the kernels read one kind of row, so the window cache and the compressed
  // one are both packed or both bf16 (the model packs all or none).
  const bool packed = swa.dtype == DType::U8;
  SL_CHECK(mode == CompressedKeys::None || (comp.dtype == DType::U8) == packed, op, ": swa ", describe(swa),
           " and comp ", describe(comp), ": this kernel reads both packed FP8 or both bf16");
  a.nope = packed ? int(kvfp8::kv_entry_nope(Dh, swa.dim(2))) : 0;
  a.entry_bytes = packed ? swa.dim(2) : 0;
  a.sel = mode == CompressedKeys::Selected ? sel.ptr<int32_t>() : nullptr;
  a.sink = sink.ptr<float>();
  a.pos = pos.ptr<int32_t>();
  a.seq = seq.ptr<int32_t>();
  a.T = T;
  a.B = B;
  a.cap = cap;
  a.n_max = n_max;
  a.H = int(H);
  a.HP = int(cdiv(H, AHG) * AHG);
  a.Dh = int(Dh);
  a.ld = int(Dh) + 8;
  a.ldS = int(std::max<int64_t>(Dh, ACH));
  a.ldP = ACH + 8;
  a.Ksel = int(K);
  a.window = window;
  a.mode = mode == CompressedKeys::None ? 0 : mode == CompressedKeys::All ? 1 : 2;
  a.ratio = std::max(ratio, 1);
  a.scale = 1.f / std::sqrt(float(Dh));

  // Decode: the CUDA-core kernel (sparse_attention_decode_kernel) for a few tokens and head dims
  // of 64..512 (variant attn-decode=off keeps the tensor-core kernel, for comparison runs).
  // The KV splits a kernel takes: `want` (chosen from the shape, or a variant's count), at least
  // one, as far as the split partials fit the stream's scratch, and never more than the merge takes.
  const size_t per_split = size_t(T) * a.HP * size_t(Dh + 2) * 4;
  auto fit_splits = [&](int64_t want) {
    const int64_t n = std::max<int64_t>(1, std::min<int64_t>(want, int64_t(kScratchBytes / per_split)));
    SL_CHECK(n <= kAttnMaxSplits, op, ": ", n, " KV splits, more than the merge's ", kAttnMaxSplits);
    return int(n);
  };
  const int64_t cand_max = int64_t(window) + (mode == CompressedKeys::Selected ? K
                                              : mode == CompressedKeys::All ? n_max : 0);
  if (variants().attention_decode_kernel && T <= kDecodeAttnMaxTokens && (Dh == 64 || Dh == 128 || Dh == 256 || Dh == 512)) {
    const int64_t dgroups = cdiv(H, DHPB);
    // About two blocks per SM and at least 16 candidates per split; variant attn-decode-splits=N
    // forces N.
    const int forced = variants().attention_decode_splits;
    const int64_t ns = fit_splits(forced > 0 ? forced
                                             : std::min<int64_t>({int64_t(kAttnMaxSplits),
                                                                  int64_t(cdiv(2 * sm_count(), dgroups * T)),
                                                                  std::max<int64_t>(1, cand_max / 16)}));
    a.nsplit = int(ns);
    a.part = ns > 1 ? static_cast<float*>(scratch(s, op, size_t(T) * a.HP * ns * size_t(Dh + 2) * 4).ptr) : nullptr;
    const size_t smem = attn_decode_smem_bytes(int(Dh));
    const dim3 grid{unsigned(dgroups), unsigned(T), unsigned(ns)};
    auto go = [&](auto kernel) {
      allow_smem(op, kernel, smem, smem_optin());
      launch_kernel(op, kernel, grid, 256, smem, st, a);
      CUDA_LAUNCH_CHECK(op, st);
    };
    switch (Dh) {
      case 64: go(sparse_attention_decode_kernel<2>); break;
      case 128: go(sparse_attention_decode_kernel<4>); break;
      case 256: go(sparse_attention_decode_kernel<8>); break;
      default: go(sparse_attention_decode_kernel<16>); break;
    }
    if (ns > 1) {
      launch_kernel(op, attn_combine_kernel, dim3(unsigned(H), unsigned(T)), attn_combine_threads(Dh), 0, st, a);
      CUDA_LAUNCH_CHECK(op, st);
    }
    return;
  }

  // Split the candidates over several blocks when the (head group, token) grid alone would leave
  // most SMs idle (decode), as far as the partials fit the stream's scratch: enough splits to fill
  // the SMs once, and more while a split would still hold more than kAttnSplitCandidates
  // candidates, up to 4 blocks per SM. (On an H100 at batch 8, a c4a layer's 640 candidates ran
  // in 57 us as 5 splits and in 49 us as 16; a window of 128 ran slower as 16 than as 5.)
  // Tuning experiments: variant attn-splits=N (N <= kAttnMaxSplits, parse's limit) forces N splits.
  const int64_t groups = cdiv(H, AHG);
  const int forced_split = variants().attention_splits;
  constexpr int64_t kAttnSplitCandidates = 48;
  const int64_t cells = groups * T;
  const int64_t fill = cdiv(sm_count(), cells),
                by_candidates = std::min<int64_t>(cdiv(cand_max, kAttnSplitCandidates), 4 * sm_count() / cells);
  const int nsplit = fit_splits(forced_split > 0 ? forced_split
                                : cells < sm_count() ? std::min<int64_t>(kAttnMaxSplits, std::max(fill, by_candidates))
                                                     : 1);
  a.nsplit = nsplit;
  if (nsplit > 1) a.part = static_cast<float*>(scratch(s, op, size_t(T) * a.HP * nsplit * size_t(Dh + 2) * 4).ptr);

  const size_t smem = attn_smem_bytes(int(Dh));
  const int nfrag = int(Dh / 16), fpw = int(cdiv(nfrag, 8));
  const dim3 grid{unsigned(groups), unsigned(T), unsigned(nsplit)};
  auto go = [&](auto kernel) {
    allow_smem(op, kernel, smem, smem_optin());
    launch_kernel(op, kernel, grid, 256, smem, st, a);
    CUDA_LAUNCH_CHECK(op, st);
  };
  if (fpw <= 1)
    go(sparse_attention_kernel<1>);
  else if (fpw <= 2)
    go(sparse_attention_kernel<2>);
  else
    go(sparse_attention_kernel<4>);
  if (nsplit > 1) {
    launch_kernel(op, attn_combine_kernel, dim3(unsigned(H), unsigned(T)), attn_combine_threads(Dh), 0, st, a);
    CUDA_LAUNCH_CHECK(op, st);
  }
}

}  // namespace sl
