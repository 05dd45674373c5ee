// Everything a comparison of traces needs from one trace, computed once: analyze()'s result,
// each GPU op's role and wait attribution, the critical path of each step, per-role
// statistics, the concurrency profile by streams, the stream-pair overlap matrix, the aux
// hidden fraction per group of roles and the resource counts (AnalysisResult::resources,
// API-derived counts included).
//
// Definitions (beyond the files each part comes from):
// - per-role statistics: over all GPU ops of the role in the trace (every step): count, median
//   and total duration, and the labels of the streams they ran on. Memcpys and memsets have
//   roles too (by their display names).
// - streams busy: time at exactly k streams running kernels, k = 0.., between the first kernel
//   start and the last kernel end (ends before starts at equal times, as in analysis.h).
// - stream-pair overlap: time during which kernels of both streams run, by stream label (streams
//   sharing a label count as one); the diagonal holds each label's busy time.
// - group of a role: one element of its path without instance numbers (the digits that end
//   each '.'-separated part), so that the instances of one job across layers form one group
//   ("L3.c4a" -> "L.c4a", "mtp0.c4a" -> "mtp.c4a", "model.layers.3.mlp" -> "model.layers..mlp").
//   Which element: GroupOptions.
// - aux hidden per group: for the group's kernels not on the main stream (analyze()'s: given,
//   or the stream with most kernel time), the part of their duration during which a
//   main-stream kernel ran / their total duration.
//
// Memory: per GPU op 8 (role) + 32 (wait) + 4 (stream) bytes; everything else is per role, per
// stream or per step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/analysis.h"
#include "profiler/critical_path.h"
#include "profiler/kernel_roles.h"
#include "profiler/trace.h"
#include "profiler/wait_attribution.h"

namespace sl::prof {

struct GroupOptions {
  // The element at this depth below the step element of the path (0 = the first below it).
  // Negative (default): the first element below the step that contains a '.' ("L3.c4a",
  // "mtp0.c4a"), else the first that contains a digit ("layer3"). "(none)" when there is none.
  int depth = -1;
};

struct ProfileOptions {
  AnalysisOptions analysis;  // for analyze(); its main stream is the aux-hidden reference too
  RoleOptions roles;         // the step range
  // waits.epsilon means what analysis.false_dep_epsilon means (both 2 us by default): a caller
  // changing one changes the other, or the two reports disagree on false dependencies.
  WaitOptions waits;
  GroupOptions groups;
};

struct ProfileStream {
  uint32_t pid = 0, id = 0;
  std::string label;  // Trace::stream_label: the program's name ("target.aux0") or "stream N"
  bool is_main = false;
  bool named() const { return label != "stream " + std::to_string(id); }
};

struct RoleStats {
  std::string key;  // KernelRoles::key
  std::string path, name;
  uint32_t ordinal = 0;
  uint64_t count = 0;
  double median = 0;  // ns; of an even count, the mean of the two middle values
  Ns total = 0;
  std::vector<std::string> streams;  // labels, sorted
};

struct StreamOverlap {
  std::vector<std::string> labels;  // sorted
  std::vector<Ns> time;             // labels.size() squared, row-major, symmetric
  Ns at(size_t i, size_t j) const { return time[i * labels.size() + j]; }
};

struct GroupHidden {
  std::string group;
  uint64_t kernels = 0, aux_kernels = 0;
  Ns aux_time = 0, hidden = 0;
  double fraction = 0;  // hidden / aux_time (0 when no aux time)
};

struct TraceProfile {
  ProfileOptions options;
  AnalysisResult analysis;
  KernelRoles roles;
  WaitAttribution waits;
  std::vector<StepCriticalPath> paths;   // per step with ops
  std::vector<RolePathTime> path_roles;  // time on the paths per role
  std::vector<ProfileStream> streams;    // GpuOps' stream numbering
  std::vector<uint32_t> op_stream;       // per GPU op: index into streams
  std::vector<RoleStats> role_stats;     // by total, descending
  std::vector<Ns> streams_busy;          // [k]: time with exactly k streams running kernels
  StreamOverlap overlap;
  std::vector<GroupHidden> aux_hidden;   // by group name

  Ns mean_step_latency() const;          // over paths
};

// The trace must be finalized. Throws sl::Error as analyze() does.
TraceProfile profile_trace(const Trace& t, const ProfileOptions& opts = {});

// Per-role statistics of only the GPU ops that start in [from, to) (the viewer's A/B range
// table). `t` is the trace `p` was computed from.
std::vector<RoleStats> role_stats_in_window(const Trace& t, const TraceProfile& p, Ns from, Ns to);

// The group a role path belongs to (GroupOptions); `step_range` as in RoleOptions.
std::string role_group(const std::string& path, const std::string& step_range, const GroupOptions& o);

}  // namespace sl::prof
