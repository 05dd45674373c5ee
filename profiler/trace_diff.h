// A vs B: the difference between the profiles of two traces of one program (typically under
// two stream policies, or two frameworks' traces of one model). Everything is matched by role
// (kernel_roles.h), never by stream id or correlation id, which differ between runs.
//
// Definitions:
// - role table: for each role key present in both, count / median / total duration in A and B,
//   delta = total B - total A, the stream labels in A and B; roles present in only one are
//   listed apart.
// - changed stream: the role's ops, paired one to one (match_roles: same step, role and
//   occurrence), ran "elsewhere" in B. Streams the program named compare by their role
//   (stream_role: "L3.aux0" and "target.aux0" are both aux0: a per-layer stream and a shared
//   one doing the same job is not a change); unnamed streams ("stream N", ids differ per run)
//   compare through the majority mapping of A's streams to B's over all paired ops.
// - critical path changes: per role, its time on the step paths (kernel + waits, summed over
//   steps) in A and B; roles that join B's paths, leave them, or whose time changed; totals
//   by segment kind.
// - stream-role overlap: the stream-pair overlap matrices folded by stream role (label pairs
//   whose roles are x and y add up, a label with itself left out), so that per-layer and
//   shared stream sets compare.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/trace_profile.h"

namespace sl::prof {

struct DiffOptions {
  size_t top = 20;        // length of the most-changed lists
  std::string label_a = "A", label_b = "B";
};

struct RoleDiff {
  std::string key;
  uint64_t count_a = 0, count_b = 0;
  double median_a = 0, median_b = 0;
  Ns total_a = 0, total_b = 0;
  std::vector<std::string> streams_a, streams_b;
  uint64_t ops_moved = 0;       // paired ops that ran elsewhere in B
  bool changed_stream = false;  // ops_moved > 0
  Ns delta() const { return total_b - total_a; }
};

struct PathRoleDiff {
  std::string key;
  Ns time_a = 0, time_b = 0;      // on the paths, summed over steps
  uint64_t steps_a = 0, steps_b = 0;
  Ns delta() const { return time_b - time_a; }
};

struct PathDiff {
  uint64_t steps_a = 0, steps_b = 0;
  Ns mean_latency_a = 0, mean_latency_b = 0;
  std::array<Ns, kSegmentKinds> by_kind_a{}, by_kind_b{};  // summed over steps
  std::vector<PathRoleDiff> joined;   // on B's paths only, by time in B
  std::vector<PathRoleDiff> left;     // on A's paths only, by time in A
  std::vector<PathRoleDiff> changed;  // on both, by |delta|, first DiffOptions::top
};

struct GroupHiddenDiff {
  std::string group;
  GroupHidden a, b;  // zeros on the side without the group
};

struct StreamRoleOverlap {
  std::string x, y;  // stream roles, x <= y
  Ns a = 0, b = 0;
};

struct TraceDiff {
  DiffOptions options;
  std::vector<RoleDiff> roles;            // in both, by key
  std::vector<RoleStats> only_a, only_b;  // by key
  std::vector<size_t> most_changed;       // into roles: by |delta|, first options.top
  std::vector<size_t> changed_stream;     // into roles: by max(total_a, total_b)
  uint64_t ops_paired = 0, ops_only_a = 0, ops_only_b = 0;
  WaitTotals waits_a, waits_b;
  EventWaitSources wait_sources_a, wait_sources_b;
  PathDiff path;
  ResourceSummary resources_a, resources_b;
  std::vector<Ns> streams_busy_a, streams_busy_b;
  std::vector<GroupHiddenDiff> aux_hidden;          // by group
  std::vector<StreamRoleOverlap> stream_role_overlap;  // by (x, y)
};

TraceDiff diff_profiles(const TraceProfile& a, const TraceProfile& b, const DiffOptions& opts = {});

}  // namespace sl::prof
