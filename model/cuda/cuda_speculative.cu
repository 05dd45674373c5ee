// Speculative decoding's bookkeeping on the device (docs/speculative.md): the verifying step's
// input tokens, acceptance, and the rollback of a cache to the committed length. They keep the
// whole verifying step free of host reads, so that it can be captured as one CUDA graph. All
// three are tiny (B sequences of 1 + k rows, or one cache row per sequence) and latency-bound.
#include <algorithm>

#include "model/cuda/cuda_common.cuh"

namespace sl {

using namespace cuda;

namespace {

// out[b*R] = bonus[b], out[b*R + i] = drafts[(i-1)*B + b]: one thread per output row.
__global__ void verify_tokens_kernel(int32_t* out, const int32_t* bonus, const int32_t* drafts, int64_t B,
                                     int64_t R) {
  pdl_enter();
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < B * R; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = r / R, i = r % R;
    out[r] = i == 0 ? bonus[b] : drafts[(i - 1) * B + b];
  }
}

// One thread per sequence: the accepted prefix (or the forced count), then every output that
// depends on it. k is small (the draft steps), so the serial scan over the rows is the cheapest.
__global__ void accept_drafts_kernel(int32_t* accepted, int32_t* bonus, int32_t* new_len, int32_t* mtp_tokens,
                                     int32_t* last_rows, int32_t* draft_pos, const int32_t* target,
                                     const int32_t* drafts, const int32_t* forced, const int32_t* pos, int64_t B,
                                     int64_t k) {
  pdl_enter();
  const int64_t R = k + 1;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    const int32_t* t = target + b * R;
    const int32_t f = forced[b];
    int64_t a = 0;
    if (f >= 0)
      a = f < k ? f : k;
    else
      while (a < k && drafts[a * B + b] == t[a]) ++a;  // draft a+1 (row a+1) against the target's row a
    const int32_t n = int32_t(pos[b * R] + a + 1);
    accepted[b] = int32_t(a);
    bonus[b] = t[a];
    new_len[b] = n;
    last_rows[b] = int32_t(b * R + a);
    for (int64_t i = 0; i < R; ++i) mtp_tokens[b * R + i] = i < a ? drafts[i * B + b] : t[i];
    for (int64_t s = 0; s < k; ++s) draft_pos[s * B + b] = int32_t(n + s - 1);
  }
}

// One block per sequence: its S tags, then the entries of the blocks in (new_len, new_len +
// extent] (element-wise zero stores; at most extent / ratio + 1 rows of d values). dt < 0: packed
// FP8 entries, rows of d bytes, cleared byte by byte (an all-zero entry reads back as zeros).
__global__ void cache_rollback_kernel(int32_t* tags, void* entries, int dt, const int32_t* new_len, int64_t S,
                                      int64_t n_max, int64_t d, int ratio, int extent) {
  pdl_enter();
  const int64_t b = blockIdx.x;
  const int64_t n = max(new_len[b], 0);  // a negative length is out of range: nothing survives
  for (int64_t i = threadIdx.x; i < S; i += blockDim.x)
    if (tags[b * S + i] >= n) tags[b * S + i] = -1;
  if (entries == nullptr) return;
  const int64_t lo = n / ratio, hi = min(n_max, (n + extent) / ratio);
  if (hi <= lo) return;
  const int64_t base = (b * n_max + lo) * d, count = (hi - lo) * d;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
    if (dt < 0)
      static_cast<uint8_t*>(entries)[base + e] = 0;
    else
      stf(entries, dt, base + e, 0.f);
}

}  // namespace

void CudaBackend::verify_tokens(Stream s, const Tensor& out, const Tensor& bonus, const Tensor& drafts) {
  const char* op = "verify_tokens";
  cudaStream_t st = stream(s, op);
  const auto [B, R, k] = checks::validate_verify_tokens<OpRules>(out, bonus, drafts);
  if (B == 0) return;
  launch_kernel(op, verify_tokens_kernel, grid_for(B * R, 128), 128, 0, st, out.ptr<int32_t>(),
                bonus.ptr<int32_t>(), drafts.ptr<int32_t>(), B, R);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::accept_drafts(Stream s, const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                                const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos,
                                const Tensor& target, const Tensor& drafts, const Tensor& forced, const Tensor& pos) {
  const char* op = "accept_drafts";
  cudaStream_t st = stream(s, op);
  const auto [B, R, k] = checks::validate_accept_drafts<OpRules>(accepted, bonus, new_len, mtp_tokens, last_rows,
                                                                 draft_pos, target, drafts, forced, pos);
  if (B == 0) return;
  launch_kernel(op, accept_drafts_kernel, grid_for(B, 128), 128, 0, st, accepted.ptr<int32_t>(),
                bonus.ptr<int32_t>(), new_len.ptr<int32_t>(), mtp_tokens.ptr<int32_t>(), last_rows.ptr<int32_t>(),
                draft_pos.ptr<int32_t>(), target.ptr<int32_t>(), drafts.ptr<int32_t>(), forced.ptr<int32_t>(),
                pos.ptr<int32_t>(), B, k);
  CUDA_LAUNCH_CHECK(op, st);
}

void CudaBackend::cache_rollback(Stream s, const Tensor& tags, const Tensor& entries, const Tensor& new_len, int ratio,
                                 int extent) {
  const char* op = "cache_rollback";
  cudaStream_t st = stream(s, op);
  const auto [B, S, n_max, d] = checks::validate_cache_rollback<OpRules>(tags, entries, new_len, ratio, extent);
  if (B == 0) return;
  SL_CHECK(B <= 0x7fffffff, op, ": ", B, " sequences exceed the grid");
  const bool with_entries = !entries.empty() && n_max * d > 0;
  launch_kernel(op, cache_rollback_kernel, unsigned(B), 256, 0, st, tags.ptr<int32_t>(),
                with_entries ? entries.data : nullptr,
                !with_entries ? kF32 : entries.dtype == DType::U8 ? -1 : fcode(entries.dtype),
                new_len.ptr<int32_t>(), S, n_max, d, with_entries ? ratio : 1, extent);
  CUDA_LAUNCH_CHECK(op, st);
}

}  // namespace sl
