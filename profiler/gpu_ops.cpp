#include "profiler/gpu_ops.h"

#include <limits>

#include "core/error.h"
#include "profiler/api_calls.h"

namespace sl::prof {

namespace {

template <class Op>
bool graph_ids(const Op& o) {
  return o.graph_id != 0 || o.graph_node_id != 0;
}

}  // namespace

GpuOps::GpuOps(const Trace& t)
    : t_(t),
      nk_(uint32_t(t.kernels.size())),
      nm_(uint32_t(t.memcpys.size())),
      ns_(uint32_t(t.memsets.size())),
      n_(nk_ + nm_ + ns_),
      launches_(t) {
  SL_CHECK(uint64_t(t.kernels.size()) + t.memcpys.size() + t.memsets.size() < uint64_t(kNoOp),
           "GpuOps: ", t.kernels.size(), " kernels + ", t.memcpys.size(), " memcpys + ", t.memsets.size(),
           " memsets do not fit 32-bit op ids");
  launch_.resize(n_);
  graph_.resize(n_);
  std::vector<int8_t> graph_launch_name(t.strings.size(), -1);  // per API name id: cudaGraphLaunch?
  for (OpId op = 0; op < n_; ++op) {
    const uint32_t a = launches_.find(pid(op), correlation(op));
    launch_[op] = a;
    bool g = kind(op) == OpKind::Kernel   ? graph_ids(t.kernels[index(op)])
             : kind(op) == OpKind::Memcpy ? graph_ids(t.memcpys[index(op)])
                                          : graph_ids(t.memsets[index(op)]);
    if (!g && a != kNoId) {
      int8_t& c = graph_launch_name[t.api_calls[a].name];
      if (c < 0) c = api_role(t.str(t.api_calls[a].name)) == ApiRole::GraphLaunch ? 1 : 0;
      g = c == 1;
    }
    graph_[op] = g ? 1 : 0;
  }
  // Start order: merge the three start-sorted vectors.
  by_start_.reserve(n_);
  uint32_t a = 0, b = 0, c = 0;
  constexpr Ns inf = std::numeric_limits<Ns>::max();
  while (a < nk_ || b < nm_ || c < ns_) {
    const Ns sa = a < nk_ ? t.kernels[a].start : inf;
    const Ns sb = b < nm_ ? t.memcpys[b].start : inf;
    const Ns sc = c < ns_ ? t.memsets[c].start : inf;
    if (sa <= sb && sa <= sc) by_start_.push_back(kernel_op(a++));
    else if (sb <= sc) by_start_.push_back(memcpy_op(b++));
    else by_start_.push_back(memset_op(c++));
  }
  // Streams, in order of first op; each stream's ops come out in start order.
  stream_of_.resize(n_);
  for (OpId op : by_start_) {
    const uint64_t key = (uint64_t(pid(op)) << 32) | stream(op);
    auto [it, fresh] = stream_index_.try_emplace(key, uint32_t(stream_keys_.size()));
    if (fresh) {
      stream_keys_.push_back({pid(op), stream(op)});
      stream_ops_.emplace_back();
    }
    stream_of_[op] = it->second;
    stream_ops_[it->second].push_back(op);
  }
}

Ns GpuOps::start(OpId op) const {
  switch (kind(op)) {
    case OpKind::Kernel: return t_.kernels[op].start;
    case OpKind::Memcpy: return t_.memcpys[op - nk_].start;
    default: return t_.memsets[op - nk_ - nm_].start;
  }
}

Ns GpuOps::end(OpId op) const {
  Ns s, e;
  switch (kind(op)) {
    case OpKind::Kernel: s = t_.kernels[op].start, e = t_.kernels[op].end; break;
    case OpKind::Memcpy: s = t_.memcpys[op - nk_].start, e = t_.memcpys[op - nk_].end; break;
    default: s = t_.memsets[op - nk_ - nm_].start, e = t_.memsets[op - nk_ - nm_].end; break;
  }
  return e < s ? s : e;
}

uint32_t GpuOps::stream(OpId op) const {
  switch (kind(op)) {
    case OpKind::Kernel: return t_.kernels[op].stream;
    case OpKind::Memcpy: return t_.memcpys[op - nk_].stream;
    default: return t_.memsets[op - nk_ - nm_].stream;
  }
}

uint32_t GpuOps::pid(OpId op) const {
  switch (kind(op)) {
    case OpKind::Kernel: return t_.kernels[op].pid;
    case OpKind::Memcpy: return t_.memcpys[op - nk_].pid;
    default: return t_.memsets[op - nk_ - nm_].pid;
  }
}

uint32_t GpuOps::correlation(OpId op) const {
  switch (kind(op)) {
    case OpKind::Kernel: return t_.kernels[op].correlation;
    case OpKind::Memcpy: return t_.memcpys[op - nk_].correlation;
    default: return t_.memsets[op - nk_ - nm_].correlation;
  }
}

std::string GpuOps::name(OpId op) const {
  switch (kind(op)) {
    case OpKind::Kernel: return t_.str(t_.kernels[op].name);
    case OpKind::Memcpy: {
      const Memcpy& m = t_.memcpys[op - nk_];
      return memcpy_display_name(m.kind, m.src_kind, m.dst_kind);
    }
    default: return memset_display_name(t_.memsets[op - nk_ - nm_].mem_kind);
  }
}

Ns GpuOps::launch_time(OpId op) const {
  if (launch_[op] != kNoId) return t_.api_calls[launch_[op]].start;
  if (kind(op) == OpKind::Kernel) return t_.kernels[op].queued;
  return kNoTime;
}

uint32_t GpuOps::find_stream(uint32_t pid, uint32_t stream) const {
  auto it = stream_index_.find((uint64_t(pid) << 32) | stream);
  return it == stream_index_.end() ? kNoId : it->second;
}

}  // namespace sl::prof
