#include "core/fp8.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sl::lowp {

float e4m3_to_float(uint8_t code) {
  const bool neg = code & 0x80;
  const int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0xF && m == 7) return NAN;
  // Subnormals: m / 8 * 2^(1 - 7); normals: (1 + m / 8) * 2^(e - 7).
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return neg ? -mag : mag;
}

uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a > kE4m3Max) return sign | 0x7E;  // saturate (infinities included)
  if (a < std::ldexp(1.f, -6)) {
    // Subnormal range: a multiple of 2^-9, rounded to nearest even (8 is the smallest normal,
    // code 0x08, so the carry needs no special case).
    return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exponent e - 1
  int exp = e - 1 + 7;
  int mant = int(std::nearbyint((f * 2.f - 1.f) * 8.f));  // the 3 mantissa bits, RNE
  if (mant == 8) mant = 0, ++exp;
  const int code = std::min(exp << 3 | mant, 0x7E);
  return sign | uint8_t(code);
}

float e8m0_to_float(uint8_t code) { return code == 255 ? NAN : std::ldexp(1.f, int(code) - 127); }

uint8_t e8m0_ceil(float x) {
  SL_CHECK(x > 0 && std::isfinite(x), "e8m0_ceil: ", x, " is not a positive finite number");
  int e = 0;
  const float f = std::frexp(x, &e);  // x = f * 2^e
  const int exp = f == 0.5f ? e - 1 : e;
  return uint8_t(std::clamp(exp + 127, 0, 254));
}

bool e8m0_exact(float x, uint8_t* code) {
  if (!(x > 0) || !std::isfinite(x)) return false;
  int e = 0;
  if (std::frexp(x, &e) != 0.5f || e - 1 < -127 || e - 1 > 127) return false;  // x = 0.5 * 2^e
  *code = uint8_t(e - 1 + 127);
  return true;
}

float fp8_group_scale(float amax) {
  return amax > 0 && std::isfinite(amax) ? e8m0_to_float(e8m0_ceil(amax / kE4m3Max)) : 1.f;
}

void round_fp8_groups(float* row, int64_t cols) {
  constexpr int64_t B = 128;
  for (int64_t g = 0; g + B <= cols; g += B) {
    float amax = 0;
    for (int64_t i = 0; i < B; ++i) amax = std::max(amax, std::fabs(row[g + i]));
    const float sc = fp8_group_scale(amax);
    for (int64_t i = 0; i < B; ++i) row[g + i] = e4m3_to_float(float_to_e4m3(row[g + i] / sc)) * sc;
  }
}

namespace {
constexpr float kE2m1Values[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
}

float e2m1_to_float(uint8_t code) {
  const float mag = kE2m1Values[code & 7];
  return (code & 8) ? -mag : mag;
}

uint8_t float_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  if (a >= kE2m1Max) return sign | 7;
  // The nearest of the eight magnitudes; a tie goes to the even code (the even mantissa).
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kE2m1Values[c]), db = std::fabs(a - kE2m1Values[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return sign | uint8_t(best);
}

Fp8Blocks quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, int block_rows, int block_cols) {
  SL_CHECK(rows >= 0 && cols >= 0 && block_rows >= 1 && block_cols >= 1, "quantize_fp8_blocks: bad shape [", rows,
           ", ", cols, "] or block ", block_rows, " x ", block_cols);
  Fp8Blocks q;
  q.rows = rows, q.cols = cols, q.block_rows = block_rows, q.block_cols = block_cols;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(q.scale_rows() * q.scale_cols()));
  for (int64_t br = 0; br < q.scale_rows(); ++br)
    for (int64_t bc = 0; bc < q.scale_cols(); ++bc) {
      const int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const uint8_t s = e8m0_ceil(fp8_group_scale(amax));  // a power of two: its own code
      q.scales[size_t(br * q.scale_cols() + bc)] = s;
      const int shift = 127 - int(s);  // x / 2^(s - 127), exact
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) q.codes[size_t(r * cols + c)] = float_to_e4m3(std::ldexp(x[r * cols + c], shift));
    }
  return q;
}

void dequantize_fp8_blocks(const Fp8Blocks& q, float* out) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const uint8_t s = q.scales[size_t((r / q.block_rows) * q.scale_cols() + c / q.block_cols)];
      out[r * q.cols + c] = std::ldexp(e4m3_to_float(q.codes[size_t(r * q.cols + c)]), int(s) - 127);
    }
}

Mxfp4 quantize_mxfp4(const float* x, int64_t rows, int64_t cols) {
  SL_CHECK(rows >= 0 && cols >= 0 && cols % 32 == 0, "quantize_mxfp4: [", rows, ", ", cols,
           "]: the columns must be a multiple of 32 (one scale per 32 values)");
  Mxfp4 q;
  q.rows = rows, q.cols = cols;
  q.packed.assign(size_t(rows * cols / 2), 0);
  q.scales.resize(size_t(rows * cols / 32));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / 32; ++g) {
      const float* v = x + r * cols + g * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
      int exp = 0;
      if (amax > 0 && std::isfinite(amax)) {
        int e = 0;
        std::frexp(amax, &e);  // amax in [2^(e-1), 2^e)
        exp = std::clamp(e - 1 - 2, -127, 127);
      }
      q.scales[size_t(r * (cols / 32) + g)] = uint8_t(exp + 127);
      for (int i = 0; i < 32; ++i) {
        const uint8_t c = float_to_e2m1(std::ldexp(v[i], -exp));
        const size_t at = size_t(r * cols + g * 32 + i);
        q.packed[at / 2] |= uint8_t(i % 2 == 0 ? c : c << 4);
      }
    }
  return q;
}

void dequantize_mxfp4(const Mxfp4& q, float* out) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const size_t at = size_t(r * q.cols + c);
      const uint8_t code = (c % 2 == 0) ? (q.packed[at / 2] & 0xF) : (q.packed[at / 2] >> 4);
      out[at] = std::ldexp(e2m1_to_float(code), int(q.scales[size_t(r * (q.cols / 32) + c / 32)]) - 127);
    }
}

}  // namespace sl::lowp
