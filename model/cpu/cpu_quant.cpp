// The native weight formats on the CPU reference (docs/model.md 8): the FP8 block-scaled GEMM and
// the quantizers that produce FP8 and MXFP4 weights. The number formats themselves are core/fp8.h;
// these ops lay them out as the model holds them.
#include "model/cpu/cpu_backend_impl.h"

#include "core/fp8.h"

namespace sl {

using namespace cpu;

void CpuBackend::gemm_fp8(Stream s, const Tensor& out, const Tensor& a, const Tensor& w, const Tensor& w_scale,
                          int groups) {
  const char* op = "gemm_fp8";
  check_stream(op, s);
  const auto [M, N, K, G] = checks::validate_gemm_fp8<OpRules>(out, a, w, w_scale, groups);
  // The weights dequantized (exact in fp32), then the activation rows quantized group by group
  // as the device does before its FP8 GEMM, then an fp32 GEMM per group: the same numbers the
  // device multiplies, summed in another order.
  constexpr int64_t B = checks::kFp8Block;
  const int64_t KB = K / B, GN = G * N, GK = G * K;
  scratch_f_.resize(size_t(GN * K + M * GK));
  float* wd = scratch_f_.data();
  float* aq = wd + GN * K;
  const uint8_t* codes = w.ptr<uint8_t>();
  const float* ws = w_scale.ptr<float>();
  for (int64_t n = 0; n < GN; ++n)
    for (int64_t k = 0; k < K; ++k) wd[n * K + k] = lowp::e4m3_to_float(codes[n * K + k]) * ws[(n / B) * KB + k / B];
  std::copy(a.ptr<float>(), a.ptr<float>() + M * GK, aq);
  for (int64_t m = 0; m < M; ++m) lowp::round_fp8_groups(aq + m * GK, GK);
  for (int64_t g = 0; g < G; ++g) matmul_nt(out.ptr<float>() + g * N, GN, aq + g * K, GK, wd + g * N * K, K, M, N, K);
}

void CpuBackend::quantize_fp8(Stream s, const Tensor& codes, const Tensor& scale, const Tensor& src) {
  const char* op = "quantize_fp8";
  check_stream(op, s);
  const auto [rows, cols] = checks::validate_quantize_fp8<OpRules>(codes, scale, src);
  const lowp::Fp8Blocks q = lowp::quantize_fp8_blocks(src.ptr<float>(), rows, cols);
  std::copy(q.codes.begin(), q.codes.end(), codes.ptr<uint8_t>());
  float* sc = scale.ptr<float>();
  for (size_t i = 0; i < q.scales.size(); ++i) sc[i] = lowp::e8m0_to_float(q.scales[i]);
}

void CpuBackend::quantize_mxfp4(Stream s, const Tensor& packed, const Tensor& scales, const Tensor& src) {
  const char* op = "quantize_mxfp4";
  check_stream(op, s);
  const auto [rows, cols] = checks::validate_quantize_mxfp4<OpRules>(packed, scales, src);
  const lowp::Mxfp4 q = lowp::quantize_mxfp4(src.ptr<float>(), rows, cols);
  std::copy(q.packed.begin(), q.packed.end(), packed.ptr<uint8_t>());
  std::copy(q.scales.begin(), q.scales.end(), scales.ptr<uint8_t>());
}

}  // namespace sl
