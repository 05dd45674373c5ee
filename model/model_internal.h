// Internals of DeepSeekV4 shared by its .cpp files: the activation buffers (allocated once,
// sized for the largest step) and the per-forward step description.
#pragma once
#include <string>

#include "model/deepseek_v4.h"

namespace sl {

// "L3" for target layer 3, "mtp1" for MTP layer 1 (layer index L + 1).
std::string layer_label(const ModelConfig& c, int layer);

// The tensors of one forward: T tokens (B sequences, the same count each), views of the step
// buffers.
struct DeepSeekV4::Step {
  int T = 0;
  Tensor tokens, pos, seq;  // I32 [T]
  Tensor last_rows;         // I32 [B]: row of each sequence's last token
  int draft_step = -1;      // -1: the target forward; s: MTP draft step s
};

// Every activation buffer of a step. Views of the first T rows serve smaller steps.
struct DeepSeekV4::Buffers {
  Buffers(Backend& be, const ModelConfig& c, const RunShape& shape);
  int64_t Tmax = 0;
  // Token plumbing (I32).
  Tensor tok, pos, seq, last_rows, next_tok, sampled, mtp_tok;
  Tensor draft_tok, draft_pos;  // [k, B]
  Tensor draft_seq, draft_rows; // [B] = 0..B-1
  // Verifying steps only (RunShape::verify; docs/speculative.md): the target's greedy token per
  // row [B*(1+k)], and per sequence the accepted count, the committed length and the forced
  // count (uploaded; -1 = greedy).
  Tensor target_tok, accepted, new_len, forced;
  // Residual streams [T, hc, D]: the target's and the MTP drafter's (the target's final X is
  // the MTP's input, so the MTP works in buffers of its own).
  Tensor x, xtmp, mx, mxtmp, xlast;
  // Sub-layer inputs and hc_pre outputs.
  Tensor y, post, comb, a;
  // Attention.
  Tensor qr_raw, qr, kv, q, o, z;
  Tensor f;  // [T, D] output of the current sub-layer (attention or MoE)
  Tensor comp_u, comp_g;  // F32 [T, 2*Dh]
  Tensor idx_w, idx_u, idx_g, idx_q, sel;
  // MoE.
  Tensor route_log;  // I32 [L + k, T, experts_per_tok] when RunShape::record_routing
  Tensor router_logits, route_ids, route_w, moe_out, sh_g, sh_u, sh_act, sh_out, moe_ws;
  Tensor shard_ids, shard_w;  // expert parallelism: this rank's share of the routing (shard_routing)
  // MTP input.
  Tensor e, hn, hp, ep;
  // Head.
  Tensor h, hnorm, logits, last_logits, draft_logits;
};

}  // namespace sl
