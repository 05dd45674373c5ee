// The default of each fused op (model/ops.def, SL_FUSED_OP): its parts, one after another, on
// the same stream. A backend that can fuse them overrides these (the CUDA backend does); the
// CPU reference runs these, so the fused kernels are checked against the parts.
#include "model/backend.h"

namespace sl {

void Backend::rmsnorm_pair(Stream s, const Tensor& out1, const Tensor& x1, const Tensor& w1, float eps1,
                           const Tensor& out2, const Tensor& x2, const Tensor& w2, float eps2, const Tensor& pos,
                           const Tensor& table) {
  rmsnorm(s, out1, x1, w1, eps1);
  rmsnorm(s, out2, x2, w2, eps2);
  if (!table.empty()) {
    const int64_t dim = out2.dim(-1);
    rope(s, out2.view({out2.numel() / dim, 1, dim}), pos, table, false);
  }
}

void Backend::rmsnorm_rope(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps,
                           const Tensor& pos, const Tensor& table) {
  const int64_t dim = x.dim(-1);
  rmsnorm(s, out.view({out.numel() / dim, dim}), x.view({x.numel() / dim, dim}), w, eps);
  rope(s, out, pos, table, false);
}

void Backend::gemm_pair(Stream s, const Tensor& out1, const Tensor& out2, const Tensor& a, const Tensor& w1,
                        const Tensor& w2) {
  gemm(s, out1, a, w1);
  gemm(s, out2, a, w2);
}

void Backend::gemm_fp8_pair(Stream s, const Tensor& out1, const Tensor& out2, const Tensor& a, const Tensor& w1,
                            const Tensor& w1_scale, const Tensor& w2, const Tensor& w2_scale) {
  gemm_fp8(s, out1, a, w1, w1_scale, 1);
  gemm_fp8(s, out2, a, w2, w2_scale, 1);
}

void Backend::gemm_swiglu(Stream s, const Tensor& act, const Tensor& g, const Tensor& u, const Tensor& x,
                          const Tensor& w1, const Tensor& w3, float limit) {
  gemm(s, g, x, w1);
  gemm(s, u, x, w3);
  swiglu(s, act, g, u, limit);
}

void Backend::hc_pre_norm(Stream s, const Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                          const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                          int sinkhorn_iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps) {
  hc_pre(s, y, post, comb, X, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps);
  rmsnorm(s, out, y, norm_w, norm_eps);
}

void Backend::add_hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& f1, const Tensor& f2,
                          const Tensor& res, const Tensor& post, const Tensor& comb) {
  add(s, f, f1, f2);
  hc_post(s, X_out, f, res, post, comb);
}

void Backend::hc_post_pre_norm(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& f1, const Tensor& f2,
                               const Tensor& res, const Tensor& post, const Tensor& comb, const Tensor& out,
                               const Tensor& y, const Tensor& fn, const Tensor& scale, const Tensor& base,
                               int sinkhorn_iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps) {
  if (f1.empty())
    hc_post(s, X_out, f, res, post, comb);
  else
    add_hc_post(s, X_out, f, f1, f2, res, post, comb);
  hc_pre_norm(s, out, y, post, comb, X_out, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps, norm_w, norm_eps);
}

}  // namespace sl
