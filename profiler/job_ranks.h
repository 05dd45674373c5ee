// Several traces as the ranks of one job: each names its rank and the world size in
// `distributedInfo` (as PyTorch writes it and HTA reads it; streamlab run --gpus N writes one
// trace per rank so). `analyze` and `view` read such a set together; these are their checks.
#pragma once
#include <string>
#include <vector>

namespace sl::prof {

struct RankClaim {
  std::string path;
  int rank = -1;       // -1: the trace does not say
  int world_size = 0;  // 0: the trace does not say
};

// Refuses two traces that claim one rank, or that disagree on the world size, naming both files.
void check_rank_claims(const std::vector<RankClaim>& claims);

// True when the traces are a whole job: each names its rank, all in one world of exactly
// claims.size() ranks, no rank twice.
bool whole_job(const std::vector<RankClaim>& claims);

// The ranks of the world the traces name (its largest world_size) that no trace claims, in
// order; empty when no trace names a world size.
std::vector<int> missing_ranks(const std::vector<RankClaim>& claims);

}  // namespace sl::prof
