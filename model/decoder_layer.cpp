// The target forward (docs/model.md 2), the decoder layer (docs/model.md 4) and the LM head.
#include <algorithm>

#include "model/model_internal.h"

namespace sl {

std::string layer_label(const ModelConfig& c, int layer) {
  return layer < c.num_hidden_layers ? "L" + std::to_string(layer)
                                     : "mtp" + std::to_string(layer - c.num_hidden_layers);
}

DeepSeekV4::Buffers::Buffers(Backend& be, const ModelConfig& c, const RunShape& shape) {
  const int64_t B = shape.batch, T = int64_t(shape.batch) * shape.max_seq_tokens;
  // H: the heads this rank holds (all, unless the attention is split over ranks).
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = shape.heads_per_rank(c), Dh = c.head_dim;
  const int64_t k = std::max(c.draft_steps, 1), V = c.vocab_size;
  Tmax = T;
  const DType act = be.act_dtype();
  auto A = [&](const char* name, DType dt, Shape s) { return be.alloc(name, dt, s, AllocKind::Activation); };
  tok = A("tokens", DType::I32, {T});
  pos = A("positions", DType::I32, {T});
  seq = A("sequence", DType::I32, {T});
  last_rows = A("last_rows", DType::I32, {B});
  next_tok = A("next_token", DType::I32, {B});
  sampled = A("sampled", DType::I32, {B});
  mtp_tok = A("mtp_tokens", DType::I32, {T});
  draft_tok = A("draft_tokens", DType::I32, {k, B});
  draft_pos = A("draft_positions", DType::I32, {k, B});
  draft_seq = A("draft_sequence", DType::I32, {B});
  draft_rows = A("draft_rows", DType::I32, {B});
  if (shape.verify) {
    target_tok = A("verify.target_tokens", DType::I32, {B * (1 + k)});
    accepted = A("verify.accepted", DType::I32, {B});
    new_len = A("verify.new_len", DType::I32, {B});
    forced = A("verify.forced", DType::I32, {B});
  }

  x = A("X", act, {T, hc, D});
  xtmp = A("X.attn", act, {T, hc, D});
  mx = A("mtp.X", act, {T, hc, D});
  mxtmp = A("mtp.X.attn", act, {T, hc, D});
  xlast = A("X.last", act, {B, hc, D});

  y = A("hc_pre.y", act, {T, D});
  post = A("hc_pre.post", DType::F32, {T, hc});
  comb = A("hc_pre.comb", DType::F32, {T, hc, hc});
  a = A("sublayer_in", act, {T, D});

  qr_raw = A("attn.qr_raw", act, {T, c.q_lora_rank});
  qr = A("attn.qr", act, {T, c.q_lora_rank});
  kv = A("attn.kv", act, {T, Dh});
  q = A("attn.q", act, {T, H, Dh});
  o = A("attn.o", act, {T, H, Dh});
  z = A("attn.z", act, {T, shape.groups_per_rank(c) * c.o_lora_rank});
  f = A("sublayer_out", act, {T, D});
  comp_u = A("compressor.u", DType::F32, {T, 2 * Dh});
  comp_g = A("compressor.g", DType::F32, {T, 2 * Dh});
  idx_w = A("indexer.w", act, {T, std::max(c.index_n_heads, 1)});
  idx_u = A("indexer.compressor.u", DType::F32, {T, 2 * std::max(c.index_head_dim, 1)});
  idx_g = A("indexer.compressor.g", DType::F32, {T, 2 * std::max(c.index_head_dim, 1)});
  idx_q = A("indexer.q", act, {T, std::max(c.index_n_heads, 1), std::max(c.index_head_dim, 1)});
  sel = A("topk_indices", DType::I32, {T, std::max(c.index_topk, 1)});

  const int64_t E = c.n_routed_experts, F = c.moe_intermediate_size, kk = c.num_experts_per_tok;
  router_logits = A("moe.router_logits", DType::F32, {T, E});
  route_ids = A("moe.ids", DType::I32, {T, kk});
  if (shape.record_routing) route_log = A("moe.ids.log", DType::I32, {c.num_hidden_layers + k, T, kk});
  route_w = A("moe.weights", DType::F32, {T, kk});
  if (shape.expert_world > 1) {
    shard_ids = A("moe.shard_ids", DType::I32, {T, kk});
    shard_w = A("moe.shard_weights", DType::F32, {T, kk});
  }
  moe_out = A("moe.routed_out", act, {T, D});
  sh_g = A("moe.shared.g", act, {T, F});
  sh_u = A("moe.shared.u", act, {T, F});
  sh_act = A("moe.shared.act", act, {T, F});
  sh_out = A("moe.shared.out", act, {T, D});
  moe_ws = be.alloc("moe.workspace", DType::U8, {int64_t(be.moe_workspace_bytes(T, int(kk), int(D), int(F), int(E)))},
                    AllocKind::Workspace);

  e = A("mtp.e", act, {T, D});
  hn = A("mtp.hn", act, {T, hc, D});
  hp = A("mtp.hp", act, {T, hc, D});
  ep = A("mtp.ep", act, {T, D});

  // The head runs on every prefill token with all_logits, on every verified row (B * (1 + k)) in
  // a verifying step, else on each sequence's last token.
  const int64_t head_rows = std::max(shape.all_logits ? T : B, shape.verify ? B * (1 + k) : B);
  h = A("head.h", act, {head_rows, D});
  hnorm = A("head.hnorm", act, {head_rows, D});
  logits = A("logits", DType::F32, {head_rows, V});
  last_logits = A("logits.last", DType::F32, {B, V});
  draft_logits = A("mtp.logits", DType::F32, {shape.draft_logits ? k : 1, B, V});
}

void DeepSeekV4::target_forward(const Step& st) {
  const Stream main{};
  Ops::Scope scope(ops_, "target");
  const Tensor e = buf_->e.rows(0, st.T), X = buf_->x.rows(0, st.T), Xtmp = buf_->xtmp.rows(0, st.T);
  ops_.embed(main, "embed", e, st.tokens, w_.embed, st.pos, false);
  ops_.hc_expand(main, "hc_expand", X, e);
  const int L = cfg_.num_hidden_layers;
  for (int l = 0; l < L; ++l)
    decoder_layer(l, w_.layers[size_t(l)], caches_[size_t(l)], X, Xtmp, st, l > 0,
                  l + 1 < L ? &w_.layers[size_t(l + 1)] : nullptr);
}

// docs/model.md 4: two sub-layers, each hc_pre -> RMSNorm -> f -> hc_post. X is the residual in
// and out; Xtmp holds it between the two sub-layers. Where one sub-layer follows another, its
// hc_post and the next one's hc_pre -> RMSNorm are one op (hc_post_pre_norm, as vLLM fuses them),
// so that a backend may run them as one kernel: in a layer between attn and ffn, and between
// layers when the caller passes `next` (the ffn's end then runs the next layer's attn hc_pre, in
// this layer's ffn scope).
void DeepSeekV4::decoder_layer(int layer, const BlockWeights& bw, LayerCache& cache, const Tensor& X,
                               const Tensor& Xtmp, const Step& st, bool entered, const BlockWeights* next) {
  const Stream main{};
  const float eps = float(cfg_.rms_norm_eps), hc_eps = float(cfg_.hc_eps);
  const int it = cfg_.hc_sinkhorn_iters;
  const int64_t T = st.T;
  Ops::Scope scope(ops_, layer_label(cfg_, layer) + "." + layer_type_name(cfg_.layer_type(layer)));
  const Tensor y = buf_->y.rows(0, T), post = buf_->post.rows(0, T), comb = buf_->comb.rows(0, T);
  const Tensor a = buf_->a.rows(0, T), f = buf_->f.rows(0, T);
  {
    Ops::Scope s(ops_, "attn");
    if (!entered)
      ops_.hc_pre_norm(main, "hc_pre.attn", a, y, post, comb, X, bw.hc_attn_fn, bw.hc_attn_scale, bw.hc_attn_base,
                       it, hc_eps, eps, bw.attn_norm, eps);
    attention(layer, bw.attn, cache, a, f, st);
  }
  {
    Ops::Scope s(ops_, "ffn");
    ops_.hc_post_pre_norm(main, "hc_post.attn+hc_pre.ffn", Xtmp, f, Tensor{}, Tensor{}, X, post, comb, a, y,
                          bw.hc_ffn_fn, bw.hc_ffn_scale, bw.hc_ffn_base, it, hc_eps, eps, bw.ffn_norm, eps);
    const Tensor routed = buf_->moe_out.rows(0, T), shared = buf_->sh_out.rows(0, T);
    moe(layer, bw.ffn, a, routed, shared, st);
    // routed + shared ("moe_combine") and hc_post in one op (a backend may fuse them), and with
    // `next` the next layer's hc_pre -> RMSNorm too.
    if (next)
      ops_.hc_post_pre_norm(main, "moe_combine+hc_post.ffn+hc_pre.attn", X, f, routed, shared, Xtmp, post, comb, a,
                            y, next->hc_attn_fn, next->hc_attn_scale, next->hc_attn_base, it, hc_eps, eps,
                            next->attn_norm, eps);
    else
      ops_.add_hc_post(main, "moe_combine+hc_post.ffn", X, f, routed, shared, Xtmp, post, comb);
  }
}

// Final collapse of the 4 streams, norm and vocabulary projection (docs/model.md 2 and 7).
void DeepSeekV4::lm_head(Stream s, const Tensor& X, int rows, const Tensor& hc_fn, const Tensor& hc_scale,
                         const Tensor& hc_base, const Tensor& norm_w, const Tensor& logits) {
  Ops::Scope scope(ops_, "head");
  const Tensor h = buf_->h.rows(0, rows), hn = buf_->hnorm.rows(0, rows);
  ops_.hc_head(s, "hc_head", h, X, hc_fn, hc_scale, hc_base, float(cfg_.hc_eps), float(cfg_.rms_norm_eps));
  ops_.rmsnorm(s, "norm", hn, h, norm_w, float(cfg_.rms_norm_eps));
  ops_.gemm(s, "head", logits.rows(0, rows), hn, w_.head);
}

}  // namespace sl
