// Attention for all three layer types (docs/model.md 5) with vLLM's aux-stream placement
// (docs/streams.md): phase A overlaps the input GEMMs, phase B overlaps the indexer (c4a) or the
// main compressor (c128a) with the query path, as vLLM did at the MTP fix (--placement vllm-fix)
// or does now (vllm-head: the c4a indexer split over aux0 and aux2, the main compressor on aux1,
// scoring and top-k after the join), and everything joins before the sparse attention.
#include "model/kv_fp8_entry.h"
#include "model/model_internal.h"
#include "model/linear.h"
#include "model/parallel.h"

namespace sl {

void DeepSeekV4::attention(int layer, const AttentionWeights& aw, LayerCache& cache, const Tensor& a,
                           const Tensor& out, const Step& st) {
  const LayerType type = cache.type;
  const LayerStreams& ls = layer_streams_[size_t(layer)];
  const auto& ev = events_[size_t(layer)].attn;
  const Tensor& table = rope_tables_[size_t(layer)];
  const float eps = float(cfg_.rms_norm_eps);
  // H, G: the heads and output groups this rank holds (RunShape::attention_tp).
  const int64_t T = st.T, H = shape_.heads_per_rank(cfg_), G = shape_.groups_per_rank(cfg_), Dh = cfg_.head_dim;
  const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
  // --kv-cache fp8: the nope dims of a cache entry (the rope dims stay bf16, as in vLLM's layout).
  // Packed caches store FP8 themselves (swa_insert, compressor_pool); emulated ones are rounded
  // in place by round_fp8_blocks, to the same values.
  const int64_t kv_nope = Dh - cfg_.qk_rope_head_dim;
  const bool round_caches = shape_.kv_fp8 && !kv_packed_;
  const Buffers& b = *buf_;

  const Tensor qr_raw = b.qr_raw.rows(0, T), qr = b.qr.rows(0, T), kv = b.kv.rows(0, T);
  const Tensor q = b.q.rows(0, T), o = b.o.rows(0, T), z = b.z.rows(0, T);
  const int64_t comp_width = (type == LayerType::C4A ? 2 : 1) * Dh;
  const Tensor comp_u = b.comp_u.prefix({T, comp_width}), comp_g = b.comp_g.prefix({T, comp_width});
  const Tensor idx_w = b.idx_w.rows(0, T), idx_u = b.idx_u.prefix({T, 2 * di}), idx_g = b.idx_g.prefix({T, 2 * di});
  const Tensor idx_q = b.idx_q.rows(0, T), sel = b.sel.rows(0, T);

  // ---- Phase A: input GEMMs. vLLM runs it multi-stream only up to 1024 tokens: above that
  // the big projection fills the GPU and the overlap stops paying.
  {
    Ops::Scope scope(ops_, "phase_a");
    const bool parallel = T <= policy_.phase_a_max_tokens;
    StreamFn main_fn = [&](Stream s) {
      // One op, as vLLM fuses wq_a and wkv ("fused_wqa_wkv").
      linear_pair(ops_, s, "wq_a+wkv", qr_raw, kv, a, aw.wq_a, aw.wkv);
    };
    std::array<StreamFn, 3> aux{};
    if (type != LayerType::Sliding)
      aux[0] = [&](Stream s) {
        ops_.gemm_pair(s, "compressor.wkv+wgate", comp_u, comp_g, a, aw.compressor.wkv, aw.compressor.wgate);
      };
    if (type == LayerType::C4A) {
      aux[1] = [&](Stream s) { ops_.gemm(s, "indexer.weights_proj", idx_w, a, aw.idx_weights_proj); };
      aux[2] = [&](Stream s) {
        ops_.gemm_pair(s, "indexer.compressor.wkv+wgate", idx_u, idx_g, a, aw.idx_compressor.wkv,
                       aw.idx_compressor.wgate);
      };
    }
    execute_in_parallel(ops_, ls, ev, parallel, main_fn, aux, phase_a_fault(layer));
  }
  // The key's RoPE with its norm (it reads nothing phase B writes).
  ops_.rmsnorm_pair(Stream{}, "q_norm+kv_norm+rope_k", qr, qr_raw, aw.q_norm, eps, kv, kv, aw.kv_norm, eps, st.pos,
                    table);

  // ---- Phase B (vLLM 6fb3f7b46): the query path on the main stream; the whole indexer (c4a)
  // or the main compressor (c128a) on aux0.
  auto main_compressor = [&](Stream s) {
    CompressorCache& cc = cache.comp;
    ops_.compressor_save(s, "compressor.save", cc.state_u, cc.state_g, cc.state_tags, comp_u, comp_g,
                         aw.compressor.ape, st.pos, st.seq, cc.ratio);
    ops_.compressor_pool(s, "compressor.pool", cc.entries, cc.state_u, cc.state_g, cc.state_tags, aw.compressor.norm,
                         table, st.pos, st.seq, cc.ratio, cc.overlap, eps);
    // The entries the pool just wrote (those this step's tokens completed).
    if (round_caches)
      ops_.round_fp8_blocks(s, "compressor.entries_fp8", cc.entries, kv_nope, kvfp8::kBlock, st.pos, st.seq, cc.ratio);
  };
  auto indexer_query = [&](Stream s) {
    linear(ops_, s, "indexer.wq_b", idx_q.view({T, Hi * di}), qr, aw.idx_wq_b);
    ops_.rope(s, "indexer.rope_q", idx_q, st.pos, table, false);
    // vLLM quantizes the indexer query to FP8 with one power-of-two scale per (token, head) and
    // folds the scale into the head weights, which is the same as scoring with the rounded query.
    if (shape_.kv_fp8) ops_.round_fp8_blocks(s, "indexer.q_fp8", idx_q.view({T, Hi * di}), Hi * di, di, Tensor{}, Tensor{}, 1);
  };
  auto indexer_compressor = [&](Stream s) {
    CompressorCache& ic = cache.indexer;
    ops_.compressor_save(s, "indexer.compressor.save", ic.state_u, ic.state_g, ic.state_tags, idx_u, idx_g,
                         aw.idx_compressor.ape, st.pos, st.seq, ic.ratio);
    ops_.compressor_pool(s, "indexer.compressor.pool", ic.entries, ic.state_u, ic.state_g, ic.state_tags,
                         aw.idx_compressor.norm, table, st.pos, st.seq, ic.ratio, ic.overlap, eps);
    if (round_caches) ops_.round_fp8_blocks(s, "indexer.entries_fp8", ic.entries, di, di, st.pos, st.seq, ic.ratio);
  };
  auto indexer_topk = [&](Stream s) {
    ops_.indexer_topk(s, "indexer_topk", sel, idx_q, idx_w, cache.indexer.entries, st.pos, st.seq, cache.indexer.ratio);
  };
  // Piecewise graphs leave phase B and the sparse attention of c4a layers eager.
  if (type == LayerType::C4A) eager_region_begin();
  if (type == LayerType::C4A && policy_.placement == Placement::VllmHead) {
    // Current vLLM: three-way. aux0 runs the indexer's query path and forks its compressor onto
    // aux2 (free by now: phase A joined); aux1 runs the main compressor; the current stream runs
    // the query path, then, after the join, the indexer's scoring and top-k.
    Ops::Scope scope(ops_, "phase_b");
    const auto& iev = events_[size_t(layer)].indexer;
    StreamFn main_fn = [&](Stream s) {
      linear(ops_, s, "wq_b", q.view({T, H * Dh}), qr, aw.wq_b);
      ops_.rmsnorm_rope(s, "q_head_norm+rope_q", q, q, Tensor{}, eps, st.pos, table);
      if (round_caches) ops_.round_fp8_blocks(s, "kv_fp8", kv, kv_nope, kvfp8::kBlock, Tensor{}, Tensor{}, 1);
      ops_.swa_insert(s, "swa_insert", cache.swa, cache.swa_tags, kv, st.pos, st.seq);
    };
    std::array<StreamFn, 3> aux{};
    aux[0] = [&](Stream s) {
      maybe_execute_in_parallel_from(ops_, s, ls.aux[2], iev[0], iev[1], indexer_query,
                                     indexer_compressor);
    };
    aux[1] = main_compressor;
    execute_in_parallel(ops_, ls, ev, true, main_fn, aux, phase_b_fault(layer));
    indexer_topk(Stream{});
  } else {
    Ops::Scope scope(ops_, "phase_b");
    StreamFn main_fn = [&](Stream s) {
      linear(ops_, s, "wq_b", q.view({T, H * Dh}), qr, aw.wq_b);
      ops_.rmsnorm_rope(s, "q_head_norm+rope_q", q, q, Tensor{}, eps, st.pos, table);
      if (round_caches) ops_.round_fp8_blocks(s, "kv_fp8", kv, kv_nope, kvfp8::kBlock, Tensor{}, Tensor{}, 1);
      ops_.swa_insert(s, "swa_insert", cache.swa, cache.swa_tags, kv, st.pos, st.seq);
      if (type == LayerType::C4A) main_compressor(s);
    };
    StreamFn aux_fn;
    if (type == LayerType::C4A)
      aux_fn = [&](Stream s) {
        indexer_query(s);
        indexer_compressor(s);
        indexer_topk(s);
      };
    else if (type == LayerType::C128A)
      aux_fn = main_compressor;
    maybe_execute_in_parallel(ops_, ls.aux[0], ev[0], ev[1], main_fn, aux_fn,
                              type == LayerType::C4A ? phase_b_fault(layer) : JoinFault{});
  }

  // ---- After the join: sparse attention over window + compressed keys, inverse RoPE,
  // grouped low-rank output projection (docs/model.md 5.5, 5.6).
  const CompressedKeys mode = type == LayerType::C4A     ? CompressedKeys::Selected
                              : type == LayerType::C128A ? CompressedKeys::All
                                                         : CompressedKeys::None;
  const Tensor comp = type == LayerType::Sliding ? Tensor{} : cache.comp.entries;
  ops_.sparse_attention(Stream{}, "sparse_attention", o, q, cache.swa, cache.swa_tags, comp, mode == CompressedKeys::Selected ? sel : Tensor{},
                        aw.attn_sink, st.pos, st.seq, cfg_.sliding_window, mode, cfg_.layer_ratio(layer));
  if (type == LayerType::C4A) eager_region_end();
  ops_.rope(Stream{}, "rope_inv_o", o, st.pos, table, true);
  linear(ops_, Stream{}, "wo_a", z, o.view({T, H * Dh}), aw.wo_a, G);
  linear(ops_, Stream{}, "wo_b", out, z, aw.wo_b);
  // Split heads: each rank's wo_b gave its groups' share of the sum; the whole sum on every rank.
  if (shape_.attention_tp) ops_.all_reduce_sum(Stream{}, "wo_b.all_reduce", out);
}

}  // namespace sl
