// The A/B statistics (core/stats.h) on synthetic samples with known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/stats.h"

using namespace sl::stats;

namespace {

// `reps` groups of `steps` samples: a per-group offset (process noise, sd `between`) plus
// per-step noise (sd `within`), around `centre`.
Groups make_groups(double centre, int reps, int steps, double between, double within, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> n01(0, 1);
  Groups g(static_cast<size_t>(reps));
  for (auto& grp : g) {
    const double offset = between * n01(gen);
    for (int s = 0; s < steps; ++s) grp.push_back(centre * (1 + offset + within * n01(gen)));
  }
  return g;
}

}  // namespace

TEST(Stats, QuantilesByHand) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(quantile({10, 20, 30, 40, 50}, 0.25), 20);
  EXPECT_DOUBLE_EQ(quantile({10, 20}, 0.75), 17.5);
  EXPECT_DOUBLE_EQ(mad({1, 2, 3, 4, 100}), 1);  // |dev| from 3: 2 1 0 1 97 -> median 1
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(Stats, ConstantSamplesGiveAPointInterval) {
  const Groups a{{2, 2, 2}, {2, 2}}, b{{2.2, 2.2}, {2.2}};
  const DiffInterval d = bootstrap_relative_diff(a, b);
  EXPECT_NEAR(d.estimate, 0.1, 1e-12);
  EXPECT_NEAR(d.lo, 0.1, 1e-12);
  EXPECT_NEAR(d.hi, 0.1, 1e-12);
  EXPECT_EQ(judge(d, 0.01, 2).verdict, Verdict::AFaster);
}

TEST(Stats, KnownDifferenceIsFound) {
  // B 5 % slower, 0.5 % process noise, 0.3 % step noise, 5 x 20.
  const Groups a = make_groups(2.0, 5, 20, 0.005, 0.003, 1);
  const Groups b = make_groups(2.1, 5, 20, 0.005, 0.003, 2);
  const DiffInterval d = bootstrap_relative_diff(a, b);
  EXPECT_LT(d.lo, 0.05);
  EXPECT_GT(d.hi, 0.05);
  EXPECT_GT(d.lo, 0.03);
  const VerdictResult v = judge(d, 0.01, 5);
  EXPECT_EQ(v.verdict, Verdict::AFaster) << v.reason;
  // And the other way round.
  EXPECT_EQ(judge(bootstrap_relative_diff(b, a), 0.01, 5).verdict, Verdict::BFaster);
}

TEST(Stats, EqualSamplesAreNoMeaningfulDifference) {
  const Groups a = make_groups(2.0, 5, 20, 0.001, 0.002, 3);
  const Groups b = make_groups(2.0, 5, 20, 0.001, 0.002, 4);
  const DiffInterval d = bootstrap_relative_diff(a, b);
  const VerdictResult v = judge(d, 0.01, 5);
  EXPECT_EQ(v.verdict, Verdict::NoDifference) << v.reason;
  EXPECT_EQ(v.repetitions_needed, 0);
}

TEST(Stats, FewNoisySamplesAreInconclusiveAndSayHowManyMore) {
  // 2 processes per side with 3 % process noise, a 1.5 % true difference, margin 1 %.
  const Groups a = make_groups(2.0, 2, 10, 0.03, 0.002, 5);
  const Groups b = make_groups(2.03, 2, 10, 0.03, 0.002, 6);
  const DiffInterval d = bootstrap_relative_diff(a, b);
  const VerdictResult v = judge(d, 0.01, 2);
  EXPECT_EQ(v.verdict, Verdict::Inconclusive) << v.reason;
  EXPECT_GT(v.repetitions_needed, 2) << v.reason;
  EXPECT_NE(v.reason.find("repetitions"), std::string::npos);
}

TEST(Stats, InconclusiveCountFollowsTheSquareRootRule) {
  // Interval [-0.02, 0.02] around 0 with margin 0.01: the half-width 0.02 must shrink below
  // 0.01 (the room between the centre and the margin), so n grows by (0.02 / 0.01)^2 = 4.
  DiffInterval d;
  d.lo = -0.02;
  d.hi = 0.02;
  const VerdictResult v = judge(d, 0.01, 5);
  EXPECT_EQ(v.verdict, Verdict::Inconclusive);
  EXPECT_EQ(v.repetitions_needed, 20);
  // Centred exactly on the margin: no count settles it.
  d.lo = 0.0;
  d.hi = 0.02;
  EXPECT_EQ(judge(d, 0.01, 5).repetitions_needed, 0);
}

TEST(Stats, ProcessNoiseWidensTheInterval) {
  // The same pooled values, once as 5 processes with large offsets, once as 100 single-value
  // groups: the two-level bootstrap must see the between-process spread.
  const Groups grouped = make_groups(2.0, 5, 20, 0.02, 0.001, 7);
  Groups flat;
  for (double x : pooled(grouped)) flat.push_back({x});
  const Groups other = make_groups(2.0, 5, 20, 0.0, 0.001, 8);
  Groups other_flat;
  for (double x : pooled(other)) other_flat.push_back({x});
  const DiffInterval dg = bootstrap_relative_diff(other, grouped);
  const DiffInterval df = bootstrap_relative_diff(other_flat, flat);
  EXPECT_GT(dg.hi - dg.lo, 2 * (df.hi - df.lo));
}

TEST(Stats, IntervalCoversTheTruthAtAboutItsConfidence) {
  // 200 experiments without a true difference: the 95 % interval should contain 0 in about 95 %
  // of them (binomial sd ~1.5 %; the bootstrap of 8 groups runs a little narrow, so allow 85-100 %).
  int covered = 0;
  BootstrapOptions o;
  o.resamples = 1000;
  for (uint32_t e = 0; e < 200; ++e) {
    const Groups a = make_groups(1.0, 8, 10, 0.01, 0.005, 1000 + 2 * e);
    const Groups b = make_groups(1.0, 8, 10, 0.01, 0.005, 1001 + 2 * e);
    const DiffInterval d = bootstrap_relative_diff(a, b, o);
    covered += d.lo <= 0 && 0 <= d.hi;
  }
  EXPECT_GE(covered, 170);
}

TEST(Stats, DeterministicForTheSameInputs) {
  const Groups a = make_groups(2.0, 5, 20, 0.005, 0.003, 9);
  const Groups b = make_groups(2.0, 5, 20, 0.005, 0.003, 10);
  const DiffInterval d1 = bootstrap_relative_diff(a, b), d2 = bootstrap_relative_diff(a, b);
  EXPECT_EQ(d1.lo, d2.lo);
  EXPECT_EQ(d1.hi, d2.hi);
}

TEST(Stats, MarginIsTheLargerOfFloorAndNoise) {
  DiffInterval noise;
  noise.lo = -0.004;
  noise.hi = 0.006;
  EXPECT_DOUBLE_EQ(equivalence_margin(noise), 0.01);
  noise.lo = -0.025;
  EXPECT_DOUBLE_EQ(equivalence_margin(noise), 0.025);
}

TEST(Stats, BadInputIsAClearError) {
  EXPECT_THROW(bootstrap_relative_diff({}, {{1.0}}), sl::Error);
  EXPECT_THROW(bootstrap_relative_diff({{0.0, 0.0}}, {{1.0}}), sl::Error);
  EXPECT_THROW(judge(DiffInterval{}, 0, 3), sl::Error);
}
