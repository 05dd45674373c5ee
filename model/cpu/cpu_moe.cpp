// MoE (docs/model.md 6): the router (sqrt-softplus scores, hash or biased top-k selection) and
// the routed experts (SwiGLU with clamp, docs/model.md 3.3).
#include <cstring>
#include <functional>
#include <numeric>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/communicator.h"
#include "model/expert_parallel.h"
#include "model/cpu/cpu_backend_impl.h"

namespace sl {

using namespace cpu;

namespace {

// softplus with PyTorch's threshold: above 20 it is z to fp32 precision, and exp would
// overflow for large z anyway.
inline float softplus(float z) { return z > 20.f ? z : std::log1p(std::exp(z)); }

inline size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// The workspace of moe_experts, carved into 64-byte aligned sections. P = tokens * k is the
// number of (token, expert) pairs; each pair becomes one row in expert order.
struct MoeWorkspace {
  size_t xs = 0, gate = 0, up = 0, ys = 0, pair_row = 0, offsets = 0, total = 0;
  MoeWorkspace(int64_t P, int64_t D, int64_t F, int64_t E) {
    size_t at = 0;
    auto take = [&](size_t bytes) {
      size_t here = at;
      at += align64(bytes);
      return here;
    };
    xs = take(size_t(P * D) * 4);        // F32 [P, D]  the permuted token rows
    gate = take(size_t(P * F) * 4);      // F32 [P, F]  w1 x, then the SwiGLU output
    up = take(size_t(P * F) * 4);        // F32 [P, F]  w3 x
    ys = take(size_t(P * D) * 4);        // F32 [P, D]  w2 (...) per row
    pair_row = take(size_t(P) * 4);      // I32 [P]     pair t*k + i -> its row
    offsets = take(size_t(E + 1) * 4);   // I32 [E+1]   rows [offsets[e], offsets[e+1]) are expert e's
    total = at;
  }
};

}  // namespace

void CpuBackend::route(Stream s, const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
                       const Tensor& tid2eid, const Tensor& tokens, float scaling) {
  const char* op = "route";
  check_stream(op, s);
  const auto [T, E, k, V, hashed] = checks::validate_route<OpRules>(ids, weights, logits, bias, tid2eid, tokens);

  scratch_f_.resize(size_t(2 * E));
  float* score = scratch_f_.data();  // s = sqrt(softplus(z)): the unbiased routing score
  float* key = score + E;            // s + bias: what the top-k selects on
  scratch_i_.resize(size_t(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits.ptr<float>() + t * E;
    for (int64_t e = 0; e < E; ++e) score[e] = std::sqrt(softplus(z[e]));
    int32_t* id = ids.ptr<int32_t>() + t * k;
    if (hashed) {
      // Hash layers: the experts are a fixed function of the token id.
      const int32_t tok = tokens.ptr<int32_t>()[t];
      SL_CHECK(tok >= 0 && tok < V, op, ": tokens[", t, "] = ", tok, " outside tid2eid ", describe(tid2eid));
      for (int64_t i = 0; i < k; ++i) {
        id[i] = tid2eid.ptr<int32_t>()[int64_t(tok) * k + i];
        SL_CHECK(id[i] >= 0 && id[i] < E, op, ": tid2eid[", tok, ", ", i, "] = ", id[i], " outside [0, ", E, ")");
      }
    } else {
      // noaux_tc: the bias steers WHICH experts are picked (load balancing) but not how much
      // they weigh. Ties go to the lower expert index.
      for (int64_t e = 0; e < E; ++e) key[e] = score[e] + (bias.empty() ? 0.f : bias.ptr<float>()[e]);
      std::iota(scratch_i_.begin(), scratch_i_.end(), 0);
      std::partial_sort(scratch_i_.begin(), scratch_i_.begin() + k, scratch_i_.end(), [&](int32_t x, int32_t y) {
        return key[x] > key[y] || (key[x] == key[y] && x < y);
      });
      for (int64_t i = 0; i < k; ++i) id[i] = scratch_i_[size_t(i)];
    }
    // Weights from the unbiased scores, renormalised over the chosen k (norm_topk_prob),
    // then scaled once by routed_scaling_factor.
    float sum = 0.f;
    for (int64_t i = 0; i < k; ++i) sum += score[id[i]];
    if (sum <= 0.f) sum = 1.f;  // vLLM's guard; only reachable if every chosen score is 0
    float* wt = weights.ptr<float>() + t * k;
    for (int64_t i = 0; i < k; ++i) wt[i] = score[id[i]] / sum * scaling;
  }
}

size_t CpuBackend::moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const {
  return MoeWorkspace(tokens * k, D, F, E).total;
}

// The routed experts (docs/model.md 6) over expert matrices that `expert` hands out as fp32,
// [F, D] for w1 / w3 (which 1 / 3) and [D, F] for w2 (which 2): the bf16 / f32 weights as they are,
// MXFP4 ones dequantized.
void CpuBackend::run_experts(const char* op, const Tensor& out, const Tensor& x, const Tensor& ids,
                             const Tensor& weights, int64_t T, int64_t D, int64_t E, int64_t F, int64_t k,
                             float swiglu_limit, bool fp8_act, const Tensor& workspace,
                             const std::function<const float*(int64_t e, int which)>& expert) {
  const MoeWorkspace ws(T * k, D, F, E);
  check_dtype(op, "workspace", workspace, DType::U8);
  SL_CHECK(workspace.bytes() >= ws.total, op, ": workspace ", describe(workspace), " is smaller than the ", ws.total,
           " bytes moe_workspace_bytes(", T, ", ", k, ", ", D, ", ", F, ", ", E, ") asks for");

  char* base = static_cast<char*>(workspace.data);
  float* xs = reinterpret_cast<float*>(base + ws.xs);
  float* gate = reinterpret_cast<float*>(base + ws.gate);
  float* up = reinterpret_cast<float*>(base + ws.up);
  float* ys = reinterpret_cast<float*>(base + ws.ys);
  int32_t* pair_row = reinterpret_cast<int32_t*>(base + ws.pair_row);
  int32_t* offsets = reinterpret_cast<int32_t*>(base + ws.offsets);
  const int32_t* id = ids.ptr<int32_t>();
  const int64_t P = T * k;

  // 1. Permute: a counting sort of the (token, slot) pairs by expert (stable, so within an
  //    expert rows keep token order). Each expert then owns a contiguous block of rows, the
  //    layout a grouped GEMM on the GPU consumes.
  std::fill_n(offsets, E + 1, 0);
  for (int64_t pr = 0; pr < P; ++pr) {
    SL_CHECK(id[pr] >= 0 && id[pr] < E, op, ": ids[", pr / k, ", ", pr % k, "] = ", id[pr], " outside [0, ", E, ")");
    ++offsets[id[pr] + 1];
  }
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  scratch_i_.assign(offsets, offsets + E);  // next free row per expert
  for (int64_t pr = 0; pr < P; ++pr) {
    const int32_t row = scratch_i_[size_t(id[pr])]++;
    pair_row[pr] = row;
    std::memcpy(xs + int64_t(row) * D, x.ptr<float>() + (pr / k) * D, size_t(D) * sizeof(float));
    if (fp8_act) lowp::round_fp8_groups(xs + int64_t(row) * D, D);
  }

  // 2. Per expert, over its block of rows: gate and up projections, SwiGLU-with-clamp, down
  //    projection.
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    matmul_nt(gate + r0 * F, F, xs + r0 * D, D, expert(e, 1), D, rows, F, D);
    matmul_nt(up + r0 * F, F, xs + r0 * D, D, expert(e, 3), D, rows, F, D);
    if (!fp8_act) {
      for (int64_t i = r0 * F; i < (r0 + rows) * F; ++i) gate[i] = swiglu_clamped(gate[i], up[i], swiglu_limit);
    } else {
      // W4A8 quantizes a bf16 h, as DeepSeek's reference inference does (w1 x and w3 x come out of
      // their GEMMs in bf16, so does the SwiGLU) and as the CUDA kernels do: rounded the same way
      // here, an element of h that lands next to an e4m3 rounding boundary rounds the same on both
      // backends. Without it about 3 % of h's elements round to the neighbouring e4m3 value on one
      // backend only, about 1.5-2 % relative error in the output (measured on an H100), which
      // would hide a real mistake in the rounding.
      for (int64_t i = r0 * F; i < (r0 + rows) * F; ++i)
        gate[i] = round_bf16(swiglu_clamped(round_bf16(gate[i]), round_bf16(up[i]), swiglu_limit));
      for (int64_t r = r0; r < r0 + rows; ++r) lowp::round_fp8_groups(gate + r * F, F);
    }
    matmul_nt(ys + r0 * D, D, gate + r0 * F, F, expert(e, 2), F, rows, D, F);
  }

  // 3. Un-permute and combine: out[t] = sum_i weights[t, i] * y(t, i), summed in slot order i
  //    (independent of which experts were chosen).
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.ptr<float>() + t * D;
    std::fill_n(o, D, 0.f);
    for (int64_t i = 0; i < k; ++i) {
      const float w = weights.ptr<float>()[t * k + i];
      const float* y = ys + int64_t(pair_row[t * k + i]) * D;
      for (int64_t d = 0; d < D; ++d) o[d] += w * y[d];
    }
  }
}

void CpuBackend::moe_experts(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                             const Tensor& w1, const Tensor& w2, const Tensor& w3, float swiglu_limit,
                             const Tensor& workspace) {
  const char* op = "moe_experts";
  check_stream(op, s);
  const auto [T, D, E, F, k] = checks::validate_moe_experts<OpRules>(out, x, ids, weights, w1, w2, w3);
  run_experts(op, out, x, ids, weights, T, D, E, F, k, swiglu_limit, false, workspace, [&](int64_t e, int which) {
    return which == 2 ? w2.ptr<float>() + e * D * F : (which == 1 ? w1 : w3).ptr<float>() + e * F * D;
  });
}

void CpuBackend::moe_experts_all_to_all(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids,
                                        const Tensor& weights, const Tensor& w1, const Tensor& w2, const Tensor& w3,
                                        float swiglu_limit) {
  const char* op = "moe_experts_all_to_all";
  check_stream(op, s);
  // Shapes as moe_experts (ids may name any rank's experts: checked while dispatching).
  const auto [T, D, Er, F, k] = checks::validate_moe_experts<OpRules>(out, x, ids, weights, w1, w2, w3);
  Communicator* comm = communicator();
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  SL_CHECK(x.dtype == DType::F32 && out.dtype == DType::F32, op, ": the CPU reference runs fp32 activations (x ",
           describe(x), ", out ", describe(out), ")");
  // This rank's experts on the rows it received: moe_experts with one slot of weight 1 per row.
  const LocalExperts experts = [&](const float* xr, const int32_t* lid, int64_t n, float* yr) {
    std::vector<float> ones(static_cast<size_t>(n), 1.f);
    std::vector<uint8_t> ws(moe_workspace_bytes(n, 1, int(D), int(F), int(Er)));
    const Tensor X{const_cast<float*>(xr), DType::F32, {n, D}}, I{const_cast<int32_t*>(lid), DType::I32, {n, 1}},
        Wt{ones.data(), DType::F32, {n, 1}}, Y{yr, DType::F32, {n, D}}, WS{ws.data(), DType::U8, {int64_t(ws.size())}};
    moe_experts(s, Y, X, I, Wt, w1, w2, w3, swiglu_limit, WS);
  };
  if (world == 1) {  // every pair is local
    std::vector<uint8_t> ws(moe_workspace_bytes(T, int(k), int(D), int(F), int(Er)));
    moe_experts(s, out, x, ids, weights, w1, w2, w3, swiglu_limit, Tensor{ws.data(), DType::U8, {int64_t(ws.size())}});
    return;
  }
  const ExpertPartition p = partition_experts(Er * world, world, rank);
  const std::vector<float> y =
      moe_all_to_all(p, *comm, x.ptr<float>(), ids.ptr<int32_t>(), weights.ptr<float>(), T, int(k), D, experts);
  std::copy(y.begin(), y.end(), out.ptr<float>());
}

void CpuBackend::moe_experts_mxfp4(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids,
                                   const Tensor& weights, const Tensor& w1, const Tensor& w1_scale, const Tensor& w2,
                                   const Tensor& w2_scale, const Tensor& w3, const Tensor& w3_scale,
                                   float swiglu_limit, bool fp8_act, const Tensor& workspace) {
  const char* op = "moe_experts_mxfp4";
  check_stream(op, s);
  const auto [T, D, E, F, k] = checks::validate_moe_experts_mxfp4<OpRules>(out, x, ids, weights, w1, w1_scale, w2,
                                                                           w2_scale, w3, w3_scale, fp8_act);
  // One expert matrix at a time, dequantized into host scratch (the experts run one after another).
  std::vector<float> deq(size_t(F * D));
  run_experts(op, out, x, ids, weights, T, D, E, F, k, swiglu_limit, fp8_act, workspace, [&](int64_t e, int which) {
    const Tensor& w = which == 1 ? w1 : which == 2 ? w2 : w3;
    const Tensor& sc = which == 1 ? w1_scale : which == 2 ? w2_scale : w3_scale;
    const int64_t rows = which == 2 ? D : F, cols = which == 2 ? F : D;
    lowp::Mxfp4 q;
    q.rows = rows, q.cols = cols;
    const uint8_t* pw = w.ptr<uint8_t>() + e * rows * cols / 2;
    const uint8_t* ps = sc.ptr<uint8_t>() + e * rows * cols / 32;
    q.packed.assign(pw, pw + rows * cols / 2);
    q.scales.assign(ps, ps + rows * cols / 32);
    lowp::dequantize_mxfp4(q, deq.data());
    return static_cast<const float*>(deq.data());
  });
}

}  // namespace sl
