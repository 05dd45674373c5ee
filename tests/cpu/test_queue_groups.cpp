// bench_queues' reading of its probe matrix, on hand-made matrices.
#include <gtest/gtest.h>

#include "experiments/bench/cuda/queue_groups.h"

namespace sl::bench {
namespace {

std::vector<std::vector<bool>> round_robin(size_t n, size_t q) {
  std::vector<std::vector<bool>> a(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) a[i][j] = (i % q) == (j % q);
  return a;
}

TEST(QueueGroups, RoundRobinIsRecognised) {
  for (size_t q : {1u, 2u, 4u, 8u, 32u}) {  // fewer queues than the 40 streams
    const auto a = round_robin(40, q);
    const auto g = queue_groups(a);
    EXPECT_EQ(g[0], 0);
    EXPECT_EQ(g[q % 40], 0);
    EXPECT_EQ(round_robin_queues(a, g), int(q)) << q;
  }
}

TEST(QueueGroups, OtherMappingsAreNot) {
  // Streams 0-3 in queue A, 4-7 in queue B: grouped, but not round robin.
  std::vector<std::vector<bool>> a(8, std::vector<bool>(8, false));
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = i + 1; j < 8; ++j) a[i][j] = (i / 4) == (j / 4);
  const auto g = queue_groups(a);
  EXPECT_EQ(g, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(round_robin_queues(a, g), 0);
  // Round robin over 2 with one probe that did not alias (noise, or no fixed mapping).
  auto b = round_robin(8, 2);
  b[1][7] = false;
  EXPECT_EQ(round_robin_queues(b, queue_groups(b)), 0);
  // No aliasing at all: a group per stream, and no round robin to speak of.
  std::vector<std::vector<bool>> none(5, std::vector<bool>(5, false));
  EXPECT_EQ(queue_groups(none), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(round_robin_queues(none, queue_groups(none)), 0);
}

}  // namespace
}  // namespace sl::bench
