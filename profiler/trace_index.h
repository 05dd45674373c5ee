// Lookup helpers over a finalized trace, shared by the analysis and the exporters.
#pragma once
#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "profiler/trace.h"

namespace sl::prof {

// correlation id -> index of the API call that launched the GPU op (runtime calls preferred over
// driver calls with the same id). Dense table when correlation ids are compact (CUPTI numbers
// them sequentially per process), hash map otherwise or when several processes are traced.
class LaunchIndex {
 public:
  explicit LaunchIndex(const Trace& t) {
    uint32_t max_corr = 0;
    std::set<uint32_t> pids;
    for (const auto& a : t.api_calls) {
      max_corr = std::max(max_corr, a.correlation);
      if (pids.size() < 2) pids.insert(a.pid);
    }
    multi_pid_ = pids.size() > 1;
    dense_ = !multi_pid_ && max_corr <= 4 * (t.api_calls.size() + t.kernels.size()) + 4096;
    if (dense_) table_.assign(size_t(max_corr) + 1, kNoId);
    for (uint32_t i = 0; i < t.api_calls.size(); ++i) {
      const auto& a = t.api_calls[i];
      if (a.correlation == 0) continue;
      uint32_t* slot;
      if (dense_) {
        slot = &table_[a.correlation];
      } else {
        auto [it, ins] = map_.try_emplace(key(a.pid, a.correlation), kNoId);
        slot = &it->second;
      }
      if (*slot == kNoId || (t.api_calls[*slot].kind == ApiKind::Driver && a.kind == ApiKind::Runtime)) *slot = i;
    }
  }
  // The API call index, or kNoId.
  uint32_t find(uint32_t pid, uint32_t corr) const {
    if (corr == 0) return kNoId;
    if (dense_) return corr < table_.size() ? table_[corr] : kNoId;
    auto it = map_.find(key(pid, corr));
    return it == map_.end() ? kNoId : it->second;
  }
  bool single_process() const { return !multi_pid_; }

 private:
  static uint64_t key(uint32_t pid, uint32_t corr) { return (uint64_t(pid) << 32) | corr; }
  bool multi_pid_ = false;
  bool dense_ = true;
  std::vector<uint32_t> table_;
  std::unordered_map<uint64_t, uint32_t> map_;
};

// Assigns slices of one track to lanes so that slices on each lane nest (Chrome trace rule).
// Feed slices in (start ascending, end descending) order.
class LaneAssigner {
 public:
  int assign(Ns start, Ns end) {
    for (size_t l = 0; l < lanes_.size(); ++l) {
      auto& st = lanes_[l];
      while (!st.empty() && st.back() <= start) st.pop_back();
      if (st.empty() || st.back() >= end) {
        st.push_back(end);
        return int(l);
      }
    }
    lanes_.emplace_back(1, end);
    return int(lanes_.size() - 1);
  }
  size_t lanes() const { return lanes_.size(); }

 private:
  std::vector<std::vector<Ns>> lanes_;
};

}  // namespace sl::prof
