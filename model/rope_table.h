// The RoPE angle tables (docs/model.md 3.2), built on the host and uploaded by every backend, so
// that the CPU reference and the CUDA backend rotate by bit-identical cos/sin values.
//
// A table is F32 [max_positions, R]: row p is cos(theta(p, 0..R/2-1)) then
// sin(theta(p, 0..R/2-1)), with theta(p, i) = float32(p) * inv_freq[i] rounded to fp32.
#pragma once
#include <vector>

#include "model/config.h"

namespace sl {

// YaRN's correction range (docs/model.md 3.2): frequencies i <= lo keep the original rotation
// (extrapolation), i >= hi are divided by the scaling factor (interpolation), and the ramp
// blends linearly in between. hi is a double because it is nudged by 0.001 when lo == hi.
struct YarnRange {
  int lo;
  double hi;
};

// lo = max(floor(cd(beta_fast)), 0), hi = min(ceil(cd(beta_slow)), R - 1), with
// cd(n) = R ln(L0 / (2 pi n)) / (2 ln base) and L0, beta_* from the config's rope_scaling keys.
// For R = 64: base 160000 gives 15/25, base 10000 gives 20/33.
YarnRange yarn_range(int R, double base, const ModelConfig& c);

// The R/2 inverse frequencies in fp32: base^(-2i/R), blended with base^(-2i/R) / factor by the
// YaRN ramp when `yarn` is set.
std::vector<float> rope_inv_freq(int R, double base, bool yarn, const ModelConfig& c);

// [max_positions, R] row-major, as described at the top of this file.
std::vector<float> build_rope_table(int R, double base, bool yarn, const ModelConfig& c, int max_positions);

// Which table a layer uses (docs/model.md 3.2): compressed layers (c4a, c128a) rotate with
// compress_rope_theta and YaRN; sliding-only layers (and the MTP layer unless it is
// configured with a compressor) with rope_theta, and YaRN only if c.swa_layers_use_yarn
// (true = vLLM; false = DeepSeek's reference / HF). layer >= num_hidden_layers is an MTP layer.
double rope_base_for_layer(const ModelConfig& c, int layer);
bool rope_uses_yarn(const ModelConfig& c, int layer);

}  // namespace sl
