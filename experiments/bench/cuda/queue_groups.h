// Reading a stream-to-hardware-queue probe (bench_queues): which streams share a queue, and
// whether the sharing follows "the k-th stream created goes to queue k mod Q". Plain C++, so
// that the CPU tests check it on hand-made matrices.
#pragma once
#include <cstddef>
#include <vector>

namespace sl::bench {

// aliased[i][j] (i < j used): a kernel on stream j waited behind stream i's queued work. Returns
// a group per stream (streams of one group share a queue), numbered by first appearance: the
// group of stream j is the group of the first i < j it aliases, else a new one.
inline std::vector<int> queue_groups(const std::vector<std::vector<bool>>& aliased) {
  const size_t n = aliased.size();
  std::vector<int> group(n, -1);
  int groups = 0;
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < j && group[j] < 0; ++i)
      if (aliased[i][j]) group[j] = group[i];
    if (group[j] < 0) group[j] = groups++;
  }
  return group;
}

// Q when group[k] == k mod Q for every stream (round robin over Q queues, Q = the number of
// groups), else 0. Also 0 when the matrix contradicts its groups (a pair in one group that did
// not alias, or a pair in two groups that did): then the sharing is not a fixed queue mapping;
// and 0 when no two streams shared (as many groups as streams: nothing says "round robin").
inline int round_robin_queues(const std::vector<std::vector<bool>>& aliased, const std::vector<int>& group) {
  const size_t n = group.size();
  int q = 0;
  for (int g : group) q = g + 1 > q ? g + 1 : q;
  if (q == 0 || size_t(q) == n) return 0;
  for (size_t k = 0; k < n; ++k)
    if (group[k] != int(k % size_t(q))) return 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (aliased[i][j] != (group[i] == group[j])) return 0;
  return q;
}

}  // namespace sl::bench
