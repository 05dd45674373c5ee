// The ranks view's logic without a window: which trace sets are one job's ranks
// (profiler/job_ranks.h), the blocks stacked by rank whatever the order given, on one clock (the
// earliest rank's start is time 0 for all, nothing shifted), a selected range measured on every
// rank at the same instants, and traces that are not a job's ranks refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "profiler/job_ranks.h"
#include "profiler/synthetic.h"
#include "ui/viewer.h"

namespace sl::ui {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobRanks, WholeJobAndRefusals) {
  using prof::RankClaim;
  EXPECT_TRUE(prof::whole_job({{"a", 0, 2}, {"b", 1, 2}}));
  EXPECT_TRUE(prof::whole_job({{"c", 2, 3}, {"a", 0, 3}, {"b", 1, 3}}));
  EXPECT_FALSE(prof::whole_job({{"a", 0, 2}}));                // rank 1 missing
  EXPECT_FALSE(prof::whole_job({{"a", 0, 3}, {"b", 1, 3}}));   // a world of 3, two given
  EXPECT_FALSE(prof::whole_job({{"a", -1, 0}, {"b", 1, 2}}));  // one names no rank
  EXPECT_FALSE(prof::whole_job({{"a", 0, 0}, {"b", 1, 0}}));   // no world size: not known to be whole
  EXPECT_EQ(error_of([] { prof::check_rank_claims({{"a.json", 1, 2}, {"b.json", 1, 2}}); }),
            "'a.json' and 'b.json' are both rank 1 (distributedInfo): give one trace per rank");
  EXPECT_EQ(error_of([] { prof::check_rank_claims({{"a.json", 0, 2}, {"b.json", 1, 4}}); }),
            "'a.json' says world_size 2 and 'b.json' says 4: not the ranks of one job");
  EXPECT_EQ(error_of([] { prof::check_rank_claims({{"a.json", -1, 0}, {"b.json", -1, 0}}); }), "");
  EXPECT_EQ(prof::missing_ranks({{"a", 3, 4}, {"b", 0, 4}}), (std::vector<int>{1, 2}));
  EXPECT_TRUE(prof::missing_ranks({{"a", 1, 2}, {"b", 0, 2}}).empty());
  EXPECT_TRUE(prof::missing_ranks({{"a", -1, 0}, {"b", -1, 0}}).empty()) << "no world size: nothing known missing";
}

// Rank `rank` of a job: one decode step whose kernel starts `late` ns after the others' (a rank
// that waits), the trace starting at `start` on the job's clock.
prof::Trace rank_trace(int rank, int world, prof::Ns start, prof::Ns late) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(1, 0, prof::kNoTime, prof::kNoTime, "main");
  b.nvtx("decode", start, start + 2000);
  b.kernel(1, start + 100 + late, start + 600 + late, "gemm", start + 10, start + 20);
  t.finalize();
  t.rank = rank;
  t.world_size = world;
  return t;
}

TEST(RanksView, StackedByRankOnOneClock) {
  const prof::Ns clock = 1'700'000'000'000'000'000;  // CUPTI-sized times: integer ns survive
  std::vector<RankTrace> given;
  given.push_back({rank_trace(2, 3, clock + 300, 0), "r2.json"});
  given.push_back({rank_trace(0, 3, clock + 100, 0), "r0.json"});
  given.push_back({rank_trace(1, 3, clock + 200, 400), "r1.json"});
  Viewer v(std::move(given), {});
  ASSERT_TRUE(v.ranks());
  EXPECT_FALSE(v.ab());
  ASSERT_EQ(v.block_count(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(v.block(i).name, "rank " + std::to_string(i));
    EXPECT_EQ(v.block(i).source, "r" + std::to_string(i) + ".json");
    EXPECT_EQ(v.block(i).offset, 0) << "ranks share one clock: nothing is shifted";
    EXPECT_EQ(v.block(i).zero, v.block(0).start) << "time 0 is the earliest rank's start";
  }
  EXPECT_LT(v.block(0).start, v.block(1).start);
  EXPECT_LT(v.block(1).start, v.block(2).start);
  // The blocks are stacked: each below the one before, with its header bar.
  EXPECT_EQ(v.block(0).top, 0.f);
  EXPECT_GT(v.block(1).top, v.block(0).track_top.back() - 1);
  EXPECT_GT(v.block(2).top, v.block(1).top);
  // One range, the same instants on every rank: [clock + 300, clock + 700) holds rank 0's kernel
  // (200 .. 700: 400 ns of it), rank 1's late kernel (700 .. 1200: none of it) and rank 2's
  // (400 .. 900: 300 ns).
  v.select_range(clock + 300, clock + 700);
  ASSERT_TRUE(v.block(0).range && v.block(1).range && v.block(2).range);
  EXPECT_EQ(v.block(0).range->gpu_busy, 400);
  EXPECT_EQ(v.block(1).range->gpu_busy, 0);
  EXPECT_EQ(v.block(2).range->gpu_busy, 300);
  EXPECT_FALSE(v.range_diff().has_value()) << "the role diff is the A/B view's";
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(v.block(i).analysis_result(), nullptr) << "rank " << i << " analysed";
}

TEST(RanksView, RefusesTracesThatAreNotRanks) {
  std::vector<RankTrace> twice;
  twice.push_back({rank_trace(1, 2, 0, 0), "a.json"});
  twice.push_back({rank_trace(1, 2, 0, 0), "b.json"});
  EXPECT_EQ(error_of([&] { Viewer v(std::move(twice), {}); }),
            "a.json and b.json are both rank 1: give one trace per rank");
  std::vector<RankTrace> unnamed;
  unnamed.push_back({rank_trace(0, 2, 0, 0), "a.json"});
  unnamed.push_back({rank_trace(1, 2, 0, 0), "b.sqlite"});
  unnamed[1].trace.rank = -1;
  EXPECT_NE(error_of([&] { Viewer v(std::move(unnamed), {}); }).find("b.sqlite: the trace names no rank"),
            std::string::npos);
}

}  // namespace
}  // namespace sl::ui
