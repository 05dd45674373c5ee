// The fp32 CPU reference backend: every op of model/backend.h as plain loops, in program
// order. Streams and events are labels (the schedule is recorded by the model's facade).
#pragma once
#include <memory>

#include "model/backend.h"

namespace sl {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace sl
