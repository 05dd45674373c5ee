// MoE (docs/model.md 6): router + routed experts on the main stream, the shared expert on the
// process-global shared-expert stream when the batch is small (vLLM's rule), joined back to the
// main stream before the caller sums the two (decoder_layer's add_hc_post).
#include "model/linear.h"
#include "model/model_internal.h"

namespace sl {

void DeepSeekV4::moe(int layer, const MoeWeights& mw, const Tensor& x, const Tensor& routed, const Tensor& shared,
                     const Step& st) {
  const Stream main{};
  const int64_t T = st.T;
  const Buffers& b = *buf_;
  const float limit = float(cfg_.swiglu_limit);
  const bool fp8_act = w_.format == WeightFormat::NativeW4A8;  // W4A8: DeepSeek's reference numerics
  // With routing recorded, each execution (target layer, or draft step) keeps its own ids.
  const int slot = st.draft_step < 0 ? layer : cfg_.num_hidden_layers + st.draft_step;
  const Tensor ids = shape_.record_routing
                         ? b.route_log.rows(slot, slot + 1).view({b.Tmax, cfg_.num_experts_per_tok}).rows(0, T)
                         : b.route_ids.rows(0, T);
  if (shape_.record_routing) routing_meta_[size_t(slot)] = {layer, st.draft_step, int(T), {}};
  const Tensor logits = b.router_logits.rows(0, T), rw = b.route_w.rows(0, T);
  const Tensor g = b.sh_g.rows(0, T), u = b.sh_u.rows(0, T), act = b.sh_act.rows(0, T);
  Ops::Scope scope(ops_, "moe");

  // vLLM: the shared-expert stream is used when T <= 256; it forks before the router, and the
  // shared MLP is enqueued after the routed experts.
  const Stream side = T <= policy_.shared_expert_max_tokens ? shared_expert_stream_ : main;
  const auto& ev = events_[size_t(layer)];
  if (side != main) {
    ops_.record(ev.moe_fork, main);
    ops_.wait(side, ev.moe_fork);
  }
  ops_.gemm(main, "gate", logits, x, mw.gate);
  const bool hash = cfg_.layer_is_hash_routed(layer);
  ops_.route(main, "route", ids, rw, logits, hash ? Tensor{} : mw.gate_bias, hash ? mw.tid2eid : Tensor{}, st.tokens,
             float(cfg_.routed_scaling_factor));
  if (shape_.expert_world > 1 && shape_.expert_all_to_all) {
    // Expert parallelism, all-to-all scheme: this rank's pairs travel to their experts' owners.
    ops_.moe_experts_all_to_all(main, "routed_experts.all_to_all", routed, x, ids, rw, mw.w1.w, mw.w2.w, mw.w3.w,
                                limit);
  } else if (shape_.expert_world > 1) {
    // Expert parallelism (all-gather scheme): this rank runs its experts on the pairs routed to
    // them (the others with weight 0), and the ranks' partial outputs are summed.
    const Tensor sid = b.shard_ids.rows(0, T), sw = b.shard_w.rows(0, T);
    // The sum runs on the comm stream, beside the shared expert (main or its own stream).
    ops_.shard_routing(main, "shard_routing", sid, sw, ids, rw, w_.experts_first, w_.experts_count);
    routed_experts(ops_, main, "routed_experts", routed, x, sid, sw, mw.w1, mw.w2, mw.w3, limit, fp8_act, b.moe_ws);
    ops_.record(ev.comm_fork, main);
    ops_.wait(comm_stream_, ev.comm_fork);
    ops_.all_reduce_sum(comm_stream_, "routed_experts.all_reduce", routed);
  } else {
    routed_experts(ops_, main, "routed_experts", routed, x, ids, rw, mw.w1, mw.w2, mw.w3, limit, fp8_act, b.moe_ws);
  }

  // w1, w3 and the SwiGLU in one op (a backend may fuse them).
  linear_swiglu(ops_, side, "shared_experts.w1+w3+swiglu", act, g, u, x, mw.sh_w1, mw.sh_w3, limit);
  linear(ops_, side, "shared_experts.w2", shared, act, mw.sh_w2);
  if (side != main) {
    ops_.record(ev.moe_join, side);
    ops_.wait(main, ev.moe_join);
  }
  if (shape_.expert_world > 1 && !shape_.expert_all_to_all) {
    ops_.record(ev.comm_join, comm_stream_);
    ops_.wait(main, ev.comm_join);
  }
  // The caller sums routed and shared (its add_hc_post: "moe_combine" and hc_post in one op).
}

}  // namespace sl
