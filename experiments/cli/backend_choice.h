// `--backend cpu|cuda` -> a backend instance, with a clear error when CUDA is not built in or
// no GPU is present.
#pragma once
#include <memory>
#include <string>

#include "model/backend.h"

namespace sl::cli {

std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace sl::cli
