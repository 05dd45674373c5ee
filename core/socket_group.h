// A Communicator whose ranks are processes of one host, joined through a Unix-domain socket
// that rank 0 listens on. It carries the host-side collectives of ranks that run the CPU backend
// in processes of their own (`streamlab run --expert-ranks N --rank-launch processes`), and the
// bootstrap of a GPU group (rank 0's NCCL unique id, broadcast to the others).
//
// The collectives go through rank 0 (a star): each rank sends its input, rank 0 computes every
// rank's result in rank order, exactly as make_fake_group does (so processes give the same bits
// as threads), and sends each its share. That is slow for large buffers and fine for what it is
// for: tests of the partitioning and of the launcher, and a few bytes of bootstrap.
//
// A rank whose process ends (exit, crash, kill) closes its socket; the others' next or current
// collective then throws sl::Error naming that rank, and rank 0 shuts the whole group down, so no
// rank waits for a peer that is gone. A collective whose operation or size differs between ranks
// is refused by name the same way.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/communicator.h"

namespace sl {

// Joins rank `rank` of a `world`-rank group at `socket_path` (at most 107 bytes; rank 0 creates
// it, the others connect, retrying until rank 0 listens). Every rank must join within
// `timeout_s` seconds of rank 0, or the join fails, naming the ranks that did not come. Rank 0
// calls `while_waiting` about once a second while ranks are missing; it may throw to give up
// early (e.g. when a rank's process has already ended).
std::unique_ptr<Communicator> join_socket_group(const std::string& socket_path, int rank, int world,
                                                double timeout_s = 60.0,
                                                const std::function<void()>& while_waiting = {});

}  // namespace sl
