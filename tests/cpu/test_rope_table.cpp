// The host-built RoPE tables (model/rope_table.h) against docs/model.md 3.2, computed here in
// double: the YaRN correction range, the blended inverse frequencies, the cos/sin rows, and
// which base/YaRN setting each layer type gets.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/config.h"
#include "model/rope_table.h"

namespace {

// The tiny testbed layout: 6 target layers with ratios [0, 0, 4, 16, 4, 16] + one MTP layer.
sl::ModelConfig tiny_like() {
  sl::ModelConfig c;
  c.num_hidden_layers = 6;
  c.num_nextn_predict_layers = 1;
  c.compress_ratios = {0, 0, 4, 16, 4, 16, 0};
  c.qk_rope_head_dim = 64;
  return c;
}

constexpr double kPi = 3.14159265358979323846;

// docs/model.md 3.2 in double.
std::vector<double> ref_inv(int R, double base, bool yarn, const sl::ModelConfig& c) {
  auto cd = [&](double n) {
    return R * std::log(c.yarn_original_max_position / (2 * kPi * n)) / (2 * std::log(base));
  };
  double lo = std::max(std::floor(cd(c.yarn_beta_fast)), 0.0);
  double hi = std::min(std::ceil(cd(c.yarn_beta_slow)), double(R - 1));
  if (lo == hi) hi += 0.001;
  std::vector<double> inv(R / 2);
  for (int i = 0; i < R / 2; ++i) {
    double f = std::pow(base, -2.0 * i / R);
    if (yarn) {
      double ramp = std::min(std::max((i - lo) / (hi - lo), 0.0), 1.0);
      f = f * (1 - ramp) + f / c.yarn_factor * ramp;
    }
    inv[i] = f;
  }
  return inv;
}

TEST(RopeTable, YarnRangeForTheRealBases) {
  sl::ModelConfig c = tiny_like();
  sl::YarnRange a = sl::yarn_range(64, 160000.0, c);
  EXPECT_EQ(a.lo, 15);
  EXPECT_EQ(a.hi, 25.0);
  sl::YarnRange b = sl::yarn_range(64, 10000.0, c);
  EXPECT_EQ(b.lo, 20);
  EXPECT_EQ(b.hi, 33.0);
}

TEST(RopeTable, InverseFrequenciesMatchDouble) {
  sl::ModelConfig c = tiny_like();
  for (double base : {10000.0, 160000.0})
    for (bool yarn : {false, true}) {
      std::vector<float> inv = sl::rope_inv_freq(64, base, yarn, c);
      std::vector<double> want = ref_inv(64, base, yarn, c);
      ASSERT_EQ(inv.size(), 32u);
      for (int i = 0; i < 32; ++i)
        EXPECT_NEAR(inv[i], want[i], 2e-6 * want[i]) << "base " << base << " yarn " << yarn << " i " << i;
    }
  // With YaRN on base 160000: pairs up to lo = 15 keep the original frequency exactly, pairs
  // from hi = 25 on are exactly 1/16 of it (a power-of-two scale), the ramp is in between.
  std::vector<float> plain = sl::rope_inv_freq(64, 160000.0, false, c), yarn = sl::rope_inv_freq(64, 160000.0, true, c);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(yarn[i], plain[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_EQ(yarn[i], plain[i] / 16.f) << i;
  for (int i = 16; i < 25; ++i) EXPECT_TRUE(yarn[i] < plain[i] && yarn[i] > plain[i] / 16.f) << i;
  EXPECT_EQ(plain[0], 1.f);
}

TEST(RopeTable, TableRowsAreCosThenSinOfTheFp32Angle) {
  sl::ModelConfig c = tiny_like();
  const int R = 64, P = 300;
  for (double base : {10000.0, 160000.0}) {
    std::vector<float> t = sl::build_rope_table(R, base, true, c, P);
    ASSERT_EQ(t.size(), size_t(P) * R);
    std::vector<double> inv = ref_inv(R, base, true, c);
    for (int p = 0; p < P; ++p)
      for (int i = 0; i < R / 2; ++i) {
        double theta = p * inv[i];
        // The table's angle is fp32(p) * fp32(inv): off from the exact angle by a few ulp of
        // theta; cos/sin then move by at most that much.
        double tol = 1e-6 + 4e-7 * theta;
        ASSERT_NEAR(t[size_t(p) * R + i], std::cos(theta), tol) << "base " << base << " p " << p << " i " << i;
        ASSERT_NEAR(t[size_t(p) * R + R / 2 + i], std::sin(theta), tol) << "base " << base << " p " << p << " i " << i;
      }
    for (int i = 0; i < R / 2; ++i) {
      EXPECT_EQ(t[i], 1.f);          // p = 0: no rotation
      EXPECT_EQ(t[R / 2 + i], 0.f);
    }
  }
  // Without YaRN, pair 0 rotates by exactly p radians.
  std::vector<float> plain = sl::build_rope_table(R, 10000.0, false, c, 10);
  EXPECT_EQ(plain[size_t(7) * R], float(std::cos(7.0)));
  EXPECT_EQ(plain[size_t(7) * R + R / 2], float(std::sin(7.0)));
}

TEST(RopeTable, LayerBasesAndYarnFollowTheLayerType) {
  sl::ModelConfig c = tiny_like();
  // Sliding layers 0, 1 and the MTP layer 6: rope_theta; compressed layers: compress_rope_theta.
  for (int l : {0, 1, 6}) EXPECT_EQ(sl::rope_base_for_layer(c, l), 10000.0) << l;
  for (int l : {2, 3, 4, 5}) EXPECT_EQ(sl::rope_base_for_layer(c, l), 160000.0) << l;
  // vLLM default: YaRN everywhere.
  c.swa_layers_use_yarn = true;
  for (int l = 0; l < 7; ++l) EXPECT_TRUE(sl::rope_uses_yarn(c, l)) << l;
  // Reference / HF policy: plain RoPE on sliding layers (incl. the MTP), YaRN on compressed.
  c.swa_layers_use_yarn = false;
  for (int l : {0, 1, 6}) EXPECT_FALSE(sl::rope_uses_yarn(c, l)) << l;
  for (int l : {2, 3, 4, 5}) EXPECT_TRUE(sl::rope_uses_yarn(c, l)) << l;
  // An MTP layer configured with a compressor is a compressed layer.
  c.mtp_compress_ratio = 4;
  EXPECT_EQ(sl::rope_base_for_layer(c, 6), 160000.0);
  EXPECT_TRUE(sl::rope_uses_yarn(c, 6));
}

}  // namespace
