#include "experiments/cli/backend_choice.h"

#include "core/error.h"
#include "model/cpu/cpu_backend.h"
#if STREAMLAB_HAVE_CUDA
#include "model/cuda/cuda_backend.h"
#endif

namespace sl::cli {

std::unique_ptr<Backend> make_backend(const std::string& name, const KernelVariants& variants) {
  if (name == "cpu") {
    SL_CHECK(variants == KernelVariants{}, "--kernel-variants ", variants.changes(),
             ": kernel variants choose among CUDA kernels; use --backend cuda");
    return make_cpu_backend();
  }
  if (name == "cuda") {
#if STREAMLAB_HAVE_CUDA
    std::string why;
    if (!cuda_available(&why)) fail("--backend cuda: no usable CUDA device (", why, ")");
    CudaBackendOptions opt;
    opt.variants = variants;
    return make_cuda_backend(opt);
#else
    fail("--backend cuda: this streamlab was built without CUDA (configure with -DSTREAMLAB_CUDA=ON)");
#endif
  }
  fail("unknown backend '", name, "' (expected cpu or cuda)");
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
