// `--backend cpu|cuda` -> a backend instance, with a clear error when CUDA is not built in or
// no GPU is present.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/communicator.h"
#include "model/backend.h"
#include "model/kernel_variants.h"

namespace sl::cli {

// `variants` (--kernel-variants) choose among the CUDA kernels of an op; the CPU backend has one
// of each, so anything but the defaults is an error there.
// `device`: which GPU (the rank's, in a multi-GPU run); must exist.
std::unique_ptr<Backend> make_backend(const std::string& name, const KernelVariants& variants = {}, int device = 0);
// The GPUs this process sees (0 without CUDA or without a GPU).
int gpu_count();
// The NCCL group of a multi-GPU run over the ranks of `bootstrap` (every rank calls it together,
// its GPU current); fails clearly without CUDA or without NCCL.
std::unique_ptr<Communicator> make_gpu_group(Communicator& bootstrap);
// "NCCL 2.28.3, from ..." for a group that make_gpu_group made, else "".
std::string gpu_group_description(const Communicator& c);
// What a group that make_gpu_group made does (on its watchdog thread) when another rank is gone
// while this one may wait on the GPU: `handler` with the reason, then the process ends (status
// 1). No-op for other groups, whose collectives see a gone rank themselves.
void on_gpu_rank_gone(Communicator& c, std::function<void(const std::string& why)> handler);
// For the option's validator: why `spec` is not a valid --kernel-variants, or "" (so that a bad
// spec fails when the command line is read, before any work).
std::string kernel_variants_error(const std::string& spec);

}  // namespace sl::cli
