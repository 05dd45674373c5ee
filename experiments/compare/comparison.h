// The comparison compare reports: sides (a policy's processes, a run folder, a trace file),
// their step latencies with spread, every side against the baseline with a bootstrap interval
// and a verdict, and the baseline against itself (A vs A, measured twice): the noise that sets
// the equivalence margin.
//
// A side's latency samples are grouped by process (core/stats.h: the two-level bootstrap), keyed
// by mode ("eager", "graph") and part of the step ("step", "target", "draft"). A trace file gives
// one process: its interval covers step-to-step noise only, and the report says so.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/stats.h"
#include "experiments/compare/measurement.h"

namespace sl::compare {

// "eager/step", "graph/target", ...
std::string sample_key(const std::string& mode, const std::string& part);
inline const char* const kParts[] = {"step", "target", "draft"};
inline const char* const kModes[] = {"eager", "graph"};

struct Side {
  std::string label;    // "per-layer", "shared", "A again", or an input's file name
  std::string policy;   // the stream policy, when known
  std::string origin;   // where it came from: "live", a run folder, a trace file
  std::string system;   // which system the figures are true of (see Measurement::stream_source)
  bool one_process = false;                   // samples from a single process (a trace file)
  std::map<std::string, stats::Groups> samples;  // sample_key -> one group per process
  std::vector<Measurement> runs;              // untimed resources etc. come from these
  std::vector<Measurement> traced_runs;       // the traced process(es), when any
};

struct LatencySummary {
  size_t processes = 0, samples = 0;
  double median_ms = 0;
  double spread_pct = 0;  // median absolute deviation / median, as a percentage
  double min_ms = 0, max_ms = 0;
};
LatencySummary summarize(const stats::Groups& g);

struct MetricDiff {
  std::string key;              // sample_key
  size_t a = 0, b = 0;          // side indexes (b compared against a)
  LatencySummary sa, sb;
  stats::DiffInterval interval; // of median(b) / median(a) - 1
  stats::VerdictResult verdict;
};

struct CompareOptions {
  double margin_floor = 0.01;   // the margin is the larger of this and the A-vs-A noise
  stats::BootstrapOptions bootstrap;
};

struct Comparison {
  std::vector<Side> sides;
  size_t baseline = 0;                   // A
  std::optional<size_t> baseline_again;  // A measured a second time (the noise), not a contender
  std::optional<size_t> reference;       // the no-overlap reference (serial), compared like any side
  std::map<std::string, stats::DiffInterval> noise;  // per key: A vs A again
  std::map<std::string, double> margin;              // per key: the equivalence margin used
  std::vector<MetricDiff> diffs;         // every contender (not A, not A again) x every shared key
  std::vector<std::string> notes;        // caveats the report must show (one process, missing data, ...)
};

// Builds the diffs. The margin of a key is the floor unless A was measured twice, then the
// larger of the floor and that noise. Throws sl::Error when a side has no samples at all.
Comparison compare_sides(std::vector<Side> sides, size_t baseline, std::optional<size_t> baseline_again,
                         std::optional<size_t> reference, const CompareOptions& o = {});

// Groups a side's measurements into samples (one group per process and key).
void add_measurement(Side& side, const Measurement& m);

// The sample keys that any side has, in report order (modes, then parts).
std::vector<std::string> keys_present(const Comparison& c);

// The diff of contender `b` on `key`, or nullptr.
const MetricDiff* find_diff(const Comparison& c, size_t b, const std::string& key);

// --fail-if-slower: the diffs whose interval says B is slower than A by more than pct percent
// (the interval's lower end above pct / 100).
std::vector<const MetricDiff*> slower_than(const Comparison& c, double pct);

}  // namespace sl::compare
