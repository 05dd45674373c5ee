// The low-precision number formats of a DeepSeek V4 checkpoint, on the host: FP8 e4m3 (the dense
// weights and the activations fed to FP8 GEMMs), the e8m0 power-of-two scale (one per 128 x 128
// weight block, per 1 x 128 activation group, per 32 MXFP4 values), and FP4 e2m1 (the routed
// experts, two values per byte). Encoders round to nearest, ties to even, and saturate to the
// largest finite value, as CUDA's __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3) and the
// OCP Microscaling (MX) spec do, so that host and device conversions agree bit for bit.
//
// Scaled formats store x as code * scale: quantize_* pick the scale of each block from its
// largest magnitude (amax) so that amax lands within the code's range, and dequantize_* give the
// exact float the stored form means (what the fp32 CPU reference computes with).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sl::lowp {

// ---------------------------------------------------------------- FP8 e4m3 (OCP "fn" variant)
// 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; 0x7F / 0xFF are NaN; the largest
// finite magnitude is 448, the smallest subnormal 2^-9.
constexpr float kE4m3Max = 448.f;
float e4m3_to_float(uint8_t code);
uint8_t float_to_e4m3(float x);  // RNE, saturating; NaN -> 0x7F

// ---------------------------------------------------------------- e8m0 scales
// An unsigned biased exponent: code e means 2^(e - 127); 255 is NaN. (ue8m0 in DeepSeek's and
// vLLM's names.)
float e8m0_to_float(uint8_t code);
// The smallest power of two >= x (x > 0 finite), as a code; clamped to 2^-127 .. 2^127.
uint8_t e8m0_ceil(float x);
// The code of x when x is exactly a power of two in 2^-127 .. 2^127 (true), else false.
bool e8m0_exact(float x, uint8_t* code);

// The scale of one 1 x 128 activation group before an FP8 GEMM, as vLLM picks it for DeepSeek
// (ue8m0 scales): the smallest power of two >= amax / 448; 1 when amax is 0 or not finite.
float fp8_group_scale(float amax);
// A row of activations rounded in place, 1 x 128 group by group, as an FP8 GEMM sees them: each
// value becomes e4m3(x / s) * s with s = fp8_group_scale(the group's amax), exact in fp32 (and in
// bf16). cols must be a multiple of 128.
void round_fp8_groups(float* row, int64_t cols);

// ---------------------------------------------------------------- FP4 e2m1
// 1 sign (bit 3), 2 exponent (bias 1), 1 mantissa bit: magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
constexpr float kE2m1Max = 6.f;
float e2m1_to_float(uint8_t code);  // low 4 bits
uint8_t float_to_e2m1(float x);     // RNE, saturating; NaN -> 0 (e2m1 has no NaN)

// ---------------------------------------------------------------- block-scaled FP8
// A [rows, cols] row-major matrix as e4m3 codes with one e8m0 scale per (block x block) tile
// (DeepSeek's weights: 128 x 128; a 1 x 128 group per activation row is block_rows = 1):
// scales [ceil(rows / block_rows), ceil(cols / block_cols)] row-major, each the smallest power of
// two with amax / scale <= 448 (all-zero tiles get 2^0).
struct Fp8Blocks {
  int64_t rows = 0, cols = 0;
  int block_rows = 128, block_cols = 128;
  std::vector<uint8_t> codes;   // [rows, cols]
  std::vector<uint8_t> scales;  // e8m0 [ceil(rows / block_rows), ceil(cols / block_cols)]
  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};
Fp8Blocks quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, int block_rows = 128, int block_cols = 128);
// out[r, c] = e4m3(codes[r, c]) * 2^(scale - 127): exact in fp32.
void dequantize_fp8_blocks(const Fp8Blocks& q, float* out);

// ---------------------------------------------------------------- MXFP4
// A [rows, cols] row-major matrix (cols even, a multiple of 32) as e2m1 codes packed two per byte,
// the even-indexed element in the low nibble, with one e8m0 scale per 32 consecutive values of a
// row: packed [rows, cols / 2], scales [rows, cols / 32]. The scale is 2^(floor(log2 amax) - 2)
// (the MX spec: the largest element keeps e2m1's top exponent), so amax / scale lies in [4, 8)
// and saturates to 6 above 6.
struct Mxfp4 {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> packed;  // [rows, cols / 2]
  std::vector<uint8_t> scales;  // e8m0 [rows, cols / 32]
};
Mxfp4 quantize_mxfp4(const float* x, int64_t rows, int64_t cols);
void dequantize_mxfp4(const Mxfp4& q, float* out);

}  // namespace sl::lowp
