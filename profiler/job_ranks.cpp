#include "profiler/job_ranks.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace sl::prof {

void check_rank_claims(const std::vector<RankClaim>& claims) {
  for (size_t i = 0; i < claims.size(); ++i)
    for (size_t k = i + 1; k < claims.size(); ++k) {
      const RankClaim &a = claims[i], &b = claims[k];
      if (a.rank >= 0 && a.rank == b.rank)
        fail("'", a.path, "' and '", b.path, "' are both rank ", a.rank, " (distributedInfo): give one trace per rank");
      if (a.world_size > 0 && b.world_size > 0 && a.world_size != b.world_size)
        fail("'", a.path, "' says world_size ", a.world_size, " and '", b.path, "' says ", b.world_size,
             ": not the ranks of one job");
    }
}

bool whole_job(const std::vector<RankClaim>& claims) {
  std::set<int> ranks;
  for (const RankClaim& c : claims) {
    if (c.rank < 0 || c.world_size != int(claims.size()) || c.rank >= c.world_size) return false;
    ranks.insert(c.rank);
  }
  return !claims.empty() && ranks.size() == claims.size();
}

std::vector<int> missing_ranks(const std::vector<RankClaim>& claims) {
  int world = 0;
  std::set<int> have;
  for (const RankClaim& c : claims) {
    world = std::max(world, c.world_size);
    if (c.rank >= 0) have.insert(c.rank);
  }
  std::vector<int> out;
  for (int r = 0; r < world; ++r)
    if (!have.count(r)) out.push_back(r);
  return out;
}

}  // namespace sl::prof
