// The GPU ops of a trace (kernels, memcpys, memsets) in one index space.
//
// Why: what delays a kernel may be a memcpy before it on its stream or a memset an event
// waits for, so the role, wait and critical-path analyses follow dependencies between ops of
// any kind. An OpId numbers kernels first, then memcpys, then memsets, in the order of the
// trace's vectors (kernel i is op i), so per-op arrays line up with Trace::kernels and a caller
// holding a kernel index needs no lookup table.
//
// Streams are keyed by (pid, stream id): stream ids repeat across processes.
//
// Cost: 16 bytes per op (launch call, stream index, start order, per-stream order), built
// with one LaunchIndex and one merge of the three start-sorted vectors.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/trace.h"
#include "profiler/trace_index.h"

namespace sl::prof {

using OpId = uint32_t;
inline constexpr OpId kNoOp = kNoId;

enum class OpKind : uint8_t { Kernel = 0, Memcpy = 1, Memset = 2 };

class GpuOps {
 public:
  explicit GpuOps(const Trace& t);  // t must be finalized and outlive this

  const Trace& trace() const { return t_; }
  size_t size() const { return n_; }
  OpKind kind(OpId op) const { return op < nk_ ? OpKind::Kernel : op < nk_ + nm_ ? OpKind::Memcpy : OpKind::Memset; }
  uint32_t index(OpId op) const { return op < nk_ ? op : op < nk_ + nm_ ? op - nk_ : op - nk_ - nm_; }
  OpId kernel_op(uint32_t i) const { return i; }
  OpId memcpy_op(uint32_t i) const { return nk_ + i; }
  OpId memset_op(uint32_t i) const { return nk_ + nm_ + i; }

  Ns start(OpId op) const;
  Ns end(OpId op) const;  // never before start (a record with end < start counts as zero length)
  uint32_t stream(OpId op) const;
  uint32_t pid(OpId op) const;
  uint32_t correlation(OpId op) const;
  // Kernel: its name; memcpy / memset: Kineto's display name ("Memcpy DtoD (Device -> Device)").
  std::string name(OpId op) const;
  // A node of a CUDA graph: graph ids in the record, or launched by cudaGraphLaunch.
  bool in_graph(OpId op) const { return graph_[op] != 0; }

  // The API call that launched the op (by correlation id), or kNoId.
  uint32_t launch(OpId op) const { return launch_[op]; }
  // The host time of the launch: the launch call's start, else a kernel's `queued` latency
  // timestamp (libraries launching through the driver API leave no runtime record), else kNoTime.
  Ns launch_time(OpId op) const;

  // All ops by start (ties: kernels, memcpys, memsets, each in trace order).
  const std::vector<OpId>& by_start() const { return by_start_; }

  // Streams: dense indices in order of first op.
  size_t streams() const { return stream_ops_.size(); }
  uint32_t stream_index(OpId op) const { return stream_of_[op]; }
  uint32_t stream_id(uint32_t s) const { return stream_keys_[s].second; }
  uint32_t stream_pid(uint32_t s) const { return stream_keys_[s].first; }
  // The index of (pid, stream), or kNoId when no op ran on it.
  uint32_t find_stream(uint32_t pid, uint32_t stream) const;
  // A stream's ops by start.
  const std::vector<OpId>& stream_ops(uint32_t s) const { return stream_ops_[s]; }

  const LaunchIndex& launches() const { return launches_; }

 private:
  const Trace& t_;
  uint32_t nk_, nm_, ns_, n_;
  LaunchIndex launches_;
  std::vector<uint32_t> launch_;
  std::vector<uint8_t> graph_;
  std::vector<OpId> by_start_;
  std::vector<uint32_t> stream_of_;
  std::vector<std::pair<uint32_t, uint32_t>> stream_keys_;  // (pid, stream)
  std::unordered_map<uint64_t, uint32_t> stream_index_;     // (pid << 32 | stream) -> index
  std::vector<std::vector<OpId>> stream_ops_;
};

}  // namespace sl::prof
