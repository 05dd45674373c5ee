// MTP draft steps (docs/model.md 7). Step 0 runs over every token the target just processed
// (input: the target's pre-hc_head residual and the next token); step s >= 1 runs one token
// per sequence on the previous step's residual and draft token. MTP layer = step mod N.
#include "model/linear.h"
#include "model/model_internal.h"

namespace sl {

void DeepSeekV4::mtp_step(int draft_step, const Tensor& Hprev, const Tensor& tokens, const Step& st) {
  const Stream main{};
  const int N = cfg_.num_nextn_predict_layers, B = shape_.batch;
  const int i = draft_step % N, layer = cfg_.num_hidden_layers + i;
  const MtpWeights& mw = w_.mtp[size_t(i)];
  const int64_t T = st.T, hc = cfg_.hc_mult, D = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps);
  const Buffers& b = *buf_;
  Ops::Scope scope(ops_, "draft" + std::to_string(draft_step));

  Step ms = st;
  ms.tokens = tokens;
  ms.draft_step = draft_step;
  const Tensor e = b.e.rows(0, T), hn = b.hn.rows(0, T), hp = b.hp.rows(0, T), ep = b.ep.rows(0, T);
  const Tensor X = b.mx.rows(0, T), Xtmp = b.mxtmp.rows(0, T);
  ops_.embed(main, "embed", e, tokens, w_.embed, st.pos, cfg_.mtp_zero_embed_pos0);
  ops_.rmsnorm(main, "enorm", e, e, mw.enorm, eps);
  ops_.rmsnorm(main, "hnorm", hn.view({T * hc, D}), Hprev.view({T * hc, D}), mw.hnorm, eps);
  linear(ops_, main, "h_proj", hp.view({T * hc, D}), hn.view({T * hc, D}), mw.h_proj);
  linear(ops_, main, "e_proj", ep, e, mw.e_proj);
  ops_.mtp_combine(main, "mtp_combine", X, hp, ep);
  decoder_layer(layer, mw.block, caches_[size_t(layer)], X, Xtmp, ms);

  // Only each sequence's last token drafts. Its residual (xlast) is also the next draft
  // step's Hprev.
  ops_.gather_rows(main, "gather_last", b.xlast.rows(0, B), X, st.last_rows);
  const int slot = shape_.draft_logits ? draft_step : 0;
  const Tensor logits = b.draft_logits.rows(slot, slot + 1).view({B, cfg_.vocab_size});
  lm_head(main, b.xlast.rows(0, B), B, mw.hc_head_fn, mw.hc_head_scale, mw.hc_head_base, mw.norm, logits);
  ops_.argmax(main, "argmax", b.draft_tok.rows(draft_step, draft_step + 1).view({B}), logits);
}

void DeepSeekV4::run_drafts() {
  const int B = shape_.batch;
  const Buffers& b = *buf_;
  for (int s = 1; s < cfg_.draft_steps; ++s) {
    Step st;
    st.T = B;
    st.pos = b.draft_pos.rows(s, s + 1).view({B});
    st.seq = b.draft_seq;
    st.last_rows = b.draft_rows;
    // xlast holds the previous step's last-token residual; mtp_step reads it (hnorm) before
    // it gathers the new one into the same buffer, all on the main stream.
    mtp_step(s, b.xlast.rows(0, B), b.draft_tok.rows(s - 1, s).view({B}), st);
  }
}

}  // namespace sl
