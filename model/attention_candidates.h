// Which keys a token's attention may look at (docs/model.md 5.5): the positions of its sliding
// window, then the compressed entries already complete at its position. One rule, used by the
// CPU reference and by the CUDA kernels (indexer scoring, sparse attention in both its forms),
// so that the two backends cannot drift apart on an off-by-one.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define SL_HOST_DEVICE __host__ __device__
#else
#define SL_HOST_DEVICE
#endif

namespace sl {

// The window of the token at position p (p >= 0): positions [p - n + 1, p], n = min(p + 1, W).
SL_HOST_DEVICE inline int64_t window_length(int64_t p, int64_t window) { return p + 1 < window ? p + 1 : window; }
SL_HOST_DEVICE inline int64_t window_first_position(int64_t p, int64_t window) {
  return p - window_length(p, window) + 1;
}

// Compressed entries complete at or before position p, `ratio` positions per entry (causality:
// entry j pools positions [j * ratio, (j + 1) * ratio)).
SL_HOST_DEVICE inline int64_t compressed_entries_seen(int64_t p, int64_t ratio) { return (p + 1) / ratio; }

}  // namespace sl
