// SQLite in the Nsight Systems export layout (docs/traces.md 5), so that `nsys stats`
// reports (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum, cuda_gpu_trace, ...), `nsys analyze` rules
// (gpu_gaps, ...) and users' SQL written for nsys exports run on streamlab traces.
//
// Tables written (times in ns, names through StringIds, enums through ENUM_* tables):
//   StringIds, CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _DRIVER,
//   _SYNCHRONIZATION, NVTX_EVENTS, CUDA_GPU_MEMORY_USAGE_EVENTS, PROFILER_OVERHEAD,
//   TARGET_INFO_GPU, TARGET_INFO_CUDA_STREAM, TARGET_INFO_SESSION_START_TIME, META_DATA_EXPORT,
//   PROCESSES, ThreadNames, ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE,
//   ENUM_CUDA_KERNEL_LAUNCH_TYPE, ENUM_CUDA_DEV_MEM_EVENT_OPER, ENUM_NSYS_EVENT_TYPE,
//   ENUM_NSYS_EVENT_CLASS,
// plus STREAMLAB_* tables for what the nsys layout has no place for (stream names and lifetimes,
// contexts, CUDA event records, counters, record counts), so the file loads back without loss.
//
// Ids follow nsys: globalPid = pid << 24, globalTid = globalPid | tid; runtime names keep
// CUPTI's "_vNNNN" form (the reports strip it).
#pragma once
#include <string>

#include "profiler/trace.h"

namespace sl::prof {

// Writes (replacing) `path`. Throws sl::Error naming the file and the failing statement.
void write_nsys_sqlite(const Trace& t, const std::string& path);

// Reads our SQLite (and, as far as its tables go, an nsys export) back. The result is
// finalized. Throws sl::Error naming the file, the table / column / row and what was expected.
Trace load_nsys_sqlite(const std::string& path);

// Kernel base name as nsys's shortName: "void ns::gemm<128>(float*, int)" -> "gemm".
std::string kernel_short_name(const std::string& demangled);

inline constexpr int64_t nsys_global_pid(uint32_t pid) { return int64_t(pid) << 24; }
inline constexpr int64_t nsys_global_tid(uint32_t pid, uint32_t tid) {
  return (int64_t(pid) << 24) | int64_t(tid & 0xFFFFFF);
}

}  // namespace sl::prof
