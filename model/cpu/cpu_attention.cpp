// Attention-side ops (MODEL.md 5): the sliding-window cache, the compressor (state ring +
// pooling into compressed entries), the lightning indexer's top-k, and the sparse attention
// with sink.
//
// Every cache is per sequence (dim 0 = B) and every ring slot carries a position tag. A
// reader uses a slot only if its tag is exactly the position it wants; anything else
// (-1 = never written, or another position that reused the slot) is treated as absent.
#include <cstring>
#include <limits>
#include <numeric>

#include "model/cpu/cpu_backend_impl.h"

namespace sl {

using namespace cpu;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// pos/seq are I32 [T]; every token must name a sequence (cache row) in [0, B) and have a
// non-negative position.
void check_tokens(const char* op, const Tensor& pos, const Tensor& seq, int64_t T, int64_t B) {
  check_i32(op, "pos", pos, {T});
  check_i32(op, "seq", seq, {T});
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    SL_CHECK(p >= 0, op, ": pos[", t, "] = ", p, " is negative");
    SL_CHECK(b >= 0 && b < B, op, ": seq[", t, "] = ", b, " outside the ", B, " cache rows");
  }
}

}  // namespace

// ---------------------------------------------------------------- sliding-window cache

void CpuBackend::swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                            const Tensor& seq) {
  const char* op = "swa_insert";
  check_stream(op, s);
  check_dtype(op, "cache", cache, DType::F32);
  check_ndim(op, "cache", cache, 3);
  const int64_t B = cache.dim(0), cap = cache.dim(1), d = cache.dim(2);
  SL_CHECK(cap >= 1, op, ": cache ", describe(cache), " has no slots");
  check_i32(op, "tags", tags, {B, cap});
  check_dtype(op, "k", k, DType::F32);
  check_ndim(op, "k", k, 2);
  const int64_t T = k.dim(0);
  check_f32(op, "k", k, {T, d});
  check_tokens(op, pos, seq, T, B);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    const int64_t slot = p % cap;
    std::memcpy(cache.ptr<float>() + (b * cap + slot) * d, k.ptr<float>() + t * d, size_t(d) * sizeof(float));
    tags.ptr<int32_t>()[b * cap + slot] = p;
  }
}

// ---------------------------------------------------------------- compressor (MODEL.md 5.3)

void CpuBackend::compressor_save(Stream s, const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                                 const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                                 const Tensor& seq, int ratio) {
  const char* op = "compressor_save";
  check_stream(op, s);
  const auto [B, S, cd, T] =
      checks::compressor_save<kPresence>(state_u, state_g, state_tags, u, g, ape, pos, seq, ratio);
  check_tokens(op, pos, seq, T, B);  // host memory: the index values can be checked here
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    const int64_t slot = p % S;
    float* su = state_u.ptr<float>() + (b * S + slot) * cd;
    float* sg = state_g.ptr<float>() + (b * S + slot) * cd;
    const float* ut = u.ptr<float>() + t * cd;
    const float* gt = g.ptr<float>() + t * cd;
    // The absolute position embedding of the token's place in its block is folded into the
    // gate score here, over the full c*d vector, before pooling picks its half.
    const float* ap = ape.ptr<float>() + (p % ratio) * cd;
    for (int64_t c = 0; c < cd; ++c) {
      su[c] = ut[c];
      sg[c] = gt[c] + ap[c];
    }
    state_tags.ptr<int32_t>()[b * S + slot] = p;
  }
}

void CpuBackend::compressor_pool(Stream s, const Tensor& entries, const Tensor& state_u, const Tensor& state_g,
                                 const Tensor& state_tags, const Tensor& norm_w, const Tensor& table,
                                 const Tensor& pos, const Tensor& seq, int ratio, bool overlap, float rms_eps) {
  const char* op = "compressor_pool";
  check_stream(op, s);
  check_dtype(op, "state_u", state_u, DType::F32);
  check_ndim(op, "state_u", state_u, 3);
  const int64_t B = state_u.dim(0), S = state_u.dim(1), cd = state_u.dim(2);
  const int64_t c = overlap ? 2 : 1;
  SL_CHECK(cd % c == 0, op, ": state_u ", describe(state_u), " last dim is not ", c, " * d");
  const int64_t d = cd / c;
  check_f32(op, "state_g", state_g, {B, S, cd});
  check_i32(op, "state_tags", state_tags, {B, S});
  SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  // A block's pooling reads c*ratio consecutive positions from the ring; a smaller ring
  // could never hold them all.
  SL_CHECK(S >= c * ratio, op, ": state ring of ", S, " slots (state_u ", describe(state_u), ") cannot hold ",
           c * ratio, " positions (ratio ", ratio, overlap ? ", overlap)" : ")");
  check_dtype(op, "entries", entries, DType::F32);
  check_ndim(op, "entries", entries, 3);
  const int64_t n_max = entries.dim(1);
  check_f32(op, "entries", entries, {B, n_max, d});
  check_f32(op, "norm_w", norm_w, {d});
  check_dtype(op, "table", table, DType::F32);
  check_ndim(op, "table", table, 2);
  const int64_t P = table.dim(0), R = table.dim(1);
  SL_CHECK(R % 2 == 0 && R <= d, op, ": table ", describe(table), " rotates R = ", R,
           " dims; R must be even and at most d = ", d);
  check_dtype(op, "pos", pos, DType::I32);
  check_ndim(op, "pos", pos, 1);
  const int64_t T = pos.dim(0);
  check_tokens(op, pos, seq, T, B);

  scratch_f_.resize(size_t(2 * d));
  float* mx = scratch_f_.data();  // per-channel running max of the scores
  float* den = mx + d;            // per-channel softmax denominator
  int64_t cand_pos[256];          // candidate positions (oldest first) and their channel offsets
  int64_t cand_off[256];
  SL_CHECK(c * ratio <= 256, op, ": ratio ", ratio, " with overlap ", overlap, " exceeds 256 candidates");

  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    if ((int64_t(p) + 1) % ratio != 0) continue;  // only the token that completes a block pools it
    const int64_t j = p / ratio;
    SL_CHECK(j < n_max, op, ": entry ", j, " (pos ", p, ", ratio ", ratio, ") outside entries ", describe(entries));
    SL_CHECK(j * ratio < P, op, ": RoPE position ", j * ratio, " outside table ", describe(table));

    // Candidates: overlap pools 2*ratio tokens: the previous block (j-1) through channels
    // [0, d), the current block (j) through [d, 2d). Without overlap just the current block.
    // Positions before 0 (the previous block of j = 0) do not exist: score -inf, value 0,
    // i.e. simply not a candidate. A slot whose tag is not the wanted position is absent.
    int n = 0;
    auto consider = [&](int64_t q, int64_t off) {
      if (q < 0) return;
      const int64_t slot = q % S;
      if (state_tags.ptr<int32_t>()[b * S + slot] != q) return;
      cand_pos[n] = q;
      cand_off[n] = off;
      ++n;
    };
    if (overlap)
      for (int64_t q = (j - 1) * ratio; q < j * ratio; ++q) consider(q, 0);
    for (int64_t q = j * ratio; q < (j + 1) * ratio; ++q) consider(q, overlap ? d : 0);
    // Every candidate absent (e.g. a block whose tokens were never saved, or were overwritten
    // in a ring too small for the batch): there is nothing to pool, and the entry is left
    // as it was rather than filled with an arbitrary value.
    if (n == 0) continue;

    float* e = entries.ptr<float>() + (b * n_max + j) * d;
    // Per channel, independently: softmax over the candidates' gate scores, weights on their
    // values. Two passes (max, then exp-sums) with candidates outermost so that each pass
    // walks contiguous state rows.
    std::fill_n(mx, d, kNegInf);
    for (int i = 0; i < n; ++i) {
      const float* gq = state_g.ptr<float>() + (b * S + cand_pos[i] % S) * cd + cand_off[i];
      for (int64_t ch = 0; ch < d; ++ch) mx[ch] = std::max(mx[ch], gq[ch]);
    }
    std::fill_n(den, d, 0.f);
    std::fill_n(e, d, 0.f);
    for (int i = 0; i < n; ++i) {
      const int64_t row = (b * S + cand_pos[i] % S) * cd + cand_off[i];
      const float* gq = state_g.ptr<float>() + row;
      const float* uq = state_u.ptr<float>() + row;
      for (int64_t ch = 0; ch < d; ++ch) {
        const float w = std::exp(gq[ch] - mx[ch]);
        den[ch] += w;
        e[ch] += w * uq[ch];
      }
    }
    for (int64_t ch = 0; ch < d; ++ch) e[ch] /= den[ch];

    // The entry is normalised, then rotated at its block's START position.
    rmsnorm_row(e, e, norm_w.ptr<float>(), d, rms_eps);
    rope_vec(e, d, table.ptr<float>() + j * ratio * R, R, /*inverse=*/false);
  }
}

// ---------------------------------------------------------------- lightning indexer (MODEL.md 5.4)

void CpuBackend::indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                              const Tensor& pos, const Tensor& seq, int ratio) {
  const char* op = "indexer_topk";
  check_stream(op, s);
  check_dtype(op, "q", q, DType::F32);
  check_ndim(op, "q", q, 3);
  const int64_t T = q.dim(0), Hi = q.dim(1), di = q.dim(2);
  SL_CHECK(Hi >= 1 && di >= 1, op, ": q ", describe(q), " has no heads");
  check_f32(op, "w", w, {T, Hi});
  check_dtype(op, "keys", keys, DType::F32);
  check_ndim(op, "keys", keys, 3);
  const int64_t B = keys.dim(0), n_max = keys.dim(1);
  check_f32(op, "keys", keys, {B, n_max, di});
  check_dtype(op, "sel", sel, DType::I32);
  check_ndim(op, "sel", sel, 2);
  const int64_t K = sel.dim(1);
  check_i32(op, "sel", sel, {T, K});
  SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  check_tokens(op, pos, seq, T, B);

  // The weights_proj output is scaled by di^-1/2 (the q.k dot) and Hi^-1/2 (the head sum).
  const float wscale = float(1.0 / std::sqrt(double(di) * double(Hi)));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    const int64_t n_c = (int64_t(p) + 1) / ratio;  // causality: entries completed at or before p
    SL_CHECK(n_c <= n_max, op, ": token ", t, " at pos ", p, " sees ", n_c, " entries, keys ", describe(keys),
             " holds ", n_max);
    scratch_f_.resize(size_t(n_c));
    float* score = scratch_f_.data();
    const float* wt = w.ptr<float>() + t * Hi;
    for (int64_t j = 0; j < n_c; ++j) {
      const float* kj = keys.ptr<float>() + (b * n_max + j) * di;
      float acc = 0.f;
      for (int64_t h = 0; h < Hi; ++h) {
        const float qk = dot(q.ptr<float>() + (t * Hi + h) * di, kj, di);
        acc += (wt[h] * wscale) * std::max(qk, 0.f);  // ReLU of each head's logit
      }
      score[j] = acc;
    }
    // Top min(K, n_c) by the stable rule: higher score first, equal scores by lower index.
    const int64_t take = std::min(K, n_c);
    scratch_i_.resize(size_t(n_c));
    std::iota(scratch_i_.begin(), scratch_i_.end(), 0);
    std::partial_sort(scratch_i_.begin(), scratch_i_.begin() + take, scratch_i_.end(), [&](int32_t x, int32_t y) {
      return score[x] > score[y] || (score[x] == score[y] && x < y);
    });
    int32_t* out = sel.ptr<int32_t>() + t * K;
    for (int64_t i = 0; i < K; ++i) out[i] = i < take ? scratch_i_[size_t(i)] : -1;  // pad with -1
  }
}

// ---------------------------------------------------------------- sparse attention (MODEL.md 5.5)

void CpuBackend::sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa,
                                  const Tensor& swa_tags, const Tensor& comp, const Tensor& sel, const Tensor& sink,
                                  const Tensor& pos, const Tensor& seq, int window, CompressedKeys mode, int ratio) {
  const char* op = "sparse_attention";
  check_stream(op, s);
  check_dtype(op, "q", q, DType::F32);
  check_ndim(op, "q", q, 3);
  const int64_t T = q.dim(0), H = q.dim(1), Dh = q.dim(2);
  check_f32(op, "o", o, {T, H, Dh});
  SL_CHECK(o.data == q.data || !overlaps(o, q), op, ": o partially overlaps q");
  check_dtype(op, "swa", swa, DType::F32);
  check_ndim(op, "swa", swa, 3);
  const int64_t B = swa.dim(0), cap = swa.dim(1);
  SL_CHECK(cap >= 1, op, ": swa ", describe(swa), " has no slots");
  check_f32(op, "swa", swa, {B, cap, Dh});
  check_i32(op, "swa_tags", swa_tags, {B, cap});
  check_f32(op, "sink", sink, {H});
  SL_CHECK(window >= 1, op, ": window = ", window, ", expected >= 1");
  check_tokens(op, pos, seq, T, B);
  int64_t n_max = 0, K = 0;
  if (mode != CompressedKeys::None) {
    check_dtype(op, "comp", comp, DType::F32);
    check_ndim(op, "comp", comp, 3);
    n_max = comp.dim(1);
    check_f32(op, "comp", comp, {B, n_max, Dh});
  }
  if (mode == CompressedKeys::All) SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  if (mode == CompressedKeys::Selected) {
    check_dtype(op, "sel", sel, DType::I32);
    check_ndim(op, "sel", sel, 2);
    K = sel.dim(1);
    check_i32(op, "sel", sel, {T, K});
  }

  const float scale = 1.f / std::sqrt(float(Dh));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];

    // The candidate keys (each is also its value): the window, then the compressed entries.
    std::vector<const float*>& keys = scratch_keys_;
    keys.clear();
    for (int64_t pp = std::max<int64_t>(0, int64_t(p) - window + 1); pp <= p; ++pp) {
      const int64_t slot = pp % cap;
      if (swa_tags.ptr<int32_t>()[b * cap + slot] == pp) keys.push_back(swa.ptr<float>() + (b * cap + slot) * Dh);
    }
    if (mode == CompressedKeys::All) {
      const int64_t n_c = (int64_t(p) + 1) / ratio;
      SL_CHECK(n_c <= n_max, op, ": token ", t, " at pos ", p, " sees ", n_c, " entries, comp ", describe(comp),
               " holds ", n_max);
      for (int64_t j = 0; j < n_c; ++j) keys.push_back(comp.ptr<float>() + (b * n_max + j) * Dh);
    } else if (mode == CompressedKeys::Selected) {
      for (int64_t i = 0; i < K; ++i) {
        const int32_t j = sel.ptr<int32_t>()[t * K + i];
        if (j < 0) continue;  // -1 pads the selection
        SL_CHECK(j < n_max, op, ": sel[", t, ", ", i, "] = ", j, " outside comp ", describe(comp));
        keys.push_back(comp.ptr<float>() + (b * n_max + j) * Dh);
      }
    }
    const size_t n = keys.size();
    scratch_f_.resize(n);
    float* sc = scratch_f_.data();

    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.ptr<float>() + (t * H + h) * Dh;
      float* oh = o.ptr<float>() + (t * H + h) * Dh;
      // All scores first (q is fully read before o, which may be the same buffer).
      const float sink_h = sink.ptr<float>()[h];
      float M = sink_h;
      for (size_t i = 0; i < n; ++i) {
        sc[i] = scale * dot(qh, keys[i], Dh);
        M = std::max(M, sc[i]);
      }
      // The sink is one more logit whose value vector is zero: it only adds to the
      // denominator, letting a head attend to "nothing".
      float den = 0.f;
      for (size_t i = 0; i < n; ++i) {
        sc[i] = std::exp(sc[i] - M);
        den += sc[i];
      }
      if (M != kNegInf) den += std::exp(sink_h - M);
      std::fill_n(oh, Dh, 0.f);
      if (den == 0.f) continue;  // no key and a -inf sink (a padded head): output 0
      for (size_t i = 0; i < n; ++i) {
        const float w = sc[i] / den;
        const float* k = keys[i];
        for (int64_t d = 0; d < Dh; ++d) oh[d] += w * k[d];
      }
    }
  }
}

}  // namespace sl
