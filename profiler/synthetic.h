// Synthetic traces for tests and benchmarks: a small builder for hand-made traces, and a
// generator of large, realistic-looking traces (a step loop of layers; each layer launches a
// main-stream GEMM chain plus aux-stream kernels with fork/join events; runtime calls on one
// thread; NVTX "step" / "L<n>" ranges; a few memcpys, memsets, syncs and allocations).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "profiler/trace.h"

namespace sl::prof {

// Hand-made traces. Every add_* returns the index of the new event.
class TraceBuilder {
 public:
  explicit TraceBuilder(Trace& t, uint32_t pid = 1, uint32_t tid = 1) : t_(t), pid_(pid), tid_(tid) {}
  // A kernel; when `launch_start` >= 0 a cudaLaunchKernel call [launch_start, launch_end) with the
  // same correlation id is added on the builder's thread.
  size_t kernel(uint32_t stream, Ns start, Ns end, std::string_view name = "kernel", Ns launch_start = -1,
                Ns launch_end = -1);
  size_t memcpy(uint32_t stream, Ns start, Ns end, uint64_t bytes = 1024, MemcpyKind kind = MemcpyKind::HtoD,
                Ns launch_start = -1, Ns launch_end = -1);
  size_t memset(uint32_t stream, Ns start, Ns end, uint64_t bytes = 1024, Ns launch_start = -1, Ns launch_end = -1);
  size_t api(std::string_view name, Ns start, Ns end, uint32_t correlation = 0);
  size_t nvtx(std::string_view name, Ns start, Ns end, std::string_view domain = {});
  size_t stream(uint32_t id, int priority = 0, Ns created = kNoTime, Ns destroyed = kNoTime, std::string_view name = {});
  // cudaEventRecord(event, on_stream) then cudaStreamWaitEvent(waiting_stream, event), both as
  // CUPTI records with fresh correlation ids, in program order at `at`.
  void record_and_wait(uint32_t event, uint32_t on_stream, uint32_t waiting_stream, Ns at);
  uint32_t next_correlation() { return ++corr_; }
  Trace& trace() { return t_; }

 private:
  Trace& t_;
  uint32_t pid_, tid_;
  uint32_t corr_ = 0;
};

struct SyntheticOptions {
  size_t target_events = 1'000'000;  // approximate total events
  uint32_t aux_streams = 3;
  uint32_t layers = 8;
  uint64_t seed = 1;
};

// Builds (and finalizes) a trace of about opts.target_events events.
Trace make_synthetic_trace(const SyntheticOptions& opts);

// A small finalized trace that uses every part of the trace model: kernels on three streams
// (overlapping, touching, a CUDA-graph launch whose kernels share one correlation id), memcpy,
// memset, runtime and driver calls, every sync type, CUDA event records (and one stream wait that
// carries its recording stream and record call, as a PyTorch trace gives it), nested push/pop,
// start/end and mark NVTX events in two domains, allocations, counters, CUPTI overhead, named
// streams with priorities and lifetimes, devices, processes, threads, record counts, metadata,
// and names that need JSON escaping. Realistic absolute CUPTI-like timestamps.
Trace make_sample_trace();

// The trace (finalized) in the layout PyTorch's profiler (Kineto) writes, for loader tests and
// benchmarks: no "streamlab" block; pretty-printed events; a cpu_op around each runtime call;
// ac2g flows; GPU activities after the CPU side in completion (end time) order, as CUPTI hands
// them over; "[memory]" allocator events; process / thread names; baseTimeNanoseconds at the end.
// Loading it back gives the PyTorch-trace reading of the same events (lossy, not a round trip).
std::string pytorch_profiler_json(const Trace& t);
void write_pytorch_profiler_json_file(const Trace& t, const std::string& path);  // sl::Error on failure

}  // namespace sl::prof
