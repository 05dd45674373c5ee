#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"

namespace sl::stats {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * double(v.size() - 1);
  const size_t i = size_t(pos);
  const double frac = pos - double(i);
  return i + 1 < v.size() ? v[i] + frac * (v[i + 1] - v[i]) : v[i];
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

double mad(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - m));
  return median(std::move(dev));
}

std::vector<double> pooled(const Groups& g) {
  std::vector<double> out;
  for (const auto& s : g) out.insert(out.end(), s.begin(), s.end());
  return out;
}

size_t group_count(const Groups& g) {
  return size_t(std::count_if(g.begin(), g.end(), [](const auto& s) { return !s.empty(); }));
}

namespace {

// A small deterministic generator (splitmix64 as a sequence): the interval must not change
// between two runs of the same report.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  size_t below(size_t n) { return size_t(splitmix64(state_++) % uint64_t(n)); }

 private:
  uint64_t state_;
};

// One two-level resample of `g` into `out` (cleared): groups with replacement, then values
// with replacement inside each drawn group.
void resample(const std::vector<const std::vector<double>*>& g, Rng& rng, std::vector<double>& out) {
  out.clear();
  for (size_t k = 0; k < g.size(); ++k) {
    const std::vector<double>& grp = *g[rng.below(g.size())];
    for (size_t j = 0; j < grp.size(); ++j) out.push_back(grp[rng.below(grp.size())]);
  }
}

double median_inplace(std::vector<double>& v) {
  const size_t n = v.size();
  auto mid = v.begin() + n / 2;
  std::nth_element(v.begin(), mid, v.end());
  if (n % 2) return *mid;
  const double upper = *mid;
  const double lower = *std::max_element(v.begin(), mid);
  return 0.5 * (lower + upper);
}

std::vector<const std::vector<double>*> non_empty(const Groups& g) {
  std::vector<const std::vector<double>*> out;
  for (const auto& s : g)
    if (!s.empty()) out.push_back(&s);
  return out;
}

}  // namespace

DiffInterval bootstrap_relative_diff(const Groups& a, const Groups& b, const BootstrapOptions& o) {
  const auto ga = non_empty(a), gb = non_empty(b);
  SL_CHECK(!ga.empty() && !gb.empty(), "bootstrap: both sides need samples (A has ", ga.size(), " groups, B ",
           gb.size(), ")");
  SL_CHECK(o.resamples >= 100, "bootstrap: at least 100 resamples, not ", o.resamples);
  SL_CHECK(o.confidence > 0 && o.confidence < 1, "bootstrap: confidence must be in (0, 1), not ", o.confidence);
  const double ma = median(pooled(a)), mb = median(pooled(b));
  SL_CHECK(ma > 0 && std::isfinite(ma) && std::isfinite(mb), "bootstrap: the median of A must be positive and both "
           "finite (A ", ma, ", B ", mb, ")");
  DiffInterval d;
  d.estimate = mb / ma - 1;
  Rng rng(o.seed);
  std::vector<double> ra, rb, diffs;
  diffs.reserve(size_t(o.resamples));
  for (int i = 0; i < o.resamples; ++i) {
    resample(ga, rng, ra);
    resample(gb, rng, rb);
    const double sa = median_inplace(ra);
    if (sa <= 0) continue;  // a resample of non-positive times: cannot form a ratio
    diffs.push_back(median_inplace(rb) / sa - 1);
  }
  SL_CHECK(!diffs.empty(), "bootstrap: every resample of A had a non-positive median");
  const double tail = (1 - o.confidence) / 2;
  d.lo = quantile(diffs, tail);
  d.hi = quantile(diffs, 1 - tail);
  return d;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::AFaster: return "A faster";
    case Verdict::BFaster: return "B faster";
    case Verdict::NoDifference: return "no meaningful difference";
    case Verdict::Inconclusive: return "inconclusive";
  }
  return "?";
}

namespace {

std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f %%", 100 * f);
  return buf;
}

}  // namespace

VerdictResult judge(const DiffInterval& d, double margin, int repetitions) {
  SL_CHECK(margin > 0 && std::isfinite(margin), "verdict: the equivalence margin must be positive, not ", margin);
  VerdictResult r;
  r.margin = margin;
  const std::string ci = "95 % interval of B/A - 1 [" + pct(d.lo) + ", " + pct(d.hi) + "]";
  const std::string band = "+-" + pct(margin).substr(1);
  if (d.lo > -margin && d.hi < margin) {
    r.verdict = Verdict::NoDifference;
    r.reason = ci + " lies inside the margin " + band;
  } else if (d.lo >= margin) {
    r.verdict = Verdict::AFaster;
    r.reason = ci + " lies above the margin " + band + ": B is slower";
  } else if (d.hi <= -margin) {
    r.verdict = Verdict::BFaster;
    r.reason = ci + " lies below the margin " + band + ": B is faster";
  } else {
    r.verdict = Verdict::Inconclusive;
    // The interval must shrink to a half-width that keeps it on one side of a margin edge,
    // centred where it is now.
    const double centre = 0.5 * (d.lo + d.hi), half = 0.5 * (d.hi - d.lo);
    const double room = std::fabs(std::fabs(centre) - margin);
    const int n = std::max(repetitions, 1);
    if (room > 0 && half > 0) {
      const double needed = double(n) * (half / room) * (half / room);
      if (needed <= 10000) r.repetitions_needed = std::max(n + 1, int(std::ceil(needed)));
    }
    r.reason = ci + " straddles the margin " + band;
    r.reason += r.repetitions_needed
                    ? "; about " + std::to_string(r.repetitions_needed) + " repetitions per side would settle it"
                    : "; the difference sits on the margin, more repetitions would not settle it";
  }
  return r;
}

double equivalence_margin(const DiffInterval& a_vs_a, double floor) {
  const double noise = std::max(std::fabs(a_vs_a.lo), std::fabs(a_vs_a.hi));
  return std::max(floor, noise);
}

}  // namespace sl::stats
