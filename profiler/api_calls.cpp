#include "profiler/api_calls.h"

#include <vector>

#include "profiler/trace_index.h"

namespace sl::prof {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "cudaEventRecord_ptsz_v7000" -> "cudaEventRecord": CUPTI's version suffix, then the
// per-thread default stream variants (_ptsz, _ptds).
std::string_view base_name(std::string_view name) {
  name = strip_api_version(name);
  for (std::string_view suffix : {"_ptsz", "_ptds"})
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
      name.remove_suffix(suffix.size());
  return strip_api_version(name);
}

}  // namespace

ApiRole api_role(std::string_view name) {
  const std::string_view n = base_name(name);
  if (starts_with(n, "cudaLaunchHostFunc") || starts_with(n, "cuLaunchHostFunc")) return ApiRole::Other;
  if (starts_with(n, "cudaLaunch") || starts_with(n, "cuLaunch")) return ApiRole::KernelLaunch;
  if (n == "cudaGraphLaunch" || n == "cuGraphLaunch") return ApiRole::GraphLaunch;
  if (starts_with(n, "cudaMemcpy") || starts_with(n, "cudaMemset") || starts_with(n, "cuMemcpy") ||
      starts_with(n, "cuMemset"))
    return ApiRole::MemoryOp;
  if (starts_with(n, "cudaStreamCreate") || starts_with(n, "cuStreamCreate")) return ApiRole::StreamCreate;
  if (n == "cudaStreamDestroy" || n == "cuStreamDestroy") return ApiRole::StreamDestroy;
  if (starts_with(n, "cudaEventCreate") || n == "cuEventCreate") return ApiRole::EventCreate;
  if (n == "cudaEventDestroy" || n == "cuEventDestroy") return ApiRole::EventDestroy;
  if (starts_with(n, "cudaEventRecord") || starts_with(n, "cuEventRecord")) return ApiRole::EventRecord;
  if (n == "cudaStreamWaitEvent" || n == "cuStreamWaitEvent") return ApiRole::StreamWaitEvent;
  if (n == "cudaStreamSynchronize" || n == "cuStreamSynchronize") return ApiRole::StreamSync;
  if (n == "cudaEventSynchronize" || n == "cuEventSynchronize") return ApiRole::EventSync;
  if (n == "cudaDeviceSynchronize" || n == "cudaThreadSynchronize" || n == "cuCtxSynchronize")
    return ApiRole::DeviceSync;
  return ApiRole::Other;
}

ApiCallCounts count_api_calls(const Trace& t) {
  ApiCallCounts c;
  std::vector<int8_t> role_of(t.strings.size(), -1);  // per name id: classified once
  LaunchIndex by_corr(t);
  for (uint32_t i = 0; i < t.api_calls.size(); ++i) {
    const ApiCall& a = t.api_calls[i];
    if (a.kind == ApiKind::Driver && a.correlation != 0) {
      const uint32_t owner = by_corr.find(a.pid, a.correlation);
      if (owner != kNoId && t.api_calls[owner].kind == ApiKind::Runtime) continue;  // made by a runtime call
    }
    int8_t& r = role_of[a.name];
    if (r < 0) r = int8_t(api_role(t.str(a.name)));
    switch (ApiRole(r)) {
      case ApiRole::KernelLaunch: c.kernel_launches++; break;
      case ApiRole::GraphLaunch: c.graph_launches++; break;
      case ApiRole::MemoryOp: c.memory_ops++; break;
      case ApiRole::StreamCreate: c.stream_creates++; break;
      case ApiRole::StreamDestroy: c.stream_destroys++; break;
      case ApiRole::EventCreate: c.event_creates++; break;
      case ApiRole::EventDestroy: c.event_destroys++; break;
      case ApiRole::EventRecord: c.event_records++; break;
      case ApiRole::StreamWaitEvent: c.stream_wait_events++; break;
      case ApiRole::StreamSync: c.stream_syncs++; break;
      case ApiRole::EventSync: c.event_syncs++; break;
      case ApiRole::DeviceSync: c.device_syncs++; break;
      case ApiRole::Other: break;
    }
  }
  return c;
}

}  // namespace sl::prof
