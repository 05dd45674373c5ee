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

void Ops::begin(Stream s, const char* name, std::initializer_list<const Tensor*> reads,
                std::initializer_list<const Tensor*> writes) {
  if (sched_ && !muted_) {
    std::vector<int> r, w;
    for (const Tensor* t : reads)
      if (t && !t->empty()) r.push_back(t->buffer);
    for (const Tensor* t : writes)
      if (t && !t->empty()) w.push_back(t->buffer);
    for (int id : r) sched_->name_buffer(id, be_.buffer_name(id));
    for (int id : w) sched_->name_buffer(id, be_.buffer_name(id));
    sched_->op(s.id, name, scope_, std::move(r), std::move(w));
  }
  if (op_ranges_) be_.range_push(name);
}

void Ops::end() {
  if (op_ranges_) be_.range_pop();
}

void Ops::record(Event e, Stream s) {
  if (sched_ && !muted_) sched_->record(e.id, s.id, scope_);
  if (!muted_) be_.record(e, s);
}

void Ops::wait(Stream s, Event e) {
  if (sched_ && !muted_) sched_->wait(s.id, e.id, scope_);
  if (!muted_) be_.wait(s, e);
}

void Ops::gemm(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& w) {
  begin(s, name, {&a, &w}, {&out});
  if (!muted_) be_.gemm(s, out, a, w);
  end();
}

void Ops::gemm_grouped(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& w, int groups) {
  begin(s, name, {&a, &w}, {&out});
  if (!muted_) be_.gemm_grouped(s, out, a, w, groups);
  end();
}

void Ops::rmsnorm(Stream s, const char* name, const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  begin(s, name, {&x, &w}, {&out});
  if (!muted_) be_.rmsnorm(s, out, x, w, eps);
  end();
}

void Ops::add(Stream s, const char* name, const Tensor& out, const Tensor& a, const Tensor& b) {
  begin(s, name, {&a, &b}, {&out});
  if (!muted_) be_.add(s, out, a, b);
  end();
}

void Ops::rope(Stream s, const char* name, const Tensor& x, const Tensor& pos, const Tensor& table, bool inverse) {
  begin(s, name, {&x, &pos, &table}, {&x});
  if (!muted_) be_.rope(s, x, pos, table, inverse);
  end();
}

void Ops::copy(Stream s, const char* name, const Tensor& dst, const Tensor& src) {
  begin(s, name, {&src}, {&dst});
  if (!muted_) be_.copy(s, dst, src);
  end();
}

void Ops::embed(Stream s, const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos,
                bool zero_pos0) {
  begin(s, "embed", {&ids, &table, &pos}, {&out});
  if (!muted_) be_.embed(s, out, ids, table, pos, zero_pos0);
  end();
}

void Ops::argmax(Stream s, const Tensor& out, const Tensor& logits) {
  begin(s, "argmax", {&logits}, {&out});
  if (!muted_) be_.argmax(s, out, logits);
  end();
}

void Ops::gather_rows(Stream s, const char* name, const Tensor& out, const Tensor& in, const Tensor& rows) {
  begin(s, name, {&in, &rows}, {&out});
  if (!muted_) be_.gather_rows(s, out, in, rows);
  end();
}

void Ops::shift_tokens(Stream s, const Tensor& out, const Tensor& tokens, const Tensor& sampled) {
  begin(s, "shift_tokens", {&tokens, &sampled}, {&out});
  if (!muted_) be_.shift_tokens(s, out, tokens, sampled);
  end();
}

void Ops::verify_tokens(Stream s, const Tensor& out, const Tensor& bonus, const Tensor& drafts) {
  begin(s, "verify_tokens", {&bonus, &drafts}, {&out});
  if (!muted_) be_.verify_tokens(s, out, bonus, drafts);
  end();
}

void Ops::accept_drafts(Stream s, const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                        const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos,
                        const Tensor& target, const Tensor& drafts, const Tensor& forced, const Tensor& pos) {
  begin(s, "accept_drafts", {&target, &drafts, &forced, &pos},
        {&accepted, &bonus, &new_len, &mtp_tokens, &last_rows, &draft_pos});
  if (!muted_) be_.accept_drafts(s, accepted, bonus, new_len, mtp_tokens, last_rows, draft_pos, target, drafts, forced, pos);
  end();
}

void Ops::cache_rollback(Stream s, const char* name, const Tensor& tags, const Tensor& entries, const Tensor& new_len,
                         int ratio, int extent) {
  // Read-modify-write: the tags and entries are read (compared, kept or cleared) and written.
  begin(s, name, {&tags, &entries, &new_len}, {&tags, &entries});
  if (!muted_) be_.cache_rollback(s, tags, entries, new_len, ratio, extent);
  end();
}

void Ops::hc_expand(Stream s, const Tensor& X, const Tensor& e) {
  begin(s, "hc_expand", {&e}, {&X});
  if (!muted_) be_.hc_expand(s, X, e);
  end();
}

void Ops::hc_pre(Stream s, const char* name, const Tensor& y, const Tensor& post, const Tensor& comb,
                 const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base, int iters, float hc_eps,
                 float rms_eps) {
  begin(s, name, {&X, &fn, &scale, &base}, {&y, &post, &comb});
  if (!muted_) be_.hc_pre(s, y, post, comb, X, fn, scale, base, iters, hc_eps, rms_eps);
  end();
}

void Ops::hc_pre_norm(Stream s, const char* name, const Tensor& out, const Tensor& y, const Tensor& post,
                      const Tensor& comb, const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                      int iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps) {
  begin(s, name, {&X, &fn, &scale, &base, &norm_w}, {&y, &post, &comb, &out});
  if (!muted_) be_.hc_pre_norm(s, out, y, post, comb, X, fn, scale, base, iters, hc_eps, rms_eps, norm_w, norm_eps);
  end();
}

void Ops::add_hc_post(Stream s, const char* name, const Tensor& X_out, const Tensor& f, const Tensor& f1,
                      const Tensor& f2, const Tensor& res, const Tensor& post, const Tensor& comb) {
  begin(s, name, {&f1, &f2, &res, &post, &comb}, {&f, &X_out});
  if (!muted_) be_.add_hc_post(s, X_out, f, f1, f2, res, post, comb);
  end();
}

void Ops::hc_post(Stream s, const char* name, const Tensor& X_out, const Tensor& f, const Tensor& res,
                  const Tensor& post, const Tensor& comb) {
  begin(s, name, {&f, &res, &post, &comb}, {&X_out});
  if (!muted_) be_.hc_post(s, X_out, f, res, post, comb);
  end();
}

void Ops::hc_head(Stream s, const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale,
                  const Tensor& base, float hc_eps, float rms_eps) {
  begin(s, "hc_head", {&X, &fn, &scale, &base}, {&h});
  if (!muted_) be_.hc_head(s, h, X, fn, scale, base, hc_eps, rms_eps);
  end();
}

void Ops::mtp_combine(Stream s, const Tensor& X, const Tensor& hp, const Tensor& ep) {
  begin(s, "mtp_combine", {&hp, &ep}, {&X});
  if (!muted_) be_.mtp_combine(s, X, hp, ep);
  end();
}

void Ops::swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                     const Tensor& seq) {
  begin(s, "swa_insert", {&k, &pos, &seq}, {&cache, &tags});
  if (!muted_) be_.swa_insert(s, cache, tags, k, pos, seq);
  end();
}

void Ops::compressor_save(Stream s, const char* name, const Tensor& su, const Tensor& sg, const Tensor& tags,
                          const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos, const Tensor& seq,
                          int ratio) {
  begin(s, name, {&u, &g, &ape, &pos, &seq}, {&su, &sg, &tags});
  if (!muted_) be_.compressor_save(s, su, sg, tags, u, g, ape, pos, seq, ratio);
  end();
}

void Ops::compressor_pool(Stream s, const char* name, const Tensor& entries, const Tensor& su, const Tensor& sg,
                          const Tensor& tags, const Tensor& norm_w, const Tensor& table, const Tensor& pos,
                          const Tensor& seq, int ratio, bool overlap, float rms_eps) {
  begin(s, name, {&su, &sg, &tags, &norm_w, &table, &pos, &seq}, {&entries});
  if (!muted_) be_.compressor_pool(s, entries, su, sg, tags, norm_w, table, pos, seq, ratio, overlap, rms_eps);
  end();
}

void Ops::indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                       const Tensor& pos, const Tensor& seq, int ratio) {
  begin(s, "indexer_topk", {&q, &w, &keys, &pos, &seq}, {&sel});
  if (!muted_) be_.indexer_topk(s, sel, q, w, keys, pos, seq, ratio);
  end();
}

void Ops::sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa, const Tensor& swa_tags,
                           const Tensor& comp, const Tensor& sel, const Tensor& sink, const Tensor& pos,
                           const Tensor& seq, int window, CompressedKeys mode, int ratio) {
  begin(s, "sparse_attention", {&q, &swa, &swa_tags, &comp, &sel, &sink, &pos, &seq}, {&o});
  if (!muted_) be_.sparse_attention(s, o, q, swa, swa_tags, comp, sel, sink, pos, seq, window, mode, ratio);
  end();
}

void Ops::route(Stream s, const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
                const Tensor& tid2eid, const Tensor& tokens, float scaling) {
  begin(s, "route", {&logits, &bias, &tid2eid, &tokens}, {&ids, &weights});
  if (!muted_) be_.route(s, ids, weights, logits, bias, tid2eid, tokens, scaling);
  end();
}

void Ops::moe_experts(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Tensor& w1, const Tensor& w2, const Tensor& w3, float limit, const Tensor& workspace) {
  begin(s, "routed_experts", {&x, &ids, &weights, &w1, &w2, &w3}, {&out, &workspace});
  if (!muted_) be_.moe_experts(s, out, x, ids, weights, w1, w2, w3, limit, workspace);
  end();
}

void Ops::rmsnorm_pair(Stream s, const char* name, const Tensor& out1, const Tensor& x1, const Tensor& w1,
                       const Tensor& out2, const Tensor& x2, const Tensor& w2, float eps) {
  begin(s, name, {&x1, &w1, &x2, &w2}, {&out1, &out2});
  if (!muted_) be_.rmsnorm_pair(s, out1, x1, w1, eps, out2, x2, w2, eps);
  end();
}

void Ops::rmsnorm_rope(Stream s, const char* name, const Tensor& out, const Tensor& x, const Tensor& w, float eps,
                       const Tensor& pos, const Tensor& table) {
  begin(s, name, {&x, &w, &pos, &table}, {&out});
  if (!muted_) be_.rmsnorm_rope(s, out, x, w, eps, pos, table);
  end();
}

void Ops::gemm_pair(Stream s, const char* name, const Tensor& out1, const Tensor& out2, const Tensor& a,
                    const Tensor& w1, const Tensor& w2) {
  begin(s, name, {&a, &w1, &w2}, {&out1, &out2});
  if (!muted_) be_.gemm_pair(s, out1, out2, a, w1, w2);
  end();
}

void Ops::gemm_swiglu(Stream s, const char* name, const Tensor& act, const Tensor& g, const Tensor& u,
                      const Tensor& x, const Tensor& w1, const Tensor& w3, float limit) {
  begin(s, name, {&x, &w1, &w3}, {&act, &g, &u});
  if (!muted_) be_.gemm_swiglu(s, act, g, u, x, w1, w3, limit);
  end();
}

void Ops::swiglu(Stream s, const char* name, const Tensor& out, const Tensor& g, const Tensor& u, float limit) {
  begin(s, name, {&g, &u}, {&out});
  if (!muted_) be_.swiglu(s, out, g, u, limit);
  end();
}

}  // namespace sl
