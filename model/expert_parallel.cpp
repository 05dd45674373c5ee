#include "model/expert_parallel.h"

#include <algorithm>

#include "core/communicator.h"
#include "core/error.h"

namespace sl {

namespace {
void check_expert_id(const ExpertPartition& p, int32_t id, size_t pair) {
  SL_CHECK(id >= 0 && id < p.experts, "expert parallelism: expert id ", id, " at pair ", pair, " is outside [0, ",
           p.experts, ")");
}
}  // namespace

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
    check_expert_id(p, ids[i], i);
    const bool here = p.owner(ids[i]) == p.rank;
    l.ids[i] = here ? int32_t(ids[i] - p.first()) : 0;
    l.weights[i] = here ? weights[i] : 0.f;
    l.pairs_here += here ? 1 : 0;
  }
  return l;
}

std::vector<float> moe_all_to_all(const ExpertPartition& p, Communicator& comm, const float* x, const int32_t* ids,
                                  const float* weights, int64_t T, int k, int64_t D, const LocalExperts& experts) {
  SL_CHECK(comm.world() == p.world && comm.rank() == p.rank, "expert parallelism: the partition is rank ", p.rank,
           " of ", p.world, ", the communicator rank ", comm.rank(), " of ", comm.world());
  const size_t W = size_t(p.world), P = size_t(T) * size_t(k);
  // Every rank sizes its buffers from the largest T of the group (an all-reduce of the max).
  std::vector<float> tmax(W, 0.f);
  tmax[size_t(p.rank)] = float(T);
  comm.all_reduce_sum(tmax.data(), W);
  const size_t cap = size_t(*std::max_element(tmax.begin(), tmax.end())) * size_t(k);  // rows per (src, dst)
  const size_t row = size_t(D) + 1;  // a sent row: the local expert id, then x

  // 1. Dispatch: pair (t, i) goes to the owner of its expert, in pair order per destination.
  std::vector<float> counts(W, 0.f), send(W * cap * row, 0.f);
  std::vector<std::pair<int, int64_t>> where(P);  // pair -> (destination, its row there)
  for (size_t pr = 0; pr < P; ++pr) {
    check_expert_id(p, ids[pr], pr);
    const int dst = p.owner(ids[pr]);
    const int64_t r = int64_t(counts[size_t(dst)]++);
    where[pr] = {dst, r};
    float* out = send.data() + (size_t(dst) * cap + size_t(r)) * row;
    out[0] = float(ids[pr] - int32_t(int64_t(dst) * p.per_rank()));
    std::copy(x + int64_t(pr / size_t(k)) * D, x + int64_t(pr / size_t(k) + 1) * D, out + 1);
  }
  std::vector<float> recv_counts(W), recv(W * cap * row);
  comm.all_to_all(counts.data(), recv_counts.data(), 1);
  comm.all_to_all(send.data(), recv.data(), cap * row);

  // 2. This rank's experts on every row it received, source by source.
  int64_t n = 0;
  for (float c : recv_counts) n += int64_t(c);
  std::vector<float> xr(size_t(n) * size_t(D)), yr(size_t(n) * size_t(D));
  std::vector<int32_t> lid(static_cast<size_t>(n));
  for (size_t s = 0, at = 0; s < W; ++s)
    for (int64_t r = 0; r < int64_t(recv_counts[s]); ++r, ++at) {
      const float* in = recv.data() + (s * cap + size_t(r)) * row;
      lid[at] = int32_t(in[0]);
      std::copy(in + 1, in + row, xr.data() + at * size_t(D));
    }
  if (n > 0) experts(xr.data(), lid.data(), n, yr.data());

  // 3. Return: each source's rows back in the order it sent them, then the combine in slot order.
  std::vector<float> back(W * cap * size_t(D), 0.f), mine(W * cap * size_t(D));
  for (size_t s = 0, at = 0; s < W; ++s)
    for (int64_t r = 0; r < int64_t(recv_counts[s]); ++r, ++at)
      std::copy(yr.data() + at * size_t(D), yr.data() + (at + 1) * size_t(D), back.data() + (s * cap + size_t(r)) * size_t(D));
  comm.all_to_all(back.data(), mine.data(), cap * size_t(D));
  std::vector<float> out(size_t(T) * size_t(D), 0.f);
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < k; ++i) {
      const size_t pr = size_t(t) * size_t(k) + size_t(i);
      const float w = weights[pr];
      const float* y = mine.data() + (size_t(where[pr].first) * cap + size_t(where[pr].second)) * size_t(D);
      for (int64_t d = 0; d < D; ++d) out[size_t(t * D + d)] += w * y[d];
    }
  return out;
}

}  // namespace sl
