// The model-side facade over the backend: every op call names itself (docs/model.md names),
// declares the buffers it reads and writes, is recorded in the stream schedule when one is
// attached, and is annotated with a backend range (NVTX on CUDA). The model code calls only
// this; backends only compute.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "model/backend.h"

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

  // ---- ops (see model/backend.h for the semantics)
  void gemm(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& w);
  void gemm_grouped(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& w, int groups);
  void rmsnorm(Stream s, const char* name, const Tensor& out, const Tensor& x, const Tensor& w, float eps);
  void add(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& b);
  void rope(Stream s, const char* name, const Tensor& x, const Tensor& pos, const Tensor& table, bool inverse);
  void copy(Stream s, const char* name, const Tensor& dst, const Tensor& src);
  void embed(Stream s, const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos, bool zero_pos0);
  void argmax(Stream s, const Tensor& out, const Tensor& logits);
  void gather_rows(Stream s, const char* name, const Tensor& out, const Tensor& in, const Tensor& rows);
  void shift_tokens(Stream s, const Tensor& out, const Tensor& tokens, const Tensor& sampled);
  // Speculative decoding (Backend::verify_tokens, accept_drafts, cache_rollback).
  void verify_tokens(Stream s, const Tensor& out, const Tensor& bonus, const Tensor& drafts);
  void accept_drafts(Stream s, const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                     const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos, const Tensor& target,
                     const Tensor& drafts, const Tensor& forced, const Tensor& pos);
  void cache_rollback(Stream s, const char* name, const Tensor& tags, const Tensor& entries, const Tensor& new_len,
                      int ratio, int extent);
  void hc_expand(Stream s, const Tensor& X, const Tensor& e);
  void hc_pre(Stream s, const char* name, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X,
              const Tensor& fn, const Tensor& scale, const Tensor& base, int iters, float hc_eps, float rms_eps);
  // hc_pre followed by the sub-layer's RMSNorm (out = rmsnorm(y, norm_w)); one op named `name`.
  void hc_pre_norm(Stream s, const char* name, const Tensor& out, const Tensor& y, const Tensor& post,
                   const Tensor& comb, const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                   int iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps);
  // f = f1 + f2, then hc_post (Backend::add_hc_post).
  void add_hc_post(Stream s, const char* name, const Tensor& X_out, const Tensor& f, const Tensor& f1,
                   const Tensor& f2, const Tensor& res, const Tensor& post, const Tensor& comb);
  void hc_post(Stream s, const char* name, const Tensor& X_out, const Tensor& f, const Tensor& res,
               const Tensor& post, const Tensor& comb);
  void hc_head(Stream s, const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
               float hc_eps, float rms_eps);
  void mtp_combine(Stream s, const Tensor& X, const Tensor& hp, const Tensor& ep);
  void swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                  const Tensor& seq);
  void compressor_save(Stream s, const char* name, const Tensor& su, const Tensor& sg, const Tensor& tags,
                       const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos, const Tensor& seq,
                       int ratio);
  void compressor_pool(Stream s, const char* name, const Tensor& entries, const Tensor& su, const Tensor& sg,
                       const Tensor& tags, const Tensor& norm_w, const Tensor& table, const Tensor& pos,
                       const Tensor& seq, int ratio, bool overlap, float rms_eps);
  void indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                    const Tensor& pos, const Tensor& seq, int ratio);
  void sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa, const Tensor& swa_tags,
                        const Tensor& comp, const Tensor& sel, const Tensor& sink, const Tensor& pos,
                        const Tensor& seq, int window, CompressedKeys mode, int ratio);
  void route(Stream s, const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
             const Tensor& tid2eid, const Tensor& tokens, float scaling);
  void moe_experts(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const Tensor& w1, const Tensor& w2, const Tensor& w3, float limit, const Tensor& workspace);
  void swiglu(Stream s, const char* name, const Tensor& out, const Tensor& g, const Tensor& u, float limit);
  // Backend::rmsnorm_pair and Backend::rmsnorm_rope.
  void rmsnorm_pair(Stream s, const char* name, const Tensor& out1, const Tensor& x1, const Tensor& w1,
                    const Tensor& out2, const Tensor& x2, const Tensor& w2, float eps);
  void rmsnorm_rope(Stream s, const char* name, const Tensor& out, const Tensor& x, const Tensor& w, float eps,
                    const Tensor& pos, const Tensor& table);
  // out1 = a . w1^T, out2 = a . w2^T (Backend::gemm_pair).
  void gemm_pair(Stream s, const char* name, const Tensor& out1, const Tensor& out2, const Tensor& a,
                 const Tensor& w1, const Tensor& w2);
  // act = swiglu(x . w1^T, x . w3^T); g and u are its scratch (Backend::gemm_swiglu).
  void gemm_swiglu(Stream s, const char* name, const Tensor& act, const Tensor& g, const Tensor& u, const Tensor& x,
                   const Tensor& w1, const Tensor& w3, float limit);

 private:
  // Declares one op: schedule entry (when attached) and the op's annotation range.
  void begin(Stream s, const char* name, std::initializer_list<const Tensor*> reads,
             std::initializer_list<const Tensor*> writes);
  void end();

  Backend& be_;
  Schedule* sched_ = nullptr;
  bool op_ranges_ = true;
  bool muted_ = false;
  std::string scope_;
};

}  // namespace sl
