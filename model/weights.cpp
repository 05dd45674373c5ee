// Weight specs (docs/model.md section 9), deterministic initialisation, and checkpoint I/O in
// DeepSeek's safetensors layout.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/bf16.h"
#include "core/interrupt_cleanup.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "core/safetensors.h"

namespace sl {

namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------ specs
//
// Initialisation scales. The goal is a random model whose activations stay finite and
// non-degenerate through all 43 + 1 layers at flash dimensions (and in bf16), so that every
// op sees realistic, well-spread inputs and the CPU/GPU comparison is meaningful:
//
// - Linear weights [out, in]: U(-a, a) with a = sqrt(3 / in), i.e. variance 1/in, so a
//   unit-variance input gives a unit-variance output (LeCun scaling). Every linear in the
//   model follows an RMSNorm (unit RMS input) or a linear/pooling of unit-RMS vectors, so
//   q, kv, the compressor's u/g, the router logits and the expert gate/up values are all
//   ~N(0, 1): attention scores q.k/sqrt(Dh) are O(1) (softmax neither one-hot nor flat),
//   router scores sqrt(softplus(z)) are spread, and the SwiGLU clamp (10) is rarely hit.
// - RMSNorm weights: 1 + 0.1 U, close to the trained regime (identity-like) but not
//   uniform, so a missing or transposed weight shows up in comparisons.
// - embed: U(-1, 1) (the first hc_pre and attn_norm normalise it anyway); head: sqrt(3/D)
//   so logits are ~N(0, 1) and the argmax is well separated from ties.
// - mHC: fn U with a = sqrt(3 / (hc*D)) gives mix logits m ~ N(0, 1) (x is RMS-normalised
//   first); scale = 0.5 + 0.05 U and base = 0.1 U keep pre ~ sigmoid(N(0, 0.25)) ~ 0.5,
//   post ~ 1 and the Sinkhorn input near-uniform, so the residual grows additively
//   (~sqrt(layers)) rather than exponentially, and the streams stay distinct.
// - attn_sink, compressor ape, gate.bias: 0.1 U (small offsets, same order as trained
//   models; they perturb but do not dominate the softmaxes / the top-k).
// - tid2eid: k distinct expert ids per vocabulary row (docs/model.md section 11, constraint 6;
//   an assumption, 12.3).
namespace {

constexpr float kNormScale = 0.1f, kNormOffset = 1.0f;
constexpr float kSmall = 0.1f;
constexpr float kHcScaleOffset = 0.5f, kHcScaleNoise = 0.05f;

struct SpecBuilder {
  const ModelConfig& c;
  std::vector<WeightSpec>& out;
  const ModelWeights& w;  // which routed experts it holds

  WeightSpec& add(std::string name, Shape shape, Tensor* dst, float scale, float offset = 0.f, bool f32 = false) {
    WeightSpec s;
    s.name = std::move(name);
    s.shape = shape;
    s.dst = dst;
    s.keep_f32 = f32;
    s.scale = scale;
    s.offset = offset;
    out.push_back(std::move(s));
    return out.back();
  }
  void linear(const std::string& name, int64_t o, int64_t i, Tensor* dst) {
    add(name, Shape{o, i}, dst, std::sqrt(3.0f / float(i)));
  }
  // A weight with a native format: FP8, or MXFP4 for the routed experts.
  void linear(const std::string& name, int64_t o, int64_t i, Linear* dst,
              WeightSpec::Native native = WeightSpec::Native::Fp8) {
    linear(name, o, i, &dst->w);
    out.back().native = native;
    out.back().scale_dst = &dst->scale;
  }
  void norm(const std::string& name, int64_t d, Tensor* dst) { add(name, Shape{d}, dst, kNormScale, kNormOffset); }
  // The last spec holds only [first, first + count) along `dim` (tensor parallelism).
  void share(int dim, int64_t first, int64_t count) {
    WeightSpec& s = out.back();
    if (count == s.shape[dim]) return;
    s.full_shape = s.shape;
    s.shape.d[size_t(dim)] = count;
    s.slice_dim = dim;
    s.slice_first = first;
  }
  void hc(const std::string& prefix, int mix, Tensor* fn, Tensor* base, Tensor* scale, int nscale) {
    const int64_t hcD = int64_t(c.hc_mult) * c.hidden_size;
    add(prefix + "fn", Shape{mix, hcD}, fn, std::sqrt(3.0f / float(hcD)), 0.f, true);
    add(prefix + "base", Shape{mix}, base, kSmall, 0.f, true);
    add(prefix + "scale", Shape{nscale}, scale, kHcScaleNoise, kHcScaleOffset, true);
  }
  void compressor(const std::string& p, int ratio, int d, CompressorWeights& w) {
    const int cc = ratio == 4 ? 2 : 1;  // overlap doubles the channels (docs/model.md 5.3)
    linear(p + "wkv.weight", int64_t(cc) * d, c.hidden_size, &w.wkv);
    linear(p + "wgate.weight", int64_t(cc) * d, c.hidden_size, &w.wgate);
    add(p + "ape", Shape{ratio, int64_t(cc) * d}, &w.ape, kSmall, 0.f, true);
    norm(p + "norm.weight", d, &w.norm);
  }
  // One decoder block; `p` is "layers.N." or "mtp.I.", `layer` the layer index (MTP: L + I).
  void block(const std::string& p, int layer, BlockWeights& b) {
    const int64_t D = c.hidden_size, H = c.num_attention_heads, Dh = c.head_dim, Lq = c.q_lora_rank;
    const int64_t G = c.o_groups, Lo = c.o_lora_rank, E = c.n_routed_experts, F = c.moe_intermediate_size;
    const int64_t Fs = F * c.n_shared_experts;
    const LayerType type = c.layer_type(layer);
    AttentionWeights& a = b.attn;
    linear(p + "attn.wq_a.weight", Lq, D, &a.wq_a);
    // Tensor parallelism holds this rank's heads (wq_b rows, sinks) and output groups (wo_a
    // rows, wo_b columns); the scaling keeps the full matrix's fan-in, so a share holds exactly
    // the full tensor's values.
    const int64_t Hh = w.held_heads(c), Gh = w.held_groups(c);
    linear(p + "attn.wq_b.weight", H * Dh, Lq, &a.wq_b);
    share(0, w.heads_first * Dh, Hh * Dh);
    linear(p + "attn.wkv.weight", Dh, D, &a.wkv);
    linear(p + "attn.wo_a.weight", G * Lo, H * Dh / G, &a.wo_a);
    share(0, w.groups_first * Lo, Gh * Lo);
    linear(p + "attn.wo_b.weight", D, G * Lo, &a.wo_b);
    share(1, w.groups_first * Lo, Gh * Lo);
    norm(p + "attn.q_norm.weight", Lq, &a.q_norm);
    norm(p + "attn.kv_norm.weight", Dh, &a.kv_norm);
    add(p + "attn.attn_sink", Shape{H}, &a.attn_sink, kSmall, 0.f, true);
    share(0, w.heads_first, Hh);
    if (type != LayerType::Sliding) compressor(p + "attn.compressor.", c.layer_ratio(layer), c.head_dim, a.compressor);
    if (type == LayerType::C4A) {
      const int64_t Hi = c.index_n_heads, di = c.index_head_dim;
      linear(p + "attn.indexer.wq_b.weight", Hi * di, Lq, &a.idx_wq_b);
      linear(p + "attn.indexer.weights_proj.weight", Hi, D, &a.idx_weights_proj);
      compressor(p + "attn.indexer.compressor.", 4, c.index_head_dim, a.idx_compressor);
    }
    MoeWeights& m = b.ffn;
    add(p + "ffn.gate.weight", Shape{E, D}, &m.gate, std::sqrt(3.0f / float(D)), 0.f, true);
    if (c.layer_is_hash_routed(layer)) {
      WeightSpec& s = add(p + "ffn.gate.tid2eid", Shape{c.vocab_size, c.num_experts_per_tok}, &m.tid2eid, 0.f);
      s.is_index = true;
      s.init = WeightSpec::Init::Tid2eid;
    } else {
      add(p + "ffn.gate.bias", Shape{E}, &m.gate_bias, kSmall, 0.f, true);
    }
    // The experts this process holds (all, or its expert-parallel shard), by their global ids.
    const int64_t e0 = w.experts_first, e1 = e0 + w.held_experts(c);
    for (int64_t e = e0; e < e1; ++e) {
      const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      constexpr auto mx = WeightSpec::Native::Mxfp4;
      linear(ep + "w1.weight", F, D, &m.w1, mx);
      out.back().stack_index = int(e - e0);
      linear(ep + "w2.weight", D, F, &m.w2, mx);
      out.back().stack_index = int(e - e0);
      linear(ep + "w3.weight", F, D, &m.w3, mx);
      out.back().stack_index = int(e - e0);
    }
    linear(p + "ffn.shared_experts.w1.weight", Fs, D, &m.sh_w1);
    linear(p + "ffn.shared_experts.w2.weight", D, Fs, &m.sh_w2);
    linear(p + "ffn.shared_experts.w3.weight", Fs, D, &m.sh_w3);
    norm(p + "attn_norm.weight", D, &b.attn_norm);
    norm(p + "ffn_norm.weight", D, &b.ffn_norm);
    hc(p + "hc_attn_", c.hc_mix(), &b.hc_attn_fn, &b.hc_attn_base, &b.hc_attn_scale, 3);
    hc(p + "hc_ffn_", c.hc_mix(), &b.hc_ffn_fn, &b.hc_ffn_base, &b.hc_ffn_scale, 3);
  }
};

// "layers.3.ffn.experts.17.w1.weight" -> "layers.3.ffn.experts.w1" (the stacked tensor).
std::string stacked_name(const std::string& n) {
  auto p = n.find(".experts.");
  SL_CHECK(p != std::string::npos, "stacked_name: ", n, " is not an expert tensor");
  auto q = n.find('.', p + 9);  // end of the expert number
  std::string tail = n.substr(q + 1);
  if (tail.size() > 7 && tail.compare(tail.size() - 7, 7, ".weight") == 0) tail.resize(tail.size() - 7);
  return n.substr(0, p) + ".experts." + tail;
}

// Whether a spec is held in a native format (quantized codes + scales) under format f.
bool held_native(const WeightSpec& s, WeightFormat f) {
  return is_native(f) && s.native != WeightSpec::Native::None;
}

// How a spec's matrix [rows, cols] is held: its values (the weight dtype, or FP8 codes [rows,
// cols], or MXFP4 pairs [rows, cols / 2]) and, native, its scales (FP8: F32 per 128 x 128 block;
// MXFP4: e8m0 per 32 values of a row).
Shape held_shape(const WeightSpec& s, WeightFormat f) {
  if (!held_native(s, f) || s.native == WeightSpec::Native::Fp8) return s.shape;
  return Shape{s.shape[0], s.shape[1] / 2};
}
Shape scale_shape(const WeightSpec& s) {
  if (s.native == WeightSpec::Native::Fp8) return Shape{(s.shape[0] + 127) / 128, (s.shape[1] + 127) / 128};
  return Shape{s.shape[0], s.shape[1] / 32};
}
DType scale_dtype(const WeightSpec& s) { return s.native == WeightSpec::Native::Fp8 ? DType::F32 : DType::U8; }

// Stacked experts: [experts held, ...] of the per-expert shape.
Shape stacked(const ModelConfig& c, const ModelWeights& w, const WeightSpec& s, Shape one) {
  if (s.stack_index < 0) return one;
  return Shape{w.held_experts(c), one[0], one[1]};
}

DType spec_dtype(const WeightSpec& s, DType wdt, WeightFormat f = WeightFormat::Bf16) {
  if (s.is_index) return DType::I32;
  if (s.keep_f32) return DType::F32;
  if (held_native(s, f)) return DType::U8;
  return wdt;
}

// The slice [stack_index] of a stacked tensor, or the tensor, viewed as `shape`.
Tensor slice_view(const WeightSpec& s, const Tensor* dst, const Shape& shape, const char* what) {
  SL_CHECK(dst && !dst->empty(), "weights: ", s.name, what, " is not allocated (call allocate_weights first)");
  Tensor t = s.stack_index >= 0 ? dst->rows(s.stack_index, s.stack_index + 1) : *dst;
  SL_CHECK(t.numel() == shape.numel(), "weights: ", s.name, what, " has ", t.numel(), " elements allocated, expected ",
           shape.str());
  return t.view(shape);
}

// The tensor a spec fills: the dst itself, or its slice for a stacked expert; native: its codes.
Tensor spec_view(const WeightSpec& s, WeightFormat f = WeightFormat::Bf16) {
  return slice_view(s, s.dst, held_shape(s, f), "");
}
// A native spec's scales.
Tensor scale_view(const WeightSpec& s) { return slice_view(s, s.scale_dst, scale_shape(s), " (scales)"); }

// Native weights are made on the backend from fp32 values (random initialisation, a float
// checkpoint): one F32 scratch of the largest native matrix, reused by every quantize call.
Tensor native_scratch(Backend& be, const std::vector<WeightSpec>& specs, WeightFormat f) {
  int64_t most = 0;
  for (const auto& s : specs)
    if (held_native(s, f)) most = std::max(most, s.shape.numel());
  if (most == 0) return {};
  return be.alloc("weights.native_scratch", DType::F32, Shape{most}, AllocKind::Workspace);
}

// native_scratch allocated at its first use: loading a checkpoint already in the native formats
// quantizes nothing and needs none.
struct LazyScratch {
  Backend& be;
  const std::vector<WeightSpec>& specs;
  WeightFormat format;
  Tensor t;
  const Tensor& get() {
    if (t.empty()) t = native_scratch(be, specs, format);
    return t;
  }
};

// Quantizes fp32 values (in `scratch`, viewed as the spec's shape) into a native spec.
void quantize_into(Backend& be, const WeightSpec& s, const Tensor& scratch) {
  const Tensor src = scratch.rows(0, s.shape.numel()).view(s.shape);
  if (s.native == WeightSpec::Native::Fp8)
    be.quantize_fp8(Stream{0}, spec_view(s, WeightFormat::Native), scale_view(s), src);
  else
    be.quantize_mxfp4(Stream{0}, spec_view(s, WeightFormat::Native), scale_view(s), src);
}

std::vector<int64_t> shape_vec(const Shape& s) { return std::vector<int64_t>(s.d.begin(), s.d.begin() + s.n); }

// k distinct ids in [0, E) per row v: a partial Fisher-Yates shuffle of 0..E-1 whose j-th
// swap uses the random word of element v*k + j of stream `key` (the same splitmix chain as
// uniform_pm1), so the table depends only on (seed, name).
std::vector<int32_t> make_tid2eid(uint64_t seed, uint64_t key, int64_t V, int k, int E) {
  SL_CHECK(k >= 1 && k <= E, "tid2eid: need 1 <= num_experts_per_tok (", k, ") <= n_routed_experts (", E, ")");
  std::vector<int32_t> ids(size_t(V) * k);
  std::vector<int32_t> perm(E);
  for (int e = 0; e < E; ++e) perm[e] = e;
  std::vector<std::pair<int, int>> swaps(k);
  for (int64_t v = 0; v < V; ++v) {
    for (int j = 0; j < k; ++j) {
      uint64_t i = uint64_t(v) * uint64_t(k) + uint64_t(j);
      uint64_t r = splitmix64(seed ^ splitmix64(key ^ splitmix64(i)));
      int pick = j + int((r >> 11) % uint64_t(E - j));
      std::swap(perm[j], perm[pick]);
      swaps[j] = {j, pick};
      ids[size_t(i)] = perm[j];
    }
    for (int j = k - 1; j >= 0; --j) std::swap(perm[swaps[j].first], perm[swaps[j].second]);  // restore 0..E-1
  }
  return ids;
}

}  // namespace

int64_t ModelWeights::held_experts(const ModelConfig& c) const {
  return experts_count < 0 ? c.n_routed_experts : experts_count;
}
int64_t ModelWeights::held_heads(const ModelConfig& c) const {
  return heads_count < 0 ? c.num_attention_heads : heads_count;
}
int64_t ModelWeights::held_groups(const ModelConfig& c) const { return groups_count < 0 ? c.o_groups : groups_count; }
bool ModelWeights::attention_split(const ModelConfig& c) const {
  return held_heads(c) != c.num_attention_heads || held_groups(c) != c.o_groups;
}

std::vector<WeightSpec> weight_specs(const ModelConfig& c, ModelWeights& w) {
  const int L = c.num_hidden_layers, N = c.num_nextn_predict_layers;
  SL_CHECK(w.experts_first >= 0 && w.experts_first + w.held_experts(c) <= c.n_routed_experts && w.held_experts(c) >= 1,
           "weight_specs: config ", c.name, ": routed experts [", w.experts_first, ", ",
           w.experts_first + w.held_experts(c), ") are not a shard of its ", c.n_routed_experts);
  SL_CHECK(L >= 0 && N >= 0, "weight_specs: config ", c.name, " has negative layer counts");
  w.layers.resize(size_t(L));
  w.mtp.resize(size_t(N));
  std::vector<WeightSpec> out;
  SpecBuilder b{c, out, w};
  const int64_t D = c.hidden_size, V = c.vocab_size;
  b.add("embed.weight", Shape{V, D}, &w.embed, 1.0f);
  b.add("head.weight", Shape{V, D}, &w.head, std::sqrt(3.0f / float(D)));
  b.norm("norm.weight", D, &w.norm);
  b.hc("hc_head_", c.hc_mult, &w.hc_head_fn, &w.hc_head_base, &w.hc_head_scale, 1);
  for (int l = 0; l < L; ++l) b.block("layers." + std::to_string(l) + ".", l, w.layers[l]);
  for (int i = 0; i < N; ++i) {
    const std::string p = "mtp." + std::to_string(i) + ".";
    MtpWeights& m = w.mtp[i];
    b.linear(p + "e_proj.weight", D, D, &m.e_proj);
    b.linear(p + "h_proj.weight", D, D, &m.h_proj);
    b.norm(p + "enorm.weight", D, &m.enorm);
    b.norm(p + "hnorm.weight", D, &m.hnorm);
    b.norm(p + "norm.weight", D, &m.norm);
    b.hc(p + "hc_head_", c.hc_mult, &m.hc_head_fn, &m.hc_head_base, &m.hc_head_scale, 1);
    b.block(p, L + i, m.block);
  }
  return out;
}

const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::Native ? "native" : f == WeightFormat::NativeW4A8 ? "native-w4a8" : "bf16";
}

WeightFormat parse_weight_format(const std::string& text) {
  if (text == "bf16") return WeightFormat::Bf16;
  if (text == "native") return WeightFormat::Native;
  if (text == "native-w4a8") return WeightFormat::NativeW4A8;
  fail("unknown weight format '", text, "' (expected bf16, native or native-w4a8)");
}

size_t held_bytes(const WeightSpec& s, DType wdt, WeightFormat fmt) {
  size_t n = size_t(held_shape(s, fmt).numel()) * dtype_size(spec_dtype(s, wdt, fmt));
  if (held_native(s, fmt)) n += size_t(scale_shape(s).numel()) * dtype_size(scale_dtype(s));
  return n;
}

size_t weight_bytes(const ModelConfig& c, DType wdt, WeightFormat fmt) { return weight_bytes(c, wdt, fmt, ModelWeights{}); }

size_t weight_bytes(const ModelConfig& c, DType wdt, WeightFormat fmt, const ModelWeights& held) {
  ModelWeights tmp;
  tmp.experts_first = held.experts_first, tmp.experts_count = held.experts_count;
  tmp.heads_first = held.heads_first, tmp.heads_count = held.heads_count;
  tmp.groups_first = held.groups_first, tmp.groups_count = held.groups_count;
  size_t total = 0;
  for (const auto& s : weight_specs(c, tmp)) total += held_bytes(s, wdt, fmt);
  return total;
}

void allocate_weights(Backend& be, const ModelConfig& c, ModelWeights& w, WeightFormat fmt) {
  const std::vector<WeightSpec> specs = weight_specs(c, w);
  // A native share must cut the whole tensor at its FP8 blocks' edges, so that its blocks (and
  // their scales) are the whole tensor's.
  for (const auto& s : specs) {
    if (!held_native(s, fmt) || s.slice_dim < 0 || s.native != WeightSpec::Native::Fp8) continue;
    SL_CHECK(s.slice_first % 128 == 0 && s.shape[s.slice_dim] % 128 == 0, "config ", c.name, ": --weights native with "
             "the attention split over ranks: ", s.name, "'s share [", s.slice_first, ", ",
             s.slice_first + s.shape[s.slice_dim], ") of its ", s.slice_dim == 0 ? "rows" : "columns",
             " does not fall on FP8's 128-wide blocks");
  }
  // Check the whole model before allocating any of it.
  // W4A8 rounds the experts' inputs in groups of 128 as well.
  for (const auto& s : specs) {
    if (!held_native(s, fmt)) continue;
    const bool fp8_in = s.native == WeightSpec::Native::Fp8 || fmt == WeightFormat::NativeW4A8;
    const int64_t need = fp8_in ? 128 : 32;
    SL_CHECK(s.shape[1] % need == 0, "config ", c.name, ": --weights ", weight_format_name(fmt), ": ", s.name, " ",
             s.shape.str(), " has ", s.shape[1], " input columns, not a multiple of ", need, " (",
             fp8_in ? "FP8 activations are quantized in groups of 128" : "MXFP4 has one scale per 32 values", ")");
  }
  w.format = fmt;
  std::set<const Tensor*> done;
  for (const auto& s : specs) {
    if (!done.insert(s.dst).second) continue;
    const std::string name = s.stack_index >= 0 ? stacked_name(s.name) : s.name;
    *s.dst = be.alloc(name, spec_dtype(s, be.weight_dtype(), fmt), stacked(c, w, s, held_shape(s, fmt)), AllocKind::Weight);
    if (held_native(s, fmt))
      *s.scale_dst = be.alloc(name + ".scale", scale_dtype(s), stacked(c, w, s, scale_shape(s)), AllocKind::Weight);
  }
}

// A tensor-parallel share gets exactly the values the whole tensor holds there: the whole tensor
// is generated into a scratch of the share's dtype (one per dtype, of the largest whole tensor),
// and the share copied out through the host (at load only). A native share is generated in fp32,
// copied out into `native` (the native scratch) and quantized there; its blocks are the whole
// tensor's (allocate_weights checks the alignment), so it holds the whole tensor's codes and scales.
void init_share(Backend& be, const WeightSpec& s, uint64_t seed, uint64_t key, std::map<DType, Tensor>& scratch,
                const std::vector<WeightSpec>& specs, WeightFormat fmt, const Tensor& native) {
  const bool quantize = held_native(s, fmt);
  const Tensor dst = quantize ? native.rows(0, s.shape.numel()).view(s.shape) : spec_view(s);
  Tensor& sc = scratch[dst.dtype];
  if (sc.empty()) {
    int64_t most = 0;
    for (const auto& o : specs)
      if (o.slice_dim >= 0) most = std::max(most, o.full_shape.numel());
    sc = be.alloc(std::string("weights.share_scratch.") + dtype_name(dst.dtype), dst.dtype, Shape{most},
                  AllocKind::Workspace);
  }
  const Tensor whole = sc.rows(0, s.full_shape.numel()).view(s.full_shape);
  be.init_uniform(Stream{0}, whole, seed, key, s.scale, s.offset);
  const size_t es = dtype_size(dst.dtype);
  std::vector<uint8_t> all(size_t(whole.numel()) * es), part(size_t(dst.numel()) * es);
  be.download(all.data(), whole, all.size());  // waits for the init
  const int64_t cols = s.full_shape.n > 1 ? s.full_shape[1] : 1;
  const int64_t rows = s.full_shape[0];
  const int64_t r0 = s.slice_dim == 0 ? s.slice_first : 0, nr = s.slice_dim == 0 ? s.shape[0] : rows;
  const int64_t c0 = s.slice_dim == 1 ? s.slice_first : 0, nc = s.slice_dim == 1 ? s.shape[1] : cols;
  for (int64_t r = 0; r < nr; ++r)
    std::memcpy(part.data() + size_t(r * nc) * es, all.data() + size_t((r0 + r) * cols + c0) * es, size_t(nc) * es);
  be.upload(Stream{0}, dst, part.data(), part.size());
  if (quantize) quantize_into(be, s, native);
  be.synchronize();  // `part` is freed on return
}

void init_weights(Backend& be, const ModelConfig& c, ModelWeights& w, uint64_t seed) {
  const Stream s0{0};
  std::vector<std::vector<int32_t>> host;  // kept alive until the uploads complete
  const std::vector<WeightSpec> specs = weight_specs(c, w);
  const Tensor scratch = native_scratch(be, specs, w.format);
  std::map<DType, Tensor> share_scratch;
  for (const auto& s : specs) {
    const uint64_t key = hash_name(s.name);
    if (s.slice_dim >= 0) {
      init_share(be, s, seed, key, share_scratch, specs, w.format, scratch);
      continue;
    }
    if (held_native(s, w.format)) {
      // The bf16 format's values, in fp32, quantized: stream order lets the next spec reuse the scratch.
      be.init_uniform(s0, scratch.rows(0, s.shape.numel()).view(s.shape), seed, key, s.scale, s.offset);
      quantize_into(be, s, scratch);
      continue;
    }
    Tensor t = spec_view(s);
    if (s.init == WeightSpec::Init::Tid2eid) {
      host.push_back(make_tid2eid(seed, key, s.shape[0], int(s.shape[1]), c.n_routed_experts));
      be.upload(s0, t, host.back().data(), host.back().size() * sizeof(int32_t));
    } else {
      be.init_uniform(s0, t, seed, key, s.scale, s.offset);
    }
  }
  be.synchronize();
}

// ------------------------------------------------------------------------------------ checkpoints

namespace {

constexpr size_t kChunkBytes = size_t(32) << 20;  // host staging per transfer

size_t shard_limit_bytes() {
  // 4 GiB per shard like HF's default max_shard_size ("5GB"-ish); the environment variable
  // lets tests exercise multi-shard checkpoints with tiny models.
  if (const char* e = std::getenv("STREAMLAB_SHARD_BYTES"); e && *e) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(e, &end, 10);
    if (end && *end == '\0' && v > 0) return size_t(v);
  }
  return size_t(4) << 30;
}

StDType file_dtype_of(const WeightSpec& s, DType file_dtype) {
  if (s.is_index) return StDType::I64;
  if (s.keep_f32) return StDType::F32;
  return file_dtype == DType::BF16 ? StDType::BF16 : StDType::F32;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) u = sign;
    else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp - 15 + 127) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Converts n elements from `src` (file dtype) into `dst` (backend dtype).
void convert_to_backend(void* dst, DType bdt, const void* src, StDType fdt, size_t n) {
  auto rd = [&](size_t i) -> float {
    switch (fdt) {
      case StDType::F32: {
        float f;
        std::memcpy(&f, static_cast<const char*>(src) + 4 * i, 4);
        return f;
      }
      case StDType::BF16: {
        uint16_t h;
        std::memcpy(&h, static_cast<const char*>(src) + 2 * i, 2);
        return bf16_to_float(h);
      }
      case StDType::F16: {
        uint16_t h;
        std::memcpy(&h, static_cast<const char*>(src) + 2 * i, 2);
        return half_to_float(h);
      }
      default: return 0.f;
    }
  };
  if (bdt == DType::F32) {
    if (fdt == StDType::F32) std::memcpy(dst, src, n * 4);
    else
      for (size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = rd(i);
  } else if (bdt == DType::BF16) {
    if (fdt == StDType::BF16) std::memcpy(dst, src, n * 2);
    else
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = float_to_bf16(rd(i));
  } else {
    fail("load_checkpoint: unsupported backend weight dtype ", dtype_name(bdt));
  }
}

// Rows of `t` per staging chunk (at least one).
int64_t rows_per_chunk(const Tensor& t, size_t elem_bytes) {
  int64_t row = t.dim(0) ? t.numel() / t.dim(0) : 1;
  return std::max<int64_t>(1, int64_t(kChunkBytes / (size_t(std::max<int64_t>(row, 1)) * elem_bytes)));
}

std::string shard_name(int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k, n);
  return buf;
}

}  // namespace

namespace {

// Downloads a tensor in row chunks and hands each chunk to `each` (host bytes, element count).
void download_rows(Backend& be, const Tensor& t, size_t file_elem_bytes,
                   const std::function<void(const std::vector<uint8_t>&, size_t)>& each) {
  const int64_t step = rows_per_chunk(t, std::max(dtype_size(t.dtype), file_elem_bytes));
  std::vector<uint8_t> raw;
  for (int64_t r = 0; r < t.dim(0); r += step) {
    const Tensor part = t.rows(r, std::min(r + step, t.dim(0)));
    raw.resize(part.bytes());
    be.download(raw.data(), part, part.bytes());
    each(raw, size_t(part.numel()));
  }
}

// A plain spec's values in the file's dtype.
void write_plain(Backend& be, const WeightSpec& s, StDType fdt, const SafetensorsWriter::Sink& sink) {
  const Tensor t = spec_view(s);
  std::vector<uint8_t> conv;
  download_rows(be, t, st_dtype_size(fdt), [&](const std::vector<uint8_t>& raw, size_t ne) {
    if (t.dtype == DType::I32) {
      SL_CHECK(fdt == StDType::I64, "save_checkpoint: ", s.name, ": i32 tensor must be saved as I64");
      conv.resize(ne * 8);
      for (size_t e = 0; e < ne; ++e) {
        int32_t v;
        std::memcpy(&v, raw.data() + 4 * e, 4);
        int64_t v64 = v;
        std::memcpy(conv.data() + 8 * e, &v64, 8);
      }
      sink(conv.data(), conv.size());
    } else if ((t.dtype == DType::F32 && fdt == StDType::F32) || (t.dtype == DType::BF16 && fdt == StDType::BF16)) {
      sink(raw.data(), raw.size());
    } else if (t.dtype == DType::F32 && fdt == StDType::BF16) {
      conv.resize(ne * 2);
      for (size_t e = 0; e < ne; ++e) {
        float f;
        std::memcpy(&f, raw.data() + 4 * e, 4);
        uint16_t h = float_to_bf16(f);
        std::memcpy(conv.data() + 2 * e, &h, 2);
      }
      sink(conv.data(), conv.size());
    } else if (t.dtype == DType::BF16 && fdt == StDType::F32) {
      conv.resize(ne * 4);
      for (size_t e = 0; e < ne; ++e) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * e, 2);
        float f = bf16_to_float(h);
        std::memcpy(conv.data() + 4 * e, &f, 4);
      }
      sink(conv.data(), conv.size());
    } else {
      fail("save_checkpoint: ", s.name, ": cannot convert ", dtype_name(t.dtype), " to ", st_dtype_name(fdt));
    }
  });
}

// "layers.0.attn.wq_a.weight" -> "layers.0.attn.wq_a.scale": where DeepSeek keeps a quantized
// weight's scales ("" for a tensor whose name does not end in .weight: it has none).
std::string scale_name(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() <= suffix.size() || weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return weight.substr(0, weight.size() - suffix.size()) + ".scale";
}

// A native spec as DeepSeek ships it: the codes (F8_E4M3, or MXFP4 pairs as I8) and X.scale
// (F8_E8M0; an FP8 weight loaded with fp32 scales that are not powers of two keeps F32).
template <class FileTensor>
void add_native_tensors(Backend& be, const WeightSpec& s, std::vector<FileTensor>& out) {
  const bool fp8 = s.native == WeightSpec::Native::Fp8;
  const Tensor codes = spec_view(s, WeightFormat::Native), sc = scale_view(s);
  out.push_back({s.name, fp8 ? StDType::F8_E4M3 : StDType::I8, shape_vec(held_shape(s, WeightFormat::Native)),
                 [&be, codes](const SafetensorsWriter::Sink& sink) {
                   download_rows(be, codes, 1, [&](const std::vector<uint8_t>& raw, size_t) { sink(raw.data(), raw.size()); });
                 }});
  std::vector<uint8_t> e8m0(size_t(sc.numel()));
  StDType sdt = StDType::F8_E8M0;
  if (fp8) {
    std::vector<float> f(size_t(sc.numel()));
    be.download(f.data(), sc, sc.bytes());
    for (size_t i = 0; i < f.size() && sdt == StDType::F8_E8M0; ++i)
      if (!lowp::e8m0_exact(f[i], &e8m0[i])) sdt = StDType::F32;
    if (sdt == StDType::F32) {
      e8m0.resize(f.size() * 4);
      std::memcpy(e8m0.data(), f.data(), e8m0.size());
    }
  } else {
    be.download(e8m0.data(), sc, sc.bytes());
  }
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(e8m0));
  out.push_back({scale_name(s.name), sdt, shape_vec(scale_shape(s)),
                 [bytes](const SafetensorsWriter::Sink& sink) { sink(bytes->data(), bytes->size()); }});
}

// The files of a checkpoint being saved into `dir`, each under a hidden staging name beside its
// final name until commit() renames them all into place in the order staged, config.json moved to
// the end (a reader that finds the new config.json finds the new weights). Destroyed before
// commit(), it removes the staged files, and `dir` itself when the save created it.
class StagedCheckpoint {
 public:
  StagedCheckpoint(std::string dir, bool created) : dir_(std::move(dir)), created_(created) {}
  ~StagedCheckpoint() {
    if (committed_) return;
    std::error_code ec;
    for (const auto& f : files_) fs::remove(staging(f), ec);
    if (created_) fs::remove_all(dir_, ec);
  }
  StagedCheckpoint(const StagedCheckpoint&) = delete;
  StagedCheckpoint& operator=(const StagedCheckpoint&) = delete;
  // Where to write `name`: a hidden name in the folder (Ctrl-C removes it too).
  std::string stage(const std::string& name) {
    files_.push_back(name);
    cleanups_.push_back(std::make_unique<InterruptCleanup>(staging(name)));
    return staging(name);
  }
  void commit() {
    std::stable_partition(files_.begin(), files_.end(), [](const std::string& f) { return f != "config.json"; });
    for (const auto& f : files_) {
      std::error_code ec;
      fs::rename(staging(f), fs::path(dir_) / f, ec);
      SL_CHECK(!ec, "save_checkpoint: cannot move ", staging(f), " into place as ", (fs::path(dir_) / f).string(), ": ",
               ec.message());
    }
    committed_ = true;
    cleanups_.clear();
  }

 private:
  std::string staging(const std::string& name) const { return (fs::path(dir_) / (".saving." + name)).string(); }
  std::string dir_;
  bool created_, committed_ = false;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<InterruptCleanup>> cleanups_;
};

}  // namespace

namespace {

void save_checkpoint_staged(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir,
                            DType file_dtype) {
  SL_CHECK(file_dtype == DType::BF16 || file_dtype == DType::F32, "save_checkpoint: file dtype must be bf16 or f32, got ",
           dtype_name(file_dtype));
  SL_CHECK(w.held_experts(c) == c.n_routed_experts, "save_checkpoint: this process holds routed experts [",
           w.experts_first, ", ", w.experts_first + w.held_experts(c), ") of ", c.n_routed_experts,
           " (expert parallelism): a checkpoint holds them all; save from a run on one rank");
  SL_CHECK(!w.attention_split(c), "save_checkpoint: this process holds ", w.held_heads(c), " of ",
           c.num_attention_heads, " attention heads (tensor parallelism): save from a run on one rank");
  std::error_code ec;
  const bool created = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  SL_CHECK(!ec && fs::is_directory(dir), "save_checkpoint: cannot create directory ", dir, ": ", ec.message());
  // All or nothing: every file is written under a hidden staging name first, and only when all of
  // them are complete are they renamed into place, config.json last. A failed save (a full disk)
  // leaves the old checkpoint as it was (it used to leave the new config.json beside the old
  // weights, which then loaded without a word), or no folder where there was none.
  StagedCheckpoint staged(dir, created);
  write_file_atomic(staged.stage("config.json"), config_to_json(c).dump(2) + "\n");

  const std::vector<WeightSpec> specs = weight_specs(c, w);
  // The file's tensors: each spec's values, and a native spec's scales beside them.
  struct FileTensor {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    SafetensorsWriter::Producer fill;
    size_t bytes() const {
      size_t n = st_dtype_size(dtype);
      for (int64_t d : shape) n *= size_t(d);
      return n;
    }
  };
  std::vector<FileTensor> tensors;
  for (const WeightSpec& s : specs) {
    if (held_native(s, w.format)) {
      add_native_tensors(be, s, tensors);
      continue;
    }
    const StDType fdt = file_dtype_of(s, file_dtype);
    tensors.push_back({s.name, fdt, shape_vec(s.shape), [&be, &s, fdt](const SafetensorsWriter::Sink& sink) {
                         write_plain(be, s, fdt, sink);
                       }});
  }
  // Greedy sharding in file order.
  const size_t limit = shard_limit_bytes();
  std::vector<std::vector<size_t>> shards(1);
  size_t cur = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t b = tensors[i].bytes();
    if (cur > 0 && cur + b > limit) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += b;
    total += b;
  }

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  const int n = int(shards.size());
  for (int k = 0; k < n; ++k) {
    const std::string fname = shard_name(k + 1, n);
    SafetensorsWriter wr(staged.stage(fname));
    for (size_t i : shards[k]) {
      weight_map[tensors[i].name] = fname;
      wr.add(tensors[i].name, tensors[i].dtype, tensors[i].shape, tensors[i].fill);
    }
    wr.finish();
  }

  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  write_file_atomic(staged.stage("model.safetensors.index.json"), index.dump(2) + "\n");
  staged.commit();  // the shards, the index, then config.json
}

}  // namespace

void save_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir, DType file_dtype) {
  try {
    save_checkpoint_staged(be, c, w, dir, file_dtype);
  } catch (const Error& e) {
    // Errors name the file being saved, not its staging name (".saving.X" is X until renamed).
    std::string m = e.what();
    for (size_t at = m.find("/.saving."); at != std::string::npos; at = m.find("/.saving.", at)) m.erase(at + 1, 8);
    throw Error(m);
  }
}

// The index of the first NaN / Inf element of a floating-point tensor, or -1. Read from the
// bits: an all-ones exponent (F32 0x7f800000, BF16 0x7f80, F16 0x7c00).
static int64_t first_nonfinite(const StTensor& t) {
  const size_t fe = st_dtype_size(t.dtype), n = fe ? t.bytes / fe : 0;
  for (size_t e = 0; e < n; ++e) {
    if (t.dtype == StDType::F32) {
      uint32_t u;
      std::memcpy(&u, t.data + 4 * e, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return int64_t(e);
    } else {
      uint16_t u;
      std::memcpy(&u, t.data + 2 * e, 2);
      const uint16_t exp = t.dtype == StDType::BF16 ? 0x7f80 : 0x7c00;
      if ((u & exp) == exp) return int64_t(e);
    }
  }
  return -1;
}

// A quantized weight [rows, cols] of the checkpoint: FP8 e4m3 codes [rows, cols] with 128 x 128
// block scales [ceil(rows/128), ceil(cols/128)], or MXFP4 (e2m1 pairs as I8 / U8 [rows, cols/2],
// the even element in the low nibble) with a scale per 32 values [rows, cols/32]. Scales are
// e8m0 (F8_E8M0 or U8: 2^(e - 127)) or F32 (Flash-Base ships fp32 block scales).
namespace {
enum class QuantKind { Fp8, Mxfp4 };

QuantKind quant_kind(const StTensor& t) { return t.dtype == StDType::F8_E4M3 ? QuantKind::Fp8 : QuantKind::Mxfp4; }

float scale_at(const StTensor& sc, size_t i) {
  if (sc.dtype == StDType::F32) {
    float f;
    std::memcpy(&f, sc.data + 4 * i, 4);
    return f;
  }
  return lowp::e8m0_to_float(sc.data[i]);
}
}  // namespace

static void check_quantized(const std::string& where, const WeightSpec& s, const StTensor& t, const StTensor& sc,
                     const std::string& fp) {
  SL_CHECK(s.shape.n == 2 || s.shape.n == 3, where, ": tensor ", s.name, " in ", fp, " has scales but is not a matrix");
  const int64_t rows = s.shape.n == 2 ? s.shape.d[0] : s.shape.d[0] * s.shape.d[1], cols = s.shape.d[s.shape.n - 1];
  const std::vector<int64_t> lead(s.shape.d.begin(), s.shape.d.begin() + (s.shape.n - 1));
  auto with_last = [&](int64_t last) {
    std::vector<int64_t> v = lead;
    v.push_back(last);
    return v;
  };
  SL_CHECK(sc.dtype == StDType::F8_E8M0 || sc.dtype == StDType::U8 || sc.dtype == StDType::F32, where, ": tensor ",
           s.name.substr(0, s.name.rfind('.')), ".scale in ", fp, " is ", st_dtype_name(sc.dtype),
           ", expected F8_E8M0, U8 or F32");
  if (t.dtype == StDType::F8_E4M3) {
    SL_CHECK(t.shape == shape_vec(s.shape), where, ": tensor ", s.name, " in ", fp, " has shape ", t.shape_str(),
             ", expected ", s.shape.str());
    const std::vector<int64_t> want = {(rows + 127) / 128, (cols + 127) / 128};
    SL_CHECK(s.shape.n == 2 && sc.shape == want, where, ": the block scales of ", s.name, " in ", fp, " have shape ",
             sc.shape_str(), ", expected [", want[0], ", ", want[1], "] (one per 128 x 128 block)");
    for (size_t i = 0; i < t.bytes; ++i)
      SL_CHECK((t.data[i] & 0x7F) != 0x7F, where, ": tensor ", s.name, " in ", fp, " holds an FP8 NaN at element ", i);
  } else if (t.dtype == StDType::I8 || t.dtype == StDType::U8) {
    SL_CHECK(cols % 32 == 0 && t.shape == with_last(cols / 2), where, ": tensor ", s.name, " in ", fp, " (MXFP4) has shape ",
             t.shape_str(), ", expected ", s.shape.str(), " with the last dim halved (two e2m1 values per byte)");
    SL_CHECK(sc.shape == with_last(cols / 32), where, ": the scales of ", s.name, " in ", fp, " have shape ",
             sc.shape_str(), ", expected one per 32 values");
  } else {
    fail(where, ": tensor ", s.name, " in ", fp, " has scales but dtype ", st_dtype_name(t.dtype),
         " (expected F8_E4M3, or I8 / U8 for MXFP4)");
  }
  for (size_t i = 0; i < sc.bytes / st_dtype_size(sc.dtype); ++i)
    SL_CHECK(std::isfinite(scale_at(sc, i)), where, ": the scales of ", s.name, " in ", fp,
             " hold a non-finite value at element ", i);
}

// Rows [r0, r1) of a quantized checkpoint tensor as fp32 ([r1 - r0, cols] into f).
static void dequantize_rows(const StTensor& t, const StTensor& sc, int64_t r0, int64_t r1, int64_t cols, float* f) {
  const QuantKind kind = quant_kind(t);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v;
      if (kind == QuantKind::Fp8) {
        v = lowp::e4m3_to_float(t.data[size_t(r * cols + c)]) *
            scale_at(sc, size_t((r / 128) * ((cols + 127) / 128) + c / 128));
      } else {
        const uint8_t byte = t.data[size_t(r * (cols / 2) + c / 2)];
        v = lowp::e2m1_to_float(c % 2 == 0 ? byte & 0xF : byte >> 4) * scale_at(sc, size_t(r * (cols / 32) + c / 32));
      }
      f[size_t((r - r0) * cols + c)] = v;
    }
}

// Dequantizes row by row into fp32, then the backend's dtype, uploading in chunks.
static void upload_dequantized(Backend& be, const Tensor& dst, const StTensor& t, const StTensor& sc) {
  const int64_t cols = dst.dim(-1), rows = cols ? dst.numel() / cols : 0;
  const int64_t step = std::max<int64_t>(1, int64_t((size_t(64) << 20) / (size_t(cols) * 4 + 1)));
  std::vector<float> f;
  std::vector<uint8_t> buf;
  const Tensor flat = dst.view({rows, cols});
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t r1 = std::min(rows, r0 + step);
    f.resize(size_t((r1 - r0) * cols));
    dequantize_rows(t, sc, r0, r1, cols, f.data());
    const Tensor part = flat.rows(r0, r1);
    buf.resize(part.bytes());
    convert_to_backend(buf.data(), part.dtype, f.data(), StDType::F32, f.size());
    be.upload(Stream{0}, part, buf.data(), part.bytes());
    be.synchronize();  // the staging buffer is reused by the next chunk
  }
}

// A native weight from the checkpoint. Already in the spec's own format (FP8 codes for an FP8
// weight, MXFP4 pairs for an expert): the codes are copied and the scales converted to how they
// are held (FP8: F32; MXFP4: e8m0, refused if an F32 scale is not a power of two). Otherwise
// (float, or the other quantized format): fp32 values on the host, quantized on the backend.
static void upload_native(Backend& be, const WeightSpec& s, const StTensor& t, const StTensor* sc,
                          LazyScratch& scratch, const std::string& where, const std::string& fp) {
  const bool fp8 = s.native == WeightSpec::Native::Fp8;
  const bool same = sc && (fp8 ? t.dtype == StDType::F8_E4M3 : t.dtype != StDType::F8_E4M3);
  const Stream s0{0};
  if (same) {
    const Tensor codes = spec_view(s, WeightFormat::Native), scale = scale_view(s);
    be.upload(s0, codes, t.data, codes.bytes());
    const size_t n = size_t(scale.numel());
    if (fp8) {
      std::vector<float> f(n);
      for (size_t i = 0; i < n; ++i) f[i] = scale_at(*sc, i);
      be.upload(s0, scale, f.data(), n * 4);
      be.synchronize();
    } else {
      std::vector<uint8_t> e(n);
      for (size_t i = 0; i < n; ++i) {
        if (sc->dtype != StDType::F32) {
          e[i] = sc->data[i];
          continue;
        }
        const float v = scale_at(*sc, i);
        SL_CHECK(lowp::e8m0_exact(v, &e[i]), where, ": the scales of ", s.name, " in ", fp, " hold ", v,
                 " at element ", i, ", not a power of two (MXFP4 scales are e8m0)");
      }
      be.upload(s0, scale, e.data(), n);
      be.synchronize();
    }
    return;
  }
  const int64_t rows = s.shape[0], cols = s.shape[1];
  std::vector<float> f(size_t(rows * cols));
  if (sc)
    dequantize_rows(t, *sc, 0, rows, cols, f.data());
  else
    convert_to_backend(f.data(), DType::F32, t.data, t.dtype, f.size());
  const Tensor& buf = scratch.get();
  be.upload(s0, buf.rows(0, rows * cols), f.data(), f.size() * 4);
  quantize_into(be, s, buf);
  be.synchronize();  // f is freed on return
}

// A checkpoint folder's shards, opened, and every tensor in them by name: the files the index
// names (each tensor where the index says, and every tensor of the shards in the index), else
// every *.safetensors in the folder. A tensor in two files is an error.
struct CheckpointFiles {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const StTensor*, const SafetensorsFile*>> found;
};

static CheckpointFiles open_checkpoint_files(const std::string& dir, const std::string& where) {
  std::error_code ec;
  CheckpointFiles cf;
  auto& files = cf.files;
  auto& found = cf.found;
  const fs::path ipath = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> index_map;  // tensor -> file (when there is an index)
  std::vector<std::string> fnames;
  if (fs::is_regular_file(ipath, ec)) {
    nlohmann::json j;
    try {
      std::ifstream in(ipath);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(ipath.string(), ": invalid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ipath.string(), ": expected an object with a \"weight_map\" object");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(ipath.string(), ": weight_map[\"", it.key(), "\"] must be a file name");
      const std::string f = it.value().get<std::string>();
      // A shard is a file of this directory: no path outside it (no folders, no "..").
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        fail(ipath.string(), ": weight_map[\"", it.key(), "\"] = \"", f,
             "\" is not a file name in the checkpoint's directory");
      index_map[it.key()] = f;
      if (seen.insert(f).second) fnames.push_back(f);
    }
    if (fnames.empty()) fail(ipath.string(), ": its weight_map is empty (no tensor is mapped to a file)");
  } else {
    // (Hidden files are not shards: a save killed mid-way leaves its staged ".saving.*" files.)
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors" && e.path().filename().string()[0] != '.')
        fnames.push_back(e.path().filename().string());
    std::sort(fnames.begin(), fnames.end());
  }
  if (fnames.empty()) fail(where, ": no *.safetensors files (and no model.safetensors.index.json)");
  for (const auto& f : fnames) {
    files.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / f).string()));
    const SafetensorsFile& sf = *files.back();
    for (const auto& t : sf.tensors()) {
      auto [it, fresh] = found.emplace(t.name, std::make_pair(&t, &sf));
      if (!fresh)
        fail(where, ": tensor ", t.name, " appears in both ", it->second.second->path(), " and ", sf.path());
    }
  }
  for (const auto& [name, f] : index_map) {
    auto it = found.find(name);
    if (it == found.end() || fs::path(it->second.second->path()).filename() != f)
      fail(where, ": the index maps ", name, " to ", f, " but that file has no such tensor");
  }
  // The index must list every tensor of its shards: one it leaves out is a checkpoint whose index
  // and files disagree.
  if (!index_map.empty())
    for (const auto& [name, tf] : found)
      if (!index_map.count(name))
        fail(where, ": tensor ", name, " in ", tf.second->path(), " is not in model.safetensors.index.json");
  return cf;
}

// Rows [first, first + count) of a 2-D (or 1-D) tensor along `dim`, as a tensor of its own: a
// view into the mapping for rows, a copy into `bytes` for columns (kept alive by the caller).
static const StTensor& slice_st(const StTensor& t, int dim, int64_t first, int64_t count, std::list<StTensor>& views,
                                std::list<std::vector<uint8_t>>& bytes) {
  const size_t es = st_dtype_size(t.dtype);
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.numel() / std::max<int64_t>(rows, 1) : 1;
  StTensor v = t;
  v.shape[size_t(dim)] = count;
  v.bytes = size_t(v.numel()) * es;
  if (dim == 0) {
    v.data = t.data + size_t(first * cols) * es;
  } else {
    std::vector<uint8_t>& b = bytes.emplace_back(v.bytes);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(b.data() + size_t(r * count) * es, t.data + size_t(r * cols + first) * es, size_t(count) * es);
    v.data = b.data();
  }
  return views.emplace_back(std::move(v));
}

void load_checkpoint(Backend& be, const ModelConfig& c, ModelWeights& w, const std::string& dir) {
  const std::string where = "checkpoint " + dir;
  std::error_code ec;
  SL_CHECK(fs::is_directory(dir, ec), where, ": not a directory");

  const CheckpointFiles cf = open_checkpoint_files(dir, where);
  auto found = cf.found;  // a copy: a tensor-parallel share replaces its whole tensor below
  const std::vector<WeightSpec> specs = weight_specs(c, w);
  // Tensor parallelism: the checkpoint holds whole tensors, a rank reads its share of rows or
  // columns (and of an FP8 weight's block scales, whose blocks the share must not cut).
  std::list<StTensor> share_views;
  std::list<std::vector<uint8_t>> share_bytes;
  for (const auto& s : specs) {
    if (s.slice_dim < 0) continue;
    const auto it = found.find(s.name);
    if (it == found.end()) continue;  // said with the other missing tensors below
    const StTensor& whole = *it->second.first;
    SL_CHECK(whole.shape == shape_vec(s.full_shape), where, ": tensor ", s.name, " in ", it->second.second->path(),
             " has shape ", whole.shape_str(), ", expected ", s.full_shape.str());
    const int64_t count = s.shape[s.slice_dim];
    it->second.first = &slice_st(whole, s.slice_dim, s.slice_first, count, share_views, share_bytes);
    const std::string sc = scale_name(s.name);
    const auto q = sc.empty() ? found.end() : found.find(sc);
    if (q == found.end()) continue;
    SL_CHECK(s.slice_first % 128 == 0 && count % 128 == 0, where, ": ", s.name, " is quantized in 128 x 128 blocks, "
             "and this rank's share [", s.slice_first, ", ", s.slice_first + count, ") of its ",
             s.slice_dim == 0 ? "rows" : "columns", " cuts them (choose a split whose shares fall on the blocks)");
    const StTensor& ws = *q->second.first;
    SL_CHECK(ws.shape.size() == 2 && ws.shape[size_t(s.slice_dim)] * 128 >= s.full_shape[s.slice_dim], where, ": ",
             sc, " has shape ", ws.shape_str(), ", not one scale per 128 x 128 block of ", s.full_shape.str());
    q->second.first = &slice_st(ws, s.slice_dim, s.slice_first / 128, count / 128, share_views, share_bytes);
  }
  std::set<std::string> wanted;
  std::vector<std::string> missing;
  // Quantized weights as DeepSeek ships them (docs/model.md 9): "X.weight" in FP8 or MXFP4 with
  // its "X.scale" beside it; dequantized here into the backend's dtype.
  std::map<std::string, const StTensor*> scale_of;
  for (const auto& s : specs) {
    wanted.insert(s.name);
    if (!found.count(s.name)) missing.push_back(s.name);
    if (const std::string sc = scale_name(s.name); !sc.empty())
      if (auto it = found.find(sc); it != found.end()) {
        wanted.insert(sc);
        scale_of[s.name] = it->second.first;
      }
  }
  if (!missing.empty())
    fail(where, ": missing tensor ", missing[0],
         missing.size() > 1 ? " (and " + std::to_string(missing.size() - 1) + " more)" : std::string(),
         " for config ", c.name);
  // A rank of an expert-parallel run holds only its share of the routed experts: the checkpoint's
  // other experts are the model's, just not this rank's to load.
  std::set<std::string> others;
  if (w.held_experts(c) < c.n_routed_experts) {
    ModelWeights all;
    for (const auto& s : weight_specs(c, all)) {
      others.insert(s.name);
      if (const std::string sc = scale_name(s.name); !sc.empty()) others.insert(sc);
    }
  }
  for (const auto& [name, tf] : found)
    if (!wanted.count(name) && !others.count(name))
      fail(where, ": unexpected tensor ", name, " in ", tf.second->path(), " (not a weight of config ", c.name, ")");

  // Check every tensor before touching the backend.
  for (const auto& s : specs) {
    const StTensor& t = *found.at(s.name).first;
    const std::string& fp = found.at(s.name).second->path();
    if (held_native(s, w.format)) scale_view(s);  // allocated, right size
    if (auto q = scale_of.find(s.name); q != scale_of.end()) {
      check_quantized(where, s, t, *q->second, fp);
      spec_view(s, w.format);
      continue;
    }
    if (st_dtype_is_fp8(t.dtype) || t.dtype == StDType::I8 || t.dtype == StDType::U8)
      fail(where, ": tensor ", s.name, " in ", fp, " is ", st_dtype_name(t.dtype), " but has no ",
           s.name.substr(0, s.name.rfind('.')), ".scale beside it (a quantized weight needs its scales)");
    if (t.shape != shape_vec(s.shape))
      fail(where, ": tensor ", s.name, " in ", fp, " has shape ", t.shape_str(), ", expected ", s.shape.str());
    if (s.is_index) {
      if (t.dtype != StDType::I64 && t.dtype != StDType::I32)
        fail(where, ": tensor ", s.name, " in ", fp, " has dtype ", st_dtype_name(t.dtype), ", expected I64 or I32");
    } else if (t.dtype != StDType::F32 && t.dtype != StDType::BF16 && t.dtype != StDType::F16) {
      fail(where, ": tensor ", s.name, " in ", fp, " has dtype ", st_dtype_name(t.dtype), ", expected BF16, F32 or F16");
    } else if (const int64_t bad = first_nonfinite(t); bad >= 0) {
      // A NaN or Inf weight makes every logit after it NaN: refused here, naming where it is.
      fail(where, ": tensor ", s.name, " in ", fp, " holds a non-finite value (NaN or Inf) at element ", bad);
    }
    spec_view(s, w.format);  // allocated, right size
  }

  const Stream s0{0};
  std::vector<uint8_t> buf;
  LazyScratch scratch{be, specs, w.format, {}};
  for (const auto& s : specs) {
    const StTensor& t = *found.at(s.name).first;
    if (held_native(s, w.format)) {
      const auto q = scale_of.find(s.name);
      upload_native(be, s, t, q == scale_of.end() ? nullptr : q->second, scratch, where, found.at(s.name).second->path());
      continue;
    }
    const Tensor dst = spec_view(s);
    if (auto q = scale_of.find(s.name); q != scale_of.end()) {
      upload_dequantized(be, dst, t, *q->second);
      continue;
    }
    const size_t fe = st_dtype_size(t.dtype);
    const int64_t step = rows_per_chunk(dst, std::max(fe, dtype_size(dst.dtype)));
    const int64_t row = dst.dim(0) ? dst.numel() / dst.dim(0) : 0;
    for (int64_t r = 0; r < dst.dim(0); r += step) {
      const Tensor part = dst.rows(r, std::min(r + step, dst.dim(0)));
      const size_t ne = size_t(part.numel());
      const uint8_t* src = t.data + size_t(r * row) * fe;
      buf.resize(part.bytes());
      if (s.is_index) {
        SL_CHECK(dst.dtype == DType::I32, where, ": ", s.name, " must be allocated as i32");
        int32_t* o = reinterpret_cast<int32_t*>(buf.data());
        for (size_t e = 0; e < ne; ++e) {
          int64_t v;
          if (t.dtype == StDType::I64) std::memcpy(&v, src + 8 * e, 8);
          else {
            int32_t v32;
            std::memcpy(&v32, src + 4 * e, 4);
            v = v32;
          }
          if (v < 0 || v >= c.n_routed_experts)
            fail(where, ": tensor ", s.name, ": expert id ", v, " at row ", r + int64_t(e) / std::max<int64_t>(row, 1),
                 " is outside [0, ", c.n_routed_experts, ")");
          o[e] = int32_t(v);
        }
      } else {
        convert_to_backend(buf.data(), dst.dtype, src, t.dtype, ne);
      }
      be.upload(s0, part, buf.data(), part.bytes());
      be.synchronize();  // the staging buffer is reused by the next chunk
    }
  }
}

}  // namespace sl
