// Speculative decoding's bookkeeping (docs/speculative.md): the verifying step's input tokens,
// greedy / forced acceptance, and the rollback of a cache to the committed length.
#include <cstring>

#include "model/cpu/cpu_backend_impl.h"

namespace sl {

using namespace cpu;

void CpuBackend::verify_tokens(Stream s, const Tensor& out, const Tensor& bonus, const Tensor& drafts) {
  const char* op = "verify_tokens";
  check_stream(op, s);
  const auto [B, R, k] = checks::validate_verify_tokens<OpRules>(out, bonus, drafts);
  const int32_t* bn = bonus.ptr<int32_t>();
  const int32_t* d = drafts.ptr<int32_t>();
  int32_t* o = out.ptr<int32_t>();
  // Sequence-major rows, as the prefill lays them out: each sequence's positions p..p+k in order.
  for (int64_t b = 0; b < B; ++b) {
    o[b * R] = bn[b];
    for (int64_t i = 1; i < R; ++i) o[b * R + i] = d[(i - 1) * B + b];
  }
}

void CpuBackend::accept_drafts(Stream s, const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                               const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos,
                               const Tensor& target, const Tensor& drafts, const Tensor& forced, const Tensor& pos) {
  const char* op = "accept_drafts";
  check_stream(op, s);
  const auto [B, R, k] = checks::validate_accept_drafts<OpRules>(accepted, bonus, new_len, mtp_tokens, last_rows,
                                                                 draft_pos, target, drafts, forced, pos);
  const int32_t* t = target.ptr<int32_t>();
  const int32_t* d = drafts.ptr<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int32_t p = pos.ptr<int32_t>()[b * R];
    SL_CHECK(p >= 0, op, ": pos[", b * R, "] = ", p, " (first row of sequence ", b, ") is negative");
    for (int64_t i = 1; i < R; ++i)
      SL_CHECK(pos.ptr<int32_t>()[b * R + i] == p + i, op, ": pos[", b * R + i, "] = ", pos.ptr<int32_t>()[b * R + i],
               ", expected ", p + i, ": a sequence's rows are consecutive positions");
    const int32_t f = forced.ptr<int32_t>()[b];
    int64_t a = 0;
    if (f >= 0) {
      a = std::min<int64_t>(f, k);
    } else {
      // Draft i+1 stands at row i+1 and is right if the target, at row i, predicted it.
      while (a < k && d[a * B + b] == t[b * R + a]) ++a;
    }
    const int32_t n = int32_t(p + a + 1);
    accepted.ptr<int32_t>()[b] = int32_t(a);
    bonus.ptr<int32_t>()[b] = t[b * R + a];
    new_len.ptr<int32_t>()[b] = n;
    last_rows.ptr<int32_t>()[b] = int32_t(b * R + a);
    // The MTP pairs the residual at row i with the token at the next position: a committed
    // draft while i < a, the bonus at row a; rows past a get the target's guess (discarded).
    for (int64_t i = 0; i < R; ++i) mtp_tokens.ptr<int32_t>()[b * R + i] = i < a ? d[i * B + b] : t[b * R + i];
    for (int64_t st = 0; st < k; ++st) draft_pos.ptr<int32_t>()[st * B + b] = int32_t(n + st - 1);
  }
}

void CpuBackend::cache_rollback(Stream s, const Tensor& tags, const Tensor& entries, const Tensor& new_len, int ratio,
                                int extent) {
  const char* op = "cache_rollback";
  check_stream(op, s);
  const auto [B, S, n_max, d] = checks::validate_cache_rollback<OpRules>(tags, entries, new_len, ratio, extent);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t n = new_len.ptr<int32_t>()[b];
    SL_CHECK(n >= 0, op, ": new_len[", b, "] = ", n, " is negative");
    int32_t* tg = tags.ptr<int32_t>() + b * S;
    for (int64_t i = 0; i < S; ++i)
      if (tg[i] >= n) tg[i] = -1;  // a rejected position: the slot reads as empty from now on
    if (entries.empty()) continue;
    // Entry j pools positions up to (j+1)*ratio - 1: it is complete within n tokens iff
    // (j+1)*ratio <= n. The first incomplete one is j = n / ratio.
    const int64_t lo = int64_t(n) / ratio, hi = std::min<int64_t>(n_max, (int64_t(n) + extent) / ratio);
    // Zero bytes are a zero entry in every layout (packed FP8 too: codes, scales and rope values).
    const size_t row = size_t(d) * dtype_size(entries.dtype);
    for (int64_t j = lo; j < hi; ++j) std::memset(entries.ptr<uint8_t>() + size_t(b * n_max + j) * row, 0, row);
  }
}

}  // namespace sl
