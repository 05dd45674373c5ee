// The model's weights, named and shaped as DeepSeek's checkpoint (docs/model.md section 9), and
// the three ways to fill them: deterministic random initialisation from a seed, loading a
// checkpoint directory (config.json + *.safetensors), and saving one.
//
// Routed experts are held stacked ([E, F, D] per matrix) so that a backend can run one grouped
// GEMM per expert matrix; the checkpoint stores them per expert
// (`layers.N.ffn.experts.E.w1.weight [F, D]`) and the spec maps each onto its slice.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/backend.h"
#include "model/config.h"

namespace sl {

struct CompressorWeights {
  Tensor wkv, wgate;  // [c*d, D]
  Tensor ape;         // F32 [ratio, c*d]
  Tensor norm;        // [d]
};

struct AttentionWeights {
  Tensor wq_a;              // [Lq, D]
  Tensor wq_b;              // [H*Dh, Lq]
  Tensor wkv;               // [Dh, D]
  Tensor wo_a;              // [G*Lo, H*Dh/G]
  Tensor wo_b;              // [D, G*Lo]
  Tensor q_norm, kv_norm;   // [Lq], [Dh]
  Tensor attn_sink;         // F32 [H]
  CompressorWeights compressor;      // c4a and c128a
  Tensor idx_wq_b;                   // [Hi*di, Lq]       c4a only
  Tensor idx_weights_proj;           // [Hi, D]           c4a only
  CompressorWeights idx_compressor;  // d = di, ratio 4   c4a only
};

struct MoeWeights {
  Tensor gate;       // F32 [E, D] (router logits are fp32)
  Tensor gate_bias;  // F32 [E]        scored layers only
  Tensor tid2eid;    // I32 [V, k]     hash layers only (int64 in the checkpoint)
  Tensor w1, w3;     // [E, F, D] stacked experts
  Tensor w2;         // [E, D, F]
  Tensor sh_w1, sh_w3;  // [F, D] shared expert
  Tensor sh_w2;         // [D, F]
};

struct BlockWeights {
  AttentionWeights attn;
  MoeWeights ffn;
  Tensor attn_norm, ffn_norm;  // [D]
  Tensor hc_attn_fn, hc_attn_base, hc_attn_scale;  // F32 [mix, hc*D], [mix], [3]
  Tensor hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
};

struct MtpWeights {
  Tensor e_proj, h_proj;          // [D, D]
  Tensor enorm, hnorm, norm;      // [D]
  Tensor hc_head_fn, hc_head_base, hc_head_scale;  // F32 [hc, hc*D], [hc], [1]
  BlockWeights block;
};

struct ModelWeights {
  Tensor embed;  // [V, D]
  Tensor head;   // [V, D]
  Tensor norm;   // [D]
  Tensor hc_head_fn, hc_head_base, hc_head_scale;
  std::vector<BlockWeights> layers;  // L target layers
  std::vector<MtpWeights> mtp;       // N MTP layers (mtp.0 .. mtp.{N-1})
};

// One checkpoint tensor: its name and shape as in the checkpoint, where it lives, and how the
// random initialisation fills it.
struct WeightSpec {
  enum class Init { Uniform, Tid2eid };
  std::string name;     // e.g. "layers.3.attn.wq_a.weight"
  Shape shape;          // checkpoint shape
  bool keep_f32 = false;   // F32 on every backend (hc params, sinks, ape, gate, gate.bias)
  bool is_index = false;   // tid2eid: int64 in the file, I32 in memory
  Tensor* dst = nullptr;   // the (stacked) tensor it fills
  int stack_index = -1;    // >= 0: slice [stack_index] of dst's dim 0
  Init init = Init::Uniform;
  float scale = 0.f;       // Uniform: value = scale * U[-1, 1) + offset
  float offset = 0.f;
};

// Every tensor of the checkpoint, in a fixed order. `w` must outlive the specs; its
// tensors are filled in by allocate_weights.
std::vector<WeightSpec> weight_specs(const ModelConfig& c, ModelWeights& w);
// Bytes the weights take on a backend whose weight dtype is `wdt` (the tensors docs/model.md 8
// keeps in F32 stay F32). Printed before allocation.
size_t weight_bytes(const ModelConfig& c, DType wdt);
// Allocates every weight tensor on the backend (one allocation per dst tensor).
void allocate_weights(Backend& be, const ModelConfig& c, ModelWeights& w);
// Fills every weight from the seed, deterministically and identically on every backend.
void init_weights(Backend& be, const ModelConfig& c, ModelWeights& w, uint64_t seed);
// Saves DeepSeek's layout: dir/config.json + dir/model-XXXXX-of-YYYYY.safetensors (+ index).
// file_dtype: BF16 or F32 for the float tensors.
void save_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir, DType file_dtype);
// Loads tensors from dir/*.safetensors into allocated weights. A missing, unexpected or
// mis-shaped tensor is an error naming it (and the file).
void load_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir);

}  // namespace sl
