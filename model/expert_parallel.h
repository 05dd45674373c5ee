// Expert parallelism (the start of multi-GPU support): the routed experts of every MoE layer split
// over the ranks of a group in contiguous blocks, rank r holding experts [r * E / world,
// (r + 1) * E / world). Two schemes, as serving stacks run them:
// - all-gather: every rank holds every token (the attention and the shared expert are
//   replicated), runs its own experts on the (token, slot) pairs routed to them, and the ranks'
//   partial outputs are summed (all-reduce, or reduce-scatter when the tokens are split
//   afterwards): out[t] = sum over ranks of that rank's pairs of t (local_routing);
// - all-to-all: each rank holds its own tokens; each (token, slot) pair travels to the rank that
//   owns its expert (dispatch), comes back as that expert's output row, and the source combines
//   its pairs in slot order (moe_all_to_all).
#pragma once
#include <cstdint>
#include <functional>
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

// The routed experts of this rank's T tokens (x [T, D], ids and weights [T, k] over all E
// experts) under the all-to-all scheme, on host fp32 buffers: returns out [T, D] = sum over slots
// i, in slot order, of weights[t, i] * Expert_{ids[t, i]}(x[t]). `experts(x_rows, local_ids, n,
// y_rows)` runs this rank's experts on n received rows (local_ids: indices into its own block)
// and writes their output rows. Every rank of `comm` calls it together (T may differ per rank);
// a rank's sends to one other rank are at most T * k rows, the capacity each exchange is sized
// for. Each output row is the owner's expert applied to that one row, so with a backend whose
// rows do not depend on their batch the result equals the whole MoE on one rank bit for bit.
using LocalExperts = std::function<void(const float* x_rows, const int32_t* local_ids, int64_t n, float* y_rows)>;
class Communicator;
std::vector<float> moe_all_to_all(const ExpertPartition& p, Communicator& comm, const float* x, const int32_t* ids,
                                  const float* weights, int64_t T, int k, int64_t D, const LocalExperts& experts);

}  // namespace sl
