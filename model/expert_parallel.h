// Expert parallelism (the start of multi-GPU support): the routed experts of every MoE layer split
// over the ranks of a group in contiguous blocks, rank r holding experts [r * E / world,
// (r + 1) * E / world). Under the all-gather scheme every rank holds every token (the attention
// and the shared expert are replicated), runs its own experts on the (token, slot) pairs routed
// to them, and the ranks' partial outputs are summed (all-reduce, or reduce-scatter when the
// tokens are split afterwards): out[t] = sum over ranks of that rank's pairs of t.
#pragma once
#include <cstdint>
#include <vector>

namespace sl {

struct ExpertPartition {
  int world = 1, rank = 0;
  int64_t experts = 0;  // E, over all ranks
  int64_t per_rank() const { return experts / world; }
  int64_t first() const { return int64_t(rank) * per_rank(); }
  int owner(int64_t e) const { return int(e / per_rank()); }
};

// Refuses a split that leaves ranks with different expert counts, naming both numbers.
ExpertPartition partition_experts(int64_t experts, int world, int rank);

// This rank's share of a routing (ids, weights: [T, k]) for its local expert GEMMs: ids of its
// own experts become local indices (id - first()), and the pairs routed to other ranks keep a
// valid local id (0) with weight 0, so that the rank's moe_experts call adds nothing for them.
struct LocalRouting {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t pairs_here = 0;  // (token, slot) pairs this rank computes
};
LocalRouting local_routing(const ExpertPartition& p, const int32_t* ids, const float* weights, int64_t T, int k);

}  // namespace sl
