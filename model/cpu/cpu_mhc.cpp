// mHC, the manifold-constrained hyper-connections (docs/model.md 3.4): the residual is hc streams
// per token; hc_pre collapses them into a sub-layer input and produces the post/comb mixes,
// hc_post spreads the sub-layer output back, hc_head collapses them for the LM head.
#include <cstring>

#include "model/cpu/cpu_backend_impl.h"

namespace sl {

using namespace cpu;

namespace {

constexpr int kMaxHc = 16;  // bounds the per-token arrays below (the model uses hc = 4)

// m[k] = (fn[k] . x) * r with r = 1/sqrt(mean(x^2) + rms_eps), the RMS taken over all hc*D
// values of the token. The normalisation is applied after the dot (as vLLM does: the GEMM
// runs on the raw x and the RMS factor scales its output).
void hc_mix_logits(float* m, const float* x, const float* fn, int64_t rows, int64_t n, float rms_eps) {
  const float r = 1.f / std::sqrt(dot(x, x, n) / float(n) + rms_eps);
  for (int64_t k = 0; k < rows; ++k) m[k] = dot(fn + k * n, x, n) * r;
}

// C <- rowsoftmax(C) + eps, then column-normalise, then (iters - 1) rounds of row- then
// column-normalisation (each divides by sum + eps). The result is close to doubly
// stochastic: an ever-so-slightly contracting mix of the residual streams.
void sinkhorn(float* C, int hc, int iters, float eps) {
  auto normalise_columns = [&] {
    for (int j = 0; j < hc; ++j) {
      float sum = 0.f;
      for (int i = 0; i < hc; ++i) sum += C[i * hc + j];
      for (int i = 0; i < hc; ++i) C[i * hc + j] /= sum + eps;
    }
  };
  auto normalise_rows = [&] {
    for (int i = 0; i < hc; ++i) {
      float sum = 0.f;
      for (int j = 0; j < hc; ++j) sum += C[i * hc + j];
      for (int j = 0; j < hc; ++j) C[i * hc + j] /= sum + eps;
    }
  };
  for (int i = 0; i < hc; ++i) {
    float* row = C + i * hc;
    float mx = row[0];
    for (int j = 1; j < hc; ++j) mx = std::max(mx, row[j]);
    float sum = 0.f;
    for (int j = 0; j < hc; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    for (int j = 0; j < hc; ++j) row[j] = row[j] / sum + eps;
  }
  normalise_columns();
  for (int it = 1; it < iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
}

// y[d] = sum_s w[s] * X[s, d] over the hc raw streams of one token.
void weighted_stream_sum(float* y, const float* X, const float* w, int hc, int64_t D) {
  for (int64_t d = 0; d < D; ++d) {
    float acc = 0.f;
    for (int s = 0; s < hc; ++s) acc += w[s] * X[s * D + d];
    y[d] = acc;
  }
}

}  // namespace

void CpuBackend::hc_pre(Stream s, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X,
                        const Tensor& fn, const Tensor& scale, const Tensor& base, int sinkhorn_iters, float hc_eps,
                        float rms_eps) {
  const char* op = "hc_pre";
  check_stream(op, s);
  const auto [T, hc, D] =
      checks::validate_hc_pre<OpRules>(y, post, comb, X, fn, scale, base, sinkhorn_iters, {1, kMaxHc});
  const int64_t mix = (2 + hc) * hc;

  const float* sc = scale.ptr<float>();
  const float* bs = base.ptr<float>();
  float m[(2 + kMaxHc) * kMaxHc];
  float pre[kMaxHc];
  for (int64_t t = 0; t < T; ++t) {
    const float* x = X.ptr<float>() + t * hc * D;
    hc_mix_logits(m, x, fn.ptr<float>(), mix, hc * D, rms_eps);
    // Logit layout: [0, hc) pre, [hc, 2hc) post, [2hc, 2hc + hc*hc) comb (row-major i, j).
    float* po = post.ptr<float>() + t * hc;
    for (int64_t k = 0; k < hc; ++k) {
      pre[k] = sigmoid(m[k] * sc[0] + bs[k]) + hc_eps;
      po[k] = 2.f * sigmoid(m[hc + k] * sc[1] + bs[hc + k]);  // hc_post_mult = 2
    }
    float* C = comb.ptr<float>() + t * hc * hc;
    for (int64_t k = 0; k < hc * hc; ++k) C[k] = m[2 * hc + k] * sc[2] + bs[2 * hc + k];
    sinkhorn(C, int(hc), sinkhorn_iters, hc_eps);
    // The sub-layer input mixes the RAW streams; the RMS factor only shaped the logits.
    weighted_stream_sum(y.ptr<float>() + t * D, x, pre, int(hc), D);
  }
}

void CpuBackend::hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& res, const Tensor& post,
                         const Tensor& comb) {
  const char* op = "hc_post";
  check_stream(op, s);
  const auto [T, hc, D] = checks::validate_hc_post<OpRules>(X_out, f, res, post, comb, {1, kMaxHc});

  float old[kMaxHc];
  for (int64_t t = 0; t < T; ++t) {
    const float* C = comb.ptr<float>() + t * hc * hc;
    const float* po = post.ptr<float>() + t * hc;
    const float* ft = f.ptr<float>() + t * D;
    const float* rt = res.ptr<float>() + t * hc * D;
    float* xt = X_out.ptr<float>() + t * hc * D;
    for (int64_t d = 0; d < D; ++d) {
      // Read all source streams of this column first: X_out may alias res (in-place update).
      for (int64_t i = 0; i < hc; ++i) old[i] = rt[i * D + d];
      for (int64_t j = 0; j < hc; ++j) {
        // comb[i][j]: i is the SOURCE stream, j the destination (note the transpose).
        float acc = po[j] * ft[d];
        for (int64_t i = 0; i < hc; ++i) acc += C[i * hc + j] * old[i];
        xt[j * D + d] = acc;
      }
    }
  }
}

void CpuBackend::hc_head(Stream s, const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale,
                         const Tensor& base, float hc_eps, float rms_eps) {
  const char* op = "hc_head";
  check_stream(op, s);
  const auto [T, hc, D] = checks::validate_hc_head<OpRules>(h, X, fn, scale, base, {1, kMaxHc});

  float m[kMaxHc], w[kMaxHc];
  for (int64_t t = 0; t < T; ++t) {
    const float* x = X.ptr<float>() + t * hc * D;
    hc_mix_logits(m, x, fn.ptr<float>(), hc, hc * D, rms_eps);
    for (int64_t k = 0; k < hc; ++k) w[k] = sigmoid(m[k] * scale.ptr<float>()[0] + base.ptr<float>()[k]) + hc_eps;
    weighted_stream_sum(h.ptr<float>() + t * D, x, w, int(hc), D);
  }
}

void CpuBackend::hc_expand(Stream s, const Tensor& X, const Tensor& e) {
  const char* op = "hc_expand";
  check_stream(op, s);
  const auto [T, hc, D] = checks::validate_hc_expand<OpRules>(X, e);
  // Every stream of the residual starts as the token's embedding (docs/model.md 2).
  for (int64_t t = 0; t < T; ++t)
    for (int64_t st = 0; st < hc; ++st)
      std::memcpy(X.ptr<float>() + (t * hc + st) * D, e.ptr<float>() + t * D, size_t(D) * sizeof(float));
}

void CpuBackend::mtp_combine(Stream s, const Tensor& X, const Tensor& hp, const Tensor& ep) {
  const char* op = "mtp_combine";
  check_stream(op, s);
  const auto [T, hc, D] = checks::validate_mtp_combine<OpRules>(X, hp, ep);
  // The embedding term is the same for every stream (broadcast over hc). Elementwise, so X
  // may alias hp.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t st = 0; st < hc; ++st) {
      const float* a = hp.ptr<float>() + (t * hc + st) * D;
      const float* e = ep.ptr<float>() + t * D;
      float* o = X.ptr<float>() + (t * hc + st) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = a[d] + e[d];
    }
}

}  // namespace sl
