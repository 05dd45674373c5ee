// Dense math of the CPU backend: GEMM (plain and grouped), RMSNorm, add, RoPE, SwiGLU.
#include "model/cpu/cpu_backend_impl.h"

namespace sl {

using namespace cpu;

namespace cpu {

// Four dot products of rows a[0..3] with the same w row, so that w is loaded once for four
// rows of a (4 rows x 8 lanes of partial sums fit the 16 SSE registers). The per-row
// arithmetic (eight lane sums, reduce8) is exactly dot()'s, so a row's result does not
// depend on how many rows are in the batch or where it falls in a tile: prefill and
// token-by-token decode give bit-identical GEMM outputs.
static inline void dot4(const float* const a[4], const float* w, int64_t K, float* const r[4]) {
  f32x4 lo[4], hi[4];
  for (int q = 0; q < 4; ++q) lo[q] = hi[q] = f32x4{0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const f32x4 w_lo = load4(w + k), w_hi = load4(w + k + 4);
    for (int q = 0; q < 4; ++q) {
      lo[q] += load4(a[q] + k) * w_lo;
      hi[q] += load4(a[q] + k + 4) * w_hi;
    }
  }
  for (int q = 0; q < 4; ++q) {
    float tail = 0.f;
    for (int64_t kk = k; kk < K; ++kk) tail += a[q][kk] * w[kk];
    *r[q] = reduce8(lo[q], hi[q], tail);
  }
}

void matmul_nt(float* out, int64_t ldo, const float* a, int64_t lda, const float* w, int64_t ldw, int64_t M,
               int64_t N, int64_t K) {
  // Blocking: a panel of kPanel rows of w (64 x K floats, 64 KiB for K = 256) stays in cache
  // while every row of a streams past it, four rows at a time.
  constexpr int64_t kPanel = 64;
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    const int64_t n1 = std::min(N, n0 + kPanel);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
      const float* rows[4] = {a + m * lda, a + (m + 1) * lda, a + (m + 2) * lda, a + (m + 3) * lda};
      for (int64_t n = n0; n < n1; ++n) {
        float* o[4] = {out + m * ldo + n, out + (m + 1) * ldo + n, out + (m + 2) * ldo + n, out + (m + 3) * ldo + n};
        dot4(rows, w + n * ldw, K, o);
      }
    }
    for (; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) out[m * ldo + n] = dot(a + m * lda, w + n * ldw, K);
  }
}

}  // namespace cpu

void CpuBackend::gemm(Stream s, const Tensor& out, const Tensor& a, const Tensor& w) {
  const char* op = "gemm";
  check_stream(op, s);
  const auto [M, N, K] = checks::validate_gemm<OpRules>(out, a, w);
  matmul_nt(out.ptr<float>(), N, a.ptr<float>(), K, w.ptr<float>(), K, M, N, K);
}

void CpuBackend::gemm_grouped(Stream s, const Tensor& out, const Tensor& a, const Tensor& w, int groups) {
  const char* op = "gemm_grouped";
  check_stream(op, s);
  const auto [M, N, K, G] = checks::validate_gemm_grouped<OpRules>(out, a, w, groups);
  // Group g maps its K-slice of every row of a to its N-slice of out with its own N rows of
  // w: one strided GEMM per group (docs/model.md 5.6, the contiguous head groups of wo_a).
  for (int64_t g = 0; g < G; ++g)
    matmul_nt(out.ptr<float>() + g * N, G * N, a.ptr<float>() + g * K, G * K, w.ptr<float>() + g * N * K, K, M, N,
              K);
}

void CpuBackend::rmsnorm(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm";
  check_stream(op, s);
  const auto [rows, dim] = checks::validate_rmsnorm<OpRules>(out, x, w);
  const float* wp = w.empty() ? nullptr : w.ptr<float>();
  for (int64_t r = 0; r < rows; ++r) rmsnorm_row(out.ptr<float>() + r * dim, x.ptr<float>() + r * dim, wp, dim, eps);
}

void CpuBackend::add(Stream s, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "add";
  check_stream(op, s);
  checks::validate_add<OpRules>(out, a, b);
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* po = out.ptr<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
}

void CpuBackend::rope(Stream s, const Tensor& x, const Tensor& pos, const Tensor& table, bool inverse) {
  const char* op = "rope";
  check_stream(op, s);
  const auto [T, heads, dim, P, R] = checks::validate_rope<OpRules>(x, pos, table);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t];
    SL_CHECK(p >= 0 && p < P, op, ": pos[", t, "] = ", p, " outside the table's ", P, " positions");
    const float* angles = table.ptr<float>() + int64_t(p) * R;
    for (int64_t h = 0; h < heads; ++h) rope_vec(x.ptr<float>() + (t * heads + h) * dim, dim, angles, R, inverse);
  }
}

void CpuBackend::swiglu(Stream s, const Tensor& out, const Tensor& g, const Tensor& u, float limit) {
  const char* op = "swiglu";
  check_stream(op, s);
  checks::validate_swiglu<OpRules>(out, g, u);
  const float* pg = g.ptr<float>();
  const float* pu = u.ptr<float>();
  float* po = out.ptr<float>();
  for (int64_t i = 0, n = g.numel(); i < n; ++i) po[i] = swiglu_clamped(pg[i], pu[i], limit);
}

}  // namespace sl
