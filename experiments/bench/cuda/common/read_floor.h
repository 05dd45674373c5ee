// The read floor at a size: how long this device takes to stream N bytes from HBM once, in one
// kernel, after the same L2 flush the kernel workbench gives every op. An op that must read N bytes
// cannot beat it, and a small read pays the same launch and ramp-up the op pays, so "op time /
// read floor" says how far a kernel is from what its size allows, where "% of the copy bandwidth"
// (a 2 GiB copy) blames a 1 MB kernel for its ramp-up.
#pragma once

#include <cstddef>
#include <vector>

namespace sl::bench {

struct ReadFloor {
  double median_us = 0, min_us = 0;
  std::vector<double> samples_us;
};

// Times `reps` reads of `bytes` (rounded up to 16) with a 256 MiB fill before each (3 more run
// untimed first). Errors name the CUDA call.
ReadFloor measure_read_floor(size_t bytes, int reps);

}  // namespace sl::bench
