// The integer decode of packed e2m1 pairs into scaled bf16 MMA operands (model/cuda/e2m1_bits.h,
// the MXFP4 kernels' variant mxfp4-decode=shift), run on the host: every byte at every position of
// a word, every e8m0 scale, against the e2m1 table of core/fp8.h times 2^(scale - 127) in double.
#include "model/cuda/e2m1_bits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/fp8.h"

namespace {

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

// The GPU's bf16 multiply (round to nearest even) for the products this decode makes, which are
// exact: the float product must already be a bf16, which the test checks rather than assumes.
uint32_t bf16_mul_exact(uint32_t a16, uint32_t b16) {
  const float p = bf16_bits_to_float(a16) * bf16_bits_to_float(b16);
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  EXPECT_EQ(bits & 0xFFFFu, 0u) << "product " << p << " is not a bf16";
  return bits >> 16;
}

// Element e of a decoded word's pairs after both scale factors, as a float.
float scaled(const uint32_t (&p)[4], int e, const sl::e2m1::Bf16Scale& f) {
  const int shift = (e & 1) ? 16 : 0;
  uint32_t v = p[e / 2] >> shift & 0xFFFFu;
  v = bf16_mul_exact(v, f.first >> shift & 0xFFFFu);
  if (f.two) v = bf16_mul_exact(v, f.second >> shift & 0xFFFFu);
  return bf16_bits_to_float(v);
}

TEST(E2m1Bits, PrmtFollowsThePtxDefinition) {
  // y:x bytes 7..0 = 0xF7 66 55 44 33 22 91 00.
  const uint32_t x = 0x33229100u, y = 0xF7665544u;
  EXPECT_EQ(sl::e2m1::prmt(x, y, 0x3210u), x);
  EXPECT_EQ(sl::e2m1::prmt(x, y, 0x7654u), y);
  EXPECT_EQ(sl::e2m1::prmt(x, y, 0x0516u), 0x00559166u);
  // Bit 3 of a selector: the chosen byte's top bit over the whole byte.
  // Byte 0: byte 2 (0x22) -> 00; bytes 1-3: bytes 7 (0xF7), 1 (0x91), 7 -> FF.
  EXPECT_EQ(sl::e2m1::prmt(x, y, 0xF9FAu), 0xFFFFFF00u);
  // Byte 0: byte 6 (0x66) -> 00; byte 1: byte 1 copied; bytes 2-3: bytes 4 (0x44), 0 (0x00) -> 00.
  EXPECT_EQ(sl::e2m1::prmt(x, y, 0x8C1Eu), 0x00009100u);
}

// Before scaling, each half is its e2m1 value times 2^-126: the subnormal route is exact.
TEST(E2m1Bits, EveryCodeDecodesToItsValueTimes2ToMinus126) {
  for (uint32_t byte = 0; byte < 256; ++byte)
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t w = byte << (8 * pos) | (0xA5u << (8 * ((pos + 1) & 3)));  // a neighbour's bits around it
      uint32_t p[4];
      sl::e2m1::pairs_times_2m126(w, p);
      for (int half = 0; half < 2; ++half) {
        const uint8_t code = uint8_t(half ? byte >> 4 : byte & 15);
        const double want = std::ldexp(double(sl::lowp::e2m1_to_float(code)), -126);
        EXPECT_EQ(double(bf16_bits_to_float(p[pos] >> (16 * half) & 0xFFFFu)), want)
            << "byte " << byte << " at " << pos << ", " << (half ? "high" : "low") << " nibble";
      }
    }
}

// The multiply form gives the shift form's pairs bit for bit: every byte at every position with
// a neighbour around it, and a million random words.
TEST(E2m1Bits, MultiplyFormEqualsShiftForm) {
  auto same = [](uint32_t w) {
    uint32_t a[4], b[4];
    sl::e2m1::pairs_times_2m126(w, a);
    sl::e2m1::pairs_times_2m126_mul(w, b);
    for (int i = 0; i < 4; ++i)
      if (a[i] != b[i]) return false;
    return true;
  };
  for (uint32_t byte = 0; byte < 256; ++byte)
    for (int pos = 0; pos < 4; ++pos)
      for (uint32_t around : {0x00u, 0xA5u, 0xFFu}) {
        const uint32_t w = byte << (8 * pos) | (around << (8 * ((pos + 1) & 3))) | (around << (8 * ((pos + 3) & 3)));
        EXPECT_TRUE(same(w)) << std::hex << w;
      }
  std::mt19937 rng(11);
  int differ = 0;
  for (int i = 0; i < 1000000; ++i) differ += !same(rng());
  EXPECT_EQ(differ, 0);
}

// After the scale factors, every element of random words equals the reference dequantization
// for every scale 0..254 (scales below 2 taken as 2, as the table decode takes them).
TEST(E2m1Bits, ScaledPairsEqualTheTableTimesTheScale) {
  std::mt19937 rng(7);
  for (uint32_t scale = 0; scale < 255; ++scale) {
    const sl::e2m1::Bf16Scale f = sl::e2m1::scale_factors(scale);
    EXPECT_EQ(f.two, scale > 128) << scale;
    const int s = std::max<int>(int(scale), 2);
    for (int trial = 0; trial < 16; ++trial) {
      const uint32_t w = rng();
      uint32_t p[4];
      sl::e2m1::pairs_times_2m126(w, p);
      for (int e = 0; e < 8; ++e) {
        const uint8_t code = uint8_t(w >> (4 * e) & 15u);  // element e: byte e / 2, low nibble first
        const double want = std::ldexp(double(sl::lowp::e2m1_to_float(code)), s - 127);
        const double got = double(scaled(p, e, f));
        if (want > 3.3895313892515355e38 || want < -3.3895313892515355e38)
          EXPECT_TRUE(std::isinf(got)) << "scale " << scale << " code " << int(code);
        else
          EXPECT_EQ(got, want) << "scale " << scale << " code " << int(code) << " element " << e;
      }
    }
  }
}

// The pairing the MMA operands need: pair i holds elements 2i (low half) and 2i + 1 (high half),
// so that they meet the activation pair (2i, 2i + 1) of the same bf16x2 register.
TEST(E2m1Bits, PairsFollowElementOrder) {
  // Elements 0..7 = codes 1..7 and 9 (0.5, 1, 1.5, 2, 3, 4, 6, -0.5), two per byte, low first.
  const uint32_t w = 0x97654321u;
  uint32_t p[4];
  sl::e2m1::pairs_times_2m126(w, p);
  const float want[8] = {0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.5f};
  for (int e = 0; e < 8; ++e)
    EXPECT_EQ(std::ldexp(bf16_bits_to_float(p[e / 2] >> (16 * (e & 1)) & 0xFFFFu), 126), want[e]) << e;
}

}  // namespace
