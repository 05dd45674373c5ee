#include "model/ops.h"

namespace sl {

Ops::Scope::Scope(Ops& ops, const std::string& name) : ops_(ops), prev_len_(ops.scope_.size()) {
  ops_.scope_ += (ops_.scope_.empty() ? "" : "/") + name;
  ops_.be_.range_push(name.c_str());
}

Ops::Scope::~Scope() {
  ops_.be_.range_pop();
  ops_.scope_.resize(prev_len_);
}

void Ops::schedule_op(Stream s, const char* label, const OpIo& io) {
  std::vector<int> r, w;
  for (const OpIo::Arg& a : io) {
    if (OpIo::reads(a.role)) r.push_back(a.tensor->buffer);
    if (OpIo::writes(a.role)) w.push_back(a.tensor->buffer);
  }
  for (const OpIo::Arg& a : io) sched_->name_buffer(a.tensor->buffer, be_.buffer_name(a.tensor->buffer));
  sched_->op(s.id, label, scope_, std::move(r), std::move(w));
}

void Ops::record(Event e, Stream s) {
  if (sched_ && !muted_) sched_->record(e.id, s.id, scope_);
  if (!muted_) be_.record(e, s);
}

void Ops::wait(Stream s, Event e) {
  if (sched_ && !muted_) sched_->wait(s.id, e.id, scope_);
  if (!muted_) be_.wait(s, e);
}

}  // namespace sl
