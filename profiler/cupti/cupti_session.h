// The CUPTI tracing session (CUDA builds only): one per process.
//
// The rules of docs/traces.md 2, in order of a run:
// - start() before any CUDA call: latency timestamps on; activity kinds CONCURRENT_KERNEL (never
//   KIND_KERNEL, which serializes kernels), MEMCPY, MEMSET, RUNTIME (noisy call ids disabled at
//   the source), DRIVER (optional), SYNCHRONIZATION, CUDA_EVENT (where available), MEMORY2,
//   MARKER + MARKER_DATA + NAME (NVTX, which arrives only when the process runs with
//   NVTX_INJECTION64_PATH pointing at libcupti), OVERHEAD, plus DEVICE / CONTEXT / STREAM;
//   buffer callbacks registered once per process; a resource-callback subscriber records context
//   and stream creation / destruction times with cuptiGetTimestamp().
// - Another CUPTI subscriber (nsys, ncu) makes cuptiSubscribe fail with
//   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: the session says so and goes NVTX-only (the
//   program keeps emitting NVTX ranges for the other tool; streamlab records nothing itself).
// - Buffers come from a preallocated pool of aligned host buffers with a cap; when the cap is
//   reached CUPTI drops records, which are counted (cuptiActivityGetNumDroppedRecords) together
//   with zero-timestamp and end < start records.
// - begin_window() ends the warm-up: device sync, forced flush, everything recorded so far is
//   discarded (devices, contexts, streams and their names are kept).
// - end_window(): device sync, cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), decode,
//   return the window's trace.
// Every CUPTI return code is checked; a failure raises sl::Error naming the call.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "profiler/trace.h"

namespace sl::prof {

struct SessionOptions {
  size_t buffer_bytes = size_t(8) << 20;  // per CUPTI buffer
  size_t preallocated_buffers = 8;
  size_t max_buffers = 64;                // cap: 64 x 8 MiB = 512 MiB of host memory
  bool driver_api = false;                // DRIVER records (cu* calls) too
  bool latency_timestamps = true;         // kernel queued / submitted
  bool memory = true;                     // MEMORY2 (allocations)
  bool nvtx = true;                       // MARKER / MARKER_DATA / NAME
  bool cuda_events = true;                // CUDA_EVENT
  bool runtime_api = true;                // RUNTIME records (launch delay needs them)
};

enum class SessionState { Off, Tracing, NvtxOnly };

class CuptiSession {
 public:
  static CuptiSession& instance();

  // Before any CUDA call. Returns Tracing, or NvtxOnly when another CUPTI subscriber is present
  // (message() explains). Throws sl::Error when a CUPTI call fails otherwise.
  SessionState start(const SessionOptions& opts = {});
  // End of the warm-up window: syncs the device, flushes, discards the records so far.
  void begin_window();
  // Syncs, flushes (forced), decodes; returns the finalized trace of the window.
  Trace end_window();
  // Disables activity collection and unsubscribes.
  void stop();

  // NVTX ranges reach CUPTI only when the process starts with NVTX_INJECTION64_PATH naming the
  // libcupti it links (NVTX has one injection slot): re-executes the program (argv as given to
  // main) with it set, once; returns (with a warning on stderr) if that is impossible.
  static void reexec_with_nvtx_injection(char** argv, const char* program);

  SessionState state() const { return state_; }
  const std::string& message() const { return message_; }
  RecordCounts counts_so_far();

  // The libcupti the process linked (for NVTX_INJECTION64_PATH), "" when unknown.
  static std::string cupti_library_path();
  // True when NVTX_INJECTION64_PATH is set (NVTX ranges will reach CUPTI).
  static bool nvtx_injection_configured();

  // Internal: called from CUPTI's callbacks.
  void on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  void on_buffer_completed(void* ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid);
  void on_resource(uint32_t cbid, const void* data);

 private:
  CuptiSession() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  SessionState state_ = SessionState::Off;
  std::string message_;
};

}  // namespace sl::prof
