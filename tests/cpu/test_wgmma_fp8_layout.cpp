// The W4A8 wgmma kernel's layouts (model/cuda/wgmma_fp8_layout.h) replayed on the host: one MX
// group of 64 feature rows and 8 tokens through wgmma's operand layouts (A from registers as
// CUTLASS's ALayout_64x32 defines it for 8-bit types, B from the K-major core matrices the
// descriptor names), with the kernel's decode (e2m1_bits.h) and its placement of each value,
// against the plain dot product of the group's elements. Also the ring's swizzle: a bijection of
// each row's pieces, and every warp read of one word per lane on 32 different banks.
#include "model/cuda/wgmma_fp8_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/fp8.h"
#include "model/cuda/e2m1_bits.h"

namespace {

using sl::lowp::e2m1_to_float;
using sl::lowp::e4m3_to_float;
namespace w = sl::wgmma_fp8;

TEST(WgmmaFp8Layout, OneGroupThroughTheOperandLayoutsIsTheDotProduct) {
  std::mt19937 rng(11);
  const int G = 4;  // groups, one 128-value block: the replay covers group offsets 0..3
  // Weights: 64 rows x 32 G e2m1 codes, packed two per byte (the even element in the low nibble).
  std::vector<uint8_t> code(64 * 32 * G), packed(64 * 16 * G);
  for (auto& c : code) c = uint8_t(rng() & 15u);
  for (int r = 0; r < 64; ++r)
    for (int i = 0; i < 16 * G; ++i) packed[r * 16 * G + i] = uint8_t(code[r * 32 * G + 2 * i] | code[r * 32 * G + 2 * i + 1] << 4);
  // Activations: 8 tokens x 32 G e4m3 codes (no NaN), placed where the fill puts them.
  std::vector<uint8_t> act(8 * 32 * G), smem(size_t(G) * 256, 0xEE);
  std::set<int> written;
  for (auto& c : act) {
    c = uint8_t(rng() & 0xFFu);
    if ((c & 0x7F) == 0x7F) c = 0;
  }
  for (int n = 0; n < 8; ++n)
    for (int g = 0; g < G; ++g)
      for (int e = 0; e < 32; ++e) {
        const int o = w::b_offset(g, e, n);
        ASSERT_TRUE(o >= 0 && o < G * 256);
        EXPECT_TRUE(written.insert(o).second) << "two values at byte " << o;
        smem[size_t(o)] = act[n * 32 * G + g * 32 + e];
      }
  for (int g = 0; g < G; ++g) {
    // A as the lanes build it: lane (warp, grp, tig) loads word tig of the group of rows
    // 16 warp + grp and + 8, and register r is the even or odd codes of one of them.
    uint8_t A[64][32];
    bool set[64][32] = {};
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const int grp = lane >> 2, tig = lane & 3;
        uint32_t word[2];
        for (int h = 0; h < 2; ++h)
          std::memcpy(&word[h], &packed[(16 * warp + grp + 8 * h) * 16 * G + g * 16 + tig * 4], 4);
        for (int r = 0; r < 4; ++r) {
          const uint32_t wd = word[w::a_register_row(r)];
          const uint32_t reg = w::a_register_odd(r) ? sl::e2m1::e4m3_odd(wd) : sl::e2m1::e4m3_even(wd);
          for (int b = 0; b < 4; ++b) {
            // ALayout_64x32: row 16 warp + grp + 8 (r & 1), K position 4 tig + b + 16 (r >> 1).
            const int row = 16 * warp + grp + 8 * (r & 1), k = 4 * tig + b + 16 * (r >> 1);
            EXPECT_FALSE(set[row][k]) << "A row " << row << " position " << k << " set twice";
            A[row][k] = uint8_t(reg >> (8 * b));
            set[row][k] = true;
          }
        }
      }
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 8; ++n) {
        // The MMA: B[k][n] from core matrix 2 g + k / 16 (leading byte offset 128), row n.
        double mma = 0, want = 0;
        for (int k = 0; k < 32; ++k)
          mma += double(e4m3_to_float(A[m][k])) * e4m3_to_float(smem[size_t((2 * g + k / 16) * 128 + 16 * n + k % 16)]);
        for (int e = 0; e < 32; ++e)
          want += std::ldexp(double(e2m1_to_float(code[m * 32 * G + g * 32 + e])), -6) *
                  e4m3_to_float(act[n * 32 * G + g * 32 + e]);
        ASSERT_EQ(mma, want) << "group " << g << ", row " << m << ", token " << n;
      }
  }
}

TEST(WgmmaFp8Layout, RingPiecesAreABijectionReadWithoutBankConflicts) {
  for (int row = 0; row < 16; ++row) {
    std::set<int> at;
    for (int t = 0; t < 4; ++t) {
      const int o = w::ring_piece(row, t);
      EXPECT_EQ(o / 64, row);
      EXPECT_EQ(o % 16, 0);
      at.insert(o);
    }
    EXPECT_EQ(at.size(), 4u) << "row " << row;
  }
  // A warp reads word tig of group q of row grp (or grp + 8): 32 lanes, 32 banks.
  for (int half = 0; half < 2; ++half)
    for (int q = 0; q < 4; ++q) {
      std::set<int> banks;
      for (int lane = 0; lane < 32; ++lane)
        banks.insert((w::ring_piece((lane >> 2) + 8 * half, q) + 4 * (lane & 3)) / 4 % 32);
      EXPECT_EQ(banks.size(), 32u) << "rows " << (half ? "grp + 8" : "grp") << ", group " << q;
    }
}

}  // namespace
