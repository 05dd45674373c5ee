// Fork/join over a layer's aux streams, as vLLM's two primitives do it (docs/model.md section 10):
//
// execute_in_parallel (phase A): record the fork event on the main stream; for each aux
// function, switch to its stream, wait on the fork, run it, record its done event (aux work
// is enqueued BEFORE the main work); run the main function; the main stream waits on every
// done event.
//
// maybe_execute_in_parallel (phase B): record the fork event; run the main function FIRST;
// then on the aux stream wait, run, record done; the main stream waits on done.
//
// With no aux stream for a role (serial policy, or a gate such as phase A's token threshold),
// everything runs on the main stream: main first, then the aux functions in order.
#pragma once
#include <array>
#include <functional>

#include "model/ops.h"
#include "model/stream_policy.h"

namespace sl {

using StreamFn = std::function<void(Stream)>;

// Faults planted on purpose (check-races' tests, and a real run of the first on the GPU):
// `skip_join`: the current stream does not wait on the aux streams' done events (a missing join);
// `rerecord`: the current stream re-records a done event itself right before waiting on it, so
// the wait no longer orders anything after the aux work;
// `skip_fork`: the aux streams start without waiting on the current stream's fork event, so their
// work overlaps whatever the current stream did before (an MTP layer's indexer rewriting the
// shared top-k buffer while the target's sparse attention may still read it).
// `applied`, when set, counts the joins and forks a fault changed: a fault planted where the
// policy has no such join or fork (serial streams, MTP layers without aux work) changes nothing,
// and a "no race" from it must not pass for a checked fault.
struct JoinFault {
  bool skip_join = false, rerecord = false, skip_fork = false;
  int* applied = nullptr;
  void count() const {
    if (applied) ++*applied;
  }
};

// The join of one aux stream back into `main`, with the planted fault if any.
inline void join(Ops& ops, Stream main, Event done, const JoinFault& f) {
  if (f.skip_join || f.rerecord) f.count();
  if (f.skip_join) return;
  if (f.rerecord) ops.record(done, main);
  ops.wait(main, done);
}

inline void execute_in_parallel(Ops& ops, const LayerStreams& ls, const std::array<Event, 4>& ev, bool parallel,
                                const StreamFn& main_fn, const std::array<StreamFn, 3>& aux_fn,
                                const JoinFault& fault = {}) {
  const Stream main{};
  bool any = false;
  for (int r = 0; r < 3; ++r) any |= aux_fn[size_t(r)] && parallel && ls.has_aux(r);
  if (!any) {
    main_fn(main);
    for (const auto& f : aux_fn)
      if (f) f(main);
    return;
  }
  ops.record(ev[0], main);
  std::array<bool, 3> forked{};
  for (int r = 0; r < 3; ++r) {
    if (!aux_fn[size_t(r)] || !ls.has_aux(r)) continue;
    const Stream aux = ls.aux[size_t(r)];
    if (!fault.skip_fork) ops.wait(aux, ev[0]);
    else fault.count();
    aux_fn[size_t(r)](aux);
    ops.record(ev[size_t(r) + 1], aux);
    forked[size_t(r)] = true;
  }
  main_fn(main);
  for (int r = 0; r < 3; ++r) {
    if (forked[size_t(r)]) join(ops, main, ev[size_t(r) + 1], fault);
    else if (aux_fn[size_t(r)]) aux_fn[size_t(r)](main);  // a role without a stream of its own
  }
}

// maybe_execute_in_parallel from a stream other than the main one (vLLM's indexer forks its
// compressor from aux0 onto aux2).
inline void maybe_execute_in_parallel_from(Ops& ops, Stream main, Stream aux, Event fork, Event done,
                                           const StreamFn& main_fn, const StreamFn& aux_fn,
                                           const JoinFault& fault = {}) {
  if (!aux_fn) {
    main_fn(main);
    return;
  }
  if (aux == main) {
    main_fn(main);
    aux_fn(main);
    return;
  }
  ops.record(fork, main);
  main_fn(main);
  if (!fault.skip_fork) ops.wait(aux, fork);
  else fault.count();
  aux_fn(aux);
  ops.record(done, aux);
  join(ops, main, done, fault);
}

inline void maybe_execute_in_parallel(Ops& ops, Stream aux, Event fork, Event done, const StreamFn& main_fn,
                                      const StreamFn& aux_fn, const JoinFault& fault = {}) {
  maybe_execute_in_parallel_from(ops, Stream{}, aux, fork, done, main_fn, aux_fn, fault);
}

}  // namespace sl
