// The A/B viewer's table for a selected time range: what each role (kernel_roles.h: the op's
// place in the program, the same in both traces whatever stream ran it) did inside the range in
// trace A and in trace B. Each side counts the GPU ops that start inside the range on its own
// clock (prof::role_stats_in_window); roles pair up by key. Computed when the selection changes,
// from the profiles made once at load.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/trace.h"
#include "profiler/trace_profile.h"

namespace sl::ui {

struct RangeRoleRow {
  std::string key;                 // role key: "<path> :: <name> #<ordinal>"
  std::string path, name;          // from the side that has the role (A when both)
  uint32_t ordinal = 0;
  uint64_t count_a = 0, count_b = 0;
  double median_a = 0, median_b = 0;  // ns
  prof::Ns total_a = 0, total_b = 0;
  std::vector<std::string> streams_a, streams_b;  // stream labels, sorted
  prof::Ns delta() const { return total_b - total_a; }
};

struct RangeDiff {
  std::vector<RangeRoleRow> rows;  // every role with ops in the range on either side, by |delta| descending, then key
  uint64_t roles_only_a = 0, roles_only_b = 0;
};

// One side of the comparison: a trace, its profile and the range in its own clock.
struct RangeSide {
  const prof::Trace* trace = nullptr;
  const prof::TraceProfile* profile = nullptr;
  prof::Ns from = 0, to = 0;
};

RangeDiff range_diff(const RangeSide& a, const RangeSide& b);

// A short label of a role for the table: its path from the element naming a layer or step
// instance (or its last `elements` elements), the kernel's short name and the ordinal
// (".../L3.c4a/attn/phase_a/rmsnorm :: rmsnorm_kernel #0").
std::string role_label(const RangeRoleRow& r, size_t elements = 3);

}  // namespace sl::ui
