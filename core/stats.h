// Statistics for A/B verdicts: is B faster than A, slower, the same, or can this run not tell?
//
// Timings come in groups: each child process (a repetition) gives many steps, and most of the
// noise on the lent GPUs is between processes (the same binary differs by up to a few percent
// from one process to the next), not between steps of one process. Treating 5 x 20 steps as
// 100 independent samples would give a falsely narrow interval, so the bootstrap here is
// two-level: resample the processes, then the steps inside each resampled process, and take the
// median of the pooled steps. With one value per group it is the ordinary percentile bootstrap.
//
// The statistic is the relative difference of medians, d = median(B) / median(A) - 1 (d > 0: B
// takes longer). The verdict is an equivalence test against a margin m (criterion.rs and
// two one-sided tests in spirit):
//   CI inside (-m, +m)   -> no meaningful difference
//   CI lower end >= +m   -> A faster (B slower by at least the margin)
//   CI upper end <= -m   -> B faster
//   anything else        -> inconclusive, with the number of repetitions that would settle it
//                           if the interval narrows as 1/sqrt(repetitions).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sl::stats {

double median(std::vector<double> v);            // 0 for an empty vector
double quantile(std::vector<double> v, double q);  // linear interpolation, q in [0, 1]
// Median absolute deviation from the median (not scaled).
double mad(const std::vector<double>& v);

// Samples in groups (one group per process / repetition). Empty groups are ignored.
using Groups = std::vector<std::vector<double>>;
std::vector<double> pooled(const Groups& g);
size_t group_count(const Groups& g);  // non-empty groups

struct BootstrapOptions {
  int resamples = 4000;
  double confidence = 0.95;
  uint64_t seed = 0x5EED;  // fixed: the same inputs give the same interval on every run
};

struct DiffInterval {
  double estimate = 0;  // median(B) / median(A) - 1 on the data as measured
  double lo = 0, hi = 0;  // percentile bootstrap interval of the same statistic
};

// Throws sl::Error when a side has no samples or a median of A is not positive.
DiffInterval bootstrap_relative_diff(const Groups& a, const Groups& b, const BootstrapOptions& o = {});

enum class Verdict { AFaster, BFaster, NoDifference, Inconclusive };
const char* to_string(Verdict v);  // "A faster", "B faster", "no meaningful difference", "inconclusive"

struct VerdictResult {
  Verdict verdict = Verdict::Inconclusive;
  double margin = 0;             // m, a fraction (0.01 = 1 %)
  // Inconclusive only: repetitions (groups per side) that would settle it, estimated from the
  // interval's half-width shrinking as 1/sqrt(n); 0 when no realistic count would (the estimate
  // sits on the margin).
  int repetitions_needed = 0;
  std::string reason;            // one sentence, for reports
};

// `repetitions` = groups per side now (the smaller side).
VerdictResult judge(const DiffInterval& d, double margin, int repetitions);

// The equivalence margin: the larger of `floor` (default 1 %) and the noise measured by running
// the baseline twice (A vs A): the far end of that A-vs-A interval, the largest difference the
// noise alone produced at this confidence.
double equivalence_margin(const DiffInterval& a_vs_a, double floor = 0.01);

}  // namespace sl::stats
