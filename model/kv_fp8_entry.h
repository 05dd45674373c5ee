// FP8 KV cache entries packed as vLLM stores them for DeepSeek V4 (docs/model.md 5.7), in plain
// code that compiles for the host and the GPU, so that both backends read and write the very same
// bytes and the CPU tests check the layout.
//
// A packed cache is a U8 tensor [B, n, entry_bytes]; what its entries hold follows from the entry
// width (kv_entry_nope, indexer_key_width), so the cache ops take packed caches without new
// arguments:
//
//   KV entry (the sliding-window cache and the compressed KV cache), head_dim = nope + rope:
//     [0, nope)                     the nope values as e4m3 codes
//     [nope, nope + 2 rope)         the rope values as bf16 (little-endian)
//     [nope + 2 rope, + nope / 64)  one ue8m0 scale byte per 64 nope values
//     then zero padding to a multiple of 8 bytes (flash: 448 + 128 + 7 + 1 = 584)
//   Indexer key (the lightning indexer's compressed keys), index_head_dim = di:
//     [0, di)                       the di values as e4m3 codes
//     [di, di + 4)                  one fp32 scale (a power of two)
//
// A block of values x (64 nope values, or a whole indexer key) is stored as q = e4m3(x / s) with
// s = the smallest power of two >= max(amax, 1e-4) / 448, and read back as q * s: exactly the
// values the emulated caches hold (round_fp8_blocks), so a model with packed caches computes what
// one with emulated caches does, in fewer bytes.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define SL_KV_HD __host__ __device__ __forceinline__
#else
#define SL_KV_HD inline
#endif

namespace sl::kvfp8 {

constexpr int64_t kBlock = 64;        // nope values per scale byte of a KV entry
constexpr float kMinAmax = 1e-4f;     // a block's amax is taken at least this (vLLM)
constexpr int64_t kScaleBytes = 4;    // an indexer key's fp32 scale

SL_KV_HD uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
SL_KV_HD float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---------------------------------------------------------------- layout
SL_KV_HD int64_t kv_entry_bytes(int64_t nope, int64_t rope) {
  return (nope + 2 * rope + nope / kBlock + 7) / 8 * 8;
}
SL_KV_HD int64_t kv_rope_offset(int64_t nope) { return nope; }
SL_KV_HD int64_t kv_scale_offset(int64_t nope, int64_t rope) { return nope + 2 * rope; }
SL_KV_HD int64_t indexer_key_bytes(int64_t di) { return di + kScaleBytes; }

// The nope width of a packed KV entry of `bytes` bytes holding head_dim values: the multiple of
// 64 (at least 64, at most head_dim, with an even rope remainder) whose layout is that wide; -1
// when none is. The width decreases by 63 bytes per 64 nope values, so at most one matches.
SL_KV_HD int64_t kv_entry_nope(int64_t head_dim, int64_t bytes) {
  for (int64_t nope = kBlock; nope <= head_dim; nope += kBlock)
    if ((head_dim - nope) % 2 == 0 && kv_entry_bytes(nope, head_dim - nope) == bytes) return nope;
  return -1;
}

// ---------------------------------------------------------------- scales
// The e8m0 code of the block scale: the smallest power of two >= max(amax, 1e-4) / 448, i.e.
// 2^(code - 127), as lowp::fp8_group_scale picks it (2^0 for a non-finite amax). Computed on the
// float's bits: exact, identical on the host and the GPU.
SL_KV_HD uint8_t block_scale_code(float amax) {
  if (!(amax <= 3.402823466e38f)) return 127;  // NaN or infinite
  const float r = (amax > kMinAmax ? amax : kMinAmax) / 448.f;  // >= 2^-22: a normal float
  const uint32_t bits = float_bits(r);
  const uint32_t e = ((bits >> 23) & 0xff) + ((bits & 0x7fffff) != 0 ? 1 : 0);  // round up to a power of two
  return uint8_t(e > 254 ? 254 : e);
}
SL_KV_HD float scale_from_code(uint8_t code) {
  return bits_float(code == 0 ? 0x00400000u : uint32_t(code) << 23);  // 2^-127 is subnormal
}

// ---------------------------------------------------------------- e4m3 (OCP "fn")
// Decoding is exact. (Encoding, round to nearest even with saturation, is core/fp8.h's
// float_to_e4m3 on the host and __nv_cvt_float_to_fp8 on the GPU: bit-identical.)
SL_KV_HD float e4m3_value(uint8_t q) {
  const uint32_t e = (q >> 3) & 0xf, m = q & 7;
  float mag;
  if (e == 0) {
    mag = float(m) * (1.f / 512.f);  // subnormal: m * 2^-9
  } else {
    mag = bits_float(((e + 120u) << 23) | (m << 20));  // (1 + m/8) 2^(e - 7)
  }
  return (q & 0x80) ? -mag : mag;
}

SL_KV_HD float bf16_value(const uint8_t* p) {
  return bits_float((uint32_t(p[0]) | uint32_t(p[1]) << 8) << 16);
}

// ---------------------------------------------------------------- reading an entry
// Value i of a packed KV entry.
SL_KV_HD float kv_value(const uint8_t* entry, int64_t i, int64_t nope, int64_t rope) {
  if (i >= nope) return bf16_value(entry + kv_rope_offset(nope) + 2 * (i - nope));
  return e4m3_value(entry[i]) * scale_from_code(entry[kv_scale_offset(nope, rope) + i / kBlock]);
}

SL_KV_HD float indexer_key_scale(const uint8_t* key, int64_t di) {
  return bits_float(uint32_t(key[di]) | uint32_t(key[di + 1]) << 8 | uint32_t(key[di + 2]) << 16 |
                    uint32_t(key[di + 3]) << 24);
}

// Every value of one packed entry of `values` values, as floats: a KV entry when nope > 0, an
// indexer key when nope == 0 (the caller tells which, from the entry width: kv_entry_nope,
// indexer_key_bytes). The one reading of a whole entry, so that the CPU kernels and the check
// backend's comparison decode the very same bytes the same way.
SL_KV_HD void decode_entry(const uint8_t* entry, int64_t values, int64_t nope, float* out) {
  if (nope > 0) {
    for (int64_t i = 0; i < values; ++i) out[i] = kv_value(entry, i, nope, values - nope);
    return;
  }
  const float s = indexer_key_scale(entry, values);
  for (int64_t i = 0; i < values; ++i) out[i] = e4m3_value(entry[i]) * s;
}

}  // namespace sl::kvfp8
