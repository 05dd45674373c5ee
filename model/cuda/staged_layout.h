// Where the staged MXFP4 kernel (moe_fp4_staged_kernel, cuda_moe.cu) puts each value: the words of
// weight rows a lane reads, the order in which token rows are staged in shared memory, and the
// registers the two f16 MMAs of one MX group take. Plain functions that compile for the GPU and
// the host, so that tests/cpu/test_staged_layout.cpp puts them together with the PTX fragment
// layout of mma.m16n8k16 (written there from the PTX ISA, independently) and checks the products
// against plain dot products on the host.
//
// The swapped MMA: A = 16 output features (rows grp and grp + 8 of a lane, grp = lane / 4) x 16
// k slots, B = 16 k slots x 8 tokens (column grp), C = features x tokens. Per 128-value chunk
// of K, MX group q (values [32 q, 32 q + 32)) is one pair of MMAs; lane tig = lane % 4 holds
// values [8 tig, 8 tig + 8) of the group: one 32-bit word of 8 e2m1 codes per feature row, and the
// token's 8 staged f16 values. The first MMA takes the even values of those 8, the second the odd.
#pragma once

#include <cstdint>

#include "model/cuda/e2m1_bits.h"

namespace sl::staged {

// The word of a weight row (32-bit words of 8 e2m1 codes, from the row's start) that lane tig
// reads for MX group q of the 128-value chunk at k. (Linear: the kernel adds the lane's part,
// weight_word(0, 0, tig), to its row pointer once.)
SL_E2M1_HD int weight_word(int k, int q, int tig) { return k / 8 + 4 * q + tig; }

// A staged row holds the token's K values as f16, 8 consecutive values at a time in the order
// 0 2 4 6 1 3 5 7 (16 bytes): the values [p, p + 8) start at byte 2 p. The staging writes group
// kg's lane l16 there (p = 128 kg + 8 l16); lane tig reads group q of the chunk at k from
// p = k + 32 q + 8 tig (linear, as weight_word).
SL_E2M1_HD int staged_byte(int p) { return 2 * p; }
SL_E2M1_HD int read_position(int k, int q, int tig) { return k + 32 * q + 8 * tig; }

// 8 consecutive values' f16 bits as the 4 B registers of the group's two MMAs: {0, 2}, {4, 6} for
// the first, {1, 3}, {5, 7} for the second (the lower value in the lower half).
SL_E2M1_HD void pack_act(const uint16_t (&h)[8], uint32_t (&r)[4]) {
  r[0] = uint32_t(h[0]) | uint32_t(h[2]) << 16;
  r[1] = uint32_t(h[4]) | uint32_t(h[6]) << 16;
  r[2] = uint32_t(h[1]) | uint32_t(h[3]) << 16;
  r[3] = uint32_t(h[5]) | uint32_t(h[7]) << 16;
}

// The f16 bits of an e4m3 code's value (exact: e4m3 has fewer mantissa bits and a narrower range;
// NaN codes 0x7F / 0xFF give an f16 NaN). The host's form of the GPU's cvt.rn.f16x2.e4m3x2.
SL_E2M1_HD uint16_t e4m3_to_f16_bits(uint32_t c) {
  const uint32_t sign = (c & 0x80u) << 8, e = (c >> 3) & 0xFu, m = c & 7u;
  if (e == 0xFu && m == 7u) return uint16_t(sign | 0x7E00u);
  if (e > 0) return uint16_t(sign | (e + 8u) << 10 | m << 7);  // 2^(e - 7) (1 + m / 8)
  if (m == 0) return uint16_t(sign);
  // Subnormal m 2^-9: the leading bit of m at position b gives 2^(b - 9) (an f16 exponent field
  // of b + 6), the bits below it the mantissa's top.
  const uint32_t b = m >= 4 ? 2u : m >= 2 ? 1u : 0u;
  return uint16_t(sign | (b + 6u) << 10 | ((m << (10 - b)) & 0x3FFu));
}

// Four e4m3 codes as two f16 pairs: lo from codes 0 and 1, hi from codes 2 and 3, the lower code
// in the lower half. (On the GPU split by mov.b32 in the PTX, so that the instruction reads each
// half where it lies: no shift for the high one.)
SL_E2M1_HD void e4m3x4_to_f16x2x2(uint32_t codes, uint32_t& lo, uint32_t& hi) {
#ifdef __CUDA_ARCH__
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(codes));
#else
  lo = uint32_t(e4m3_to_f16_bits(codes & 0xFFu)) | uint32_t(e4m3_to_f16_bits(codes >> 8 & 0xFFu)) << 16;
  hi = uint32_t(e4m3_to_f16_bits(codes >> 16 & 0xFFu)) | uint32_t(e4m3_to_f16_bits(codes >> 24)) << 16;
#endif
}

// The A registers of one MX group's two MMAs from the lane's words of rows grp (w_lo) and grp + 8
// (w_hi): a[m] = {row grp slots 2 tig.., row grp + 8 slots 2 tig.., row grp slots 8 + 2 tig..,
// row grp + 8 slots 8 + 2 tig..}, MMA 0 on the even values (0, 2 | 4, 6), MMA 1 on the odd ones,
// each weight its e2m1 value times 2^-6 (e2m1_bits.h e4m3_operands).
SL_E2M1_HD void group_a_regs(uint32_t w_lo, uint32_t w_hi, uint32_t (&a)[2][4]) {
  uint32_t e0, o0, e1, o1;
  e2m1::e4m3_operands(w_lo, e0, o0);
  e2m1::e4m3_operands(w_hi, e1, o1);
  e4m3x4_to_f16x2x2(e0, a[0][0], a[0][2]);
  e4m3x4_to_f16x2x2(e1, a[0][1], a[0][3]);
  e4m3x4_to_f16x2x2(o0, a[1][0], a[1][2]);
  e4m3x4_to_f16x2x2(o1, a[1][1], a[1][3]);
}

}  // namespace sl::staged
