#include "ui/step_series.h"

#include <algorithm>
#include <map>

#include "ui/intervals.h"

namespace sl::ui {

StepSeries step_series(std::vector<std::pair<Ns, int64_t>> changes) {
  std::sort(changes.begin(), changes.end());
  StepSeries s;
  int64_t cur = 0;
  for (size_t i = 0; i < changes.size();) {
    const Ns t = changes[i].first;
    for (; i < changes.size() && changes[i].first == t; ++i) cur += changes[i].second;
    if (!s.v.empty() && s.v.back() == cur) continue;  // no change after all
    s.t.push_back(t);
    s.v.push_back(cur);
    if (cur > s.peak) s.peak = cur, s.peak_at = t;
  }
  for (size_t k = 0; k < s.v.size(); k += StepSeries::kBlock)
    s.block_max.push_back(*std::max_element(s.v.begin() + ptrdiff_t(k),
                                            s.v.begin() + ptrdiff_t(std::min(s.v.size(), k + StepSeries::kBlock))));
  return s;
}

int64_t StepSeries::at(Ns x) const {
  const auto it = std::upper_bound(t.begin(), t.end(), x);  // first change after x
  return it == t.begin() ? 0 : v[size_t(it - t.begin()) - 1];
}

int64_t StepSeries::max_over(Ns a, Ns b) const {
  // The value at a, then every value that starts inside (a, b).
  int64_t m = at(a);
  size_t i = size_t(std::upper_bound(t.begin(), t.end(), a) - t.begin());
  const size_t end = size_t(std::lower_bound(t.begin(), t.end(), b) - t.begin());
  while (i < end && i % kBlock != 0) m = std::max(m, v[i++]);
  while (i + kBlock <= end) m = std::max(m, block_max[i / kBlock]), i += kBlock;
  while (i < end) m = std::max(m, v[i++]);
  return m;
}

StepSeries streams_busy(const prof::Trace& trace) {
  std::map<uint32_t, std::vector<std::pair<Ns, Ns>>> by_stream;
  for (const auto& k : trace.kernels)
    if (k.end > k.start) by_stream[k.stream].emplace_back(k.start, k.end);
  std::vector<std::pair<Ns, int64_t>> changes;
  for (auto& [stream, iv] : by_stream)
    for (auto [s, e] : merge_intervals(std::move(iv))) changes.emplace_back(s, +1), changes.emplace_back(e, -1);
  return step_series(std::move(changes));
}

StepSeries memory_allocated(const prof::Trace& trace) {
  std::vector<std::pair<Ns, int64_t>> changes;
  for (const auto& a : trace.allocations) {
    if (a.alloc == prof::kNoTime) continue;
    changes.emplace_back(a.alloc, int64_t(a.bytes));
    if (a.free != prof::kNoTime) changes.emplace_back(a.free, -int64_t(a.bytes));
  }
  return step_series(std::move(changes));
}

}  // namespace sl::ui
