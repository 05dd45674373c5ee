// Weight specs (names and shapes of docs/model.md section 9), byte/parameter totals, deterministic
// initialisation, and checkpoint save/load round trips and errors (on the CPU backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "model/config.h"
#include "model/cpu/cpu_backend.h"
#include "model/weights.h"

using namespace sl;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

class TmpDir {
 public:
  TmpDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("sl_test_weights_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                                         std::to_string(counter++));
    fs::remove_all(path_);
  }
  ~TmpDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string sub(const std::string& n) const { return (path_ / n).string(); }

 private:
  fs::path path_;
};

std::map<std::string, WeightSpec> by_name(const std::vector<WeightSpec>& specs) {
  std::map<std::string, WeightSpec> m;
  for (const auto& s : specs) m[s.name] = s;
  return m;
}

// The bytes a spec's tensor (or expert slice) holds on the backend.
std::vector<uint8_t> fetch(Backend& be, const WeightSpec& s) {
  Tensor t = s.stack_index >= 0 ? s.dst->rows(s.stack_index, s.stack_index + 1) : *s.dst;
  std::vector<uint8_t> v(t.bytes());
  be.download(v.data(), t, t.bytes());
  return v;
}

struct Model {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ModelWeights w;
  std::vector<WeightSpec> specs;
  explicit Model(const ModelConfig& c, WeightFormat f = WeightFormat::Bf16) {
    allocate_weights(*be, c, w, f);
    specs = weight_specs(c, w);
  }
};

}  // namespace

TEST(Weights, TinySpecNamesAndShapes) {
  ModelConfig c = load_config("tiny");
  ModelWeights w;
  auto specs = weight_specs(c, w);
  auto m = by_name(specs);
  EXPECT_EQ(m.size(), specs.size()) << "names must be unique";
  EXPECT_EQ(w.layers.size(), 6u);
  EXPECT_EQ(w.mtp.size(), 2u);

  auto expect = [&](const std::string& n, Shape shape, bool f32 = false, int stack = -1) {
    SCOPED_TRACE(n);
    ASSERT_TRUE(m.count(n));
    const WeightSpec& s = m[n];
    EXPECT_EQ(s.shape, shape) << s.shape.str();
    EXPECT_EQ(s.keep_f32, f32);
    EXPECT_EQ(s.stack_index, stack);
    EXPECT_NE(s.dst, nullptr);
  };
  // D 256, H 4, Dh 128, Lq 128, G 2, Lo 64, Hi 4, di 128, E 8, k 2, F 128, V 1024, hc 4.
  expect("embed.weight", {1024, 256});
  expect("head.weight", {1024, 256});
  expect("norm.weight", {256});
  expect("hc_head_fn", {4, 1024}, true);
  expect("hc_head_base", {4}, true);
  expect("hc_head_scale", {1}, true);
  expect("layers.0.attn.wq_a.weight", {128, 256});
  expect("layers.0.attn.wq_b.weight", {512, 128});
  expect("layers.0.attn.wkv.weight", {128, 256});
  expect("layers.0.attn.wo_a.weight", {128, 256});  // [G*Lo, H*Dh/G]
  expect("layers.0.attn.wo_b.weight", {256, 128});
  expect("layers.0.attn.q_norm.weight", {128});
  expect("layers.0.attn.kv_norm.weight", {128});
  expect("layers.0.attn.attn_sink", {4}, true);
  expect("layers.2.attn.compressor.wkv.weight", {256, 256});  // c4a: c = 2
  expect("layers.2.attn.compressor.wgate.weight", {256, 256});
  expect("layers.2.attn.compressor.ape", {4, 256}, true);
  expect("layers.2.attn.compressor.norm.weight", {128});
  expect("layers.3.attn.compressor.wkv.weight", {128, 256});  // HCA 16: c = 1
  expect("layers.3.attn.compressor.ape", {16, 128}, true);
  expect("layers.2.attn.indexer.wq_b.weight", {512, 128});
  expect("layers.2.attn.indexer.weights_proj.weight", {4, 256});
  expect("layers.2.attn.indexer.compressor.wkv.weight", {256, 256});
  expect("layers.2.attn.indexer.compressor.wgate.weight", {256, 256});
  expect("layers.2.attn.indexer.compressor.ape", {4, 256}, true);
  expect("layers.2.attn.indexer.compressor.norm.weight", {128});
  expect("layers.0.ffn.gate.weight", {8, 256}, true);
  expect("layers.2.ffn.gate.tid2eid", {1024, 2});
  EXPECT_TRUE(m["layers.2.ffn.gate.tid2eid"].is_index);
  EXPECT_EQ(m["layers.2.ffn.gate.tid2eid"].init, WeightSpec::Init::Tid2eid);
  expect("layers.3.ffn.gate.bias", {8}, true);
  expect("layers.5.ffn.experts.7.w1.weight", {128, 256}, false, 7);
  expect("layers.5.ffn.experts.7.w2.weight", {256, 128}, false, 7);
  expect("layers.5.ffn.experts.0.w3.weight", {128, 256}, false, 0);
  EXPECT_EQ(m["layers.5.ffn.experts.7.w2.weight"].dst, &w.layers[5].ffn.w2.w);
  // The native formats (docs/model.md 8): FP8 for the main-stream projections and the shared
  // expert, MXFP4 for the routed experts, none for the aux-stream GEMMs, router, embedding, head.
  using N = WeightSpec::Native;
  for (const char* n : {"layers.0.attn.wq_a.weight", "layers.0.attn.wq_b.weight", "layers.0.attn.wkv.weight",
                        "layers.0.attn.wo_a.weight", "layers.0.attn.wo_b.weight", "layers.2.attn.indexer.wq_b.weight",
                        "layers.1.ffn.shared_experts.w1.weight", "layers.1.ffn.shared_experts.w2.weight",
                        "layers.1.ffn.shared_experts.w3.weight", "mtp.0.e_proj.weight", "mtp.1.h_proj.weight"}) {
    EXPECT_EQ(m[n].native, N::Fp8) << n;
    EXPECT_NE(m[n].scale_dst, nullptr) << n;
  }
  for (const char* n : {"layers.5.ffn.experts.7.w1.weight", "layers.5.ffn.experts.7.w2.weight",
                        "mtp.0.ffn.experts.3.w3.weight"})
    EXPECT_EQ(m[n].native, N::Mxfp4) << n;
  for (const char* n : {"embed.weight", "head.weight", "layers.2.attn.compressor.wkv.weight",
                        "layers.2.attn.indexer.weights_proj.weight", "layers.2.attn.indexer.compressor.wgate.weight",
                        "layers.0.ffn.gate.weight", "layers.0.attn.q_norm.weight"})
    EXPECT_EQ(m[n].native, N::None) << n;
  expect("layers.1.ffn.shared_experts.w1.weight", {128, 256});
  expect("layers.1.ffn.shared_experts.w2.weight", {256, 128});
  expect("layers.4.attn_norm.weight", {256});
  expect("layers.4.ffn_norm.weight", {256});
  expect("layers.4.hc_attn_fn", {24, 1024}, true);
  expect("layers.4.hc_attn_base", {24}, true);
  expect("layers.4.hc_ffn_scale", {3}, true);
  expect("mtp.0.e_proj.weight", {256, 256});
  expect("mtp.1.h_proj.weight", {256, 256});
  expect("mtp.1.enorm.weight", {256});
  expect("mtp.1.hnorm.weight", {256});
  expect("mtp.0.norm.weight", {256});
  expect("mtp.0.hc_head_fn", {4, 1024}, true);
  expect("mtp.0.hc_head_scale", {1}, true);
  expect("mtp.1.attn.wq_a.weight", {128, 256});
  expect("mtp.1.ffn.gate.bias", {8}, true);  // the MTP is never hash-routed
  expect("mtp.0.ffn.experts.3.w2.weight", {256, 128}, false, 3);
  expect("mtp.0.hc_ffn_fn", {24, 1024}, true);
  EXPECT_EQ(m["mtp.1.attn.wq_a.weight"].dst, &w.mtp[1].block.attn.wq_a.w);

  for (const char* absent :
       {"layers.0.attn.compressor.wkv.weight", "layers.3.attn.indexer.wq_b.weight", "layers.3.ffn.gate.tid2eid",
        "layers.2.ffn.gate.bias", "mtp.0.attn.compressor.wkv.weight", "mtp.0.ffn.gate.tid2eid", "mtp.0.embed.weight",
        "mtp.0.head.weight", "layers.0.attn.wq_a.scale", "layers.8.attn.wq_a.weight"})
    EXPECT_FALSE(m.count(absent)) << absent;

  // Every init is sensible: linear scales sqrt(3/fan_in), norms around 1.
  EXPECT_FLOAT_EQ(m["layers.0.attn.wq_b.weight"].scale, std::sqrt(3.f / 128));
  EXPECT_FLOAT_EQ(m["layers.0.ffn.experts.1.w2.weight"].scale, std::sqrt(3.f / 128));
  EXPECT_FLOAT_EQ(m["norm.weight"].offset, 1.f);
  for (const auto& s : specs) {
    if (s.init == WeightSpec::Init::Uniform) {
      EXPECT_GT(s.scale, 0.f) << s.name;
    }
    EXPECT_TRUE(std::isfinite(s.scale) && std::isfinite(s.offset)) << s.name;
  }
}

TEST(Weights, TensorCountsPerLayerType) {
  ModelConfig c = load_config("tiny");
  const int E = c.n_routed_experts;
  auto count = [](const std::vector<WeightSpec>& specs, const std::string& prefix) {
    int n = 0;
    for (const auto& s : specs) n += s.name.rfind(prefix, 0) == 0;
    return n;
  };
  ModelWeights w;
  auto specs = weight_specs(c, w);
  // Block = 8 attention + gate + (bias | tid2eid) + 3E experts + 3 shared + 2 norms + 6 hc.
  const int block = 8 + 2 + 3 * E + 3 + 2 + 6;
  const int compressor = 4, indexer = 2 + 4;
  EXPECT_EQ(count(specs, "layers.0."), block);                          // sliding, hash
  EXPECT_EQ(count(specs, "layers.1."), block);                          // sliding, hash
  EXPECT_EQ(count(specs, "layers.2."), block + compressor + indexer);   // c4a, hash
  EXPECT_EQ(count(specs, "layers.3."), block + compressor);             // c128a (16)
  EXPECT_EQ(count(specs, "layers.4."), block + compressor + indexer);   // c4a
  EXPECT_EQ(count(specs, "layers.5."), block + compressor);             // c128a (16)
  EXPECT_EQ(count(specs, "mtp.0."), block + 8);                         // + e/h_proj, 3 norms, hc_head
  EXPECT_EQ(count(specs, "mtp.1."), block + 8);
  EXPECT_EQ(int(specs.size()), 6 + 2 * block + 2 * (block + 10) + 2 * (block + 4) + 2 * (block + 8));
  EXPECT_EQ(int(specs.size()), 410);

  // MTP layers get a compressor (+ indexer) with the knob.
  c.mtp_compress_ratio = 4;
  ModelWeights w4;
  auto s4 = weight_specs(c, w4);
  EXPECT_EQ(count(s4, "mtp.0."), block + 8 + compressor + indexer);
  EXPECT_TRUE(by_name(s4).count("mtp.1.attn.indexer.compressor.ape"));
  EXPECT_EQ(by_name(s4)["mtp.0.attn.compressor.ape"].shape, (Shape{4, 256}));
  c.mtp_compress_ratio = 128;
  ModelWeights w128;
  auto s128 = weight_specs(c, w128);
  EXPECT_EQ(count(s128, "mtp.0."), block + 8 + compressor);
  EXPECT_EQ(by_name(s128)["mtp.0.attn.compressor.ape"].shape, (Shape{128, 128}));
}

TEST(Weights, WeightBytesMatchSpecsAndAllocation) {
  for (const char* name : {"tiny", "flash-2l", "flash"}) {
    SCOPED_TRACE(name);
    ModelConfig c = load_config(name);
    ModelWeights w;
    auto specs = weight_specs(c, w);
    for (DType wdt : {DType::F32, DType::BF16}) {
      size_t sum = 0;
      for (const auto& s : specs) {
        size_t e = s.is_index ? 4 : s.keep_f32 ? 4 : dtype_size(wdt);
        sum += size_t(s.shape.numel()) * e;
      }
      EXPECT_EQ(weight_bytes(c, wdt), sum);
    }
  }
  ModelConfig c = load_config("tiny");
  Model m(c);
  EXPECT_EQ(m.be->memory().weights_bytes, weight_bytes(c, DType::F32));
  // Stacked experts: one [E, F, D] tensor, named after the stack.
  EXPECT_EQ(m.w.layers[3].ffn.w1.w.shape, (Shape{8, 128, 256}));
  EXPECT_EQ(m.w.layers[3].ffn.w2.w.shape, (Shape{8, 256, 128}));
  EXPECT_EQ(m.be->buffer_name(m.w.layers[3].ffn.w1.w.buffer), "layers.3.ffn.experts.w1");
  EXPECT_EQ(m.be->buffer_name(m.w.mtp[1].block.ffn.w3.w.buffer), "mtp.1.ffn.experts.w3");
  EXPECT_EQ(m.be->buffer_name(m.w.layers[2].attn.wq_a.w.buffer), "layers.2.attn.wq_a.weight");
  EXPECT_EQ(m.w.layers[0].ffn.tid2eid.dtype, DType::I32);
  EXPECT_EQ(m.w.layers[0].ffn.gate.dtype, DType::F32);
  EXPECT_TRUE(m.w.layers[0].ffn.gate_bias.empty());
  EXPECT_TRUE(m.w.layers[3].ffn.tid2eid.empty());
  EXPECT_TRUE(m.w.layers[3].attn.idx_wq_b.w.empty());
  EXPECT_FALSE(m.w.layers[2].attn.idx_compressor.ape.empty());
}

// Flash totals, computed by hand from docs/model.md 1.1 and 9 (D 4096, H 64, Dh 512, Lq 1024,
// G 8, Lo 1024, Hi 64, di 128, E 256, k 6, F 2048, V 129280, hc 4, mix 24).
TEST(Weights, FlashTotals) {
  const int64_t D = 4096, H = 64, Dh = 512, Lq = 1024, G = 8, Lo = 1024, Hi = 64, di = 128, E = 256, k = 6,
                F = 2048, V = 129280, hcD = 4 * D;
  const int64_t attn = Lq * D + H * Dh * Lq + Dh * D + G * Lo * (H * Dh / G) + D * G * Lo + Lq + Dh + H;
  const int64_t comp4 = 2 * (2 * Dh * D) + 4 * 2 * Dh + Dh;       // 8,393,216
  const int64_t comp128 = 2 * (Dh * D) + 128 * Dh + Dh;           // 4,260,352
  const int64_t indexer = Hi * di * Lq + Hi * D + 2 * (2 * di * D) + 4 * 2 * di + di;  // 10,749,056
  const int64_t ffn = E * D + 3 * E * F * D + 3 * F * D;
  const int64_t norms_hc = 2 * D + 2 * (24 * hcD + 24 + 3);
  const int64_t block = attn + ffn + norms_hc;                    // without routing table / compressors
  const int64_t bias = E, tid = V * k;
  const int64_t hc_head = 4 * hcD + 4 + 1;
  const int64_t top = 2 * V * D + D + hc_head;
  const int64_t mtp_extra = 2 * D * D + 3 * D + hc_head;
  EXPECT_EQ(attn, 106956352);
  EXPECT_EQ(comp4, 8393216);
  EXPECT_EQ(comp128, 4260352);
  EXPECT_EQ(indexer, 10749056);
  EXPECT_EQ(block, 6576416374);
  // Layers 0, 1: sliding + hash; 2: c4a + hash; 4..42 even: c4a (20); 3..41 odd: c128a (20).
  const int64_t total = 2 * (block + tid) + (block + comp4 + indexer + tid) + 20 * (block + comp4 + indexer + bias) +
                        20 * (block + comp128 + bias) + (block + bias + mtp_extra) + top;
  EXPECT_EQ(total, 290944616402);  // ~290.9 B parameters (284.3 B without the MTP layer)

  ModelConfig c = load_config("flash");
  ModelWeights w;
  int64_t params = 0, f32 = 0, idx = 0;
  for (const auto& s : weight_specs(c, w)) {
    params += s.shape.numel();
    if (s.keep_f32) f32 += s.shape.numel();
    if (s.is_index) idx += s.shape.numel();
  }
  EXPECT_EQ(params, total);
  // F32-kept: per block sink + gate + hc; bias on 41 scored blocks; ape; two hc_heads.
  const int64_t f32_hand = 44 * (H + E * D + 2 * (24 * hcD + 24 + 3)) + 41 * E + 21 * (4 * 2 * Dh + 4 * 2 * di) +
                           20 * (128 * Dh) + 2 * hc_head;
  EXPECT_EQ(f32, f32_hand);
  EXPECT_EQ(f32, 82305362);
  EXPECT_EQ(idx, 3 * V * k);
  EXPECT_EQ(weight_bytes(c, DType::BF16), size_t(2 * total + 2 * f32_hand + 2 * 3 * V * k));
  EXPECT_EQ(weight_bytes(c, DType::BF16), 582058497608ull);  // ~542.1 GiB
  // --weights native, from the same counts: the FP8 matrices (per block wq_a, wq_b, wkv, wo_a, wo_b
  // and the shared expert; indexer.wq_b in the 21 c4a layers; e_proj and h_proj) take 1 byte per
  // value plus a 4-byte scale per 128 x 128 block instead of 2 bytes; the routed experts 0.5 + 1/32
  // (e2m1 pairs and an e8m0 per 32) instead of 2. Every dim is a multiple of 128: no partial blocks.
  const int64_t fp8 = 44 * (Lq * D + H * Dh * Lq + Dh * D + G * Lo * (H * Dh / G) + D * G * Lo + 3 * F * D) +
                      21 * Hi * di * Lq + 2 * D * D;
  const int64_t mx = 44 * 3 * E * F * D;
  const int64_t native = 582058497608ll - 2 * (fp8 + mx) + fp8 + fp8 / (128 * 128) * 4 + mx / 2 + mx / 32;
  EXPECT_EQ(int64_t(weight_bytes(c, DType::BF16, WeightFormat::Native)), native);
  EXPECT_EQ(native, 159693555272ll);  // ~159.7 GB (148.7 GiB) on a bf16 backend
  EXPECT_EQ(weight_bytes(c, DType::F32), size_t(4 * total));
  std::printf("flash: %lld parameters, %zu bytes on a bf16 backend, %zu bytes on an f32 backend\n",
              (long long)params, weight_bytes(c, DType::BF16), weight_bytes(c, DType::F32));
}

TEST(Weights, InitDeterministic) {
  ModelConfig c = load_config("tiny");
  Model a(c), b(c), d(c);
  init_weights(*a.be, c, a.w, 7);
  init_weights(*b.be, c, b.w, 7);
  init_weights(*d.be, c, d.w, 8);
  size_t same_as_other_seed = 0;
  for (size_t i = 0; i < a.specs.size(); ++i) {
    const WeightSpec& s = a.specs[i];
    auto va = fetch(*a.be, s), vb = fetch(*b.be, b.specs[i]), vd = fetch(*d.be, d.specs[i]);
    EXPECT_EQ(va, vb) << s.name;
    same_as_other_seed += va == vd;
  }
  EXPECT_EQ(same_as_other_seed, 0u);

  // Values: scale * uniform_pm1(seed, hash_name(checkpoint name), i) + offset, per expert slice.
  auto m = by_name(a.specs);
  for (const char* n : {"layers.0.ffn.experts.3.w1.weight", "layers.5.ffn.experts.7.w2.weight", "mtp.1.enorm.weight",
                        "hc_head_scale", "layers.2.attn.compressor.ape", "embed.weight"}) {
    const WeightSpec& s = m[n];
    auto v = fetch(*a.be, s);
    const float* f = reinterpret_cast<const float*>(v.data());
    for (int64_t i : {int64_t(0), s.shape.numel() - 1}) {
      float want = s.scale * uniform_pm1(7, hash_name(n), uint64_t(i));
      want = want + s.offset;
      EXPECT_EQ(f[i], want) << n << "[" << i << "]";
    }
  }
  // Ranges.
  auto range = [&](const char* n, float lo, float hi) {
    auto v = fetch(*a.be, m[n]);
    const float* f = reinterpret_cast<const float*>(v.data());
    float mn = 1e30f, mx = -1e30f;
    for (size_t i = 0; i < v.size() / 4; ++i) mn = std::min(mn, f[i]), mx = std::max(mx, f[i]);
    EXPECT_GE(mn, lo) << n;
    EXPECT_LE(mx, hi) << n;
    if (v.size() / 4 > 16) {
      EXPECT_GT(mx - mn, 0.5f * (hi - lo)) << n;  // spread, not constant
    }
  };
  range("layers.1.attn_norm.weight", 0.9f, 1.1f);
  range("layers.1.hc_attn_scale", 0.45f, 0.55f);
  range("layers.1.attn.attn_sink", -0.1f, 0.1f);
  range("embed.weight", -1.f, 1.f);
  range("layers.1.attn.wq_a.weight", -std::sqrt(3.f / 256), std::sqrt(3.f / 256));

  // tid2eid: k distinct ids in [0, E) per row, every expert used, differs between layers.
  auto t0 = fetch(*a.be, m["layers.0.ffn.gate.tid2eid"]);
  auto t1 = fetch(*a.be, m["layers.1.ffn.gate.tid2eid"]);
  EXPECT_NE(t0, t1);
  const int32_t* ids = reinterpret_cast<const int32_t*>(t0.data());
  std::vector<int> hits(c.n_routed_experts, 0);
  for (int v = 0; v < c.vocab_size; ++v) {
    std::set<int> row;
    for (int j = 0; j < c.num_experts_per_tok; ++j) {
      int e = ids[v * c.num_experts_per_tok + j];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, c.n_routed_experts);
      row.insert(e);
      hits[e]++;
    }
    EXPECT_EQ(int(row.size()), c.num_experts_per_tok) << "row " << v;
  }
  for (int e = 0; e < c.n_routed_experts; ++e) EXPECT_GT(hits[e], 150) << e;  // ~256 expected each

  // Not allocated -> error.
  ModelWeights none;
  auto be = make_cpu_backend();
  EXPECT_NE(error_of([&] { init_weights(*be, c, none, 1); }).find("not allocated"), std::string::npos);
}

TEST(Weights, SaveLoadF32Exact) {
  ModelConfig c = load_config("tiny");
  TmpDir d;
  Model a(c);
  init_weights(*a.be, c, a.w, 3);
  save_checkpoint(*a.be, c, a.w, d.str(), DType::F32);
  EXPECT_TRUE(fs::exists(d.sub("config.json")));
  EXPECT_TRUE(fs::exists(d.sub("model-00001-of-00001.safetensors")));
  EXPECT_TRUE(fs::exists(d.sub("model.safetensors.index.json")));
  // config.json is a loadable config equal to c.
  ModelConfig back = load_config(d.sub("config.json"));
  EXPECT_EQ(config_to_json(back), config_to_json(c));

  // The file itself: dtypes and a known value.
  SafetensorsFile f(d.sub("model-00001-of-00001.safetensors"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), a.specs.size());
  EXPECT_EQ(f.find("layers.0.ffn.gate.tid2eid")->dtype, StDType::I64);
  EXPECT_EQ(f.find("layers.0.attn.wq_a.weight")->dtype, StDType::F32);
  EXPECT_EQ(f.find("layers.0.ffn.experts.5.w2.weight")->shape, (std::vector<int64_t>{256, 128}));

  Model b(c);
  load_checkpoint(*b.be, c, b.w, d.str());
  for (size_t i = 0; i < a.specs.size(); ++i) EXPECT_EQ(fetch(*a.be, a.specs[i]), fetch(*b.be, b.specs[i])) << a.specs[i].name;

  // Index JSON: total_size and a weight_map entry for every tensor.
  std::ifstream in(d.sub("model.safetensors.index.json"));
  auto idx = nlohmann::json::parse(in);
  EXPECT_EQ(idx["weight_map"].size(), a.specs.size());
  EXPECT_EQ(idx["weight_map"]["mtp.1.hc_head_fn"], "model-00001-of-00001.safetensors");
  size_t total = 0;
  for (const auto& t : f.tensors()) total += t.bytes;
  EXPECT_EQ(idx["metadata"]["total_size"].template get<size_t>(), total);
}

// DeepSeek's quantized layout (docs/model.md 9): dense projections as FP8 e4m3 with 128 x 128
// block scales (e8m0, and f32 as Flash-Base ships them), routed experts as MXFP4 (I8 pairs, e8m0
// per 32). Loading dequantizes each to exactly what core/fp8.h's dequantization gives; every
// other tensor loads as written. Broken scales are refused, naming the tensor.
TEST(Weights, LoadFp8AndMxfp4Checkpoint) {
  ModelConfig c = load_config("tiny");
  TmpDir d;
  Model a(c);
  init_weights(*a.be, c, a.w, 5);
  fs::create_directories(d.str());
  {
    std::ofstream cfg(d.sub("config.json"));
    cfg << config_to_json(c).dump(2);
  }
  auto ends_with = [](const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  std::map<std::string, std::vector<float>> expect;  // the values loading must give, per spec
  std::vector<std::vector<uint8_t>> keep;            // bytes the writer reads at finish()
  SafetensorsWriter wr(d.sub("model.safetensors"));
  int fp8 = 0, fp8_f32 = 0, mx = 0;
  for (const WeightSpec& s : a.specs) {
    const std::vector<uint8_t> raw = fetch(*a.be, s);
    std::vector<int64_t> shape(s.shape.d.begin(), s.shape.d.begin() + s.shape.n);
    if (s.is_index) {
      std::vector<int64_t> ids(raw.size() / 4);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = reinterpret_cast<const int32_t*>(raw.data())[i];
      keep.emplace_back(reinterpret_cast<const uint8_t*>(ids.data()), reinterpret_cast<const uint8_t*>(ids.data() + ids.size()));
      wr.add(s.name, StDType::I64, shape, keep.back().data());
      continue;
    }
    const float* v = reinterpret_cast<const float*>(raw.data());
    const size_t n = raw.size() / 4;
    const std::string base = s.name.substr(0, s.name.rfind('.'));
    const bool dense = ends_with(s.name, "attn.wq_b.weight") || ends_with(s.name, "attn.wo_b.weight") ||
                       ends_with(s.name, "shared_experts.w2.weight");
    const bool expert = s.name.find(".ffn.experts.") != std::string::npos;
    std::vector<float> back(n);
    if (dense) {
      const lowp::Fp8Blocks q = lowp::quantize_fp8_blocks(v, shape[0], shape[1]);
      lowp::dequantize_fp8_blocks(q, back.data());
      keep.push_back(q.codes);
      wr.add(s.name, StDType::F8_E4M3, shape, keep.back().data());
      const std::vector<int64_t> sshape = {q.scale_rows(), q.scale_cols()};
      if (fp8 % 2 == 0) {
        keep.push_back(q.scales);
        wr.add(base + ".scale", StDType::F8_E8M0, sshape, keep.back().data());
      } else {  // fp32 block scales (Flash-Base)
        std::vector<float> f(q.scales.size());
        for (size_t i = 0; i < f.size(); ++i) f[i] = lowp::e8m0_to_float(q.scales[i]);
        keep.emplace_back(reinterpret_cast<const uint8_t*>(f.data()), reinterpret_cast<const uint8_t*>(f.data() + f.size()));
        wr.add(base + ".scale", StDType::F32, sshape, keep.back().data());
        ++fp8_f32;
      }
      ++fp8;
    } else if (expert) {
      const lowp::Mxfp4 q = lowp::quantize_mxfp4(v, shape[0], shape[1]);
      lowp::dequantize_mxfp4(q, back.data());
      keep.push_back(q.packed);
      wr.add(s.name, StDType::I8, {shape[0], shape[1] / 2}, keep.back().data());
      keep.push_back(q.scales);
      wr.add(base + ".scale", StDType::F8_E8M0, {shape[0], shape[1] / 32}, keep.back().data());
      ++mx;
    } else {
      back.assign(v, v + n);
      keep.push_back(raw);
      wr.add(s.name, StDType::F32, shape, keep.back().data());
    }
    expect[s.name] = back;
  }
  wr.finish();
  ASSERT_GT(fp8, 4);
  ASSERT_GT(fp8_f32, 1);
  ASSERT_GT(mx, 10);

  Model b(c);
  load_checkpoint(*b.be, c, b.w, d.str());
  for (const WeightSpec& s : b.specs) {
    if (s.is_index) continue;
    const std::vector<uint8_t> got = fetch(*b.be, s);
    const std::vector<float> f(reinterpret_cast<const float*>(got.data()),
                               reinterpret_cast<const float*>(got.data()) + got.size() / 4);
    EXPECT_EQ(f, expect[s.name]) << s.name;
  }
}

TEST(Weights, SaveLoadBf16ShardedAndWithoutIndex) {
  ModelConfig c = load_config("tiny");
  TmpDir d;
  Model a(c);
  init_weights(*a.be, c, a.w, 11);
  ::setenv("STREAMLAB_SHARD_BYTES", "2000000", 1);
  save_checkpoint(*a.be, c, a.w, d.str(), DType::BF16);
  ::unsetenv("STREAMLAB_SHARD_BYTES");
  int shards = 0;
  for (const auto& e : fs::directory_iterator(d.str())) shards += e.path().extension() == ".safetensors";
  EXPECT_GT(shards, 3);
  char first[64];
  std::snprintf(first, sizeof first, "model-00001-of-%05d.safetensors", shards);
  EXPECT_TRUE(fs::exists(d.sub(first))) << first;

  auto check = [&](Model& b) {
    for (size_t i = 0; i < a.specs.size(); ++i) {
      const WeightSpec& s = a.specs[i];
      auto va = fetch(*a.be, s), vb = fetch(*b.be, b.specs[i]);
      ASSERT_EQ(va.size(), vb.size());
      if (s.keep_f32 || s.is_index) {
        EXPECT_EQ(va, vb) << s.name;  // kept F32 / int64 in the file: exact
        continue;
      }
      const float* fa = reinterpret_cast<const float*>(va.data());
      const float* fb = reinterpret_cast<const float*>(vb.data());
      size_t bad = 0;
      for (size_t e = 0; e < va.size() / 4; ++e) bad += fb[e] != round_bf16(fa[e]);
      EXPECT_EQ(bad, 0u) << s.name;
    }
  };
  Model b(c);
  load_checkpoint(*b.be, c, b.w, d.str());
  check(b);
  SafetensorsFile f(d.sub(first));
  EXPECT_EQ(f.find("embed.weight")->dtype, StDType::BF16);

  // Without the index every *.safetensors file is read.
  fs::remove(d.sub("model.safetensors.index.json"));
  Model b2(c);
  load_checkpoint(*b2.be, c, b2.w, d.str());
  check(b2);
}

TEST(Weights, LoadErrorsNameTheTensor) {
  ModelConfig c = load_config("tiny");
  TmpDir d;
  Model a(c);
  init_weights(*a.be, c, a.w, 5);
  save_checkpoint(*a.be, c, a.w, d.str(), DType::F32);

  // Missing: a config that expects more tensors (MTP compressor).
  ModelConfig c4 = c;
  c4.mtp_compress_ratio = 4;
  {
    Model b(c4);
    std::string e = error_of([&] { load_checkpoint(*b.be, c4, b.w, d.str()); });
    EXPECT_NE(e.find("missing tensor mtp.0.attn.compressor.wkv.weight"), std::string::npos) << e;
    EXPECT_NE(e.find(d.str()), std::string::npos) << e;
  }
  // Unexpected: a checkpoint with more tensors than the config.
  TmpDir d4;
  {
    Model b(c4);
    init_weights(*b.be, c4, b.w, 5);
    save_checkpoint(*b.be, c4, b.w, d4.str(), DType::F32);
    Model t(c);
    std::string e = error_of([&] { load_checkpoint(*t.be, c, t.w, d4.str()); });
    EXPECT_NE(e.find("unexpected tensor mtp.0.attn."), std::string::npos) << e;
    EXPECT_NE(e.find("model-00001-of-00001.safetensors"), std::string::npos) << e;
  }
  // Mis-shaped.
  ModelConfig cs = c;
  cs.o_lora_rank = 32;
  {
    Model b(cs);
    std::string e = error_of([&] { load_checkpoint(*b.be, cs, b.w, d.str()); });
    EXPECT_NE(e.find("layers.0.attn.wo_a.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("has shape [128, 256], expected [64, 256]"), std::string::npos) << e;
  }
  // Quantized tensors that do not hold together: FP8 without its scales, scales of the wrong
  // shape, an FP8 NaN code (each a hand-edited copy of the valid checkpoint).
  TmpDir d8;
  fs::create_directories(d8.str());
  struct Bad {
    std::vector<int64_t> scale_shape;  // empty: no .scale tensor
    uint8_t code;
    const char* says;
  };
  for (const Bad& bad : {Bad{{}, 0x38, "is F8_E4M3 but has no layers.0.attn.wq_b.scale beside it"},
                         Bad{{1, 1}, 0x38, "the block scales of layers.0.attn.wq_b.weight"},
                         Bad{{4, 1}, 0x7F, "holds an FP8 NaN at element 0"}}) {
    SafetensorsFile src(d.sub("model-00001-of-00001.safetensors"));
    const StTensor* wq_b = src.find("layers.0.attn.wq_b.weight");
    ASSERT_NE(wq_b, nullptr);
    std::vector<uint8_t> codes(wq_b->bytes / 4, bad.code);
    std::vector<uint8_t> scales(16, 127);
    SafetensorsWriter w(d8.sub("model.safetensors"));
    for (const auto& t : src.tensors()) {
      if (t.name == "layers.0.attn.wq_b.weight") w.add(t.name, StDType::F8_E4M3, t.shape, codes.data());
      else w.add(t.name, t.dtype, t.shape, t.data);
    }
    if (!bad.scale_shape.empty()) w.add("layers.0.attn.wq_b.scale", StDType::F8_E8M0, bad.scale_shape, scales.data());
    w.finish();
    Model b(c);
    std::string e = error_of([&] { load_checkpoint(*b.be, c, b.w, d8.str()); });
    EXPECT_NE(e.find(bad.says), std::string::npos) << e;
  }
  // Wrong dtype and out-of-range expert ids (a hand-edited single-file checkpoint).
  TmpDir dx;
  fs::create_directories(dx.str());
  {
    SafetensorsFile src(d.sub("model-00001-of-00001.safetensors"));
    std::vector<int64_t> bad_ids(1024 * 2, 9);  // E = 8
    SafetensorsWriter w(dx.sub("model.safetensors"));
    for (const auto& t : src.tensors()) {
      if (t.name == "layers.1.ffn.gate.tid2eid") w.add(t.name, StDType::I64, t.shape, bad_ids.data());
      else w.add(t.name, t.dtype, t.shape, t.data);
    }
    w.finish();
    Model b(c);
    std::string e = error_of([&] { load_checkpoint(*b.be, c, b.w, dx.str()); });
    EXPECT_NE(e.find("layers.1.ffn.gate.tid2eid"), std::string::npos) << e;
    EXPECT_NE(e.find("expert id 9"), std::string::npos) << e;
  }
  {
    SafetensorsFile src(d.sub("model-00001-of-00001.safetensors"));
    std::vector<int32_t> ints(256, 1);
    SafetensorsWriter w(dx.sub("model.safetensors"));
    for (const auto& t : src.tensors()) {
      if (t.name == "norm.weight") w.add(t.name, StDType::I32, t.shape, ints.data());
      else w.add(t.name, t.dtype, t.shape, t.data);
    }
    w.finish();
    Model b(c);
    std::string e = error_of([&] { load_checkpoint(*b.be, c, b.w, dx.str()); });
    EXPECT_NE(e.find("norm.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("dtype I32, expected BF16, F32 or F16"), std::string::npos) << e;
  }
  // No files at all; not a directory.
  TmpDir de;
  fs::create_directories(de.str());
  {
    Model b(c);
    EXPECT_NE(error_of([&] { load_checkpoint(*b.be, c, b.w, de.str()); }).find("no *.safetensors"), std::string::npos);
    EXPECT_NE(error_of([&] { load_checkpoint(*b.be, c, b.w, de.sub("nope")); }).find("not a directory"),
              std::string::npos);
  }
  // Index pointing at a file that lacks the tensor.
  {
    std::ifstream in(d.sub("model.safetensors.index.json"));
    auto idx = nlohmann::json::parse(in);
    idx["weight_map"]["bogus.weight"] = "model-00001-of-00001.safetensors";
    std::ofstream(d.sub("model.safetensors.index.json")) << idx.dump();
    Model b(c);
    std::string e = error_of([&] { load_checkpoint(*b.be, c, b.w, d.str()); });
    EXPECT_NE(e.find("bogus.weight"), std::string::npos) << e;
  }
}

TEST(Weights, LoadAcceptsF16AndI32) {
  ModelConfig c = load_config("tiny");
  TmpDir d, d16;
  Model a(c);
  init_weights(*a.be, c, a.w, 9);
  save_checkpoint(*a.be, c, a.w, d.str(), DType::F32);
  fs::create_directories(d16.str());
  SafetensorsFile src(d.sub("model-00001-of-00001.safetensors"));
  // norm.weight as F16 1 + i/1024 (exact in f16); attn_sink as F16 specials; tid2eid as I32.
  std::vector<uint16_t> h(256);
  std::vector<float> want(256);
  for (int i = 0; i < 256; ++i) {
    want[i] = 1.f + float(i) / 1024.f;
    h[i] = uint16_t(0x3c00 + i);
  }
  // -1, the smallest subnormal 2^-24, -2^-14 (smallest normal), 65504 (largest finite).
  std::vector<uint16_t> sink16 = {0xbc00, 0x0001, 0x8400, 0x7bff};
  std::vector<float> sink_want = {-1.f, std::ldexp(1.f, -24), -std::ldexp(1.f, -14), 65504.f};
  std::vector<int32_t> ids;
  SafetensorsWriter w(d16.sub("model.safetensors"));
  for (const auto& t : src.tensors()) {
    if (t.name == "norm.weight") {
      w.add(t.name, StDType::F16, t.shape, h.data());
    } else if (t.name == "layers.0.attn.attn_sink") {
      w.add(t.name, StDType::F16, t.shape, sink16.data());
    } else if (t.name == "layers.0.ffn.gate.tid2eid") {
      for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t v;
        std::memcpy(&v, t.data + 8 * i, 8);
        ids.push_back(int32_t(v));
      }
      w.add(t.name, StDType::I32, t.shape, ids.data());
    } else {
      w.add(t.name, t.dtype, t.shape, t.data);
    }
  }
  w.finish();
  Model b(c);
  load_checkpoint(*b.be, c, b.w, d16.str());
  std::vector<float> got(256);
  b.be->download(got.data(), b.w.norm, 1024);
  EXPECT_EQ(got, want);
  std::vector<float> sink(4);
  b.be->download(sink.data(), b.w.layers[0].attn.attn_sink, 16);
  EXPECT_EQ(sink, sink_want);
  auto m = by_name(a.specs);
  auto mb = by_name(b.specs);
  EXPECT_EQ(fetch(*a.be, m["layers.0.ffn.gate.tid2eid"]), fetch(*b.be, mb["layers.0.ffn.gate.tid2eid"]));
  EXPECT_EQ(fetch(*a.be, m["layers.3.attn.wq_a.weight"]), fetch(*b.be, mb["layers.3.attn.wq_a.weight"]));
}

// --weights native (docs/model.md 8): the allocation, its byte count, initialisation as the bf16
// format's fp32 values quantized by core/fp8.h (an independent host quantizer), and the round trips
// through DeepSeek's layout: native -> file (F8_E4M3 / I8 codes, F8_E8M0 scales) -> native is
// exact, native -> file -> bf16 gives the dequantized values, and an f32 file -> native gives the
// codes of the native initialisation.
TEST(Weights, NativeFormatInitSaveLoad) {
  const ModelConfig c = load_config("tiny");
  auto native_model = [&] { return std::make_unique<Model>(c, WeightFormat::Native); };
  auto a = native_model();
  EXPECT_EQ(a->w.format, WeightFormat::Native);
  EXPECT_EQ(a->be->memory().weights_bytes, weight_bytes(c, DType::F32, WeightFormat::Native));
  EXPECT_LT(weight_bytes(c, DType::BF16, WeightFormat::Native), weight_bytes(c, DType::BF16) / 2);
  const BlockWeights& l3 = a->w.layers[3];
  EXPECT_EQ(l3.attn.wq_b.w.dtype, DType::U8);
  EXPECT_EQ(l3.attn.wq_b.scale.shape, (Shape{4, 1}));           // [512, 128]: 4 x 1 blocks
  EXPECT_EQ(l3.ffn.w1.w.shape, (Shape{8, 128, 128}));             // [E, F, D / 2]
  EXPECT_EQ(l3.ffn.w1.scale.shape, (Shape{8, 128, 8}));           // [E, F, D / 32]
  EXPECT_EQ(l3.ffn.w1.scale.dtype, DType::U8);
  EXPECT_EQ(l3.attn.compressor.wkv.dtype, DType::F32);            // aux-stream GEMMs stay plain
  init_weights(*a->be, c, a->w, 7);

  // The same seed in the bf16 format (f32 on the CPU): its values, quantized on the host.
  Model plain(c);
  init_weights(*plain.be, c, plain.w, 7);
  auto floats = [](const std::vector<uint8_t>& b) {
    std::vector<float> f(b.size() / 4);
    std::memcpy(f.data(), b.data(), b.size());
    return f;
  };
  int fp8 = 0, mx = 0;
  for (size_t i = 0; i < a->specs.size(); ++i) {
    const WeightSpec& s = a->specs[i];
    const std::vector<uint8_t> got = fetch(*a->be, s);
    if (s.native == WeightSpec::Native::None) {
      EXPECT_EQ(got, fetch(*plain.be, plain.specs[i])) << s.name;
      continue;
    }
    const std::vector<float> v = floats(fetch(*plain.be, plain.specs[i]));
    Tensor sc = s.stack_index >= 0 ? s.scale_dst->rows(s.stack_index, s.stack_index + 1) : *s.scale_dst;
    std::vector<uint8_t> scale(sc.bytes());
    a->be->download(scale.data(), sc, sc.bytes());
    if (s.native == WeightSpec::Native::Fp8) {
      const lowp::Fp8Blocks q = lowp::quantize_fp8_blocks(v.data(), s.shape[0], s.shape[1]);
      EXPECT_EQ(got, q.codes) << s.name;
      const std::vector<float> f = floats(scale);
      for (size_t k = 0; k < f.size(); ++k) EXPECT_EQ(f[k], lowp::e8m0_to_float(q.scales[k])) << s.name << " " << k;
      ++fp8;
    } else {
      const lowp::Mxfp4 q = lowp::quantize_mxfp4(v.data(), s.shape[0], s.shape[1]);
      EXPECT_EQ(got, q.packed) << s.name;
      EXPECT_EQ(scale, q.scales) << s.name;
      ++mx;
    }
  }
  // Per layer wq_a, wq_b, wkv, wo_a, wo_b and the shared expert's three; indexer.wq_b in the two
  // c4a layers; e_proj and h_proj in the two MTP layers. Experts: 8 layers x 8 experts x 3.
  EXPECT_EQ(fp8, 8 * 8 + 2 + 2 * 2);
  EXPECT_EQ(mx, 8 * 8 * 3);

  // Native -> file: DeepSeek's dtypes.
  TmpDir d;
  save_checkpoint(*a->be, c, a->w, d.str(), DType::F32);  // f32: the plain tensors round-trip exactly
  SafetensorsFile f(d.sub("model-00001-of-00001.safetensors"));
  EXPECT_EQ(f.find("layers.0.attn.wq_a.weight")->dtype, StDType::F8_E4M3);
  EXPECT_EQ(f.find("layers.0.attn.wq_a.scale")->dtype, StDType::F8_E8M0);
  EXPECT_EQ(f.find("layers.0.attn.wq_a.scale")->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.find("layers.2.ffn.experts.5.w2.weight")->dtype, StDType::I8);
  EXPECT_EQ(f.find("layers.2.ffn.experts.5.w2.weight")->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(f.find("layers.2.ffn.experts.5.w2.scale")->shape, (std::vector<int64_t>{256, 4}));
  EXPECT_EQ(f.find("layers.2.attn.compressor.wkv.weight")->dtype, StDType::F32);
  EXPECT_EQ(f.find("layers.2.attn.compressor.wkv.scale"), nullptr);

  // File -> native: exact, scales included.
  auto b = native_model();
  load_checkpoint(*b->be, c, b->w, d.str());
  for (size_t i = 0; i < a->specs.size(); ++i) {
    const WeightSpec &sa = a->specs[i], &sb = b->specs[i];
    EXPECT_EQ(fetch(*a->be, sa), fetch(*b->be, sb)) << sa.name;
    if (sa.scale_dst) {
      WeightSpec ta = sa, tb = sb;
      ta.dst = sa.scale_dst, tb.dst = sb.scale_dst;
      EXPECT_EQ(fetch(*a->be, ta), fetch(*b->be, tb)) << sa.name << " scales";
    }
  }

  // File -> bf16 format: the dequantized values.
  Model deq(c);
  load_checkpoint(*deq.be, c, deq.w, d.str());
  const WeightSpec& wo = by_name(deq.specs)["layers.1.attn.wo_b.weight"];
  const std::vector<float> wo_f = floats(fetch(*deq.be, wo));
  const std::vector<float> wo_plain = floats(fetch(*plain.be, by_name(plain.specs)["layers.1.attn.wo_b.weight"]));
  double worst = 0;
  for (size_t k = 0; k < wo_f.size(); ++k) worst = std::max(worst, double(std::fabs(wo_f[k] - wo_plain[k])));
  EXPECT_GT(worst, 0.0);                                   // quantized, not the plain values
  EXPECT_LT(worst, std::sqrt(3.0 / 128) / 16 * 1.01);      // half an e4m3 step at the block's amax

  // An f32 file -> native: quantized on load, the codes of the native initialisation.
  TmpDir d2;
  save_checkpoint(*plain.be, c, plain.w, d2.str(), DType::F32);
  auto q = native_model();
  load_checkpoint(*q->be, c, q->w, d2.str());
  for (size_t i = 0; i < a->specs.size(); ++i) EXPECT_EQ(fetch(*a->be, a->specs[i]), fetch(*q->be, q->specs[i])) << a->specs[i].name;
}

// A config whose dims the native formats cannot hold is refused before anything is allocated.
TEST(Weights, NativeFormatRefusesUnfitDims) {
  ModelConfig c = load_config("tiny");
  c.q_lora_rank = 96;  // wq_b's input: not a multiple of 128
  auto be = make_cpu_backend();
  ModelWeights w;
  const std::string e = error_of([&] { allocate_weights(*be, c, w, WeightFormat::Native); });
  EXPECT_NE(e.find("wq_b.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("multiple of 128"), std::string::npos) << e;
  EXPECT_EQ(be->memory().weights_bytes, 0u);
  EXPECT_EQ(parse_weight_format("native"), WeightFormat::Native);
  EXPECT_EQ(parse_weight_format("native-w4a8"), WeightFormat::NativeW4A8);
  EXPECT_STREQ(weight_format_name(WeightFormat::NativeW4A8), "native-w4a8");
  EXPECT_NE(error_of([] { parse_weight_format("fp8"); }).find("bf16, native or native-w4a8"), std::string::npos);
  // The W4A8 format holds the native format's bytes (only the experts' activations differ).
  EXPECT_EQ(weight_bytes(load_config("tiny"), DType::BF16, WeightFormat::NativeW4A8),
            weight_bytes(load_config("tiny"), DType::BF16, WeightFormat::Native));
  // Routed experts 64 wide (a multiple of 32, not of 128; two shared experts make the FP8 shared
  // MLP 128 wide) fit native, not W4A8: w2's input is rounded to FP8 in groups of 128 there.
  ModelConfig c96 = load_config("tiny");
  c96.moe_intermediate_size = 64;
  c96.n_shared_experts = 2;
  ModelWeights w96;
  EXPECT_EQ(error_of([&] { allocate_weights(*be, c96, w96, WeightFormat::Native); }), "<no error>");
  auto be2 = make_cpu_backend();
  ModelWeights w96b;
  const std::string e96 = error_of([&] { allocate_weights(*be2, c96, w96b, WeightFormat::NativeW4A8); });
  EXPECT_NE(e96.find("--weights native-w4a8"), std::string::npos) << e96;
  EXPECT_NE(e96.find("w2"), std::string::npos) << e96;
  EXPECT_NE(e96.find("multiple of 128"), std::string::npos) << e96;
  EXPECT_EQ(be2->memory().weights_bytes, 0u);
}
