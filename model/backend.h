// The backend interface: the small set of ops the DeepSeek V4 + MTP forward is written
// against (docs/model.md names). The model code (model/*.cpp) calls them through the facade
// (model/ops.h), which records the stream schedule; the CPU fp32 reference (model/cpu) and the
// CUDA backend (model/cuda) implement them. Each op is declared once, in model/ops.def: its
// parameters, which tensors it reads and writes, and what it computes.
//
// Conventions shared by every op:
// - Every op takes the stream it runs on first. The CPU backend runs ops in program order and
//   treats streams as labels; the CUDA backend enqueues on the matching cudaStream_t.
// - Tensors are contiguous, row-major, in the backend's memory. "Activation" tensors have the
//   backend's act_dtype() (F32 on CPU, BF16 on CUDA); tensors documented as F32 or I32 are
//   always that type. Weights have weight_dtype() unless documented F32.
// - A token batch is T rows. `pos` (I32 [T]) is each token's absolute position in its own
//   sequence, `seq` (I32 [T]) the sequence (= cache row) it belongs to, in [0, B).
// - Caches are per sequence: dim 0 is B. Ring caches are indexed by position mod capacity and
//   carry a position tag per slot (I32, -1 = empty); a reader uses a slot only if its tag
//   equals the position it wants, so a slot never written (e.g. an MTP layer that only some
//   draft steps visit) is never read as data.
// - All reductions accumulate in fp32. No op allocates memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

// Removes the parentheses around an op's parameter list in model/ops.def.
#define SL_UNPAREN(...) __VA_ARGS__

namespace sl {

class Communicator;  // core/communicator.h

struct Stream {
  int id = 0;  // 0 = the main ("current") stream
  bool operator==(const Stream& o) const { return id == o.id; }
  bool operator!=(const Stream& o) const { return id != o.id; }
};
struct Event {
  int id = -1;
};

// Which key set the sparse attention reads beyond the sliding window (docs/model.md 5.5).
enum class CompressedKeys { None, All, Selected };

struct MemoryStats {
  size_t weights_bytes = 0;      // allocated with kind Weight
  size_t activations_bytes = 0;  // everything else (activations, caches, workspaces)
  size_t peak_bytes = 0;         // high-water mark of the arena / pool
  size_t library_bytes = 0;      // e.g. cuBLAS workspaces (CUDA)
  size_t blas_handles = 0;       // cuBLAS handles created (CUDA)
  size_t blas_workspaces = 0;    // cuBLAS workspaces allocated, one per (handle, stream) (CUDA)
  size_t streams_created = 0;    // CUDA streams the backend created (besides the main stream)
};

enum class AllocKind { Weight, Activation, Cache, Workspace };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DType act_dtype() const = 0;
  virtual DType weight_dtype() const = 0;
  // Whether the cache ops take FP8 KV caches packed as vLLM stores them (U8 entries,
  // model/kv_fp8_entry.h); a backend that does not gets --kv-cache fp8 emulated in act_dtype().
  virtual bool packed_kv_caches() const { return false; }

  // ---------------------------------------------------------------- memory
  // Returns zero-initialised memory. The name is kept for errors and schedules.
  virtual Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) = 0;
  virtual std::string buffer_name(int buffer) const = 0;
  // Host <-> backend copies; upload is ordered on `s`, download synchronises everything.
  virtual void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const Tensor& src, size_t bytes) = 0;
  virtual MemoryStats memory() const = 0;
  // Memory the backend could still allocate (host: MemAvailable; CUDA: the device's free memory),
  // so that a model too large is refused before allocating; 0 when unknown.
  virtual size_t available_bytes() const { return 0; }

  // ---------------------------------------------------------------- streams and events
  // A stream as a C++ engine creates it: on CUDA, with its own cuBLAS handle and workspace.
  virtual Stream create_stream(const std::string& name, int priority) = 0;
  // A stream of a PyTorch-style pool (model/stream_policy.h, torch source): created bare; GEMMs
  // on it use the backend's one per-thread cuBLAS handle with a workspace for this stream
  // allocated at its first GEMM. `claim_stream` marks it drawn (given to a user), naming the roles
  // it serves; only drawn streams get what using a stream needs (the CUDA backend's op scratch).
  // Backends without per-stream resources treat both as create_stream.
  virtual Stream create_pool_stream(const std::string& name, int priority) { return create_stream(name, priority); }
  virtual void claim_stream(Stream s, const std::string& roles) {}
  virtual void destroy_stream(Stream s) = 0;
  virtual Event create_event(const std::string& name) = 0;
  virtual void record(Event e, Stream s) = 0;  // e completes when s reaches this point
  virtual void wait(Stream s, Event e) = 0;    // later work on s waits for e
  virtual void synchronize() = 0;              // host waits for all streams
  // CUDA graphs: capture everything enqueued on the main stream (and the streams it forks to)
  // between begin and end into graph `slot`, instantiate it, and replay it later. Backends
  // without graphs throw.
  struct GraphStats {
    double capture_ms = 0, instantiate_ms = 0;
    size_t nodes = 0, edges = 0;
  };
  virtual void graph_begin_capture(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  virtual GraphStats graph_end_capture(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  virtual void graph_replay(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  // Timing marks: points on a stream whose time can be read back after synchronize(), also
  // from inside a CUDA graph (where a mark is captured as an event-record node), so that the
  // parts of a step (target, drafts) can be timed without a tracer. The defaults, for backends
  // that run ops in program order on the host, read the host clock when the mark is recorded.
  virtual Event create_timing_mark(const std::string& name);
  virtual void record_timing_mark(Event e, Stream s);
  virtual double elapsed_ms(Event from, Event to);  // from the mark `from` to the mark `to`
  // Annotation ranges (NVTX on CUDA; no-op on CPU). Names follow docs/model.md.
  virtual void range_push(const char* name) {}
  virtual void range_pop() {}

  // ---------------------------------------------------------------- ops
  // Every compute op, declared once in model/ops.def (its parameters, its tensors' roles and
  // its semantics): `virtual void <op>(Stream s, <parameters>)`. Fused ops have a default that
  // runs their parts (model/fused_ops.cpp); the others are pure.
#define SL_OP(name, params, args, ...) virtual void name(Stream s, SL_UNPAREN params) = 0;
#define SL_FUSED_OP(name, params, args, ...) virtual void name(Stream s, SL_UNPAREN params);
#include "model/ops.def"
#undef SL_OP
#undef SL_FUSED_OP

  // Bytes of the `workspace` that moe_experts needs for these sizes.
  virtual size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const = 0;

  // The group that all_reduce_sum sums over when a model is split over ranks (expert
  // parallelism, model/expert_parallel.h); null (the default): one rank. Not owned: it must
  // outlive the ops that use it.
  virtual void set_communicator(Communicator* c) { comm_ = c; }
  Communicator* communicator() const { return comm_; }

 private:
  Communicator* comm_ = nullptr;
  std::vector<double> host_marks_ms_;  // the default timing marks (host clock, ms)
};

}  // namespace sl
