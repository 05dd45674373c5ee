// Packed FP8 KV cache entries on the GPU (model/kv_fp8_entry.h has the layout and the plain
// decoding both backends share): the block-cooperative packing the cache writers use
// (swa_insert, compressor_pool) and the vector decoders the readers use (sparse attention,
// the indexer's scoring).
//
// Encoding matches the CPU's bit for bit: the block scale from kvfp8::block_scale_code, x / s
// exact (s is a power of two), __nv_cvt_float_to_fp8 with saturation (round to nearest even,
// as core/fp8.h's float_to_e4m3). Decoding is exact: an e4m3 code times a power of two is a
// bf16 value, so a reader that stages keys as bf16 loses nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "model/cuda/cuda_common.cuh"
#include "model/kv_fp8_entry.h"

namespace sl::cuda {

// ---------------------------------------------------------------- packing (one block)
// The whole thread block packs one entry of `values` values, value(i) giving value i (the same
// from every thread that asks). Warps take 64-value scale blocks in turn (two values per lane,
// the amax by a warp reduction); the threads share the rope bytes and the zero padding. No
// barrier inside: the caller makes the values visible before and needs none after.
template <class Value>
__device__ void block_pack_kv_entry(uint8_t* e, const Value& value, int64_t nope, int64_t rope, int64_t bytes) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t scales = kvfp8::kv_scale_offset(nope, rope);
  for (int64_t c0 = int64_t(warp) * kvfp8::kBlock; c0 < nope; c0 += int64_t(nwarps) * kvfp8::kBlock) {
    const float x0 = value(c0 + lane), x1 = value(c0 + 32 + lane);
    const uint8_t code = kvfp8::block_scale_code(warp_max(fmaxf(fabsf(x0), fabsf(x1))));
    const float s = kvfp8::scale_from_code(code);
    e[c0 + lane] = e4m3_code(x0 / s);
    e[c0 + 32 + lane] = e4m3_code(x1 / s);
    if (lane == 0) e[scales + c0 / kvfp8::kBlock] = code;
  }
  // The rope values as bf16 (2-byte aligned: the entry is 8-aligned and nope even).
  __nv_bfloat16* r = reinterpret_cast<__nv_bfloat16*>(e + kvfp8::kv_rope_offset(nope));
  for (int64_t i = threadIdx.x; i < rope; i += blockDim.x) r[i] = __float2bfloat16_rn(value(nope + i));
  for (int64_t i = scales + nope / kvfp8::kBlock + threadIdx.x; i < bytes; i += blockDim.x) e[i] = 0;
}

// An indexer key of di values (one scale for the whole key), by the first warp of the block.
template <class Value>
__device__ void warp_pack_indexer_key(uint8_t* e, const Value& value, int64_t di) {
  const int lane = threadIdx.x & 31;
  float amax = 0.f;
  for (int64_t i = lane; i < di; i += 32) amax = fmaxf(amax, fabsf(value(i)));
  const float s = kvfp8::scale_from_code(kvfp8::block_scale_code(warp_max(amax)));
  for (int64_t i = lane; i < di; i += 32) e[i] = e4m3_code(value(i) / s);
  if (lane == 0) *reinterpret_cast<float*>(e + di) = s;  // di % 4 == 0 (indexer_topk): aligned
}

// ---------------------------------------------------------------- decoding
// N consecutive FP8 values of a packed entry, codes at p, all under one scale s, as floats.
// 8-byte loads when N is a multiple of 8 (p 8-byte aligned then: entries are multiples of 8
// bytes and the value index a multiple of 8), else byte loads.
template <int N>
__device__ __forceinline__ void load_fp8_values(const uint8_t* p, float s, float* out) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int v = 0; v < N / 8; ++v) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(p) + v);
#pragma unroll
      for (int j = 0; j < 4; ++j) out[8 * v + j] = e4m3_value(uint8_t(u.x >> (8 * j))) * s;
#pragma unroll
      for (int j = 0; j < 4; ++j) out[8 * v + 4 + j] = e4m3_value(uint8_t(u.y >> (8 * j))) * s;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = e4m3_value(__ldg(p + j)) * s;
  }
}

// N consecutive bf16 values at p (8-byte loads when N is a multiple of 4: p is then 8-aligned).
template <int N>
__device__ __forceinline__ void load_bf16_values(const uint8_t* p, float* out) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int v = 0; v < N / 4; ++v) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(p) + v);
      out[4 * v + 0] = __uint_as_float(u.x << 16);
      out[4 * v + 1] = __uint_as_float(u.x & 0xffff0000u);
      out[4 * v + 2] = __uint_as_float(u.y << 16);
      out[4 * v + 3] = __uint_as_float(u.y & 0xffff0000u);
    }
  } else {
    const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(p);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = __bfloat162float(b[j]);
  }
}

// Values [i0, i0 + N) of a packed KV entry. N divides 64 and i0 is a multiple of N, so the run
// lies within one scale block, or wholly in the rope part (nope is a multiple of 64).
template <int N>
__device__ __forceinline__ void load_kv_values(const uint8_t* e, int64_t i0, int64_t nope, int64_t rope, float* out) {
  if (i0 < nope) {
    const float s = kvfp8::scale_from_code(__ldg(e + kvfp8::kv_scale_offset(nope, rope) + i0 / kvfp8::kBlock));
    load_fp8_values<N>(e + i0, s, out);
  } else {
    load_bf16_values<N>(e + kvfp8::kv_rope_offset(nope) + 2 * (i0 - nope), out);
  }
}

}  // namespace sl::cuda
