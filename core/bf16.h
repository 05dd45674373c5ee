// bfloat16 <-> float on the host, round-to-nearest-even (what CUDA's __float2bfloat16 does),
// so that host-side conversions and device-side ones agree bit for bit.
#pragma once
#include <cstdint>
#include <cstring>

namespace sl {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds a float through bf16 and back (emulates a bf16 store).
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace sl
