// A group of GPUs for a split model, over NCCL: one process per GPU, each holding one
// NcclCommunicator. The device collectives the CUDA backend needs (the MoE all-reduce) run on
// NCCL, on the op's stream like a kernel; the few host collectives (and the bootstrap: rank 0's
// NCCL unique id) go through the group the ranks already share (`bootstrap`, e.g. the socket
// group of `--rank-launch processes`).
//
// NCCL is loaded when a group is made (dlopen of libnccl.so.2, or only the file named by
// STREAMLAB_NCCL_LIBRARY), so streamlab builds and runs without it and says clearly when a
// multi-GPU run cannot find it. Only compiled with STREAMLAB_CUDA.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/communicator.h"
#include "core/tensor.h"

namespace sl {

// A rank that ends or aborts while the others wait inside an NCCL collective would leave them
// waiting forever on the GPU, where no host call sees it. So each NcclCommunicator runs a watchdog
// thread that watches the bootstrap group (peer_gone) and, when a rank is gone, ends this process
// with a message saying so (exit status 1): the default, for ranks 1 .. N-1. Rank 0 sets its own
// handler (say how every rank ended, clean up, then end). finish() stops the watchdog at a normal
// end, before the ranks' final barrier.
class NcclCommunicator : public Communicator {
 public:
  // Called on the watchdog thread with the reason; must not return (it ends the process).
  virtual void set_on_peer_gone(std::function<void(const std::string& why)> handler) = 0;
  // buf[i] = the sum over ranks of their buf[i], n values of `dt` (F32 or BF16) in device
  // memory, enqueued on `stream`.
  virtual void all_reduce_sum_device(void* buf, size_t n, DType dt, cudaStream_t stream) = 0;
  // "NCCL 2.28.3, from /path/libnccl.so.2".
  virtual std::string describe() const = 0;
};

// Every rank of `bootstrap` calls this together, with its GPU current (cudaSetDevice). The
// bootstrap group must outlive the result; its rank and world are the NCCL group's.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap);

}  // namespace sl
