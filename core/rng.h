// Counter-based random numbers: value i of stream `key` is a pure function of (seed, key, i).
// Weights initialised this way are identical on every backend (the CUDA backend evaluates
// the same function per element on the device) and independent of allocation order.
#pragma once
#include <cstdint>
#include <string_view>

namespace sl {

inline constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of a name: the per-tensor stream key.
inline constexpr uint64_t hash_name(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

// Uniform in [-1, 1) with 24 random bits: exactly representable in fp32, so host and device
// produce the same float.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline float uniform_pm1(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t r = splitmix64(seed ^ splitmix64(key ^ splitmix64(i)));
  return float(int32_t(r >> 40) - (1 << 23)) * (1.0f / float(1 << 23));
}

}  // namespace sl
