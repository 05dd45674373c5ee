// RoPE angle tables (docs/model.md 3.2).
//
// Precision: the tables follow vLLM's construction step by step in fp32 (the inverse
// frequencies, the YaRN ramp and blend, and the angle float32(p) * inv[i] each rounded to fp32
// as PyTorch would), because at large p the fp32 rounding of the angle itself is part of the
// model's behaviour. Two steps are evaluated in double and rounded once to fp32 instead of
// calling the fp32 libm routines: base^(2i/R) and cos/sin of the fp32 angle. That gives
// correctly rounded values that are the same on every host; PyTorch's fp32 pow/cos/sin (SLEEF,
// <= 1 ulp) may differ from them in the last bit of an occasional entry. The YaRN correction
// range is computed in double, as Python does.
#include "model/rope_table.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sl {

namespace {

constexpr double kPi = 3.14159265358979323846;

// The (fractional) rotary dimension whose wavelength fits `num_rotations` times into the
// original context L0: dims below it rotate too fast to need interpolation.
double yarn_correction_dim(double num_rotations, int R, double base, double L0) {
  return (double(R) * std::log(L0 / (num_rotations * 2.0 * kPi))) / (2.0 * std::log(base));
}

}  // namespace

YarnRange yarn_range(int R, double base, const ModelConfig& c) {
  SL_CHECK(R > 0 && R % 2 == 0, "yarn_range: R = ", R, " must be positive and even");
  SL_CHECK(base > 1.0, "yarn_range: base = ", base, " must be > 1");
  const double L0 = double(c.yarn_original_max_position);
  const double lo = std::floor(yarn_correction_dim(c.yarn_beta_fast, R, base, L0));
  const double hi = std::ceil(yarn_correction_dim(c.yarn_beta_slow, R, base, L0));
  YarnRange r;
  r.lo = int(std::max(lo, 0.0));
  r.hi = std::min(hi, double(R - 1));
  if (double(r.lo) == r.hi) r.hi += 0.001;  // avoid a zero-width ramp (division by zero)
  return r;
}

std::vector<float> rope_inv_freq(int R, double base, bool yarn, const ModelConfig& c) {
  SL_CHECK(R > 0 && R % 2 == 0, "rope_inv_freq: R = ", R, " must be positive and even");
  const int half = R / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  YarnRange yr{0, 0.0};
  if (yarn) {
    SL_CHECK(c.yarn_factor > 0.0, "rope_inv_freq: yarn factor ", c.yarn_factor, " must be positive");
    yr = yarn_range(R, base, c);
  }
  const float base_f = float(base);
  const float factor = float(c.yarn_factor);
  const float ramp_width = float(yr.hi - double(yr.lo));
  for (int i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(R);                          // arange(0, R, 2) / R
    const float pos_freq = float(std::pow(double(base_f), double(exponent)));  // base ** exponent
    const float inv_extrap = 1.0f / pos_freq;                                 // original frequency
    if (!yarn) {
      inv[size_t(i)] = inv_extrap;
      continue;
    }
    const float inv_interp = 1.0f / (factor * pos_freq);  // stretched by the context factor
    float ramp = (float(i) - float(yr.lo)) / ramp_width;
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    const float keep = 1.0f - ramp;  // vLLM's inv_freq_mask (extrapolation weight)
    const float a = inv_interp * (1.0f - keep);
    const float b = inv_extrap * keep;
    inv[size_t(i)] = a + b;
  }
  return inv;
}

std::vector<float> build_rope_table(int R, double base, bool yarn, const ModelConfig& c, int max_positions) {
  SL_CHECK(max_positions >= 0, "build_rope_table: max_positions = ", max_positions, " is negative");
  const std::vector<float> inv = rope_inv_freq(R, base, yarn, c);
  const int half = R / 2;
  std::vector<float> table(size_t(max_positions) * size_t(R));
  for (int p = 0; p < max_positions; ++p) {
    float* row = table.data() + size_t(p) * size_t(R);
    for (int i = 0; i < half; ++i) {
      const float theta = float(p) * inv[size_t(i)];  // the fp32 angle, as vLLM's cache
      row[i] = float(std::cos(double(theta)));
      row[half + i] = float(std::sin(double(theta)));
    }
  }
  return table;
}

double rope_base_for_layer(const ModelConfig& c, int layer) {
  return c.layer_type(layer) == LayerType::Sliding ? c.rope_theta : c.compress_rope_theta;
}

bool rope_uses_yarn(const ModelConfig& c, int layer) {
  return c.layer_type(layer) == LayerType::Sliding ? c.swa_layers_use_yarn : true;
}

}  // namespace sl
