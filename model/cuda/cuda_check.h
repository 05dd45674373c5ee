// Error checking for the CUDA backend: every CUDA runtime and cuBLAS call goes through one of
// these macros, which throw sl::Error naming the op (e.g. "sparse_attention"), the NVTX range
// path the model had pushed when the call was made (e.g. "target/L3.c4a/attn", which names the
// layer), the call's text, the error's name and string, and the source line.
//
//   CUDA_CHECK(op, cudaMemcpyAsync(...));
//   CUBLAS_CHECK(op, cublasGemmEx(...));
//   kernel<<<grid, block, smem, stream>>>(...); CUDA_LAUNCH_CHECK(op, stream);
//
// CUDA_LAUNCH_CHECK catches launch-configuration errors at once. A fault inside a kernel
// (illegal address, ...) is asynchronous: it surfaces at the next synchronising call and is then
// reported by that call. Set STREAMLAB_CUDA_SYNC=1 to synchronise the stream after every launch,
// so that a fault is reported by the op that caused it (slow; for debugging only).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace sl::cuda {

// The "/"-joined NVTX range names pushed on this thread (the model's step/layer/phase), or "".
std::string range_path();
// True when STREAMLAB_CUDA_SYNC=1 (read once).
bool sync_after_launch();

[[noreturn]] void fail_cuda(const std::string& op, const char* call, cudaError_t e, const char* file, int line);
[[noreturn]] void fail_cublas(const std::string& op, const char* call, cublasStatus_t s, const char* file, int line);
void check_launch(const std::string& op, cudaStream_t stream, const char* file, int line);

const char* cublas_status_name(cublasStatus_t s);

}  // namespace sl::cuda

#define CUDA_CHECK(op, call)                                                          \
  do {                                                                                \
    cudaError_t sl_cuda_err_ = (call);                                                \
    if (sl_cuda_err_ != cudaSuccess) ::sl::cuda::fail_cuda((op), #call, sl_cuda_err_, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(op, call)                                                        \
  do {                                                                                \
    cublasStatus_t sl_cublas_st_ = (call);                                            \
    if (sl_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::sl::cuda::fail_cublas((op), #call, sl_cublas_st_, __FILE__, __LINE__);        \
  } while (0)

// After every kernel launch: cudaGetLastError (and, with STREAMLAB_CUDA_SYNC=1, a stream sync).
#define CUDA_LAUNCH_CHECK(op, stream) ::sl::cuda::check_launch((op), (stream), __FILE__, __LINE__)
