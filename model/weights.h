// The model's weights, named and shaped as DeepSeek's checkpoint (docs/model.md section 9), and
// the three ways to fill them: deterministic random initialisation from a seed, loading a
// checkpoint directory (config.json + *.safetensors), and saving one.
//
// Routed experts are held stacked ([E, F, D] per matrix) so that a backend can run one grouped
// GEMM per expert matrix; the checkpoint stores them per expert
// (`layers.N.ffn.experts.E.w1.weight [F, D]`) and the spec maps each onto its slice.
//
// Two weight formats (docs/model.md 8): bf16 (every matrix in the backend's weight dtype: bf16 on
// CUDA, fp32 on the CPU reference) and native, the real checkpoint's: the main-stream projections
// and the shared expert in FP8 (e4m3 codes, a power-of-two scale per 128 x 128 block), the routed
// experts in MXFP4 (e2m1 pairs, an e8m0 scale per 32 values); the compressor and indexer GEMMs on
// the aux streams, the router, the embedding and the head stay in the weight dtype either way.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/backend.h"
#include "model/config.h"

namespace sl {

// Native: the checkpoint's formats (FP8 projections, MXFP4 routed experts), the routed experts fed
// bf16 activations (W4A16, as vLLM and SGLang run them on Hopper). NativeW4A8: the same weights,
// the routed experts' inputs (x, and the SwiGLU output before w2) rounded to FP8 per 1 x 128 group
// first, as DeepSeek's reference inference does (its fp4_gemm takes FP8 activations).
enum class WeightFormat { Bf16, Native, NativeW4A8 };
const char* weight_format_name(WeightFormat f);  // "bf16", "native", "native-w4a8"
WeightFormat parse_weight_format(const std::string& text);  // throws, naming the choices
// Whether f holds the checkpoint's formats (Native or NativeW4A8: the same bytes).
inline bool is_native(WeightFormat f) { return f != WeightFormat::Bf16; }

// A weight matrix as the model multiplies by it: plain (w in the weight dtype, scale empty), FP8
// (w U8 e4m3 codes [out, in], scale F32 [ceil(out/128), ceil(in/128)]) or, for stacked experts,
// MXFP4 (w U8 [E, out, in/2] packed e2m1, scale U8 [E, out, in/32] e8m0). model/linear.h runs it.
struct Linear {
  Tensor w, scale;
  bool native() const { return !scale.empty(); }
};

struct CompressorWeights {
  Tensor wkv, wgate;  // [c*d, D]
  Tensor ape;         // F32 [ratio, c*d]
  Tensor norm;        // [d]
};

struct AttentionWeights {
  Linear wq_a;              // [Lq, D]          FP8 when native (so are the other Linears)
  Linear wq_b;              // [H*Dh, Lq]
  Linear wkv;               // [Dh, D]
  Linear wo_a;              // [G*Lo, H*Dh/G]
  Linear wo_b;              // [D, G*Lo]
  Tensor q_norm, kv_norm;   // [Lq], [Dh]
  Tensor attn_sink;         // F32 [H]
  CompressorWeights compressor;      // c4a and c128a
  Linear idx_wq_b;                   // [Hi*di, Lq]       c4a only
  Tensor idx_weights_proj;           // [Hi, D]           c4a only
  CompressorWeights idx_compressor;  // d = di, ratio 4   c4a only
};

struct MoeWeights {
  Tensor gate;       // F32 [E, D] (router logits are fp32)
  Tensor gate_bias;  // F32 [E]        scored layers only
  Tensor tid2eid;    // I32 [V, k]     hash layers only (int64 in the checkpoint)
  Linear w1, w3;     // [E, F, D] stacked experts (MXFP4 when native)
  Linear w2;         // [E, D, F]
  Linear sh_w1, sh_w3;  // [F, D] shared expert
  Linear sh_w2;         // [D, F]
};

struct BlockWeights {
  AttentionWeights attn;
  MoeWeights ffn;
  Tensor attn_norm, ffn_norm;  // [D]
  Tensor hc_attn_fn, hc_attn_base, hc_attn_scale;  // F32 [mix, hc*D], [mix], [3]
  Tensor hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
};

struct MtpWeights {
  Linear e_proj, h_proj;          // [D, D]
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
  WeightFormat format = WeightFormat::Bf16;  // set by allocate_weights
  // The routed experts held (expert parallelism): experts [experts_first, experts_first +
  // experts_count) of every MoE layer, at stack indices 0 .. experts_count - 1; -1: all. Set
  // before weight_specs / allocate_weights.
  int64_t experts_first = 0, experts_count = -1;
  int64_t held_experts(const ModelConfig& c) const;
  // The attention heads held (tensor parallelism of the attention, RunShape::attention_tp):
  // heads [heads_first, heads_first + heads_count) of every layer (their wq_b rows and sinks),
  // and output groups [groups_first, groups_first + groups_count) (their wo_a rows and wo_b
  // columns); -1: all. Set before weight_specs / allocate_weights.
  int64_t heads_first = 0, heads_count = -1, groups_first = 0, groups_count = -1;
  int64_t held_heads(const ModelConfig& c) const;
  int64_t held_groups(const ModelConfig& c) const;
  bool attention_split(const ModelConfig& c) const;
};

// One checkpoint tensor: its name and shape as in the checkpoint, where it lives, and how the
// random initialisation fills it.
struct WeightSpec {
  enum class Init { Uniform, Tid2eid };
  // Its native format (docs/model.md 8); None: the weight dtype in both formats.
  enum class Native { None, Fp8, Mxfp4 };
  std::string name;     // e.g. "layers.3.attn.wq_a.weight"
  Shape shape;          // checkpoint shape
  bool keep_f32 = false;   // F32 on every backend (hc params, sinks, ape, gate, gate.bias)
  bool is_index = false;   // tid2eid: int64 in the file, I32 in memory
  Tensor* dst = nullptr;   // the (stacked) tensor it fills
  Native native = Native::None;
  Tensor* scale_dst = nullptr;  // native: the scales of dst (Linear::scale)
  int stack_index = -1;    // >= 0: slice [stack_index] of dst's dim 0
  Init init = Init::Uniform;
  float scale = 0.f;       // Uniform: value = scale * U[-1, 1) + offset
  float offset = 0.f;
  // A tensor-parallel share: `shape` is the part held, `full_shape` the checkpoint's, and the
  // part is [slice_first, slice_first + shape[slice_dim]) along dim slice_dim (0 rows, 1
  // columns). slice_dim -1: the whole tensor.
  int slice_dim = -1;
  int64_t slice_first = 0;
  Shape full_shape;
};

// Every tensor of the checkpoint, in a fixed order (a native weight's scales are its spec's
// scale_dst, saved as "X.scale" beside "X.weight"). `w` must outlive the specs; its tensors are
// filled in by allocate_weights.
std::vector<WeightSpec> weight_specs(const ModelConfig& c, ModelWeights& w);
// Bytes the weights take on a backend whose weight dtype is `wdt` in format `fmt` (the tensors
// docs/model.md 8 keeps in F32 stay F32; native weights count their codes and scales). Printed
// before allocation.
size_t weight_bytes(const ModelConfig& c, DType wdt, WeightFormat fmt = WeightFormat::Bf16);
// The same for the share `held` describes (its experts_* and heads_* / groups_* ranges): what one
// rank of a split model holds.
size_t weight_bytes(const ModelConfig& c, DType wdt, WeightFormat fmt, const ModelWeights& held);
// Bytes one spec holds (a stacked expert spec: its one expert), scales included: what reading
// it once costs (the decode bytes floor).
size_t held_bytes(const WeightSpec& s, DType wdt, WeightFormat fmt);
// Allocates every weight tensor on the backend (one allocation per dst tensor, and per scale
// tensor of a native weight). Native needs every FP8 matrix's input dim to be a multiple of 128
// and every expert dim a multiple of 32: an error names the first that is not.
void allocate_weights(Backend& be, const ModelConfig& c, ModelWeights& w, WeightFormat fmt = WeightFormat::Bf16);
// Fills every weight from the seed, deterministically and identically on every backend. A native
// weight is the bf16 format's values, generated in fp32 and quantized on the backend
// (quantize_fp8 / quantize_mxfp4): the same numbers the bf16 model holds, before rounding.
void init_weights(Backend& be, const ModelConfig& c, ModelWeights& w, uint64_t seed);
// Saves DeepSeek's layout: dir/config.json + dir/model-XXXXX-of-YYYYY.safetensors (+ index).
// file_dtype: BF16 or F32 for the float tensors. Native weights are saved as they are held:
// FP8 codes (F8_E4M3) with "X.scale" (F8_E8M0, or F32 when a scale is not a power of two),
// MXFP4 pairs (I8) with "X.scale" (F8_E8M0).
void save_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir, DType file_dtype);
// Loads tensors from dir/*.safetensors into allocated weights, whatever the file's format: a
// quantized tensor into a bf16 weight is dequantized; a float tensor into a native weight is
// quantized on the backend; a native tensor into a native weight of its own format is copied.
// A missing, unexpected or mis-shaped tensor is an error naming it (and the file).
void load_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir);

}  // namespace sl
