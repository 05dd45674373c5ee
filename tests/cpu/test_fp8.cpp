// The checkpoint's low-precision formats (core/fp8.h): FP8 e4m3, e8m0 scales, FP4 e2m1, and the
// block-scaled FP8 and MXFP4 layouts, against values worked out by hand from the format
// definitions and against a brute-force nearest-value search over every code.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp8.h"

namespace sl::lowp {
namespace {

TEST(Fp8, E4m3CodesByHand) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.f);            // exponent 7 = bias
  EXPECT_EQ(e4m3_to_float(0x39), 1.125f);         // one mantissa step
  EXPECT_EQ(e4m3_to_float(0x7E), 448.f);          // 1.75 * 2^8, the largest finite
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.f, -6));  // the smallest normal
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));  // the smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_float(0xB8), -1.f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(Fp8, E4m3EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(uint8_t(c))), c) << "code " << c;
  }
}

TEST(Fp8, E4m3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // halfway 1 .. 1.125: the even mantissa (1)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);  // halfway 1.125 .. 1.25: 1.25
  EXPECT_EQ(float_to_e4m3(1.07f), 0x39);
  EXPECT_EQ(float_to_e4m3(1.5f * std::ldexp(1.f, -9)), 0x02);  // a subnormal tie: even
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -11)), 0x00);        // under half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(500.f), 0x7E);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(float_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-0.f), 0x80);
}

// The encoder's choice is the nearest finite code (brute force over all of them), ties to even.
TEST(Fp8, E4m3IsTheNearestCode) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> ex(-12, 9);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng));
    const float got = e4m3_to_float(float_to_e4m3(x));
    float best = 0;
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7F) == 0x7F) continue;
      const float v = e4m3_to_float(uint8_t(c));
      if (std::fabs(v - x) < std::fabs(best - x)) best = v;
    }
    if (std::fabs(x) <= 448.f) {
      EXPECT_EQ(std::fabs(got - x), std::fabs(best - x)) << "x = " << x;
    } else {
      EXPECT_EQ(got, x > 0 ? 448.f : -448.f);
    }
  }
}

TEST(Fp8, E8m0Scales) {
  EXPECT_EQ(e8m0_to_float(127), 1.f);
  EXPECT_EQ(e8m0_to_float(130), 8.f);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
  EXPECT_EQ(e8m0_ceil(1.f), 127);
  EXPECT_EQ(e8m0_ceil(1.5f), 128);
  EXPECT_EQ(e8m0_ceil(0.75f), 127);
  EXPECT_EQ(e8m0_ceil(0.5f), 126);
  EXPECT_EQ(e8m0_ceil(1e-3f), 127 - 9);  // 2^-10 < 1e-3 <= 2^-9
  EXPECT_THROW(e8m0_ceil(0.f), std::exception);
}

TEST(Fp8, E2m1Codes) {
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), (c & 8 ? -1.f : 1.f) * mags[c & 7]) << c;
    EXPECT_EQ(float_to_e2m1(e2m1_to_float(uint8_t(c))), c == 8 ? 8 : c) << c;  // -0 keeps its sign bit
  }
  // Ties go to the even code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  EXPECT_EQ(float_to_e2m1(0.25f), 0);
  EXPECT_EQ(float_to_e2m1(0.75f), 2);
  EXPECT_EQ(float_to_e2m1(1.25f), 2);
  EXPECT_EQ(float_to_e2m1(1.75f), 4);
  EXPECT_EQ(float_to_e2m1(2.5f), 4);
  EXPECT_EQ(float_to_e2m1(3.5f), 6);
  EXPECT_EQ(float_to_e2m1(5.f), 6);
  EXPECT_EQ(float_to_e2m1(-7.f), 15);  // saturates to -6
  EXPECT_EQ(float_to_e2m1(2.6f), 5);
}

TEST(Fp8, BlockScaledFp8) {
  // 130 x 260: partial tiles at both edges; magnitudes spread over 2^-8 .. 2^6.
  const int64_t R = 130, C = 260;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(size_t(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) x[size_t(r * C + c)] = std::ldexp(u(rng), int((r / 128) * 3 + (c / 128) * 2) - 4);
  const Fp8Blocks q = quantize_fp8_blocks(x.data(), R, C);
  ASSERT_EQ(q.scale_rows(), 2);
  ASSERT_EQ(q.scale_cols(), 3);
  ASSERT_EQ(q.scales.size(), 6u);
  std::vector<float> back(x.size());
  dequantize_fp8_blocks(q, back.data());
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(R, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(C, bc * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(x[size_t(r * C + c)]));
      const float s = e8m0_to_float(q.scales[size_t(br * 3 + bc)]);
      // The smallest power of two that brings amax within 448.
      EXPECT_LE(amax / s, 448.f);
      EXPECT_GT(amax / s, 224.f);
    }
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = e8m0_to_float(q.scales[size_t((int64_t(i) / C / 128) * 3 + (int64_t(i) % C) / 128)]);
    // Half a step of the 3-bit mantissa (1/16 relative), or of the subnormal step 2^-9 * s.
    const float bound = std::max(std::fabs(x[i]) / 16.f, std::ldexp(s, -10));
    EXPECT_LE(std::fabs(back[i] - x[i]), bound * 1.0001f) << i;
  }
  // One group per activation row (1 x 128).
  const Fp8Blocks g = quantize_fp8_blocks(x.data(), 2, 256, 1, 128);
  EXPECT_EQ(g.scales.size(), 4u);
}

TEST(Fp8, Mxfp4PackingByHand) {
  // amax 6: floor(log2 6) = 2, scale 2^(2 - 2) = 1; codes 1 -> 2, -2 -> 12, 0.5 -> 1, 6 -> 7.
  std::vector<float> x(32, 0.f);
  x[0] = 1.f, x[1] = -2.f, x[2] = 0.5f, x[3] = 6.f;
  const Mxfp4 q = quantize_mxfp4(x.data(), 1, 32);
  ASSERT_EQ(q.packed.size(), 16u);
  EXPECT_EQ(q.scales[0], 127);
  EXPECT_EQ(q.packed[0], 0xC2);  // even element in the low nibble
  EXPECT_EQ(q.packed[1], 0x71);
  std::vector<float> back(32);
  dequantize_mxfp4(q, back.data());
  EXPECT_EQ(back, x);
  EXPECT_THROW(quantize_mxfp4(x.data(), 1, 31), std::exception);
}

TEST(Fp8, Mxfp4ScaleAndError) {
  const int64_t R = 3, C = 96;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(size_t(R * C));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(u(rng), int(i / 32) - 4);
  const Mxfp4 q = quantize_mxfp4(x.data(), R, C);
  std::vector<float> back(x.size());
  dequantize_mxfp4(q, back.data());
  for (int64_t g = 0; g < R * C / 32; ++g) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(g * 32 + i)]));
    const float s = e8m0_to_float(q.scales[size_t(g)]);
    EXPECT_GE(amax / s, 4.f);  // the MX rule: the largest keeps e2m1's top exponent
    EXPECT_LT(amax / s, 8.f);
    for (int i = 0; i < 32; ++i) {
      const float v = x[size_t(g * 32 + i)] / s, b = back[size_t(g * 32 + i)] / s;
      // Within half a step of the e2m1 grid, or saturated at 6.
      const float step = std::fabs(v) < 2 ? 0.5f : std::fabs(v) < 4 ? 1.f : 2.f;
      if (std::fabs(v) <= 6.f) {
        EXPECT_LE(std::fabs(b - v), step / 2 + 1e-6f) << g << " " << i;
      } else {
        EXPECT_EQ(std::fabs(b), 6.f);
      }
    }
  }
}

}  // namespace
}  // namespace sl::lowp

// e8m0_exact: the code of an exact power of two (how a checkpoint's fp32 scales become e8m0), and
// false for anything else.
TEST(Fp8, E8m0ExactTakesOnlyPowersOfTwo) {
  uint8_t c = 0;
  EXPECT_TRUE(sl::lowp::e8m0_exact(1.f, &c));
  EXPECT_EQ(c, 127);
  EXPECT_TRUE(sl::lowp::e8m0_exact(0.5f, &c));
  EXPECT_EQ(c, 126);
  EXPECT_TRUE(sl::lowp::e8m0_exact(std::ldexp(1.f, -127), &c));  // subnormal in fp32, still e8m0's smallest
  EXPECT_EQ(c, 0);
  EXPECT_TRUE(sl::lowp::e8m0_exact(std::ldexp(1.f, 127), &c));
  EXPECT_EQ(c, 254);
  for (float bad : {3.f, 0.3f, 0.f, -1.f, std::ldexp(1.f, -128), INFINITY, NAN}) {
    c = 77;
    EXPECT_FALSE(sl::lowp::e8m0_exact(bad, &c)) << bad;
    EXPECT_EQ(c, 77) << "the code is left alone for " << bad;
  }
}
