#include "model/expert_parallel.h"

#include "core/error.h"

namespace sl {

ExpertPartition partition_experts(int64_t experts, int world, int rank) {
  SL_CHECK(world >= 1 && rank >= 0 && rank < world, "expert parallelism: rank ", rank, " is outside a world of ",
           world);
  SL_CHECK(experts >= world && experts % world == 0, "expert parallelism: ", experts, " routed experts do not split ",
           "evenly over ", world, " ranks (each rank holds the same number)");
  ExpertPartition p;
  p.world = world;
  p.rank = rank;
  p.experts = experts;
  return p;
}

LocalRouting local_routing(const ExpertPartition& p, const int32_t* ids, const float* weights, int64_t T, int k) {
  LocalRouting l;
  const size_t n = size_t(T) * size_t(k);
  l.ids.resize(n);
  l.weights.resize(n);
  for (size_t i = 0; i < n; ++i) {
    SL_CHECK(ids[i] >= 0 && ids[i] < p.experts, "expert parallelism: expert id ", ids[i], " at pair ", i,
             " is outside [0, ", p.experts, ")");
    const bool here = p.owner(ids[i]) == p.rank;
    l.ids[i] = here ? int32_t(ids[i] - p.first()) : 0;
    l.weights[i] = here ? weights[i] : 0.f;
    l.pairs_here += here ? 1 : 0;
  }
  return l;
}

}  // namespace sl
