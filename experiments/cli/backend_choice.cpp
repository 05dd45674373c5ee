#include "experiments/cli/backend_choice.h"

#include <cstdlib>

#include "core/error.h"
#include "model/cpu/cpu_backend.h"
#if STREAMLAB_HAVE_CUDA
#include <cuda_runtime.h>

#include "model/cuda/cuda_backend.h"
#include "model/cuda/nccl_communicator.h"
#endif

namespace sl::cli {

std::unique_ptr<Backend> make_backend(const std::string& name, const KernelVariants& variants, int device) {
  if (name == "cpu") {
    SL_CHECK(variants == KernelVariants{}, "--kernel-variants ", variants.changes(),
             ": kernel variants choose among CUDA kernels; use --backend cuda");
    return make_cpu_backend();
  }
  if (name == "cuda") {
#if STREAMLAB_HAVE_CUDA
    std::string why;
    if (!cuda_available(&why)) fail("--backend cuda: no usable CUDA device (", why, ")");
    const int gpus = gpu_count();
    SL_CHECK(device >= 0 && device < gpus, "--backend cuda: GPU ", device, " wanted (one GPU per rank), but this "
             "process sees ", gpus, " GPU", gpus == 1 ? "" : "s");
    CudaBackendOptions opt;
    opt.variants = variants;
    opt.device = device;
    return make_cuda_backend(opt);
#else
    fail("--backend cuda: this streamlab was built without CUDA (configure with -DSTREAMLAB_CUDA=ON)");
#endif
  }
  fail("unknown backend '", name, "' (expected cpu or cuda)");
}

int gpu_count() {
#if STREAMLAB_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear: no driver or no GPU here
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::unique_ptr<Communicator> make_gpu_group(Communicator& bootstrap) {
#if STREAMLAB_HAVE_CUDA
  return make_nccl_communicator(bootstrap);  // NCCL_NVLS_ENABLE: set in main
#else
  (void)bootstrap;
  fail("a multi-GPU run needs CUDA and NCCL: this streamlab was built without CUDA (configure with -DSTREAMLAB_CUDA=ON)");
#endif
}

std::string gpu_group_description(const Communicator& c) {
#if STREAMLAB_HAVE_CUDA
  if (const auto* n = dynamic_cast<const NcclCommunicator*>(&c)) return n->describe();
#else
  (void)c;
#endif
  return "";
}

void on_gpu_rank_gone(Communicator& c, std::function<void(const std::string& why)> handler) {
#if STREAMLAB_HAVE_CUDA
  if (auto* n = dynamic_cast<NcclCommunicator*>(&c)) n->set_on_peer_gone(std::move(handler));
#else
  (void)c;
  (void)handler;
#endif
}

std::string kernel_variants_error(const std::string& spec) {
  try {
    KernelVariants::parse(spec);
    return "";
  } catch (const Error& e) {
    // CLI11 puts the option's name in front already.
    const std::string why = e.what(), prefix = "--kernel-variants: ";
    return why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
  }
}

}  // namespace sl::cli
