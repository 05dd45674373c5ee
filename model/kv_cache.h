// Per-layer caches (docs/model.md 5.7), one row per sequence:
// - the sliding-window cache: a ring of K (= V) vectors with a position tag per slot;
// - for compressed layers, the compressor's state ring (u and g of recent tokens, fp32) and
//   the compressed entries;
// - for c4a layers, the same two for the lightning indexer (d = index_head_dim).
// Ring capacities cover the window (or the pooling span) plus the most tokens one sequence
// brings in one step, so a step can insert all its tokens before any of them is read.
#pragma once
#include <string>

#include "core/tensor.h"
#include "model/backend.h"
#include "model/config.h"

namespace sl {

struct CompressorCache {
  Tensor state_u, state_g;  // F32 [B, S, c*d]
  Tensor state_tags;        // I32 [B, S]
  Tensor entries;           // act [B, n_max, d], or packed FP8 U8 [B, n_max, entry bytes]
  bool overlap = false;
  int ratio = 0;
};

struct LayerCache {
  LayerType type = LayerType::Sliding;
  Tensor swa, swa_tags;      // act [B, cap, Dh] (or packed FP8 U8 [B, cap, entry bytes]), I32 [B, cap]
  CompressorCache comp;      // c4a, c128a
  CompressorCache indexer;   // c4a
};

// Allocates the caches of one layer and marks every tag slot empty (-1). packed_fp8: the window
// and compressed caches and the indexer keys as packed FP8 entries (U8 [B, n, entry bytes],
// model/kv_fp8_entry.h) instead of act values.
LayerCache make_layer_cache(Backend& be, Stream s, const ModelConfig& c, int layer, int batch, int max_positions,
                            int max_seq_tokens, const std::string& prefix, bool packed_fp8 = false);
size_t layer_cache_bytes(const ModelConfig& c, int layer, int batch, int max_positions, int max_seq_tokens,
                         DType act, bool packed_fp8 = false);

// Bytes one cache entry takes in a real cache (what a decode step must read per entry):
// - KV entry (window and compressed caches), `fp8` false: head_dim values in `act`.
// - KV entry, `fp8` true: vLLM's layout (docs/model.md 5.7), the nope dims in e4m3, the rope
//   dims in bf16 and a ue8m0 scale byte per 64 nope values, padded to 8 bytes (flash: 448 + 128 +
//   7 + 1 = 584).
// - Indexer key: index_head_dim values in `act`, or in e4m3 with one fp32 scale.
// The bytes of the packed caches (DeepSeekV4::kv_packed), and of the caches the emulated ones
// stand for: the decode bytes floor's.
size_t kv_entry_bytes(const ModelConfig& c, DType act, bool fp8);
size_t indexer_key_bytes(const ModelConfig& c, DType act, bool fp8);

}  // namespace sl
