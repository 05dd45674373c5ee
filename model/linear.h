// Multiplying by a weight in whichever format it is held (model/weights.h Linear): the bf16 ops
// (gemm, gemm_grouped, gemm_pair, gemm_swiglu, moe_experts) for plain weights, their FP8 / MXFP4
// counterparts (gemm_fp8, moe_experts_mxfp4) for native ones. The model code calls these instead
// of picking an op, so one forward serves both --weights formats; each call is one or more ops
// of the facade under the caller's label, on the caller's stream.
#pragma once
#include "model/ops.h"
#include "model/weights.h"

namespace sl {

// out = a . w^T; groups > 1: block-diagonal (wo_a, docs/model.md 5.6).
void linear(Ops& ops, Stream s, const char* label, const Tensor& out, const Tensor& a, const Linear& w, int groups = 1);
// Two projections of one input (wq_a and wkv). Plain: one gemm_pair op; FP8: one gemm_fp8_pair op
// (a backend may fuse either); one of each: two ops.
void linear_pair(Ops& ops, Stream s, const char* label, const Tensor& out1, const Tensor& out2, const Tensor& a,
                 const Linear& w1, const Linear& w2);
// A dense SwiGLU expert's input half: act = swiglu(x . w1^T, x . w3^T); g and u are scratch.
void linear_swiglu(Ops& ops, Stream s, const char* label, const Tensor& act, const Tensor& g, const Tensor& u,
                   const Tensor& x, const Linear& w1, const Linear& w3, float limit);
// The routed experts (moe_experts, or moe_experts_mxfp4 on MXFP4 weights, fed FP8 activations
// when fp8_act: WeightFormat::NativeW4A8).
void routed_experts(Ops& ops, Stream s, const char* label, const Tensor& out, const Tensor& x, const Tensor& ids,
                    const Tensor& weights, const Linear& w1, const Linear& w2, const Linear& w3, float limit,
                    bool fp8_act, const Tensor& workspace);

}  // namespace sl
