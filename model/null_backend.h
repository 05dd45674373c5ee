// A backend that computes nothing and holds no memory: allocations get distinct fake
// addresses, ops do nothing, downloads return zeros. It lets `streamlab schedule` build any
// config (flash included) and record the stream schedule of a step without a GPU or the
// weights' memory.
#pragma once
#include <memory>

#include "model/backend.h"

namespace sl {

std::unique_ptr<Backend> make_null_backend();

}  // namespace sl
