#include "ui/range_diff.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "profiler/kernel_roles.h"
#include "ui/kernel_names.h"

namespace sl::ui {

RangeDiff range_diff(const RangeSide& a, const RangeSide& b) {
  std::map<std::string, RangeRoleRow> by_key;
  auto take = [&](const RangeSide& side, bool is_a) {
    for (prof::RoleStats& s : prof::role_stats_in_window(*side.trace, *side.profile, side.from, side.to)) {
      auto [it, fresh] = by_key.try_emplace(s.key);
      RangeRoleRow& r = it->second;
      if (fresh) r.key = s.key, r.path = s.path, r.name = s.name, r.ordinal = s.ordinal;
      (is_a ? r.count_a : r.count_b) = s.count;
      (is_a ? r.median_a : r.median_b) = s.median;
      (is_a ? r.total_a : r.total_b) = s.total;
      (is_a ? r.streams_a : r.streams_b) = std::move(s.streams);
    }
  };
  take(a, true);
  take(b, false);
  RangeDiff d;
  for (auto& [key, r] : by_key) {
    d.roles_only_a += r.count_b == 0;
    d.roles_only_b += r.count_a == 0;
    d.rows.push_back(std::move(r));
  }
  // By |delta|: the roles that changed most first; ties by key, so the order is stable.
  std::stable_sort(d.rows.begin(), d.rows.end(), [](const RangeRoleRow& x, const RangeRoleRow& y) {
    return std::llabs(x.delta()) > std::llabs(y.delta());
  });
  return d;
}

std::string role_label(const RangeRoleRow& r, size_t elements) {
  // From the first element below the step that names an instance ("L4.c4a", "draft1": a '.'
  // or a digit), which tells the layer; else the last `elements`.
  const auto parts = prof::path_elements(r.path);
  size_t first = parts.size() > elements ? parts.size() - elements : 0;
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].find_first_of(".0123456789") != std::string_view::npos) {
      first = std::min(first, i);
      break;
    }
  std::string path = first > 0 ? "..." : "";  // ASCII: ImGui's default font has no ellipsis
  for (size_t i = first; i < parts.size(); ++i) {
    if (!path.empty()) path += '/';
    path += parts[i];
  }
  return path.append(" :: ").append(short_kernel_name(r.name)).append(" #").append(std::to_string(r.ordinal));
}

}  // namespace sl::ui
