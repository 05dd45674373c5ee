// A backend tensor's values on the host as floats, whatever float dtype the backend stores
// (bf16 widened exactly): for comparing a backend's output with a reference (GPU tests, the
// kernel workbench).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/backend.h"

namespace sl {

// Synchronises `be` (Backend::download). Throws for a tensor that is not F32 or BF16.
std::vector<float> download_floats(Backend& be, const Tensor& t);

}  // namespace sl
