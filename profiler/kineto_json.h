// Kineto-style Chrome trace JSON (docs/traces.md 3): opens in Perfetto UI and in
// Holistic Trace Analysis like a PyTorch profiler trace.
//
// Layout written:
// - top level: schemaVersion, deviceProperties, distributedInfo {"rank": N}, baseTimeNanoseconds,
//   displayTimeUnit, traceEvents, plus "streamlab" (what the Kineto layout has no place for:
//   streams, contexts, CUDA event records, allocations, CUPTI overhead, record counts), so the
//   file loads back into the trace model without loss;
// - ts / dur in microseconds relative to baseTimeNanoseconds with three decimals (exact ns);
// - GPU ops ph "X" with pid = device, tid = stream; cat kernel / gpu_memcpy / gpu_memset with
//   Kineto's arg names; runtime / driver calls (cat cuda_runtime / cuda_driver, names without
//   CUPTI's _vNNNN suffix) and NVTX ranges (user_annotation) on pid = process, tid = thread;
//   GPU projections of NVTX ranges (gpu_user_annotation) and cuda_sync slices each on their own
//   track per stream; ac2g flows (s at the launch call, f with bp "e" at the GPU op, one id per
//   GPU op so graph kernels sharing a correlation id get distinct flows); counters ph "C";
//   process_name / thread_name metadata ("stream N").
// - Track ids: bits 0-22 the stream (or thread) id, bit 23 sync track, bit 24 annotation track,
//   bits 25-30 an overflow lane for slices that would not nest (e.g. clock skew making two
//   kernels of one stream overlap by a few ns); lane 0 is the plain id.
#pragma once
#include <cstdio>
#include <ostream>
#include <string>

#include "profiler/trace.h"

namespace sl::prof {

struct KinetoOptions {
  // distributedInfo: the rank, and world_size when > 0 (HTA keys a folder of traces by rank); a
  // negative rank takes the trace's own (Trace::rank, 0 when unknown), as does world_size 0.
  int rank = -1;
  int world_size = 0;
  bool flows = true;             // ac2g flows launch -> GPU op
  bool syncs = true;             // cuda_sync slices
  bool gpu_annotations = true;   // gpu_user_annotation: NVTX ranges projected onto the GPU
  bool counters = true;          // allocated memory per device, trace counters
  bool streamlab_block = true;   // the round-trip block
};

inline constexpr uint32_t kTidStreamMask = 0x7FFFFF;
inline constexpr uint32_t kTidSyncBit = 1u << 23;
inline constexpr uint32_t kTidAnnotationBit = 1u << 24;
inline constexpr int kTidLaneShift = 25;

// Writes the trace (must be finalized). Returns the number of trace events written.
size_t write_kineto_json(const Trace& t, std::FILE* out, const KinetoOptions& opts = {});
size_t write_kineto_json(const Trace& t, std::ostream& out, const KinetoOptions& opts = {});
// Throws sl::Error naming the file when it cannot be written.
size_t write_kineto_json_file(const Trace& t, const std::string& path, const KinetoOptions& opts = {});
std::string kineto_json_string(const Trace& t, const KinetoOptions& opts = {});

}  // namespace sl::prof
