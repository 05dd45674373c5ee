// `--backend cpu|cuda` -> a backend instance, with a clear error when CUDA is not built in or
// no GPU is present.
#pragma once
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/kernel_variants.h"

namespace sl::cli {

// `variants` (--kernel-variants) choose among the CUDA kernels of an op; the CPU backend has one
// of each, so anything but the defaults is an error there.
std::unique_ptr<Backend> make_backend(const std::string& name, const KernelVariants& variants = {});
// For the option's validator: why `spec` is not a valid --kernel-variants, or "" (so that a bad
// spec fails when the command line is read, before any work).
std::string kernel_variants_error(const std::string& spec);

}  // namespace sl::cli
