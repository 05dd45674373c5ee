// The CUDA backend (sm_90): bf16 weights and activations, fp32 accumulation; cuBLAS for dense
// GEMMs, kernels of our own for the rest. Only compiled with STREAMLAB_CUDA.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/kernel_variants.h"

namespace sl {

struct CudaBackendOptions {
  int device = 0;
  // Device memory arena: > 0 = one cudaMalloc of this size up front (an allocation that does not
  // fit is an error); 0 = grow on demand in chunks of max(1 GiB, request). Either way everything
  // is allocated while the model is built; nothing is allocated inside a forward step.
  size_t arena_bytes = 0;
  // Which kernel of each op family runs (model/kernel_variants.h).
  KernelVariants variants;
};

// True when a CUDA device is usable; otherwise *why says what is missing (e.g. "CUDA driver
// version is insufficient for CUDA runtime version": no GPU on this machine).
bool cuda_available(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt);

// The paths gemm_fp8 took in this process: row chunks run on cuBLASLt's block-scaled FP8 GEMM,
// and calls that wanted it but fell back to the FP8 GEMV because cuBLASLt had no algorithm. A
// fallback is slow, not wrong, so the GPU tests check these counts.
struct Fp8PathCounts {
  size_t cublaslt = 0, fallback = 0;
};
Fp8PathCounts cuda_fp8_path_counts();

}  // namespace sl
