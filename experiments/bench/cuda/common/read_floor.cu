#include "experiments/bench/cuda/common/read_floor.h"

#include <algorithm>
#include <cstdint>
#include <errno.h>

#include <cuda_runtime.h>

#include "core/error.h"

namespace sl::bench {
namespace {

#define READ_FLOOR_CHECK(call)                                                                              \
  do {                                                                                                      \
    const cudaError_t e_ = (call);                                                                          \
    SL_CHECK(e_ == cudaSuccess, "read floor: ", #call, " failed: ", cudaGetErrorName(e_), " (",             \
             cudaGetErrorString(e_), ")");                                                                  \
  } while (0)

// Every thread reads 16-byte words a grid apart, four loads in flight before it adds them, and
// stores one word only if the sum hits a value the data never holds, so the loads are kept and
// nothing is written.
__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

}  // namespace

ReadFloor measure_read_floor(size_t bytes, int reps) {
  const size_t words = (bytes + 15) / 16, flush_bytes = size_t(256) << 20;
  void *src = nullptr, *flush = nullptr, *sink = nullptr;
  READ_FLOOR_CHECK(cudaMalloc(&src, words * 16));
  READ_FLOOR_CHECK(cudaMalloc(&flush, flush_bytes));
  READ_FLOOR_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  READ_FLOOR_CHECK(cudaMemset(src, 0x5A, words * 16));
  int dev = 0, sms = 0;
  READ_FLOOR_CHECK(cudaGetDevice(&dev));
  READ_FLOOR_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Enough threads for the loads in flight to cover the latency (4 blocks of 512 per SM), fewer
  // when there are fewer words than that (a block per 2048 words).
  const size_t blocks = std::max<size_t>(1, std::min<size_t>(size_t(4) * sms, (words + 2047) / 2048));
  cudaEvent_t a, b;
  READ_FLOOR_CHECK(cudaEventCreate(&a));
  READ_FLOOR_CHECK(cudaEventCreate(&b));
  ReadFloor r;
  for (int i = 0; i < 3 + reps; ++i) {
    READ_FLOOR_CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
    READ_FLOOR_CHECK(cudaEventRecord(a));
    read_kernel<<<unsigned(blocks), 512>>>(static_cast<const uint4*>(src), words, static_cast<unsigned*>(sink));
    READ_FLOOR_CHECK(cudaGetLastError());
    READ_FLOOR_CHECK(cudaEventRecord(b));
    READ_FLOOR_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    READ_FLOOR_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) r.samples_us.push_back(double(ms) * 1e3);
  }
  READ_FLOOR_CHECK(cudaEventDestroy(a));
  READ_FLOOR_CHECK(cudaEventDestroy(b));
  READ_FLOOR_CHECK(cudaFree(src));
  READ_FLOOR_CHECK(cudaFree(flush));
  READ_FLOOR_CHECK(cudaFree(sink));
  std::vector<double> v = r.samples_us;
  std::sort(v.begin(), v.end());
  r.median_us = v[v.size() / 2];
  r.min_us = v.front();
  return r;
}

}  // namespace sl::bench
