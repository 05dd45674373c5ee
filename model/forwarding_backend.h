// A backend that wraps another one: every call goes to `inner`, and after each op the hook
// after_op() sees the op's name and its tensors with their roles (model/op_io.h). Derive from it
// to watch or disturb a backend (e.g. a test backend that corrupts one op's output) by
// overriding only what differs, instead of re-declaring every op.
#pragma once
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/op_io.h"

namespace sl {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  Backend& inner() { return *inner_; }
  const Backend& inner() const { return *inner_; }

  std::string name() const override { return inner_->name(); }
  DType act_dtype() const override { return inner_->act_dtype(); }
  DType weight_dtype() const override { return inner_->weight_dtype(); }
  bool packed_kv_caches() const override { return inner_->packed_kv_caches(); }

  Tensor alloc(const std::string& n, DType dt, Shape shape, AllocKind k) override { return inner_->alloc(n, dt, shape, k); }
  std::string buffer_name(int b) const override { return inner_->buffer_name(b); }
  void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) override { inner_->upload(s, dst, host, bytes); }
  void download(void* host, const Tensor& src, size_t bytes) override { inner_->download(host, src, bytes); }
  MemoryStats memory() const override { return inner_->memory(); }
  size_t available_bytes() const override { return inner_->available_bytes(); }

  Stream create_stream(const std::string& n, int prio) override { return inner_->create_stream(n, prio); }
  Stream create_pool_stream(const std::string& n, int prio) override { return inner_->create_pool_stream(n, prio); }
  void claim_stream(Stream s, const std::string& roles) override { inner_->claim_stream(s, roles); }
  void destroy_stream(Stream s) override { inner_->destroy_stream(s); }
  Event create_event(const std::string& n) override { return inner_->create_event(n); }
  void record(Event e, Stream s) override { inner_->record(e, s); }
  void wait(Stream s, Event e) override { inner_->wait(s, e); }
  void synchronize() override { inner_->synchronize(); }
  void set_communicator(Communicator* c) override {
    Backend::set_communicator(c);
    inner_->set_communicator(c);
  }
  void graph_begin_capture(int slot) override { inner_->graph_begin_capture(slot); }
  GraphStats graph_end_capture(int slot) override { return inner_->graph_end_capture(slot); }
  void graph_replay(int slot) override { inner_->graph_replay(slot); }
  Event create_timing_mark(const std::string& n) override { return inner_->create_timing_mark(n); }
  void record_timing_mark(Event e, Stream s) override { inner_->record_timing_mark(e, s); }
  double elapsed_ms(Event from, Event to) override { return inner_->elapsed_ms(from, to); }
  void range_push(const char* n) override { inner_->range_push(n); }
  void range_pop() override { inner_->range_pop(); }

  // Every op (fused ones too, so that the inner backend's own fusion runs): the inner op, then
  // the hook.
#define SL_OP(name, params, args, ...)          \
  void name(Stream s, SL_UNPAREN params) override { \
    inner_->name(s, SL_UNPAREN args);           \
    OpIo io;                                    \
    describe_##name(io, SL_UNPAREN args);       \
    after_op(#name, s, io);                     \
  }
#include "model/ops.def"
#undef SL_OP

  size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const override {
    return inner_->moe_workspace_bytes(tokens, k, D, F, E);
  }

 protected:
  // After each op has run on the inner backend (on its stream: synchronize first to read
  // device results).
  virtual void after_op(const char* op, Stream s, const OpIo& io) {}

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace sl
