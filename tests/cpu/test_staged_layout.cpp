// The staged MXFP4 kernel's data layout (model/cuda/staged_layout.h) put together on the host with
// the fragment layout of mma.sync.m16n8k16 as the PTX ISA gives it (written here from the ISA,
// independently of the kernel): one tile of 16 features x up to 8 tokens over two 128-value
// chunks, emulated lane by lane as moe_fp4_staged_kernel runs it (its words of the weight rows,
// its staged rows, its two MMAs per MX group, its scales), equals the plain dot products of the
// dequantized weights and the tokens' values. A wrong word, half, register or fragment role moves
// whole products, far beyond the tolerance.
#include "model/cuda/staged_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"

namespace {

using sl::staged::group_a_regs;

// An f16's value from its bits (IEEE binary16), written out here rather than borrowed.
double f16_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
  if (e == 0)
    v = std::ldexp(double(m), -24);
  else
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return sign ? -v : v;
}

// The f16 bits of a float that f16 holds exactly (the staged values are such floats); fails the
// test otherwise.
uint16_t f16_bits_exact(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a == 0) return sign;
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  uint16_t bits;
  if (e - 1 >= -14) {
    const double mant = (2 * f - 1) * 1024;
    EXPECT_EQ(mant, std::floor(mant)) << x << " is not an f16";
    bits = uint16_t((e - 1 + 15) << 10 | int(mant));
  } else {
    const double mant = std::ldexp(a, 24);
    EXPECT_EQ(mant, std::floor(mant)) << x << " is not an f16";
    bits = uint16_t(mant);
  }
  EXPECT_EQ(f16_value(bits), a) << x;
  return sign | bits;
}

TEST(StagedLayout, E4m3ToF16IsTheE4m3Value) {
  for (uint32_t c = 0; c < 256; ++c) {
    const double got = f16_value(sl::staged::e4m3_to_f16_bits(c));
    const float want = sl::lowp::e4m3_to_float(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(got, double(want)) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << c;
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, from the PTX ISA's "Matrix fragments for
// mma.m16n8k16 with floating point type": groupID = lane >> 2, threadID_in_group (tig) = lane % 4.
// A (16 x 16): element a_i (i = 0..7: register i / 2, half i % 2) is at row groupID for i in
// {0, 1, 4, 5}, else groupID + 8; column 2 tig + (i & 1), plus 8 for i >= 4.
// B (16 x 8): b_i (i = 0..3) at row 2 tig + (i & 1), plus 8 for i >= 2; column groupID.
// C / D (16 x 8): c_i (i = 0..3) at row groupID for i < 2, else groupID + 8; column 2 tig + (i & 1).
void mma16816(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], double (&d)[32][4]) {
  double A[16][16], B[16][8];
  auto half = [](uint32_t r, int i) { return f16_value(uint16_t(i & 1 ? r >> 16 : r & 0xFFFFu)); };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 8; ++i) {
      const int row = (i == 0 || i == 1 || i == 4 || i == 5) ? g : g + 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = half(a[lane][i / 2], i);
    }
    for (int i = 0; i < 4; ++i) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = half(b[lane][i / 2], i);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
      double s = 0;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      d[lane][i] += s;
    }
  }
}

// One tile, emulated: 16 feature rows of MXFP4 weights, `tokens` token rows staged as f16 times a
// power of two per 128 values, K = 256 (two chunks), every lane's words, staged values, MMAs and
// scales as the kernel takes them.
void check_tile(int tokens, uint64_t seed, bool big_scales) {
  constexpr int N = 16, K = 256, KG = K / 128;
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(size_t(N) * K), x(size_t(8) * K, 0.f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = u(rng) * (big_scales && (i / 32) % 3 == 1 ? 1e6f : 0.1f);
  for (int t = 0; t < tokens; ++t)
    for (int k = 0; k < K; ++k) x[size_t(t) * K + k] = sl::round_bf16(u(rng) * (k < 128 ? 3.f : 0.01f));
  const sl::lowp::Mxfp4 q = sl::lowp::quantize_mxfp4(w.data(), N, K);
  std::vector<float> wd(w.size());
  sl::lowp::dequantize_mxfp4(q, wd.data());

  // Staging (stage_rows, unrounded form): group scale s = 2^(e - 15) for amax < 2^e.
  std::vector<uint8_t> staged(size_t(8) * 2 * K, 0);
  float scale[8][KG] = {};
  for (int t = 0; t < tokens; ++t)
    for (int kg = 0; kg < KG; ++kg) {
      float amax = 0;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[size_t(t) * K + kg * 128 + i]));
      int e = 0;
      std::frexp(amax, &e);
      const float s = amax > 0 ? std::ldexp(1.f, e - 15) : 1.f;
      scale[t][kg] = s;
      for (int l16 = 0; l16 < 16; ++l16) {
        uint16_t h[8];
        for (int i = 0; i < 8; ++i) h[i] = f16_bits_exact(x[size_t(t) * K + kg * 128 + l16 * 8 + i] / s);
        uint32_t r[4];
        sl::staged::pack_act(h, r);
        std::memcpy(&staged[size_t(t) * 2 * K + sl::staged::staged_byte(kg * 128 + l16 * 8)], r, 16);
      }
    }

  auto word = [&](int row, int index) {  // 32-bit little-endian word `index` of a packed row
    uint32_t v;
    std::memcpy(&v, &q.packed[size_t(row) * K / 2 + size_t(index) * 4], 4);
    return v;
  };
  auto scales4 = [&](int row, int k) {  // the row's 4 scale bytes of the chunk at k
    uint32_t v;
    std::memcpy(&v, &q.scales[size_t(row) * K / 32 + size_t(k) / 32], 4);
    return v;
  };
  double c[32][4] = {};
  for (int k = 0; k < K; k += 128) {
    double part[32][4] = {};
    for (int qg = 0; qg < 4; ++qg) {
      uint32_t a[2][32][4], b[2][32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        uint32_t regs[2][4];
        group_a_regs(word(g, sl::staged::weight_word(k, qg, t)), word(g + 8, sl::staged::weight_word(k, qg, t)), regs);
        for (int m = 0; m < 2; ++m)
          for (int r = 0; r < 4; ++r) a[m][lane][r] = regs[m][r];
        uint32_t br[4] = {0, 0, 0, 0};
        if (g < tokens)
          std::memcpy(br, &staged[size_t(g) * 2 * K + sl::staged::staged_byte(sl::staged::read_position(k, qg, t))], 16);
        b[0][lane][0] = br[0], b[0][lane][1] = br[1], b[1][lane][0] = br[2], b[1][lane][1] = br[3];
      }
      double d[32][4] = {};
      mma16816(a[0], b[0], d);  // the even values
      mma16816(a[1], b[1], d);  // the odd values
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2;
        const float f0 = sl::e2m1::group_factor_2p6(sl::e2m1::scales_plus6(scales4(g, k)), qg);
        const float f1 = sl::e2m1::group_factor_2p6(sl::e2m1::scales_plus6(scales4(g + 8, k)), qg);
        for (int i = 0; i < 4; ++i) part[lane][i] += d[lane][i] * (i < 2 ? f0 : f1);
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int t = lane & 3;
      for (int i = 0; i < 4; ++i) {
        const int token = 2 * t + (i & 1);
        if (token < tokens) c[lane][i] += part[lane][i] * scale[token][k / 128];
      }
    }
  }
  // c[lane][2 f + h]: feature grp + 8 f, token 2 tig + h (store_swapped_tile).
  double amax = 0, err = 0;
  int compared = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int n = (lane >> 2) + 8 * (i >> 1), token = 2 * (lane & 3) + (i & 1);
      if (token >= tokens) continue;
      double want = 0;
      for (int k = 0; k < K; ++k) want += double(wd[size_t(n) * K + k]) * x[size_t(token) * K + k];
      amax = std::max(amax, std::fabs(want));
      err = std::max(err, std::fabs(c[lane][i] - want));
      ++compared;
    }
  EXPECT_EQ(compared, N * tokens);
  EXPECT_GT(amax, 0.0);
  EXPECT_LE(err, 1e-9 * amax) << tokens << " tokens, seed " << seed << (big_scales ? ", big scales" : "");
}

TEST(StagedLayout, EmulatedTileEqualsTheDotProducts) {
  for (int tokens : {1, 3, 8})
    for (uint64_t seed : {1u, 2u}) check_tile(tokens, seed, false);
  check_tile(8, 3, true);  // groups with scales far above the others
}

}  // namespace
