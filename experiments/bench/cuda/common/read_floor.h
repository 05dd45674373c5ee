// The read floor at a size: how long this device takes to stream N bytes from HBM once, in one
// kernel, after the same L2 flush the kernel workbench gives every op (bench_kernels times it). An
// op that must read N bytes cannot beat it, and a small read pays the same launch and ramp-up the
// op pays, so "op time / read floor" says how far a kernel is from what its size allows, where
// "% of the copy bandwidth" (a 2 GiB copy) blames a 1 MB kernel for its ramp-up.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace sl::bench {

// Enqueues one read of `words` 16-byte words at `src` on the default stream (`sink`: one word of
// device memory, written only if the data holds a value it never does, so the loads are kept).
// Returns the launch's error.
cudaError_t launch_read_kernel(const void* src, size_t words, unsigned* sink);

}  // namespace sl::bench
