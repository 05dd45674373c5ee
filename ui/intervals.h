// Time intervals merged into disjoint ones: the union that busy times, per-stream occupancy
// and overlap sweeps of the viewer are built on (one implementation for all of them).
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "profiler/trace.h"

namespace sl::ui {

// [start, end) intervals, any order -> disjoint, sorted; touching intervals join.
inline std::vector<std::pair<prof::Ns, prof::Ns>> merge_intervals(std::vector<std::pair<prof::Ns, prof::Ns>> iv) {
  std::sort(iv.begin(), iv.end());
  std::vector<std::pair<prof::Ns, prof::Ns>> out;
  for (auto [s, e] : iv) {
    if (!out.empty() && s <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(s, e);
  }
  return out;
}

// The length of their union.
inline prof::Ns union_length(std::vector<std::pair<prof::Ns, prof::Ns>> iv) {
  prof::Ns total = 0;
  for (auto [s, e] : merge_intervals(std::move(iv))) total += e - s;
  return total;
}

}  // namespace sl::ui
