// The model-side facade over the backend: every op call names itself (docs/model.md names),
// declares the buffers it reads and writes, is recorded in the stream schedule when one is
// attached, and is annotated with a backend range (NVTX on CUDA). The model code calls only
// this; backends only compute.
#pragma once
#include <string>
#include <vector>

#include "core/schedule.h"
#include "model/backend.h"
#include "model/op_io.h"

namespace sl {

class Ops {
 public:
  explicit Ops(Backend& be) : be_(be) {}
  Backend& backend() { return be_; }

  // While a schedule is attached, every op, record and wait is appended to it.
  void attach_schedule(Schedule* s) { sched_ = s; }
  Schedule* schedule() { return sched_; }
  // Op-level annotation ranges cost host time per op; step/layer/phase ranges are always on.
  void set_op_ranges(bool on) { op_ranges_ = on; }
  // While muted, ops, records and waits reach neither the backend nor the schedule: the model
  // code walks through work that a replayed CUDA graph already holds (piecewise graphs, where
  // the host runs the eager regions between graph replays).
  void set_muted(bool on) { muted_ = on; }
  bool muted() const { return muted_; }

  // Nested scope ("prefill/target/L3/attn"): an annotation range plus the schedule's scope.
  class Scope {
   public:
    Scope(Ops& ops, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Ops& ops_;
    size_t prev_len_;
  };

  // ---- streams and events
  void record(Event e, Stream s);
  void wait(Stream s, Event e);

  // ---- ops: one per backend op (model/ops.def), named for the schedule and the annotation
  // range by `label` (e.g. "wq_a", "routed_experts"):
  //   void <op>(Stream s, const char* label, <the op's parameters>);
  // The op's reads and writes (its roles in model/ops.def) become the schedule entry.
#define SL_OP(name, params, args, ...)                            \
  void name(Stream s, const char* label, SL_UNPAREN params) {     \
    if (sched_ && !muted_) {                                      \
      OpIo io;                                                    \
      describe_##name(io, SL_UNPAREN args);                       \
      schedule_op(s, label, io);                                  \
    }                                                             \
    if (op_ranges_) be_.range_push(label);                        \
    if (!muted_) be_.name(s, SL_UNPAREN args);                    \
    if (op_ranges_) be_.range_pop();                              \
  }
#include "model/ops.def"
#undef SL_OP

 private:
  // Appends one op to the attached schedule: its reads and writes as buffer ids.
  void schedule_op(Stream s, const char* label, const OpIo& io);

  Backend& be_;
  Schedule* sched_ = nullptr;
  bool op_ranges_ = true;
  bool muted_ = false;
  std::string scope_;
};

}  // namespace sl
