// The other ranks of a run, as processes: rank 0 (the process the user started) starts ranks
// 1 .. N-1 as copies of itself with the same command line plus `--rank-of R:SOCKET`, each writing
// its output to a log file of its own, and they all join one socket group (core/socket_group.h).
//
// Nothing is left behind or lost: a rank that fails makes rank 0 fail with that rank's status and
// the end of its log; rank 0 failing aborts the group, and the others, finding it gone, end too
// (they also die with rank 0's process: PR_SET_PDEATHSIG). The folder of sockets and logs is
// removed at the end.
#pragma once
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace sl::cli {

class RankProcesses {
 public:
  // Starts ranks 1 .. world-1 from `argv` (main's), in a fresh folder under $TMPDIR (or /tmp).
  RankProcesses(char** argv, int world);
  ~RankProcesses();  // on an error path: waits a few seconds for the ranks to end, then kills them
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Rank 0's place in the group; fails early (not at the join timeout) when a rank's process ends
  // before it joined, with that rank's log.
  std::unique_ptr<Communicator> join(double timeout_s = 60.0);
  // Waits for every rank's process; fails naming the first that did not exit 0, with its log.
  void finish();
  // After rank 0 failed: waits up to grace_s for the ranks to end (then kills them) and describes
  // each that did not exit 0, or "" if all did (or finish() already told of a failed one).
  std::string how_ranks_ended(double grace_s = kGraceSeconds);
  // For a process about to end without unwinding (std::_Exit: a GPU rank gone, rank 0 blocked on
  // the GPU): the ranks' statuses as how_ranks_ended says them, printed on stderr after `why`,
  // and the folder removed.
  void report_and_clean_up(const std::string& why);

 private:
  static constexpr double kGraceSeconds = 5.0;  // for the ranks to end after rank 0 failed
  static constexpr int kStatusUnknown = -1;
  void start(char** argv, int world);
  std::string log_tail(int rank) const;
  std::string describe_exit(int rank, int status) const;
  void reap(double grace_s);

  std::string dir_, socket_;
  std::vector<pid_t> pids_;  // index r - 1 for rank r; -1 once reaped
  std::vector<int> status_;
  std::vector<bool> killed_;  // killed by rank 0 after the grace period
  bool described_ = false;    // a failure already told (finish), or how_ranks_ended said its piece
};

// Rank 0's side of a model split over ranks 1 .. N-1 that are processes: starts them
// (RankProcesses), joins their socket group and, on the CUDA backend, makes the NCCL group over
// it (rank r on GPU r). When a rank is gone while rank 0 waits on the GPU, NCCL's watchdog tells
// the others, says how every rank ended, and ends the process.
class RankGroup {
 public:
  RankGroup(char** argv, int world, bool cuda);
  // What the backend sums over: the NCCL group, or the socket group.
  Communicator& comm() { return gpu_ ? *gpu_ : *host_; }
  std::string gpu_description() const;  // "NCCL 2.28.9, from ..." on the CUDA backend, else ""
  // A normal end: the final barrier with every rank, then every rank's exit (fails naming one
  // that did not end well).
  void finish();
  // After rank 0 failed: stops the group and says how the other ranks ended ("" if well).
  std::string stop_after_failure();

 private:
  RankProcesses processes_;
  std::unique_ptr<Communicator> host_, gpu_;
};

// `--rank-of R:SOCKET` as given to a started rank: its rank and the group's socket.
struct RankOf {
  int rank = 0;
  std::string socket;
};
RankOf parse_rank_of(const std::string& spec);

}  // namespace sl::cli
