// Why each kernel started when it did: its launch-to-start time (start - end of its launch
// call) split into parts that sum to it.
//
// Parts, taken in time order from the end of the launch call:
// - own stream: waiting behind earlier GPU work of its own stream, until the previous op
//   (kernel, memcpy, memset: the latest end of the ops that started before it there) ended:
//   launch end .. min(start, predecessor end);
// - cross-stream event: waiting on an event another stream recorded, until the event's
//   producer ended: .. min(start, producer end) (several waits: the latest producer);
// - the rest, which is one of
//   - unrelated: when it exceeds epsilon and a kernel of another stream, with no event linking
//     the two streams, ended within epsilon before the kernel started (a suspected false
//     dependency: two streams sharing a hardware queue, as analysis.h defines it);
//   - inside a graph: for the nodes of a CUDA graph launch (one launch call, many kernels) the
//     graph's own edges order them, and those are not in the trace;
//   - host launch gap otherwise: the kernel was free to start; launch latency.
// Kernels that start before their launch call ends (clock skew) get zeros and are counted, as
// are kernels without a launch call (nothing to measure from).
//
// Events. A stream-wait-event on stream S applies to the first op launched on S after the
// wait call (program order: correlation ids, which CUPTI assigns at API entry in one sequence
// per process, so "launched before" is "smaller correlation id"). Its producer is the last op
// launched on the recording stream before the event-record call (of a graph launch there: the
// node that ended last). Where a wait's recording stream comes from, by preference:
//  (a) the Sync record itself (event_stream, event_record_correlation: PyTorch / Kineto traces
//      with sync events, HTA's source);
//  (b) the Sync's event id and the CUDA event records (our CUPTI traces): the latest record of
//      that event made before the wait;
//  (c) only the runtime calls (a default PyTorch trace: cudaEventRecord(WithFlags) and
//      cudaStreamWaitEvent with no stream info), used only when the trace holds no
//      stream-wait-event Sync record: a rest that ends within epsilon of another stream's
//      kernel end counts as an event wait on that kernel when a cudaStreamWaitEvent call on the
//      launching thread came between the previous launch on the kernel's stream and this
//      launch. Such waits are inferred, and counted.
//
// Each op also records what bound its start (the latest of: its launch, its own-stream
// predecessor, its producer, the unrelated blocker; for graph nodes, the node of the same
// launch that ended last before it), which the critical path follows.
//
// Cost: 32 bytes per op; one sort of kernel ends, one of each stream's ops by correlation, and
// for graph launches one of their nodes by end.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/gpu_ops.h"
#include "profiler/trace.h"

namespace sl::prof {

struct WaitOptions {
  Ns epsilon = 2'000;  // "ended exactly then" (AnalysisOptions::false_dep_epsilon)
};

// What the rest of a launch-to-start time was.
enum class RestKind : uint8_t { LaunchGap = 0, Unrelated = 1, InGraph = 2 };
// What bound an op's start.
enum class WaitCause : uint8_t { Host = 0, OwnStream = 1, Event = 2, Unrelated = 3, GraphEdge = 4 };
const char* to_string(RestKind k);   // "launch_gap", "unrelated", "in_graph"
const char* to_string(WaitCause c);  // "host", "own_stream", "event", "unrelated", "graph_edge"

enum WaitFlags : uint8_t {
  kWaitAttributed = 1,        // had a launch call and started after it ended: parts are set
  kWaitStartedEarly = 2,      // started before its launch call ended: zeros
  kWaitNoLaunch = 4,          // no launch call: zeros
  kWaitInferredEvent = 8,     // the event part comes from source (c)
};

struct OpWait {
  Ns own_stream = 0;
  Ns event = 0;
  Ns rest = 0;                        // see rest_kind
  OpId bound_by = kNoOp;              // the GPU op whose end bound the start (cause != Host)
  WaitCause cause = WaitCause::Host;
  RestKind rest_kind = RestKind::LaunchGap;
  uint8_t flags = 0;

  Ns launch_to_start() const { return own_stream + event + rest; }
  Ns part(RestKind k) const { return rest_kind == k ? rest : 0; }
};

// Sums over kernels (memcpys and memsets are attributed too, per op, but not summed here).
struct WaitTotals {
  uint64_t kernels = 0;                    // kernels attributed
  uint64_t started_before_launch_end = 0;  // zeros
  uint64_t without_launch = 0;             // zeros
  uint64_t inferred_event_waits = 0;       // kernels whose event part is inferred (source c)
  uint64_t graph_kernels = 0;
  Ns launch_to_start = 0;
  Ns own_stream = 0, event = 0, unrelated = 0, launch_gap = 0, in_graph = 0;
  void add(const OpWait& w, bool graph);
};

struct StreamWaitTotals {
  uint32_t pid = 0, stream = 0;
  std::string label;  // Trace::stream_label
  WaitTotals totals;
};

// How the trace's stream-wait-events were resolved.
struct EventWaitSources {
  uint64_t waits = 0;             // stream-wait-event Sync records on a stream
  uint64_t from_sync_fields = 0;  // (a)
  uint64_t from_event_records = 0;  // (b)
  uint64_t unresolved = 0;        // neither names the recording stream
  uint64_t no_producer = 0;       // resolved, but nothing launched on the recording stream before the record
  uint64_t not_applied = 0;       // no op launched on the waiting stream after the wait
  uint64_t api_wait_calls = 0;    // cudaStreamWaitEvent calls (source c's evidence)
  bool inferred_from_api = false; // source (c) in use: no stream-wait-event Sync record in the trace
};

struct WaitAttribution {
  WaitOptions options;
  std::vector<OpWait> ops;                 // per GPU op (GpuOps numbering)
  WaitTotals total;                        // kernels
  std::vector<StreamWaitTotals> streams;   // kernels per stream, by (pid, stream)
  EventWaitSources sources;
};

WaitAttribution attribute_waits(const GpuOps& ops, const WaitOptions& opts = {});

}  // namespace sl::prof
