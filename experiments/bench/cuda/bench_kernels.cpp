// The kernel workbench: every CUDA kernel variant of an op (model/kernel_variants.h) run at the
// model's decode shapes against the CPU reference on identical inputs, and timed.
//
// For each op family (the decode GEMMs: our GEMV or cuBLAS, with or without its workspace; the
// same GEMMs with FP8 block-scaled weights, gemm_fp8; the routed experts, one decode kernel now;
// sparse attention: the decode kernel or the prefill kernel, KV splits; mHC's hc_pre: the mix GEMV
// (1-2 tokens) or tensor-core GEMM, then the finish, or one fused launch) and each shape, the
// inputs are built once per backend from the same
// seeds (the reference's rounded to bf16 where the device stores bf16), the op runs on the CPU
// reference and on the device under each variant, and the device's output is compared with the
// reference's (relative error, bf16 bound 2e-2). Then each variant is timed: the L2 is flushed
// (a 256 MiB fill) before every run, the run is bracketed by timing marks, and the median over
// the runs is set against the bytes the op must move (weights it reads, the KV it attends to,
// its activations) to give GB/s and the fraction of the device-to-device copy bandwidth measured
// in the same process, and against the read floor at that size (a kernel that only streams the
// op's bytes from HBM, flushed and timed the same way: common/read_floor.h): "x read" is the op's
// median over the read's, 1.0 the best a kernel of that size can do here.
//
//   bench_kernels [--ops=gemm,gemm_fp8,moe_experts,moe_experts_mxfp4,moe_experts_w4a8,sparse_attention,hc_pre]
//                 [--config=flash-6l]
//                 [--batches=1,8]
//                 [--pos=4095] [--experts=64] [--reps=20] [--variants=SPEC;SPEC...]
//                 [--dut=cuda|cpu] [--out=FILE.json]
//
// --dut=cpu puts a second CPU backend in the device's place (every comparison then agrees, the
// times are the host's): the workbench's own checks on a machine without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "experiments/bench/cuda/bench_util.h"
#include "experiments/bench/cuda/common/read_floor.h"
#include "model/config.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/kernel_variants.h"
#include "model/tensor_values.h"

namespace sl {
namespace {

struct Options {
  std::vector<std::string> ops{"gemm",           "gemm_fp8",         "moe_experts", "moe_experts_mxfp4",
                               "moe_experts_w4a8", "sparse_attention", "hc_pre"};
  std::string config = "flash-6l", dut = "cuda", out, command_line;
  std::vector<int> batches{1, 8};
  int pos = 4095;     // the decode position of every sequence ((pos+1) % 128 == 0: full blocks)
  int experts = 64;   // routed experts held (at most the config's): only the ones hit are read
  int reps = 20;
  std::vector<std::string> variants;  // empty: each op's own list
};

// ---------------------------------------------------------------- cases
// What an input is; fixes its dtype on a backend.
enum class Kind { Act, Wt, F32, I32, U8, Workspace };

struct Input {
  std::string name;
  Kind kind;
  Shape shape;
  float scale = 1, offset = 0;   // floats: scale * uniform(-1, 1) + offset
  std::vector<int32_t> ints;     // I32: the values
};

// One op at one shape.
struct Case {
  std::string op, label;  // "gemm", "wq_b M=1 N=32768 K=1024"
  std::vector<Input> inputs;
  // Runs the op once on `s` over the inputs (allocated in the order of `inputs`).
  std::function<void(Backend&, const std::vector<Tensor>&)> run;
  int output = 0;       // which input is the op's result
  double bytes = 0;     // bytes the op must move at the least
  int moe_T = 0, moe_k = 0, moe_D = 0, moe_F = 0, moe_E = 0;  // a Workspace input's sizes
};

DType dtype_on(const Backend& be, Kind k) {
  switch (k) {
    case Kind::Act: return be.act_dtype();
    case Kind::Wt: return be.weight_dtype();
    case Kind::I32: return DType::I32;
    case Kind::U8:
    case Kind::Workspace: return DType::U8;
    case Kind::F32: break;
  }
  return DType::F32;
}

// The inputs of `c` on `be`, initialised from the case's seeds. `round_like`: the backend whose
// dtypes the values must be representable in (the device's), so that the reference computes from
// the very numbers the device holds.
std::vector<Tensor> make_inputs(Backend& be, const Case& c, const Backend& round_like) {
  std::vector<Tensor> t;
  uint64_t key = 1;
  for (const Input& in : c.inputs) {
    Shape s = in.shape;
    if (in.kind == Kind::Workspace)
      s = Shape{int64_t(be.moe_workspace_bytes(c.moe_T, c.moe_k, c.moe_D, c.moe_F, c.moe_E))};
    const Tensor x = be.alloc(in.name, dtype_on(be, in.kind), s, AllocKind::Activation);
    if (in.kind == Kind::I32 || in.kind == Kind::U8) {
      SL_CHECK(size_t(x.numel()) == in.ints.size(), "bench_kernels: ", c.label, ": ", in.name, " has ",
               in.ints.size(), " values for ", x.numel(), " elements");
      if (in.kind == Kind::I32) {
        be.upload(Stream{}, x, in.ints.data(), in.ints.size() * 4);
      } else {
        const std::vector<uint8_t> bytes(in.ints.begin(), in.ints.end());
        be.upload(Stream{}, x, bytes.data(), bytes.size());
      }
    } else if (in.kind != Kind::Workspace) {
      be.init_uniform(Stream{}, x, 20261204, key, in.scale, in.offset);
      if (x.dtype == DType::F32 && dtype_on(round_like, in.kind) == DType::BF16) {
        std::vector<float> v(size_t(x.numel()));
        be.download(v.data(), x, v.size() * 4);
        for (float& f : v) f = round_bf16(f);
        be.upload(Stream{}, x, v.data(), v.size() * 4);
      }
    }
    ++key;
    t.push_back(x);
  }
  be.synchronize();
  return t;
}

// sqrt(sum (d - r)^2 / sum r^2); infinite when the device gave a NaN or inf the reference did not.
double rel_err(const std::vector<float>& dut, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(dut[i])) return INFINITY;
    const double d = double(dut[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// T x k distinct expert ids per token, uniformly drawn.
std::vector<int32_t> random_ids(int T, int k, int E, std::mt19937& rng) {
  std::vector<int32_t> ids;
  for (int t = 0; t < T; ++t) {
    std::set<int32_t> row;
    while (int(row.size()) < k) row.insert(int32_t(rng() % uint32_t(E)));
    std::vector<int32_t> r(row.begin(), row.end());
    std::shuffle(r.begin(), r.end(), rng);
    ids.insert(ids.end(), r.begin(), r.end());
  }
  return ids;
}

// The decode GEMMs of one layer: out[M, N] = a[M, K] . w[N, K]^T.
std::vector<Case> gemm_cases(const ModelConfig& c, int M) {
  const int D = c.hidden_size, Lq = c.q_lora_rank, F = c.moe_intermediate_size * c.n_shared_experts;
  const std::vector<std::tuple<const char*, int, int>> shapes = {
      {"wq_a", Lq, D}, {"wkv", c.head_dim, D}, {"wq_b", c.num_attention_heads * c.head_dim, Lq},
      {"wo_b", D, c.o_groups * c.o_lora_rank}, {"shared.w1", F, D}, {"shared.w2", D, F},
      {"gate", c.n_routed_experts, D}, {"indexer.wq_b", c.index_n_heads * c.index_head_dim, Lq}};
  std::vector<Case> out;
  for (const auto& [name, N, K] : shapes) {
    if (N <= 0 || K <= 0) continue;  // a config without that projection
    Case k;
    k.op = "gemm";
    k.label = std::string(name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
    k.inputs = {{"a", Kind::Act, {M, K}}, {"w", Kind::Wt, {N, K}, 1.f / std::sqrt(float(K))}, {"out", Kind::Act, {M, N}}};
    k.inputs[2].scale = 0;
    k.output = 2;
    k.run = [](Backend& be, const std::vector<Tensor>& t) { be.gemm(Stream{}, t[2], t[0], t[1]); };
    k.bytes = 2.0 * (double(N) * K + double(M) * K + double(M) * N);
    out.push_back(std::move(k));
  }
  return out;
}

// The same decode GEMMs with the weights as the checkpoint holds them (docs/model.md 8): e4m3
// codes with one scale per 128 x 128 block, the activation quantized per 1 x 128 group.
std::vector<Case> gemm_fp8_cases(const ModelConfig& c, int M, std::mt19937& rng) {
  std::vector<Case> out;
  for (Case& b : gemm_cases(c, M)) {
    const int64_t N = b.inputs[1].shape.d[0], K = b.inputs[1].shape.d[1];
    if (K % 128 != 0) continue;
    Case k;
    k.op = "gemm_fp8";
    k.label = b.label;
    std::vector<int32_t> codes(size_t(N * K));
    std::uniform_int_distribution<int> d(0, 253);
    for (auto& x : codes) x = d(rng) >= 127 ? d(rng) % 127 + 128 : d(rng) % 127;  // every code but the NaNs
    k.inputs = {{"a", Kind::Act, {M, K}},
                {"w", Kind::U8, {N, K}, 1, 0, codes},
                {"w_scale", Kind::F32, {(N + 127) / 128, K / 128}, 0.002f, 0.004f},
                {"out", Kind::Act, {M, N}, 0}};
    k.output = 3;
    k.run = [](Backend& be, const std::vector<Tensor>& t) { be.gemm_fp8(Stream{}, t[3], t[0], t[1], t[2], 1); };
    k.bytes = double(N) * K + 4.0 * ((N + 127) / 128) * (K / 128) + 2.0 * (double(M) * K + double(M) * N);
    out.push_back(std::move(k));
  }
  return out;
}

// The routed experts of one MoE layer at decode: T tokens, k experts each, of E held.
Case moe_case(const ModelConfig& c, int T, int E, std::mt19937& rng) {
  const int k = c.num_experts_per_tok, D = c.hidden_size, F = c.moe_intermediate_size;
  Case m;
  m.op = "moe_experts";
  m.label = "T=" + std::to_string(T) + " k=" + std::to_string(k) + " D=" + std::to_string(D) +
            " F=" + std::to_string(F) + " E=" + std::to_string(E);
  const std::vector<int32_t> ids = random_ids(T, k, E, rng);
  const std::set<int32_t> hit(ids.begin(), ids.end());
  m.inputs = {{"x", Kind::Act, {T, D}},
              {"ids", Kind::I32, {T, k}, 1, 0, ids},
              {"weights", Kind::F32, {T, k}, 0.2f, 0.3f},
              {"w1", Kind::Wt, {E, F, D}, 1.f / std::sqrt(float(D))},
              {"w2", Kind::Wt, {E, D, F}, 1.f / std::sqrt(float(F))},
              {"w3", Kind::Wt, {E, F, D}, 1.f / std::sqrt(float(D))},
              {"out", Kind::Act, {T, D}, 0},
              {"workspace", Kind::Workspace, {}}};
  m.moe_T = T, m.moe_k = k, m.moe_D = D, m.moe_F = F, m.moe_E = E;
  const float limit = float(c.swiglu_limit);
  m.run = [limit](Backend& be, const std::vector<Tensor>& t) {
    be.moe_experts(Stream{}, t[6], t[0], t[1], t[2], t[3], t[4], t[5], limit, t[7]);
  };
  m.output = 6;
  m.bytes = double(hit.size()) * 3 * F * double(D) * 2 + 2.0 * 2 * T * D + 8.0 * T * k;
  return m;
}

// The same routed experts with MXFP4 weights (the checkpoint's format): random e2m1 bytes and
// e8m0 scales around 2^-7 (weights of about the bf16 case's size). fp8_act: fed FP8 activations
// (W4A8, --weights native-w4a8), op name moe_experts_w4a8.
Case moe_mxfp4_case(const ModelConfig& c, int T, int E, std::mt19937& rng, bool fp8_act = false) {
  Case m = moe_case(c, T, E, rng);
  const int k = c.num_experts_per_tok, D = c.hidden_size, F = c.moe_intermediate_size;
  m.op = fp8_act ? "moe_experts_w4a8" : "moe_experts_mxfp4";
  const std::vector<int32_t> ids = m.inputs[1].ints;
  std::uniform_int_distribution<int> byte(0, 255), sc(124, 126);
  auto bytes = [&](size_t n, bool scale) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = scale ? sc(rng) : byte(rng);
    return v;
  };
  const size_t fd = size_t(E) * F * D;
  m.inputs = {{"x", Kind::Act, {T, D}},
              {"ids", Kind::I32, {T, k}, 1, 0, ids},
              {"weights", Kind::F32, {T, k}, 0.2f, 0.3f},
              {"w1", Kind::U8, {E, F, D / 2}, 1, 0, bytes(fd / 2, false)},
              {"w1_scale", Kind::U8, {E, F, D / 32}, 1, 0, bytes(fd / 32, true)},
              {"w2", Kind::U8, {E, D, F / 2}, 1, 0, bytes(fd / 2, false)},
              {"w2_scale", Kind::U8, {E, D, F / 32}, 1, 0, bytes(fd / 32, true)},
              {"w3", Kind::U8, {E, F, D / 2}, 1, 0, bytes(fd / 2, false)},
              {"w3_scale", Kind::U8, {E, F, D / 32}, 1, 0, bytes(fd / 32, true)},
              {"out", Kind::Act, {T, D}, 0},
              {"workspace", Kind::Workspace, {}}};
  const float limit = float(c.swiglu_limit);
  m.run = [limit, fp8_act](Backend& be, const std::vector<Tensor>& t) {
    be.moe_experts_mxfp4(Stream{}, t[9], t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], limit, fp8_act,
                         t[10]);
  };
  m.output = 9;
  const std::set<int32_t> hit(ids.begin(), ids.end());
  m.bytes = double(hit.size()) * 3 * F * double(D) * (0.5 + 1.0 / 32) + 2.0 * 2 * T * D + 8.0 * T * k;
  return m;
}

// Sparse attention of one decode token per sequence at position `pos`: sliding window only,
// all compressed entries (ratio 128), or the indexer's top-K of them (ratio 4).
Case attention_case(const ModelConfig& c, int B, int pos, CompressedKeys mode, std::mt19937& rng) {
  const int H = c.num_attention_heads, Dh = c.head_dim, W = c.sliding_window;
  const int ratio = mode == CompressedKeys::All ? 128 : 4;
  const int n_c = mode == CompressedKeys::None ? 0 : (pos + 1) / ratio;
  const int n_max = std::max(n_c, 1), K = std::min(c.index_topk, std::max(n_c, 1));
  Case a;
  a.op = "sparse_attention";
  const char* kind = mode == CompressedKeys::None ? "window" : mode == CompressedKeys::All ? "all/128" : "top-k/4";
  a.label = std::string(kind) + " B=" + std::to_string(B) + " H=" + std::to_string(H) + " Dh=" + std::to_string(Dh) +
            " pos=" + std::to_string(pos);
  std::vector<int32_t> tags(static_cast<size_t>(B * W)), pos_v(static_cast<size_t>(B), pos);
  std::vector<int32_t> seq_v(static_cast<size_t>(B)), sel;
  for (int b = 0; b < B; ++b) {
    seq_v[size_t(b)] = b;
    for (int s = 0; s < W; ++s) {  // slot s holds the position of the window that is s mod W
      const int p = pos - ((pos - s) % W + W) % W;
      tags[size_t(b) * W + s] = p >= 0 ? p : -1;
    }
    if (mode == CompressedKeys::Selected) {
      std::vector<int32_t> all(static_cast<size_t>(n_c));
      for (int j = 0; j < n_c; ++j) all[size_t(j)] = j;
      std::shuffle(all.begin(), all.end(), rng);
      sel.insert(sel.end(), all.begin(), all.begin() + K);
    }
  }
  a.inputs = {{"q", Kind::Act, {B, H, Dh}},       {"swa", Kind::Act, {B, W, Dh}},
              {"swa_tags", Kind::I32, {B, W}, 1, 0, tags}, {"comp", Kind::Act, {B, n_max, Dh}},
              {"sel", Kind::I32, {B, K}, 1, 0, mode == CompressedKeys::Selected ? sel : std::vector<int32_t>(size_t(B) * K, -1)},
              {"sink", Kind::F32, {H}},           {"pos", Kind::I32, {B}, 1, 0, pos_v},
              {"seq", Kind::I32, {B}, 1, 0, seq_v}, {"o", Kind::Act, {B, H, Dh}, 0}};
  a.run = [mode, W, ratio](Backend& be, const std::vector<Tensor>& t) {
    const Tensor comp = mode == CompressedKeys::None ? Tensor{} : t[3];
    const Tensor sel = mode == CompressedKeys::Selected ? t[4] : Tensor{};
    be.sparse_attention(Stream{}, t[8], t[0], t[1], t[2], comp, sel, t[5], t[6], t[7], W, mode, ratio);
  };
  a.output = 8;
  const int keys = std::min(W, pos + 1) + (mode == CompressedKeys::Selected ? K : n_c);
  a.bytes = double(B) * (2.0 * 2 * H * Dh + 2.0 * keys * Dh + (mode == CompressedKeys::Selected ? 4.0 * K : 0));
  return a;
}

// mHC's hc_pre at decode (docs/model.md 3.4): B tokens of 4 residual streams of D values, the
// 24 mix logits against the F32 fn [24, 4D], the Sinkhorn and the collapse. The compared output is
// the collapsed y; post and comb follow from the same logits.
Case hc_pre_case(const ModelConfig& c, int B) {
  const int D = c.hidden_size, mix = 24;
  Case h;
  h.op = "hc_pre";
  h.label = "B=" + std::to_string(B) + " D=" + std::to_string(D);
  h.inputs = {{"X", Kind::Act, {B, 4, D}},
              {"fn", Kind::F32, {mix, 4 * D}, 0.02f},
              {"scale", Kind::F32, {3}, 0.2f, 1.f},
              {"base", Kind::F32, {mix}, 0.5f},
              {"y", Kind::Act, {B, D}, 0},
              {"post", Kind::F32, {B, 4}, 0},
              {"comb", Kind::F32, {B, 4, 4}, 0}};
  const int iters = c.hc_sinkhorn_iters;
  const float hc_eps = float(c.hc_eps), rms_eps = float(c.rms_norm_eps);
  h.run = [iters, hc_eps, rms_eps](Backend& be, const std::vector<Tensor>& t) {
    be.hc_pre(Stream{}, t[4], t[5], t[6], t[0], t[1], t[2], t[3], iters, hc_eps, rms_eps);
  };
  h.output = 4;
  h.bytes = 4.0 * mix * 4 * D + 2.0 * B * 4 * D + 2.0 * B * D + 4.0 * B * 20;
  return h;
}

// Each op's variants: the default first, then every alternative a run can ask for.
std::vector<std::string> default_variants(const std::string& op) {
  if (op == "gemm") return {"", "gemv-bf16-max-mb=4096", "gemv-bf16-max-mb=0", "gemv-bf16-max-mb=0,cublas-workspace-kb=0"};
  if (op == "gemm_fp8")
    return {"", "fp8-decode=warp", "fp8-decode=wide", "fp8-wide-blocks=1", "pdl=off"};
  if (op == "moe_experts_mxfp4")
    return {"", "mxfp4-decode=shift", "mxfp4-decode=table,mxfp4-swap=off", "mxfp4-swap=off",
            "mxfp4-swap=on", "mxfp4-wide=on,mxfp4-swap=off", "mxfp4-mma=off", "mxfp4-load=noalloc",
            "mxfp4-swap-ks=4"};
  // The routed experts have one decode kernel now (the split-K and w2-column variants measured
  // slower: results/2026-12-04-h200-kernel-workbench); PDL and the GEMV limit still apply.
  if (op == "moe_experts") return {"", "pdl=off"};
  // W4A8: moe_experts_mxfp4's kernels on activations rounded to FP8 first (the swapped kernel up
  // to 16 token-expert pairs, the default), or the 8-row kernel at every size.
  if (op == "moe_experts_w4a8") return {"", "mxfp4-swap=off"};
  if (op == "hc_pre") return {"", "hc-decode=split", "hc-splits=8", "hc-splits=16", "hc-splits=32", "hc-splits=64"};
  return {"", "attn-splits=1", "attn-splits=16", "attn-decode=off", "attn-decode-splits=1", "attn-decode-splits=4",
          "attn-decode-splits=8"};
}

// ---------------------------------------------------------------- measuring
struct Row {
  std::string op, label, variant;
  double rel_err = 0, median_us = 0, min_us = 0, bytes = 0;
  double read_floor_us = 0;  // the same bytes only read (0: not measured, --dut=cpu)
  std::vector<double> us;
};

// The read floor at `bytes` (common/read_floor.h): the median of `reps` reads after 3 untimed,
// each after the same 256 MiB flush as an op's run.
double read_floor_us(size_t bytes, int reps) {
  const size_t words = (bytes + 15) / 16, flush_bytes = size_t(256) << 20;
  void *src = nullptr, *flush = nullptr, *sink = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&src, words * 16));
  BENCH_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  BENCH_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  BENCH_CUDA_CHECK(cudaMemset(src, 0x5A, words * 16));
  cudaEvent_t a, b;
  BENCH_CUDA_CHECK(cudaEventCreate(&a));
  BENCH_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < 3 + reps; ++i) {
    BENCH_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
    BENCH_CUDA_CHECK(cudaEventRecord(a));
    BENCH_CUDA_CHECK(bench::launch_read_kernel(src, words, static_cast<unsigned*>(sink)));
    BENCH_CUDA_CHECK(cudaEventRecord(b));
    BENCH_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) us.push_back(double(ms) * 1e3);
  }
  BENCH_CUDA_CHECK(cudaEventDestroy(a));
  BENCH_CUDA_CHECK(cudaEventDestroy(b));
  for (void* p : {src, flush, sink}) BENCH_CUDA_CHECK(cudaFree(p));
  return bench::median(us);
}

std::unique_ptr<Backend> make_dut(const Options& o, const std::string& variant) {
  if (o.dut == "cpu") return make_cpu_backend();
  CudaBackendOptions opt;
  opt.variants = KernelVariants::parse(variant);
  return make_cuda_backend(opt);
}

Row measure(const Options& o, const Case& c, const std::string& variant, const std::vector<float>& ref) {
  std::unique_ptr<Backend> dut = make_dut(o, variant);
  const std::vector<Tensor> t = make_inputs(*dut, c, *dut);
  Row r{c.op, c.label, variant.empty() ? "(defaults)" : variant};
  r.bytes = c.bytes;
  c.run(*dut, t);
  r.rel_err = rel_err(download_floats(*dut, t[size_t(c.output)]), ref);
  // Larger than the H200's 60 MB L2 several times over: each run starts from HBM.
  const Tensor flush = dut->alloc("l2_flush", DType::F32, {int64_t(64) << 20}, AllocKind::Workspace);
  const Event a = dut->create_timing_mark("begin"), b = dut->create_timing_mark("end");
  for (int i = 0; i < 3 + o.reps; ++i) {
    dut->fill(Stream{}, flush, float(i));
    dut->record_timing_mark(a, Stream{});
    c.run(*dut, t);
    dut->record_timing_mark(b, Stream{});
    dut->synchronize();
    if (i >= 3) r.us.push_back(dut->elapsed_ms(a, b) * 1e3);
  }
  r.median_us = bench::median(r.us);
  r.min_us = *std::min_element(r.us.begin(), r.us.end());
  return r;
}

int run(const Options& o) {
  std::string why;
  if (o.dut == "cuda" && !cuda_available(&why)) {
    std::fprintf(stderr, "bench_kernels: no CUDA device (%s); nothing measured (--dut=cpu checks the workbench itself)\n",
                 why.c_str());
    return 2;
  }
  ModelConfig cfg = load_config(o.config);
  std::vector<double> bw_samples;
  const double bw = o.dut == "cuda" ? bench::copy_bandwidth_bytes_per_s(&bw_samples) : 0;
  if (bw > 0) std::printf("device-to-device copy: median %.1f GB/s (read + write)\n", bw / 1e9);

  std::mt19937 rng(4242);
  std::vector<Case> cases;
  for (const std::string& op : o.ops)
    for (int B : o.batches) {
      if (op == "gemm") {
        for (Case& c : gemm_cases(cfg, B)) cases.push_back(std::move(c));
      } else if (op == "gemm_fp8") {
        for (Case& c : gemm_fp8_cases(cfg, B, rng)) cases.push_back(std::move(c));
      } else if (op == "moe_experts") {
        cases.push_back(moe_case(cfg, B, std::min(o.experts, cfg.n_routed_experts), rng));
      } else if (op == "moe_experts_mxfp4" || op == "moe_experts_w4a8") {
        cases.push_back(moe_mxfp4_case(cfg, B, std::min(o.experts, cfg.n_routed_experts), rng, op == "moe_experts_w4a8"));
      } else if (op == "hc_pre") {
        cases.push_back(hc_pre_case(cfg, B));
      } else {
        for (CompressedKeys m : {CompressedKeys::None, CompressedKeys::All, CompressedKeys::Selected})
          cases.push_back(attention_case(cfg, B, o.pos, m, rng));
      }
    }

  const double tolerance = 2e-2;
  std::vector<Row> rows;
  int failures = 0;
  std::printf("\n%-17s %-34s %-44s %9s %10s %10s %9s %7s %7s\n", "op", "shape", "variant", "rel err", "median us",
              "min us", "GB/s", "% copy", "x read");
  // The dtypes the device stores, which the reference's inputs are rounded to.
  const std::unique_ptr<Backend> dut_dtypes = make_dut(o, "");
  for (const Case& c : cases) {
    std::vector<float> ref;
    {
      std::unique_ptr<Backend> cpu = make_cpu_backend();
      const std::vector<Tensor> t = make_inputs(*cpu, c, *dut_dtypes);
      c.run(*cpu, t);
      ref = download_floats(*cpu, t[size_t(c.output)]);
    }
    std::vector<std::string> variants = o.variants.empty() ? default_variants(c.op) : o.variants;
    if (o.dut == "cpu") variants = {""};  // variants choose among CUDA kernels
    const double read_us = o.dut == "cuda" ? read_floor_us(size_t(c.bytes), o.reps) : 0.0;
    if (read_us > 0)
      std::printf("%-17s %-34s %-44s %9s %10.1f %10s %9.1f %7s %7s\n", c.op.c_str(), c.label.c_str(), "(read floor)", "-",
                  read_us, "-", c.bytes / (read_us * 1e-6) / 1e9, "-", "1.00");
    for (const std::string& v : variants) {
      std::fprintf(stderr, "bench_kernels: %s %s [%s]...\n", c.op.c_str(), c.label.c_str(), v.c_str());
      Row r = measure(o, c, v, ref);
      r.read_floor_us = read_us;
      const bool bad = !(r.rel_err <= tolerance);
      failures += bad;
      const double gbps = r.bytes / (r.median_us * 1e-6) / 1e9;
      char vs_read[32] = "-";
      if (read_us > 0) std::snprintf(vs_read, sizeof vs_read, "%.2f", r.median_us / read_us);
      std::printf("%-17s %-34s %-44s %9.2e %10.1f %10.1f %9.1f %7s %7s%s\n", r.op.c_str(), r.label.c_str(),
                  r.variant.c_str(), r.rel_err, r.median_us, r.min_us, gbps,
                  bw > 0 ? (std::to_string(int(std::lround(100 * gbps * 1e9 / bw))) + "%").c_str() : "-", vs_read,
                  bad ? "  FAIL" : "");
      std::fflush(stdout);
      rows.push_back(std::move(r));
    }
  }

  if (!o.out.empty()) {
    nlohmann::json j;
    j["provenance"] = o.dut == "cuda" ? bench::provenance(o.command_line)
                                       : nlohmann::json{{"device", "cpu (workbench self-check)"}, {"command", o.command_line}};
    j["config"] = o.config;
    j["pos"] = o.pos;
    j["tolerance"] = tolerance;
    j["copy_bandwidth_GBps"] = {{"median", bw / 1e9}, {"samples", bw_samples}};
    for (const Row& r : rows)
      j["rows"].push_back({{"op", r.op}, {"shape", r.label}, {"variant", r.variant}, {"rel_err", r.rel_err},
                           {"median_us", r.median_us}, {"min_us", r.min_us}, {"samples_us", r.us},
                           {"bytes", r.bytes}, {"GBps", r.bytes / (r.median_us * 1e-6) / 1e9},
                           {"fraction_of_copy_bw", bw > 0 ? r.bytes / (r.median_us * 1e-6) / bw : 0.0},
                           {"read_floor_us", r.read_floor_us},
                           {"times_read_floor", r.read_floor_us > 0 ? r.median_us / r.read_floor_us : 0.0},
                           {"passed", r.rel_err <= tolerance}});
    bench::write_json_atomic(o.out, j);
    std::printf("wrote %s\n", o.out.c_str());
  }
  if (failures) std::fprintf(stderr, "bench_kernels: %d variant(s) over the tolerance %.0e\n", failures, tolerance);
  return failures ? 1 : 0;
}

int positive(const char* flag, const char* v, int max) {
  int n = 0;
  try {
    size_t used = 0;
    n = std::stoi(v, &used);
    SL_CHECK(used == std::strlen(v), "");
  } catch (...) {
    fail(flag, " takes a whole number, not '", v, "'");
  }
  SL_CHECK(n >= 1 && n <= max, flag, " = ", n, " is outside 1..", max);
  return n;
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--ops=")) {
      o.ops = sl::bench::split(v, ',');
      for (const auto& op : o.ops)
        SL_CHECK(op == "gemm" || op == "gemm_fp8" || op == "moe_experts" || op == "moe_experts_mxfp4" ||
                     op == "moe_experts_w4a8" || op == "sparse_attention" || op == "hc_pre",
                 "--ops: '", op,
                 "' is not one of gemm, gemm_fp8, moe_experts, moe_experts_mxfp4, moe_experts_w4a8, sparse_attention, "
                 "hc_pre");
      SL_CHECK(!o.ops.empty(), "--ops is empty");
    } else if (auto v = flag_value(arg, "--config=")) {
      o.config = v;
    } else if (auto v = flag_value(arg, "--batches=")) {
      o.batches.clear();
      for (const auto& b : sl::bench::split(v, ',')) o.batches.push_back(sl::positive("--batches", b.c_str(), 64));
      SL_CHECK(!o.batches.empty(), "--batches is empty");
    } else if (auto v = flag_value(arg, "--pos=")) {
      o.pos = sl::positive("--pos", v, 65535);  // the CPU reference holds every compressed entry
    } else if (auto v = flag_value(arg, "--experts=")) {
      o.experts = sl::positive("--experts", v, 4096);
    } else if (auto v = flag_value(arg, "--reps=")) {
      o.reps = sl::positive("--reps", v, 100000);
    } else if (auto v = flag_value(arg, "--variants=")) {
      o.variants = sl::bench::split(v, ';');
      for (const auto& s : o.variants) sl::KernelVariants::parse(s);  // an error names the bad key
    } else if (auto v = flag_value(arg, "--dut=")) {
      o.dut = v;
      SL_CHECK(o.dut == "cuda" || o.dut == "cpu", "--dut takes cuda or cpu, not '", o.dut, "'");
    } else if (auto v = flag_value(arg, "--out=")) {
      o.out = v;
    } else {
      sl::fail("unknown argument '", arg, "' (--help lists them)");
    }
    return true;
  };
  static const std::string usage = std::string(
      "bench_kernels [--ops=gemm,gemm_fp8,moe_experts,moe_experts_mxfp4,moe_experts_w4a8,sparse_attention,hc_pre]\n"
      "              [--config=flash-6l]\n"
      "              [--batches=1,8]\n"
      "              [--pos=4095] [--experts=64] [--reps=20] [--variants=SPEC;SPEC...] [--dut=cuda|cpu]\n"
      "              [--out=FILE.json]\n"
      "The kernel workbench: each op's CUDA kernel variants at the config's decode shapes, checked\n"
      "against the CPU reference (relative error, bf16 bound 2e-2) and timed with the L2 flushed\n"
      "before every run: median and min time, GB/s of the bytes the op must move, and that as a\n"
      "fraction of the device-to-device copy bandwidth measured in the same run; \"x read\": the median\n"
      "over the read floor, a kernel that only streams the op's bytes, timed the same way (1.00 = the\n"
      "best a kernel of that size can do on this device).\n"
      "  --ops        the op families (default all seven; gemm_fp8 and moe_experts_mxfp4: the same ops on\n"
      "               the checkpoint's FP8 / MXFP4 weights; moe_experts_w4a8: the MXFP4 experts fed FP8\n"
      "               activations, as --weights native-w4a8 runs them; hc_pre: mHC's mix and collapse)\n"
      "  --batches    decode batch sizes (one token per sequence)\n"
      "  --pos        the decode position (sparse attention's window and compressed entries)\n"
      "  --experts    routed experts held (capped at the config's; only those hit are read)\n"
      "  --reps       timed runs per variant (after 3 warm-up runs)\n"
      "  --variants   ';'-separated kernel-variant specs instead of each op's list; a spec is\n"
      "               ") + sl::kKernelVariantsHelp + "\n"
      "  --dut=cpu    a second CPU backend as the device: checks the workbench without a GPU\n"
      "Exit status: 0 all variants within the tolerance, 1 a variant over it or an error, 2 no GPU.\n";
  return sl::bench::bench_main(argc, argv, "bench_kernels", usage.c_str(), parse, [&o] { return sl::run(o); });
}
