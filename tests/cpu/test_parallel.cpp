// profiler/parallel.h: the parallel sorts give exactly std::stable_sort's order (ties in input
// order) for every thread count, input shape and size around the thresholds; the in-place
// permutation handles cycles inside and across the threads' shares; errors in a parallel_for
// reach the caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "profiler/parallel.h"

using namespace sl::prof;

namespace {

// A record larger than its key, with a payload that tells equal keys apart.
struct Rec {
  int64_t start = 0, end = 0;
  uint32_t payload = 0;
  uint32_t pad[5] = {};
};

struct Key {
  int64_t start, not_end;
  bool operator<(const Key& o) const { return start < o.start || (start == o.start && not_end < o.not_end); }
};

Key key_of(const Rec& r) { return Key{r.start, ~r.end}; }
bool less(const Rec& a, const Rec& b) { return key_of(a) < key_of(b); }

// Inputs of several shapes; few distinct starts and ends make many ties.
std::vector<Rec> make(size_t n, int shape, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Rec> v(n);
  for (size_t i = 0; i < n; ++i) {
    Rec& r = v[i];
    r.payload = uint32_t(i);
    switch (shape) {
      case 0: r.start = int64_t(rng() % 50), r.end = r.start + int64_t(rng() % 3); break;  // ties
      case 1: r.start = int64_t(i) * 10 + int64_t(rng() % 40), r.end = r.start + 5; break;  // nearly sorted
      case 2: r.start = int64_t(n - i), r.end = r.start; break;                              // reversed
      case 3: r.start = int64_t(rng()), r.end = int64_t(rng()); break;                       // random, extremes
      default: r.start = int64_t(i % 4) * int64_t(n) + int64_t(i), r.end = r.start + 1;      // 4 interleaved runs
    }
  }
  if (shape == 3 && n > 2) v[1].end = INT64_MIN, v[2].end = INT64_MAX;  // ~ must not overflow
  return v;
}

bool same(const std::vector<Rec>& a, const std::vector<Rec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].start != b[i].start || a[i].end != b[i].end || a[i].payload != b[i].payload) return false;
  return true;
}

}  // namespace

TEST(Parallel, SortsGiveStableSortsOrder) {
  const size_t big = parallel::kMinParallelElements;
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(100), big - 1, big, big + 7, 3 * big + 11})
    for (int shape = 0; shape < 5; ++shape) {
      const std::vector<Rec> input = make(n, shape, uint32_t(n * 7 + size_t(shape)));
      std::vector<Rec> want = input;
      std::stable_sort(want.begin(), want.end(), less);
      for (unsigned threads : {1u, 2u, 3u, 4u, 8u}) {
        std::vector<Rec> a = input;
        parallel::stable_sort(a.data(), a.size(), less, threads);
        EXPECT_TRUE(same(a, want)) << "records, n " << n << " shape " << shape << " threads " << threads;
        std::vector<Rec> b = input;
        parallel::stable_sort_by_key(b, key_of, threads);
        EXPECT_TRUE(same(b, want)) << "by key, n " << n << " shape " << shape << " threads " << threads;
        EXPECT_EQ(parallel::is_sorted(input.data(), n, less, threads), std::is_sorted(input.begin(), input.end(), less));
        EXPECT_TRUE(parallel::is_sorted(want.data(), n, less, threads));
      }
    }
}

// A rotation is one cycle through every share; a reversal pairs positions of far-apart shares;
// a random permutation mixes short and long cycles.
TEST(Parallel, PermuteInPlace) {
  const size_t n = 10007;
  std::vector<std::vector<size_t>> perms;
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  perms.push_back(p);
  std::rotate(p.begin(), p.begin() + 1, p.end());
  perms.push_back(p);
  std::reverse(p.begin(), p.end());
  perms.push_back(p);
  std::shuffle(p.begin(), p.end(), std::mt19937(3));
  perms.push_back(p);
  for (const auto& src : perms)
    for (unsigned threads : {1u, 2u, 5u, 16u}) {
      std::vector<uint64_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = i * 1000003;
      parallel::detail::permute(v.data(), n, [&](size_t j) { return src[j]; }, threads);
      bool ok = true;
      for (size_t j = 0; j < n; ++j) ok &= v[j] == src[j] * 1000003;
      EXPECT_TRUE(ok) << "threads " << threads;
    }
}

TEST(Parallel, ForRunsEveryItemOnceAndPassesErrorsOn) {
  for (unsigned threads : {1u, 3u, 8u}) {
    std::vector<std::atomic<int>> hits(1000);
    parallel::parallel_for(threads, hits.size(), [&](size_t i) { hits[i]++; });
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](auto& h) { return h.load() == 1; }));
    EXPECT_THROW(parallel::parallel_for(threads, 100,
                                        [](size_t i) {
                                          if (i == 42) throw std::runtime_error("item 42");
                                        }),
                 std::runtime_error);
  }
  parallel::parallel_for(4, 0, [](size_t) { FAIL() << "no items"; });
}

TEST(Parallel, PrefaultKeepsContents) {
  std::vector<char> v(size_t(3) << 20, 'x');
  parallel::prefault(v.data() + 5, v.size() - 9);
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](char c) { return c == 'x'; }));
  std::vector<char> fresh;
  fresh.reserve(size_t(8) << 20);
  parallel::prefault(fresh.data(), fresh.capacity());
  fresh.resize(fresh.capacity());
  EXPECT_TRUE(std::all_of(fresh.begin(), fresh.end(), [](char c) { return c == 0; }));
}
