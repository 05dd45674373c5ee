// The verifying decode step (docs/speculative.md): the target checks the previous step's k
// drafts in one forward over 1 + k tokens per sequence, accepts a prefix of them, every cache
// forgets the rejected positions, and the MTP drafts again from the last committed position.
// Acceptance, rollback lengths, the MTP's input tokens, the draft row and the draft positions
// all come from device ops, so the step has no host reads and can be one CUDA graph.
#include "model/model_internal.h"

namespace sl {

void DeepSeekV4::verify_enqueue() {
  const int B = shape_.batch, k = cfg_.draft_steps, R = 1 + k, T = B * R;
  const int L = cfg_.num_hidden_layers, N = cfg_.num_nextn_predict_layers;
  const Stream main{};
  const Buffers& b = *buf_;
  Step st = make_step(T);  // positions and sequences uploaded by decode_prepare
  Ops::Scope scope(ops_, "decode");
  if (step_marks_) be_.record_timing_mark(step_marks_->begin, main);

  // Input rows per sequence: the previous step's bonus token (the last committed one, at p) and
  // its drafts (p+1 .. p+k), all still on the device.
  ops_.verify_tokens(main, "verify_tokens", st.tokens, b.sampled, b.draft_tok);
  target_forward(st);
  // The head on every row: t_i, the target's token for position p+i+1, checks draft i+1.
  lm_head(main, b.x.rows(0, T), T, w_.hc_head_fn, w_.hc_head_scale, w_.hc_head_base, w_.norm, b.logits);
  ops_.argmax(main, "argmax", b.target_tok, b.logits.rows(0, T));
  // The bonus goes to `sampled`, where the next step's verify_tokens reads it, and last_rows
  // points at each sequence's last committed row (the bonus's logits, draft 0's row).
  ops_.accept_drafts(main, "accept_drafts", b.accepted, b.sampled, b.new_len, b.mtp_tok.rows(0, T), b.last_rows, b.draft_pos,
                     b.target_tok.view({B, R}), b.draft_tok, b.forced, st.pos);
  ops_.gather_rows(main, "gather_last_logits", b.last_logits, b.logits.rows(0, T), b.last_rows);
  rollback_caches(0, L);
  if (step_marks_) be_.record_timing_mark(step_marks_->target_done, main);

  // Draft step 0 over every row, as vLLM's proposer runs its padded batch: row i pairs the
  // target's residual at p+i with the committed token at p+i+1 (the bonus at row a). Rows past
  // a are garbage; they wrote MTP cache positions past the committed length, which the second
  // rollback forgets before the later draft steps read the MTP caches.
  mtp_step(0, b.x.rows(0, T), b.mtp_tok.rows(0, T), st);
  rollback_caches(L, L + N);
  run_drafts();  // steps s >= 1 at draft_pos row s = new_len + s - 1 (accept_drafts wrote it)
  if (step_marks_) be_.record_timing_mark(step_marks_->end, main);
}

void DeepSeekV4::rollback_caches(int first, int last) {
  const Stream main{};
  const Tensor& new_len = buf_->new_len;
  // Nothing was ever written at or past new_len + k: this step's rows reach p + k <= new_len - 1
  // + k, the previous step's drafts p + k - 2, and every earlier write is below those (see
  // docs/speculative.md). So only the compressed entries of blocks ending below new_len + k can
  // be stale; the ones beyond are still zero.
  const int extent = cfg_.draft_steps;
  Ops::Scope scope(ops_, "rollback");
  for (int l = first; l < last; ++l) {
    LayerCache& c = caches_[size_t(l)];
    Ops::Scope layer(ops_, layer_label(cfg_, l));
    ops_.cache_rollback(main, "rollback.swa", c.swa_tags, Tensor{}, new_len, 1, extent);
    if (c.type != LayerType::Sliding)
      ops_.cache_rollback(main, "rollback.compressor", c.comp.state_tags, c.comp.entries, new_len, c.comp.ratio,
                          extent);
    if (c.type == LayerType::C4A)
      ops_.cache_rollback(main, "rollback.indexer", c.indexer.state_tags, c.indexer.entries, new_len,
                          c.indexer.ratio, extent);
  }
}

}  // namespace sl
