// Host memory the system can still give this process, for checks made before a large
// allocation (a model's weights, a trace parsed whole) so that they fail with both figures
// instead of being killed half-way.
#pragma once
#include <cstddef>

namespace sl {

// /proc/meminfo's MemAvailable (what the kernel estimates can be allocated without swapping), in
// bytes; 0 when unknown (no /proc).
size_t host_memory_available();

}  // namespace sl
