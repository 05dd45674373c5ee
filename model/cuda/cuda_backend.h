// The CUDA backend (sm_90): bf16 weights and activations, fp32 accumulation; cuBLAS for dense
// GEMMs, kernels of our own for the rest. Only compiled with STREAMLAB_CUDA.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/backend.h"

namespace sl {

struct CudaBackendOptions {
  int device = 0;
  size_t arena_bytes = 0;  // 0 = size from the device's free memory (minus a margin)
};

// True when a CUDA device is usable; otherwise *why says what is missing (e.g. "CUDA driver
// version is insufficient for CUDA runtime version": no GPU on this machine).
bool cuda_available(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt);

}  // namespace sl
