// What a CUDA runtime / driver API call does, by its name, and the resource counts a trace
// holds only as API calls.
//
// Why: a default PyTorch profiler trace has no CUPTI stream, event or synchronization records,
// only the `cuda_runtime` calls. That a program records events and makes streams wait on them
// shows there as cudaEventRecord(WithFlags) / cudaStreamWaitEvent calls, with no stream info.
// Counting the calls gives resource numbers for such traces too; the wait attribution uses the
// cudaStreamWaitEvent calls to tell an event wait from a false dependency.
#pragma once
#include <cstdint>
#include <string_view>

#include "profiler/trace.h"

namespace sl::prof {

enum class ApiRole : uint8_t {
  Other = 0,
  KernelLaunch,     // cudaLaunchKernel(Ex), cuLaunchKernel(Ex), cudaLaunchCooperativeKernel, ...
  GraphLaunch,      // cudaGraphLaunch, cuGraphLaunch
  MemoryOp,         // cudaMemcpy*, cudaMemset*, cuMemcpy*, cuMemset*
  StreamCreate,     // cudaStreamCreate(WithFlags|WithPriority), cuStreamCreate(WithPriority)
  StreamDestroy,    // cudaStreamDestroy, cuStreamDestroy
  EventCreate,      // cudaEventCreate(WithFlags), cuEventCreate
  EventDestroy,     // cudaEventDestroy, cuEventDestroy
  EventRecord,      // cudaEventRecord, cudaEventRecordWithFlags, cuEventRecord(WithFlags)
  StreamWaitEvent,  // cudaStreamWaitEvent, cuStreamWaitEvent
  StreamSync,       // cudaStreamSynchronize, cuStreamSynchronize
  EventSync,        // cudaEventSynchronize, cuEventSynchronize
  DeviceSync,       // cudaDeviceSynchronize, cudaThreadSynchronize, cuCtxSynchronize
};

// By name; CUPTI's version suffixes ("_v3020", "_ptsz", "_v2") are ignored.
ApiRole api_role(std::string_view name);

// Calls per role. A driver call that a runtime call made (CUPTI gives both the same correlation
// id) is not counted again.
struct ApiCallCounts {
  uint64_t kernel_launches = 0, graph_launches = 0, memory_ops = 0;
  uint64_t stream_creates = 0, stream_destroys = 0;
  uint64_t event_creates = 0, event_destroys = 0;
  uint64_t event_records = 0, stream_wait_events = 0;
  uint64_t stream_syncs = 0, event_syncs = 0, device_syncs = 0;
};

ApiCallCounts count_api_calls(const Trace& t);

}  // namespace sl::prof
