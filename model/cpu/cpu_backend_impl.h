// Private to model/cpu: the CpuBackend class and the small loops its op files share.
//
// The CPU backend is the fp32 reference: every op is a plain loop nest in program order,
// accumulating in fp32. It is the yardstick the CUDA backend is compared against, so clarity
// beats speed everywhere except the GEMM (which dominates a forward pass).
//
// File layout (one concept per file):
//   cpu_backend.cpp    memory, streams-as-labels, events, init/fill/copy, embed/argmax/gather/shift
//   cpu_dense.cpp      gemm, gemm_grouped, rmsnorm, add, rope, swiglu (+ the shared GEMM loop)
//   cpu_quant.cpp      gemm_fp8, quantize_fp8, quantize_mxfp4 (the native weight formats)
//   cpu_mhc.cpp        hc_pre, hc_post, hc_head, mtp_combine
//   cpu_attention.cpp  swa_insert, compressor_save/pool, indexer_topk, sparse_attention
//   cpu_moe.cpp        route, moe_experts, moe_experts_mxfp4, moe_workspace_bytes
//   cpu_speculative.cpp  verify_tokens, accept_drafts, cache_rollback
#pragma once
#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/backend.h"
#include "model/op_checks.h"

namespace sl::cpu {

// ---------------------------------------------------------------- argument checks
// The shared helpers (model/op_checks.h), bound to the CPU reference's rule that every
// argument has data behind it.

constexpr auto kPresence = checks::Presence::Data;
using checks::describe;
using checks::overlaps;
inline constexpr auto& check_present = checks::check_present<kPresence>;
inline constexpr auto& check_dtype = checks::check_dtype<kPresence>;
inline constexpr auto& check_ndim = checks::check_ndim<kPresence>;
inline constexpr auto& check_shape = checks::check_shape<kPresence>;
inline constexpr auto& check_f32 = checks::check_f32<kPresence>;
inline constexpr auto& check_i32 = checks::check_i32<kPresence>;
// The per-op validators' rules: f32 everywhere (the reference computes in fp32).
using OpRules = checks::Rules<kPresence, checks::Floats::F32, checks::Floats::F32, /*packed_kv=*/true>;

// ---------------------------------------------------------------- shared loops

// n values as e4m3 codes under one power-of-two scale, the smallest >= max(amax, 1e-4) / 448
// (vLLM's FP8 KV caches, model/kv_fp8_entry.h); returns the scale's e8m0 code. The one place
// the CPU quantizes a cache block: swa_insert and compressor_pool pack with it, round_fp8_blocks
// (the emulation) rounds with it. In cpu_attention.cpp.
uint8_t pack_fp8_block(uint8_t* codes, const float* x, int64_t n);

// Four fp32 lanes as a GCC/Clang vector type (SSE on x86-64, NEON on arm64): the GEMM and dot
// loops are written with it because the compiler does not vectorise a float reduction on
// its own (that would reorder the additions). Lane arithmetic is plain fp32 multiply and add.
typedef float f32x4 __attribute__((vector_size(16)));
inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

// The reduction shared by dot() and the GEMM kernel: lane sums lo = lanes 0..3 and hi =
// lanes 4..7 of eight partial sums, folded pairwise, plus the scalar tail. Every dot product
// in the backend uses this exact order, so a GEMM row is bit-identical to dot() of that row.
inline float reduce8(f32x4 lo, f32x4 hi, float tail) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3])) + tail;
}

// sum_i a[i] * b[i] in fp32, with eight independent partial sums (i mod 8). Besides the
// speed, the rounding error then grows like n/8 rather than n.
inline float dot(const float* a, const float* b, int64_t n) {
  f32x4 lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += load4(a + i) * load4(b + i);
    hi += load4(a + i + 4) * load4(b + i + 4);
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return reduce8(lo, hi, tail);
}

inline float sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// out[m, n] = dot(a[m, :K], w[n, :K]) for m < M, n < N; row strides lda, ldw, ldo (elements).
// Defined in cpu_dense.cpp; also used by moe_experts on its per-expert row blocks.
void matmul_nt(float* out, int64_t ldo, const float* a, int64_t lda, const float* w, int64_t ldw, int64_t M,
               int64_t N, int64_t K);

// out[i] = w[i] * x[i] / sqrt(mean(x^2) + eps) over one row of n values (w may be null:
// no weight). out may alias x.
inline void rmsnorm_row(float* out, const float* x, const float* w, int64_t n, float eps) {
  float ms = dot(x, x, n) / float(n);
  float r = 1.f / std::sqrt(ms + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (w ? w[i] : 1.f) * (x[i] * r);
}

// Interleaved RoPE on the last R values of v[0..len): pair i is (v[N'+2i], v[N'+2i+1]) with
// N' = len - R, rotated by the angle whose cos/sin are angles[i] / angles[R/2 + i]
// (one row of the [P, R] table). inverse rotates by -angle (sin -> -sin).
inline void rope_vec(float* v, int64_t len, const float* angles, int64_t R, bool inverse) {
  float* r = v + (len - R);
  const int64_t half = R / 2;
  for (int64_t i = 0; i < half; ++i) {
    float c = angles[i];
    float s = inverse ? -angles[half + i] : angles[half + i];
    float e = r[2 * i], o = r[2 * i + 1];
    r[2 * i] = e * c - o * s;
    r[2 * i + 1] = o * c + e * s;
  }
}

// The SwiGLU-with-clamp activation of one value pair (docs/model.md 3.3): the gate is clamped
// above only, the up projection on both sides.
inline float swiglu_clamped(float g, float u, float limit) {
  g = std::min(g, limit);
  u = std::min(std::max(u, -limit), limit);
  return g * sigmoid(g) * u;
}

}  // namespace sl::cpu

namespace sl {

class CpuBackend : public Backend {  // not final: tests derive recording backends from it
 public:
  CpuBackend() = default;
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::F32; }
  DType weight_dtype() const override { return DType::F32; }
  bool packed_kv_caches() const override { return true; }

  // memory (cpu_backend.cpp)
  Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) override;
  std::string buffer_name(int buffer) const override;
  void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) override;
  void download(void* host, const Tensor& src, size_t bytes) override;
  MemoryStats memory() const override;
  size_t available_bytes() const override;

  // streams and events: labels only (cpu_backend.cpp)
  Stream create_stream(const std::string& name, int priority) override;
  void destroy_stream(Stream s) override;
  Event create_event(const std::string& name) override;
  void record(Event e, Stream s) override;
  void wait(Stream s, Event e) override;
  void synchronize() override {}

  // The ops (model/ops.def; the file implementing each: the list at the top). The fused
  // ops are not overridden: the CPU reference runs their parts (model/fused_ops.cpp).
#define SL_OP(name, params, args, ...) void name(Stream s, SL_UNPAREN params) override;
#define SL_FUSED_OP(name, params, args, ...)
#include "model/ops.def"
#undef SL_OP
#undef SL_FUSED_OP
  size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const override;

 private:
  // moe_experts and moe_experts_mxfp4 after validation (cpu_moe.cpp); fp8_act rounds each
  // matrix's input rows to FP8 groups first (moe_experts_mxfp4's W4A8).
  void run_experts(const char* op, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   int64_t T, int64_t D, int64_t E, int64_t F, int64_t k, float swiglu_limit, bool fp8_act,
                   const Tensor& workspace, const std::function<const float*(int64_t e, int which)>& expert);
  void check_stream(const char* op, Stream s) const;
  void check_event(const char* op, Event e) const;

  struct Buffer {
    void* data = nullptr;  // 64-byte aligned, freed with std::free
    size_t bytes = 0;
    std::string name;
    AllocKind kind = AllocKind::Activation;
  };
  std::vector<Buffer> buffers_;  // index = buffer id
  std::array<size_t, 4> bytes_by_kind_{};
  size_t total_bytes_ = 0, peak_bytes_ = 0;

  std::vector<std::string> stream_names_{"main"};  // index = stream id; 0 is the main stream
  std::set<int> live_streams_{0};
  std::vector<std::string> event_names_;  // index = event id

  // Host scratch reused across calls (the ops themselves allocate no backend memory).
  std::vector<float> scratch_f_;
  std::vector<int32_t> scratch_i_;
  std::vector<const float*> scratch_keys_;
  std::vector<float> scratch_unpacked_;  // packed FP8 cache entries read back as floats
};

}  // namespace sl
