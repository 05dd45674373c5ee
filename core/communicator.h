// The collectives a model split over several GPUs needs (expert and tensor parallelism), with
// the meaning NCCL gives them, on host fp32 buffers. One Communicator per rank; every rank of a
// group calls the same collectives in the same order with the same sizes.
//
// make_fake_group is an in-process group for tests on the CPU: each rank runs on a thread of
// its own, and a collective returns on a rank once every rank has called it. Sums run in rank
// order, so a result does not depend on thread timing. (The NCCL communicator of a multi-GPU run
// implements the same interface on device buffers.)
#pragma once
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace sl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // buf[i] = the sum over ranks of their buf[i] (in place, n values).
  virtual void all_reduce_sum(float* buf, size_t n) = 0;
  // out[r * n + i] = rank r's in[i]: out holds world * n values.
  virtual void all_gather(const float* in, float* out, size_t n) = 0;
  // out[i] = the sum over ranks r of their in[rank() * n + i]: in holds world * n values, out n.
  virtual void reduce_scatter_sum(const float* in, float* out, size_t n) = 0;
  // out[r * n + i] = rank r's in[rank() * n + i]: each rank sends its r-th chunk to rank r.
  virtual void all_to_all(const float* in, float* out, size_t n) = 0;
  // data[0 .. bytes) = rank 0's data[0 .. bytes) on every rank (the bootstrap of a GPU group).
  virtual void broadcast(void* data, size_t bytes) = 0;
  // A rank that fails stops the group: every collective waiting now or called later, on any
  // rank, throws sl::Error naming `why`, instead of waiting forever for the failed rank.
  virtual void abort(const std::string& why) = 0;
  // Waits up to timeout_ms for a sign that another rank ended or aborted the group, without
  // taking part in any collective (a watchdog thread may call it while the owner works); true
  // and *why set if one did. For groups whose work can block where their collectives cannot see
  // it (NCCL kernels waiting on the GPU for a rank that is gone).
  virtual bool peer_gone(int timeout_ms, std::string* why) = 0;
  // The end of a run: every rank calls it, and it returns once all have (a barrier), so that no
  // rank's normal exit looks like a failure to a rank still watching (peer_gone).
  virtual void finish() {
    float one = 1.f;
    all_reduce_sum(&one, 1);
  }
};

// Aborts `comm` (when not null) if the scope it guards is left by an exception: the other ranks
// then stop instead of waiting for this one in their next collective.
class AbortOnThrow {
 public:
  AbortOnThrow(Communicator* comm, std::string why) : comm_(comm), why_(std::move(why)) {}
  ~AbortOnThrow() {
    if (comm_ && std::uncaught_exceptions() > 0) comm_->abort(why_);
  }
  AbortOnThrow(const AbortOnThrow&) = delete;
  AbortOnThrow& operator=(const AbortOnThrow&) = delete;

 private:
  Communicator* comm_;
  std::string why_;
};

// world >= 1 communicators sharing one in-process group (rank i at index i).
std::vector<std::unique_ptr<Communicator>> make_fake_group(int world);

}  // namespace sl
