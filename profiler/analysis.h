// Analysis of a trace: what the streams bought.
//
// Definitions (docs/measurement.md 5; the HTA breakdowns: docs/traces.md 8):
// - busy = length of the union of kernel intervals; overlap = time with >= 2 kernels running;
//   overlap fraction = overlap / busy; stream overlap = time with kernels of >= 2 streams
//   running (the same, less the overlap of kernels of one stream under PDL). Sweep over sorted start/end points; at equal timestamps
//   ends are processed before starts, so touching kernels [a,b) [b,c) never overlap.
// - concurrency histogram = time at exactly 0, 1, 2, ... kernels between the first kernel start
//   and the last kernel end of the scope.
// - aux hidden fraction = for kernels on streams other than the main stream: the part of their
//   duration overlapped by main-stream kernels / their total duration.
// - queue wait = start - max(ready, end of the previous kernel on the same stream), where ready
//   is the kernel's `submitted` latency timestamp, else the end of its launch call; >= 0.
//   A wait > epsilon that ends within epsilon of the end of a kernel on another stream, with no
//   stream-wait-event linking the two streams since the previous launch on the waiting stream,
//   is a suspected false dependency (two streams sharing a hardware queue).
// - launch delay = kernel start - end of its launch call (by correlation id).
// - HTA temporal breakdown over GPU ops (kernels, memcpy, memset): span = last end - first
//   start; idle = span - union; compute = union of computation kernels (HTA's get_kernel_type:
//   not NCCL, not Memcpy*/Memset*/dma*, not *Memcpy*, not *Sync*); non-compute = union - compute.
// - HTA communication / computation overlap: the union of NCCL kernels (^nccl.*Kernel) and the
//   part of it covered by the union of computation kernels; overlap fraction = covered / union.
// - HTA idle breakdown per stream: the gap before each op is "host wait" when its launch call
//   started after the previous op on the stream ended, else "kernel wait" when the gap is under
//   the threshold (HTA default 30 us), else "other".
//
// Cost: the trace's vectors are sorted once (Trace::finalize); everything here is linear sweeps
// plus one radix sort of kernel end times.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/api_calls.h"
#include "profiler/trace.h"

namespace sl::prof {

struct AnalysisOptions {
  std::string range;                      // NVTX range name to break the trace down by ("" = none);
                                          // "domain:name" or a prefix "name*" work too
  std::optional<uint32_t> main_stream;    // designated main stream; default: the stream with most kernel time
  Ns kernel_wait_threshold = 30'000;      // HTA's consecutive_kernel_delay (30 us)
  Ns false_dep_epsilon = 2'000;           // "ended exactly then" tolerance
  // Range membership: by kernel start (default, as specified) or by the start of the kernel's
  // launch call (for CPU-side NVTX ranges whose kernels run after the range closes).
  bool range_by_launch = false;
  // Kernel time by operation: each kernel is attributed to the innermost NVTX push/pop range
  // enclosing its launch call on the launching thread (an instrumented program names its ops
  // that way; cuBLAS kernel names say nothing about which op they served). Kernels of a graph
  // launch go to the range around cudaGraphLaunch. Kernels without a runtime launch record
  // (cuBLAS launches through the driver API) are placed by their `queued` latency timestamp.
  bool by_op = false;
  size_t max_false_deps_listed = 100;     // examples kept in the result
};

struct DurationStats {
  uint64_t count = 0;
  Ns total = 0, min = 0, max = 0;
  double mean = 0, median = 0, p90 = 0, p99 = 0;
};

// Metrics of a set of kernels (a whole trace or one range instance).
struct ScopeMetrics {
  Ns first_start = kNoTime, last_end = kNoTime;  // of the kernels in scope
  Ns span = 0;                 // last_end - first_start
  uint64_t kernels = 0;
  Ns kernel_time = 0;          // sum of kernel durations
  Ns busy = 0;                 // union of kernel intervals
  Ns overlap = 0;              // time with >= 2 kernels running
  double overlap_fraction = 0; // overlap / busy
  // Time with kernels of >= 2 streams running: overlap without two kernels of one stream
  // (programmatic dependent launch lets a kernel start while the one before it on its stream
  // finishes; with PDL off the two are equal).
  Ns stream_overlap = 0;
  double stream_overlap_fraction = 0;  // stream_overlap / busy
  std::vector<Ns> concurrency; // concurrency[k] = time with exactly k kernels running (within span)
  Ns aux_time = 0;             // total duration of kernels not on the main stream
  Ns aux_hidden = 0;           // part of it overlapped by main-stream kernels
  double aux_hidden_fraction = 0;
};

struct StreamMetrics {
  uint32_t stream = 0;
  std::string label;           // NVTX name or "stream N"
  int32_t priority = 0;
  bool is_main = false;
  uint64_t kernels = 0, memcpys = 0, memsets = 0;
  Ns kernel_time = 0;
  Ns busy = 0;                 // union of this stream's kernel intervals
  Ns overlapped = 0;           // part of busy during which another kernel also ran
  double overlap_fraction = 0; // overlapped / busy
  Ns first_start = kNoTime, last_end = kNoTime;
  // HTA idle breakdown over this stream's GPU ops (gaps between consecutive ops).
  Ns idle_host_wait = 0, idle_kernel_wait = 0, idle_other = 0;
  DurationStats queue_wait;
  DurationStats launch_delay;
  uint64_t suspected_false_deps = 0;
};

struct TemporalBreakdown {
  Ns span = 0, idle = 0, compute = 0, non_compute = 0;
  double idle_pct = 0, compute_pct = 0, non_compute_pct = 0;
};

// HTA's communication / computation overlap (its get_comm_comp_overlap, per rank): the part of
// the union of communication kernels (names matching ^nccl.*Kernel) during which computation
// kernels (hta_is_compute_kernel) also ran, over that union.
struct CommOverlap {
  uint64_t comm_kernels = 0;
  Ns comm = 0;         // union of communication kernel intervals
  Ns overlapped = 0;   // part of it that computation kernels cover
  double fraction = 0; // overlapped / comm (0 without communication kernels)
};

struct KernelNameStats {
  std::string name;
  uint64_t count = 0;
  Ns total = 0, min = 0, max = 0;
  // The kernels' own time on their streams: how far each extends its stream's busy time past the
  // kernels that started before it there. Under programmatic dependent launch a kernel starts
  // early and waits for the one before it; its duration counts that wait, its own time does not.
  // A stream's own times add up to its busy time.
  Ns own = 0;
  double mean = 0, median = 0;
};

// Kernel time of one innermost NVTX range name (AnalysisOptions::by_op). The names
// "(no launch call)" and "(no range)" collect kernels that cannot be attributed.
struct OpTimeStats {
  std::string name;
  uint64_t kernels = 0;
  Ns total = 0;        // sum of kernel durations
  uint64_t ranges = 0; // distinct range instances that launched these kernels
  // Host time of those range instances (end - start on the launching thread, nested ranges
  // included): what enqueuing the op cost the CPU. When an eager step is bound by its launch
  // rate, this, not the kernel time, is where the step goes.
  Ns host = 0;
};

struct FalseDependency {
  uint32_t kernel = 0;          // index into Trace::kernels (the waiting kernel)
  uint32_t blocker = 0;         // index of the kernel on the other stream that ended then
  uint32_t stream = 0, blocker_stream = 0;
  Ns wait = 0;                  // queue wait of the waiting kernel
  Ns gap = 0;                   // waiting kernel start - blocker end (0 .. epsilon)
};

struct RangeInstance {
  uint64_t index = 0;           // n-th instance of the range name in time order
  std::string name;             // the range's own name (what a "PREFIX*" pattern matched)
  Ns start = 0, end = 0;        // the NVTX range itself (CPU side)
  uint32_t pid = 0, tid = 0;
  uint16_t depth = 0;
  ScopeMetrics metrics;
};

struct RangeSummary {
  std::string name;
  uint64_t instances = 0;
  std::vector<RangeInstance> per_instance;
  // Sums over instances (busy, overlap, aux...) and the fractions of those sums.
  ScopeMetrics total;
};

struct ResourceSummary {
  uint64_t streams = 0;                       // streams seen
  uint64_t streams_created = 0, streams_destroyed = 0;  // inside the window
  uint64_t max_streams_alive = 0;
  std::vector<std::pair<Ns, uint32_t>> streams_alive;   // (time, streams alive from then on)
  uint64_t contexts = 0;
  uint64_t cuda_event_records = 0, distinct_cuda_events = 0;
  uint64_t syncs = 0, stream_waits = 0, host_syncs = 0;
  // The same seen as runtime / driver API calls (stream and event creates, event records,
  // cudaStreamWaitEvent calls, syncs): all a default PyTorch trace shows of them, since it
  // carries no CUPTI event or synchronization records.
  ApiCallCounts api;
  uint64_t allocations = 0, frees = 0;
  uint64_t peak_allocated_bytes = 0;          // high-water mark of live allocations in the window
  Ns peak_allocated_at = kNoTime;
  uint64_t allocated_at_end = 0;
  Ns cupti_overhead = 0;                      // sum of OVERHEAD record durations
};

struct AnalysisResult {
  AnalysisOptions options;
  uint32_t main_stream = kNoStream;
  uint64_t events = 0;                        // events in the trace
  RecordCounts counts;
  ScopeMetrics whole;                         // all kernels of the trace
  std::vector<StreamMetrics> streams;         // sorted by stream id
  TemporalBreakdown temporal;
  CommOverlap comm;
  std::vector<KernelNameStats> kernel_stats;  // sorted by total time, descending
  std::vector<OpTimeStats> op_stats;          // options.by_op: sorted by total time, descending
  DurationStats queue_wait;                   // all kernels
  DurationStats launch_delay;                 // kernels with a launch call
  uint64_t kernels_without_launch = 0;        // no API call with the same correlation id
  uint64_t graph_kernels = 0;                 // kernels that are graph nodes
  uint64_t suspected_false_deps = 0;
  std::vector<FalseDependency> false_deps;    // first options.max_false_deps_listed
  std::optional<RangeSummary> range;          // when options.range is set
  ResourceSummary resources;
};

// The trace must be finalized (Trace::finalize). Throws sl::Error on an unusable request (e.g. a
// --main-stream that does not exist).
AnalysisResult analyze(const Trace& trace, const AnalysisOptions& opts = {});

// HTA's classification: true for computation kernels.
bool hta_is_compute_kernel(std::string_view name);
// HTA's communication kernels: the name matches ^nccl.*Kernel.
bool hta_is_comm_kernel(std::string_view name);

}  // namespace sl::prof
