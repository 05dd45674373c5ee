#include "model/linear.h"

#include "core/error.h"

namespace sl {

void linear(Ops& ops, Stream s, const char* label, const Tensor& out, const Tensor& a, const Linear& w, int groups) {
  if (w.native())
    ops.gemm_fp8(s, label, out, a, w.w, w.scale, groups);
  else if (groups > 1)
    ops.gemm_grouped(s, label, out, a, w.w, groups);
  else
    ops.gemm(s, label, out, a, w.w);
}

void linear_pair(Ops& ops, Stream s, const char* label, const Tensor& out1, const Tensor& out2, const Tensor& a,
                 const Linear& w1, const Linear& w2) {
  if (!w1.native() && !w2.native()) {
    ops.gemm_pair(s, label, out1, out2, a, w1.w, w2.w);
    return;
  }
  if (w1.native() && w2.native()) {
    ops.gemm_fp8_pair(s, label, out1, out2, a, w1.w, w1.scale, w2.w, w2.scale);
    return;
  }
  linear(ops, s, label, out1, a, w1);
  linear(ops, s, label, out2, a, w2);
}

void linear_swiglu(Ops& ops, Stream s, const char* label, const Tensor& act, const Tensor& g, const Tensor& u,
                   const Tensor& x, const Linear& w1, const Linear& w3, float limit) {
  if (!w1.native() && !w3.native()) {
    ops.gemm_swiglu(s, label, act, g, u, x, w1.w, w3.w, limit);
    return;
  }
  linear_pair(ops, s, label, g, u, x, w1, w3);
  ops.swiglu(s, label, act, g, u, limit);
}

void routed_experts(Ops& ops, Stream s, const char* label, const Tensor& out, const Tensor& x, const Tensor& ids,
                    const Tensor& weights, const Linear& w1, const Linear& w2, const Linear& w3, float limit,
                    bool fp8_act, const Tensor& workspace) {
  SL_CHECK(w1.native() == w2.native() && w1.native() == w3.native(), label,
           ": the expert matrices are not all in one format");
  if (w1.native())
    ops.moe_experts_mxfp4(s, label, out, x, ids, weights, w1.w, w1.scale, w2.w, w2.scale, w3.w, w3.scale, limit,
                          fp8_act, workspace);
  else
    ops.moe_experts(s, label, out, x, ids, weights, w1.w, w2.w, w3.w, limit, workspace);
}

}  // namespace sl
