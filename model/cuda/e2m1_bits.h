// Bit-level decoding of MXFP4 (e2m1) weights into bf16 MMA operands, in plain integer code that
// compiles for the GPU and for the host, so that the CPU tests check the bit tricks against the
// e2m1 table (tests/cpu/test_e2m1_bits.cpp) and the kernels use the very same functions
// (model/cuda/cuda_moe.cu, variant mxfp4-decode=shift).
//
// An e2m1 code is s e1 e0 m: magnitude (1 + m/2) 2^(e - 1) for e > 0, m/2 for e = 0, i.e. 0, 0.5, 1,
// 1.5, 2, 3, 4, 6. Placed in a bf16 as s << 15 | (e1 e0 m) << 6, the exponent field is e and the
// mantissa's first bit m: exactly the value times 2^-126, the two e = 0 codes landing on bf16
// subnormals (0 and 2^-127). One bf16x2 multiply by 2^(scale - 1) then gives the value times the
// group's scale 2^(scale - 127), exactly (a power of two times a value with one mantissa bit). The
// same trick serves Marlin-style mixed-input GEMMs; here it needs no repacking of the checkpoint's
// bytes: a byte permute pairs each byte's two nibbles in the two halves of a register.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define SL_E2M1_HD __host__ __device__ __forceinline__
#else
#define SL_E2M1_HD inline
#endif

namespace sl::e2m1 {

// PTX prmt.b32 in its generic form: byte n of the result is byte (s >> 4n) & 7 of y:x (x the low
// four), or, when bit 3 of that selector nibble is set, that byte's top bit copied over all eight
// bits. (CUDA's __byte_perm documents only the 3-bit selectors, so the kernels use the PTX.)
SL_E2M1_HD uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s));
  return r;
#else
  const uint64_t in = uint64_t(y) << 32 | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = s >> (4 * n) & 15u;
    uint32_t byte = uint32_t(in >> (8 * (sel & 7u))) & 0xFFu;
    if (sel & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    r |= byte << (8 * n);
  }
  return r;
#endif
}

// 8 e2m1 codes in checkpoint order (4 packed bytes, element 2i in byte i's low nibble, 2i + 1 in
// its high nibble) as 4 bf16 pairs (pair i = elements 2i, 2i + 1, the even one in the low half),
// each value times 2^-126. Per pair one byte permute builds x = [byte i, 0, byte i >> 4, 0] (the
// zero bytes are the sign of w4's top byte, which the shift cleared), and then
//   (x << 6 | x << 12) & 0x81C081C0
// is the pair: x << 6 puts each low nibble's magnitude at bits 6-8 and 22-24, x << 12 its sign at
// bits 15 and 31, and neither shift brings anything else into those eight bits (the zero bytes
// see to that). Two integer instructions per pair (the permute and one three-input LOP3); the two
// shifts may issue on the FMA pipe.
SL_E2M1_HD void pairs_times_2m126(uint32_t w, uint32_t (&p)[4]) {
  const uint32_t w4 = w >> 4;  // byte i's high nibble in byte i's low nibble; bits 28-31 zero
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = prmt(w, w4, 0xF0F0u | uint32_t(i) | uint32_t(4 + i) << 8);
    p[i] = ((x << 6) | (x << 12)) & 0x81C081C0u;
  }
}

// The same pairs with one multiply where pairs_times_2m126 shifts twice: the even and odd elements
// are first masked to one nibble per byte (three instructions per word), so that the permuted
// x = [even element i, 0, odd element i, 0] has bits only in 0-3 and 16-19; then x << 6 and
// x << 12 share no bit, their sum is their OR, and x * 0x1040 is both shifts in one IMAD. Per
// word 15 instructions instead of 17 (mxfp4-decode=shift-quad). The zero bytes come from
// selector 0x8 (the top bit of a masked byte: always 0).
SL_E2M1_HD void pairs_times_2m126_mul(uint32_t w, uint32_t (&p)[4]) {
  const uint32_t even = w & 0x0F0F0F0Fu, odd = (w >> 4) & 0x0F0F0F0Fu;
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = prmt(even, odd, 0x8080u | uint32_t(i) | uint32_t(4 + i) << 8);
    p[i] = (x * 0x1040u) & 0x81C081C0u;
  }
}

// The bf16x2 factors that take pairs_times_2m126's values to value * 2^(scale - 127): `first`
// 2^(min(s, 128) - 1) (an exponent field of at most 254) and, for s > 128 (weights above 8),
// `second` 2^(s - 128). s = max(scale, 2), as the table decode takes scales below 2 (weights
// under 1e-37). A bf16x2 of 2^(f - 127) in both halves is f * 0x00800080.
struct Bf16Scale {
  uint32_t first, second;
  bool two;
};
SL_E2M1_HD Bf16Scale scale_factors(uint32_t scale) {
  const uint32_t s = scale < 2u ? 2u : scale;
  const uint32_t f1 = (s < 128u ? s : 128u) + 126u;  // exponent field of 2^(min(s, 128) - 1)
  const uint32_t f2 = s > 128u ? s - 1u : 127u;      // of 2^(s - 128), or 1
  return {f1 * 0x00800080u, f2 * 0x00800080u, s > 128u};
}

}  // namespace sl::e2m1
