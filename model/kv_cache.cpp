#include "model/kv_cache.h"

#include <algorithm>

#include "model/kv_fp8_entry.h"

namespace sl {

namespace {

struct CacheDims {
  int64_t swa_cap = 0;  // sliding-window ring slots
  int ratio = 1;
  bool overlap = false;
  int64_t state_slots = 0;  // compressor state ring slots
  int64_t n_max = 0;        // compressed entries
};

// A step brings up to `max_seq_tokens` tokens of one sequence; all are inserted before the
// first is read, so the ring must still hold the window of the step's first token:
// W - 1 older positions + the step's tokens. The compressor pools up to c*ratio tokens ending
// at a block end, so its state ring needs c*ratio - 1 older positions + the step's tokens.
// MTP draft steps write up to draft_steps - 1 positions beyond the next target position; those
// slots stay tagged until overwritten, so both rings also keep draft_steps extra slots (without
// them a draft written ahead could evict the oldest position of a later query's window).
// A verifying step (docs/speculative.md) inserts 1 + k tokens per sequence, which the model
// requires max_seq_tokens to hold, and may then reject all but one: its rejected positions
// (up to p + k) and the drafts written after the rollback (up to p + 2k - 1) evict positions
// up to p + 2k - 1 - cap = p + k - W - max_seq_tokens, older than any later window (which
// starts at >= p + 2 - W) since k < max_seq_tokens; likewise for the state ring and its span.
CacheDims dims(const ModelConfig& c, int layer, int max_positions, int max_seq_tokens) {
  CacheDims d;
  max_seq_tokens += std::max(c.draft_steps, 0);
  d.swa_cap = int64_t(c.sliding_window) - 1 + max_seq_tokens;
  d.ratio = c.layer_ratio(layer);
  d.overlap = c.layer_type(layer) == LayerType::C4A;
  const int span = (d.overlap ? 2 : 1) * d.ratio;
  d.state_slots = span + max_seq_tokens;
  d.n_max = c.max_compressed_entries(layer, max_positions);
  return d;
}

// An entry row's dtype and width: width act values, or `packed` bytes (0: not packed).
CompressorCache make_compressor(Backend& be, Stream s, const std::string& name, int64_t B, const CacheDims& d,
                                int64_t width, int64_t packed) {
  CompressorCache cc;
  const int64_t cd = (d.overlap ? 2 : 1) * width;
  cc.ratio = d.ratio;
  cc.overlap = d.overlap;
  cc.state_u = be.alloc(name + ".state_u", DType::F32, {B, d.state_slots, cd}, AllocKind::Cache);
  cc.state_g = be.alloc(name + ".state_g", DType::F32, {B, d.state_slots, cd}, AllocKind::Cache);
  cc.state_tags = be.alloc(name + ".state_tags", DType::I32, {B, d.state_slots}, AllocKind::Cache);
  cc.entries = be.alloc(name + ".entries", packed ? DType::U8 : be.act_dtype(),
                        {B, std::max<int64_t>(d.n_max, 1), packed ? packed : width}, AllocKind::Cache);
  be.fill(s, cc.state_tags, -1.f);
  return cc;
}

}  // namespace

LayerCache make_layer_cache(Backend& be, Stream s, const ModelConfig& c, int layer, int batch, int max_positions,
                            int max_seq_tokens, const std::string& prefix, bool packed_fp8) {
  const CacheDims d = dims(c, layer, max_positions, max_seq_tokens);
  const int64_t kv_bytes = packed_fp8 ? int64_t(kv_entry_bytes(c, be.act_dtype(), true)) : 0;
  const int64_t key_bytes = packed_fp8 ? int64_t(indexer_key_bytes(c, be.act_dtype(), true)) : 0;
  LayerCache lc;
  lc.type = c.layer_type(layer);
  lc.swa = be.alloc(prefix + ".swa", packed_fp8 ? DType::U8 : be.act_dtype(),
                    {batch, d.swa_cap, packed_fp8 ? kv_bytes : c.head_dim}, AllocKind::Cache);
  lc.swa_tags = be.alloc(prefix + ".swa_tags", DType::I32, {batch, d.swa_cap}, AllocKind::Cache);
  be.fill(s, lc.swa_tags, -1.f);
  if (lc.type != LayerType::Sliding)
    lc.comp = make_compressor(be, s, prefix + ".compressor", batch, d, c.head_dim, kv_bytes);
  if (lc.type == LayerType::C4A)
    lc.indexer = make_compressor(be, s, prefix + ".indexer", batch, d, c.index_head_dim, key_bytes);
  return lc;
}

size_t kv_entry_bytes(const ModelConfig& c, DType act, bool fp8) {
  if (!fp8) return size_t(c.head_dim) * dtype_size(act);
  return size_t(kvfp8::kv_entry_bytes(c.head_dim - c.qk_rope_head_dim, c.qk_rope_head_dim));
}

size_t indexer_key_bytes(const ModelConfig& c, DType act, bool fp8) {
  return fp8 ? size_t(kvfp8::indexer_key_bytes(c.index_head_dim)) : size_t(c.index_head_dim) * dtype_size(act);
}

size_t layer_cache_bytes(const ModelConfig& c, int layer, int batch, int max_positions, int max_seq_tokens,
                         DType act, bool packed_fp8) {
  const CacheDims d = dims(c, layer, max_positions, max_seq_tokens);
  const size_t kv_entry = kv_entry_bytes(c, act, packed_fp8), key = indexer_key_bytes(c, act, packed_fp8);
  size_t bytes = size_t(batch) * d.swa_cap * (kv_entry + 4);
  auto comp = [&](int64_t width, size_t entry) {
    const int64_t cd = (d.overlap ? 2 : 1) * width;
    return size_t(batch) * (d.state_slots * (2 * cd * 4 + 4) + std::max<int64_t>(d.n_max, 1) * entry);
  };
  const LayerType t = c.layer_type(layer);
  if (t != LayerType::Sliding) bytes += comp(c.head_dim, kv_entry);
  if (t == LayerType::C4A) bytes += comp(c.index_head_dim, key);
  return bytes;
}

}  // namespace sl
