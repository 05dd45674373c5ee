// Attention-side ops (docs/model.md 5): the sliding-window cache, the compressor (state ring +
// pooling into compressed entries), the lightning indexer's top-k, and the sparse attention
// with sink.
//
// Every cache is per sequence (dim 0 = B) and every ring slot carries a position tag. A
// reader uses a slot only if its tag is exactly the position it wants; anything else
// (-1 = never written, or another position that reused the slot) is treated as absent.
#include <cstring>
#include <limits>
#include <numeric>

#include "core/bf16.h"
#include "core/fp8.h"
#include "model/attention_candidates.h"
#include "model/cpu/cpu_backend_impl.h"
#include "model/kv_fp8_entry.h"

namespace sl {

using namespace cpu;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// pos/seq are I32 [T]; every token must name a sequence (cache row) in [0, B) and have a
// non-negative position.
// The values of pos/seq [T] (host memory here; their shapes the validators check).
void check_token_values(const char* op, const Tensor& pos, const Tensor& seq, int64_t T, int64_t B) {
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    SL_CHECK(p >= 0, op, ": pos[", t, "] = ", p, " is negative");
    SL_CHECK(b >= 0 && b < B, op, ": seq[", t, "] = ", b, " outside the ", B, " cache rows");
  }
}

// ---------------------------------------------------------------- packed FP8 cache entries
// (model/kv_fp8_entry.h: the layout, the block scale and the decoding both backends share;
// pack_fp8_block, shared with round_fp8_blocks, is at the end of this file)

void pack_kv_entry(uint8_t* e, const float* x, int64_t nope, int64_t rope, int64_t bytes) {
  std::memset(e, 0, size_t(bytes));  // the padding
  for (int64_t c0 = 0; c0 < nope; c0 += kvfp8::kBlock)
    e[kvfp8::kv_scale_offset(nope, rope) + c0 / kvfp8::kBlock] = pack_fp8_block(e + c0, x + c0, kvfp8::kBlock);
  uint8_t* r = e + kvfp8::kv_rope_offset(nope);
  for (int64_t i = 0; i < rope; ++i) {
    const uint16_t b = float_to_bf16(x[nope + i]);
    r[2 * i] = uint8_t(b & 0xff);
    r[2 * i + 1] = uint8_t(b >> 8);
  }
}

void pack_indexer_key(uint8_t* e, const float* x, int64_t di) {
  const float s = kvfp8::scale_from_code(pack_fp8_block(e, x, di));
  std::memcpy(e + di, &s, sizeof s);  // little-endian fp32, as kvfp8::indexer_key_scale reads it
}

// A cache's entry `row` as floats: itself when it is a float cache, else unpacked into out.
const float* cache_entry(const Tensor& cache, int64_t row, int64_t values, int64_t nope, float* out) {
  if (cache.dtype != DType::U8) return cache.ptr<float>() + row * values;
  kvfp8::decode_entry(cache.ptr<uint8_t>() + row * cache.dim(2), values, nope, out);
  return out;
}

// The nope width of a packed KV cache (-1 for a float cache).
int64_t packed_nope(const Tensor& cache, int64_t values) {
  return cache.dtype == DType::U8 ? kvfp8::kv_entry_nope(values, cache.dim(2)) : -1;
}

}  // namespace

// ---------------------------------------------------------------- sliding-window cache

void CpuBackend::swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                            const Tensor& seq) {
  const char* op = "swa_insert";
  check_stream(op, s);
  const auto [B, cap, d, T, nope] = checks::validate_swa_insert<OpRules>(cache, tags, k, pos, seq);
  check_token_values(op, pos, seq, T, B);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    const int64_t slot = p % cap;
    if (nope > 0) {
      const int64_t bytes = cache.dim(2);
      pack_kv_entry(cache.ptr<uint8_t>() + (b * cap + slot) * bytes, k.ptr<float>() + t * d, nope, d - nope, bytes);
    } else {
      std::memcpy(cache.ptr<float>() + (b * cap + slot) * d, k.ptr<float>() + t * d, size_t(d) * sizeof(float));
    }
    tags.ptr<int32_t>()[b * cap + slot] = p;
  }
}

// ---------------------------------------------------------------- compressor (docs/model.md 5.3)

void CpuBackend::compressor_save(Stream s, const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                                 const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                                 const Tensor& seq, int ratio) {
  const char* op = "compressor_save";
  check_stream(op, s);
  const auto [B, S, cd, T] =
      checks::validate_compressor_save<OpRules>(state_u, state_g, state_tags, u, g, ape, pos, seq, ratio);
  check_token_values(op, pos, seq, T, B);
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
  const auto [B, S, cd, c, d, n_max, P, R, T, nope] = checks::validate_compressor_pool<OpRules>(
      entries, state_u, state_g, state_tags, norm_w, table, pos, seq, ratio, overlap);
  check_token_values(op, pos, seq, T, B);

  scratch_f_.resize(size_t(3 * d));
  float* mx = scratch_f_.data();  // per-channel running max of the scores
  float* den = mx + d;            // per-channel softmax denominator
  float* pooled = den + d;        // the entry before a packed cache stores it
  const bool packed = nope >= 0;         // KV entries (nope > 0) or indexer keys (0)
  const int64_t bytes = entries.dim(2);  // per entry (values on a float cache)
  int64_t cand_pos[256];          // candidate positions (oldest first) and their channel offsets
  int64_t cand_off[256];  // c * ratio <= 256: the validator checks it

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

    float* e = packed ? pooled : entries.ptr<float>() + (b * n_max + j) * d;
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
    if (!packed) continue;
    uint8_t* dst = entries.ptr<uint8_t>() + (b * n_max + j) * bytes;
    if (nope > 0) pack_kv_entry(dst, e, nope, d - nope, bytes);
    else pack_indexer_key(dst, e, d);
  }
}

// ---------------------------------------------------------------- lightning indexer (docs/model.md 5.4)

void CpuBackend::indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                              const Tensor& pos, const Tensor& seq, int ratio) {
  const char* op = "indexer_topk";
  check_stream(op, s);
  const auto [T, Hi, di, B, n_max, K] = checks::validate_indexer_topk<OpRules>(sel, q, w, keys, pos, seq, ratio);
  check_token_values(op, pos, seq, T, B);

  // The weights_proj output is scaled by di^-1/2 (the q.k dot) and Hi^-1/2 (the head sum).
  const float wscale = float(1.0 / std::sqrt(double(di) * double(Hi)));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];
    const int64_t n_c = compressed_entries_seen(p, ratio);
    SL_CHECK(n_c <= n_max, op, ": token ", t, " at pos ", p, " sees ", n_c, " entries, keys ", describe(keys),
             " holds ", n_max);
    scratch_f_.resize(size_t(n_c + di));
    float* score = scratch_f_.data();
    float* unpacked = score + n_c;  // a packed key read back
    const float* wt = w.ptr<float>() + t * Hi;
    for (int64_t j = 0; j < n_c; ++j) {
      const float* kj = cache_entry(keys, b * n_max + j, di, 0, unpacked);
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

// ---------------------------------------------------------------- sparse attention (docs/model.md 5.5)

void CpuBackend::sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa,
                                  const Tensor& swa_tags, const Tensor& comp, const Tensor& sel, const Tensor& sink,
                                  const Tensor& pos, const Tensor& seq, int window, CompressedKeys mode, int ratio) {
  const char* op = "sparse_attention";
  check_stream(op, s);
  const auto [T, H, Dh, B, cap, n_max, K] = checks::validate_sparse_attention<OpRules>(
      o, q, swa, swa_tags, comp, sel, sink, pos, seq, window, mode, ratio);
  // The loop reads q[t] before it writes o[t]: o may be q itself, but not partly overlap it.
  SL_CHECK(o.data == q.data || !overlaps(o, q), op, ": o partially overlaps q");
  check_token_values(op, pos, seq, T, B);

  const float scale = 1.f / std::sqrt(float(Dh));
  // Packed FP8 caches are read back into scratch rows, one per candidate key (a window and a
  // selection at most, or every compressed entry: sized per token below).
  const int64_t swa_nope = packed_nope(swa, Dh), comp_nope = comp.empty() ? -1 : packed_nope(comp, Dh);
  std::vector<float>& unpacked = scratch_unpacked_;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t p = pos.ptr<int32_t>()[t], b = seq.ptr<int32_t>()[t];

    // The candidate keys (each is also its value): the window, then the compressed entries.
    std::vector<const float*>& keys = scratch_keys_;
    keys.clear();
    const int64_t most = (p - window_first_position(p, window) + 1) +
                         (mode == CompressedKeys::All ? compressed_entries_seen(p, ratio) : K);
    if (swa_nope > 0 || comp_nope > 0) unpacked.resize(size_t(most * Dh));
    auto key = [&](const Tensor& cache, int64_t row, int64_t nope) {
      keys.push_back(cache_entry(cache, row, Dh, nope, unpacked.data() + keys.size() * Dh));
    };
    for (int64_t pp = window_first_position(p, window); pp <= p; ++pp) {
      const int64_t slot = pp % cap;
      if (swa_tags.ptr<int32_t>()[b * cap + slot] == pp) key(swa, b * cap + slot, swa_nope);
    }
    if (mode == CompressedKeys::All) {
      const int64_t n_c = compressed_entries_seen(p, ratio);
      SL_CHECK(n_c <= n_max, op, ": token ", t, " at pos ", p, " sees ", n_c, " entries, comp ", describe(comp),
               " holds ", n_max);
      for (int64_t j = 0; j < n_c; ++j) key(comp, b * n_max + j, comp_nope);
    } else if (mode == CompressedKeys::Selected) {
      for (int64_t i = 0; i < K; ++i) {
        const int32_t j = sel.ptr<int32_t>()[t * K + i];
        if (j < 0) continue;  // -1 pads the selection
        SL_CHECK(j < n_max, op, ": sel[", t, ", ", i, "] = ", j, " outside comp ", describe(comp));
        key(comp, b * n_max + j, comp_nope);
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

// One block of values as e4m3 codes; returns the scale's e8m0 code (cpu_backend_impl.h).
uint8_t cpu::pack_fp8_block(uint8_t* codes, const float* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint8_t code = kvfp8::block_scale_code(amax);
  const float s = kvfp8::scale_from_code(code);
  for (int64_t i = 0; i < n; ++i) codes[i] = lowp::float_to_e4m3(x[i] / s);  // a power of two: exact
  return code;
}

}  // namespace sl
