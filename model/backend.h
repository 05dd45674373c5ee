// The backend interface: the small set of ops the DeepSeek V4 + MTP forward is written
// against (docs/model.md names). The model code (model/*.cpp) calls only these; the CPU fp32
// reference (model/cpu) and the CUDA backend (model/cuda) implement them. Which buffers each
// op reads and writes is declared by the model-side facade (model/ops.h), which also records
// the stream schedule; backends just compute.
//
// Conventions shared by every op:
// - Every op takes the stream it runs on first. The CPU backend runs ops in program order and
//   treats streams as labels; the CUDA backend enqueues on the matching cudaStream_t.
// - Tensors are contiguous, row-major, in the backend's memory. "Activation" tensors have the
//   backend's act_dtype() (F32 on CPU, BF16 on CUDA); tensors documented as F32 or I32 are
//   always that type. Weights have weight_dtype() unless documented F32.
// - A token batch is T rows. `pos` (I32 [T]) is each token's absolute position in its own
//   sequence, `seq` (I32 [T]) the sequence (= cache row) it belongs to, in [0, B).
// - Caches are per sequence: dim 0 is B. Ring caches are indexed by position mod capacity and
//   carry a position tag per slot (I32, -1 = empty); a reader uses a slot only if its tag
//   equals the position it wants, so a slot never written (e.g. an MTP layer that only some
//   draft steps visit) is never read as data.
// - All reductions accumulate in fp32. No op allocates memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sl {

struct Stream {
  int id = 0;  // 0 = the main ("current") stream
  bool operator==(const Stream& o) const { return id == o.id; }
  bool operator!=(const Stream& o) const { return id != o.id; }
};
struct Event {
  int id = -1;
};

// Which key set the sparse attention reads beyond the sliding window (docs/model.md 5.5).
enum class CompressedKeys { None, All, Selected };

struct MemoryStats {
  size_t weights_bytes = 0;      // allocated with kind Weight
  size_t activations_bytes = 0;  // everything else (activations, caches, workspaces)
  size_t peak_bytes = 0;         // high-water mark of the arena / pool
  size_t library_bytes = 0;      // e.g. cuBLAS workspaces (CUDA)
  size_t blas_handles = 0;       // cuBLAS handles created (CUDA)
  size_t blas_workspaces = 0;    // cuBLAS workspaces allocated, one per (handle, stream) (CUDA)
  size_t streams_created = 0;    // CUDA streams the backend created (besides the main stream)
};

enum class AllocKind { Weight, Activation, Cache, Workspace };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DType act_dtype() const = 0;
  virtual DType weight_dtype() const = 0;

  // ---------------------------------------------------------------- memory
  // Returns zero-initialised memory. The name is kept for errors and schedules.
  virtual Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) = 0;
  virtual std::string buffer_name(int buffer) const = 0;
  // Host <-> backend copies; upload is ordered on `s`, download synchronises everything.
  virtual void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const Tensor& src, size_t bytes) = 0;
  virtual MemoryStats memory() const = 0;
  // Memory the backend could still allocate (host: MemAvailable; CUDA: the device's free memory),
  // so that a model too large is refused before allocating; 0 when unknown.
  virtual size_t available_bytes() const { return 0; }

  // ---------------------------------------------------------------- streams and events
  // A stream as a C++ engine creates it: on CUDA, with its own cuBLAS handle and workspace.
  virtual Stream create_stream(const std::string& name, int priority) = 0;
  // A stream of a PyTorch-style pool (model/stream_policy.h, torch source): created bare; GEMMs
  // on it use the backend's one per-thread cuBLAS handle with a workspace for this stream
  // allocated at its first GEMM. `claim_stream` marks it drawn (given to a user), naming the roles
  // it serves; only drawn streams get what using a stream needs (the CUDA backend's op scratch).
  // Backends without per-stream resources treat both as create_stream.
  virtual Stream create_pool_stream(const std::string& name, int priority) { return create_stream(name, priority); }
  virtual void claim_stream(Stream s, const std::string& roles) {}
  virtual void destroy_stream(Stream s) = 0;
  virtual Event create_event(const std::string& name) = 0;
  virtual void record(Event e, Stream s) = 0;  // e completes when s reaches this point
  virtual void wait(Stream s, Event e) = 0;    // later work on s waits for e
  virtual void synchronize() = 0;              // host waits for all streams
  // CUDA graphs: capture everything enqueued on the main stream (and the streams it forks to)
  // between begin and end into graph `slot`, instantiate it, and replay it later. Backends
  // without graphs throw.
  struct GraphStats {
    double capture_ms = 0, instantiate_ms = 0;
    size_t nodes = 0, edges = 0;
  };
  virtual void graph_begin_capture(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  virtual GraphStats graph_end_capture(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  virtual void graph_replay(int slot) { fail(name(), " backend: CUDA graphs are not supported"); }
  // Timing marks: points on a stream whose time can be read back after synchronize(), also
  // from inside a CUDA graph (where a mark is captured as an event-record node), so that the
  // parts of a step (target, drafts) can be timed without a tracer. The defaults, for backends
  // that run ops in program order on the host, read the host clock when the mark is recorded.
  virtual Event create_timing_mark(const std::string& name);
  virtual void record_timing_mark(Event e, Stream s);
  virtual double elapsed_ms(Event from, Event to);  // from the mark `from` to the mark `to`
  // Annotation ranges (NVTX on CUDA; no-op on CPU). Names follow docs/model.md.
  virtual void range_push(const char* name) {}
  virtual void range_pop() {}

  // ---------------------------------------------------------------- initialisation
  // t[i] = scale * uniform_pm1(seed, key, i) + offset (core/rng.h), converted to t's dtype.
  virtual void init_uniform(Stream s, const Tensor& t, uint64_t seed, uint64_t key, float scale, float offset) = 0;
  virtual void fill(Stream s, const Tensor& t, float value) = 0;  // F32/BF16/I32 (value cast)
  virtual void copy(Stream s, const Tensor& dst, const Tensor& src) = 0;  // same dtype and numel

  // ---------------------------------------------------------------- dense math
  // out[M,N] = a[M,K] . w[N,K]^T, fp32 accumulation. out is act_dtype or F32; a is act_dtype
  // or F32; w is weight_dtype or F32.
  virtual void gemm(Stream s, const Tensor& out, const Tensor& a, const Tensor& w) = 0;
  // Block-diagonal ("grouped") GEMM of the output projection (docs/model.md 5.6):
  // out[M, G*N] with out[:, g*N:(g+1)*N] = a[:, g*K:(g+1)*K] . w[g*N:(g+1)*N, :]^T.
  virtual void gemm_grouped(Stream s, const Tensor& out, const Tensor& a, const Tensor& w, int groups) = 0;
  // out[r,:] = w . x[r,:] / sqrt(mean(x[r,:]^2) + eps). Rows = numel/dim where dim = last dim
  // of x. w may be empty (no weight: the per-head Q norm). out may alias x.
  virtual void rmsnorm(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps) = 0;
  // Two independent row norms (q_norm and kv_norm) in one op, so that a backend may run them as
  // one launch. The default runs the two rmsnorms.
  virtual void rmsnorm_pair(Stream s, const Tensor& out1, const Tensor& x1, const Tensor& w1, float eps1,
                            const Tensor& out2, const Tensor& x2, const Tensor& w2, float eps2) {
    rmsnorm(s, out1, x1, w1, eps1);
    rmsnorm(s, out2, x2, w2, eps2);
  }
  // out = rmsnorm over the last dim of x [T, heads, dim], then RoPE on out (the query's per-head
  // norm and rotation, docs/model.md 5.2) in one op. The default runs rmsnorm, then rope.
  virtual void rmsnorm_rope(Stream s, const Tensor& out, const Tensor& x, const Tensor& w, float eps,
                            const Tensor& pos, const Tensor& table) {
    const int64_t dim = x.dim(-1);
    rmsnorm(s, out.view({out.numel() / dim, dim}), x.view({x.numel() / dim, dim}), w, eps);
    rope(s, out, pos, table, false);
  }
  // out = a + b (same shape).
  virtual void add(Stream s, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // Interleaved RoPE (docs/model.md 3.2) in place on the last R = table.dim(1) dims of each head
  // vector: x [T, heads, dim], angle row pos[t] of table (F32 [P, R]: R/2 cos then R/2 sin).
  // inverse: sin -> -sin.
  virtual void rope(Stream s, const Tensor& x, const Tensor& pos, const Tensor& table, bool inverse) = 0;

  // ---------------------------------------------------------------- embedding, sampling
  // out[t,:] = table[ids[t],:]; if zero_pos0, rows with pos[t] == 0 become 0 (MTP, vLLM).
  virtual void embed(Stream s, const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos,
                     bool zero_pos0) = 0;
  // out[n] = argmax of logits[n, :] (F32); ties -> lowest index.
  virtual void argmax(Stream s, const Tensor& out, const Tensor& logits) = 0;
  // out[i, :] = in[rows[i], :] (rows I32 [n]).
  virtual void gather_rows(Stream s, const Tensor& out, const Tensor& in, const Tensor& rows) = 0;
  // MTP token shift (docs/model.md 7, step 0): tokens are B sequences of T0 tokens each;
  // out[b*T0 + i] = tokens[b*T0 + i + 1] for i < T0-1, and sampled[b] for i = T0-1.
  virtual void shift_tokens(Stream s, const Tensor& out, const Tensor& tokens, const Tensor& sampled) = 0;

  // ---------------------------------------------------------------- speculative decoding
  // The verifying decode step (docs/speculative.md): B sequences of R = 1 + k rows each, row
  // b*R + i at position p_b + i. Its bookkeeping runs on the device so that a step stays one
  // CUDA graph; all tensors here are I32.
  //
  // The step's input tokens: out[b*R] = bonus[b] (the last committed token, not yet cached),
  // out[b*R + i] = drafts[i-1, b] for i = 1..k. bonus [B], drafts [k, B], out [B*R].
  virtual void verify_tokens(Stream s, const Tensor& out, const Tensor& bonus, const Tensor& drafts) = 0;
  // Acceptance. target [B, R]: the target's greedy token at each row (target[b, i] predicts
  // position p_b + i + 1); drafts [k, B]: the drafts the step verified (drafts[i, b] sits at row
  // i + 1); forced [B]: -1 (any negative) = greedy, else the count to accept; pos [B*R]: the
  // rows' positions (p_b = pos[b*R]). Per sequence: a = min(forced, k) when forced >= 0, else
  // the longest prefix with drafts[i, b] == target[b, i] (i < a). Writes
  //   accepted [B] = a;  bonus [B] = target[b, a];  new_len [B] = p_b + a + 1;
  //   mtp_tokens [B*R]: row i = drafts[i, b] for i < a, else target[b, i] (the MTP's next-token
  //     input: the committed tokens, then the bonus at row a; rows past a are never used);
  //   last_rows [B] = b*R + a;  draft_pos [k, B]: row s = new_len + s - 1.
  virtual void accept_drafts(Stream s, const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                             const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos,
                             const Tensor& target, const Tensor& drafts, const Tensor& forced, const Tensor& pos) = 0;
  // Rolls a cache back to new_len [B] positions per sequence: tags [B, S] >= new_len[b] become
  // -1 (a ring's slots, or a compressor state's). With entries [B, n_max, d] (act, optional: a
  // compressor's output), rows j of blocks not complete within new_len[b] tokens become zero:
  // new_len[b] < (j+1)*ratio, touching only those with (j+1)*ratio <= new_len[b] + extent. The
  // caller guarantees that nothing at or past position new_len[b] + extent was ever written,
  // so the rows beyond are still zero and a rollback costs O(extent), not O(n_max).
  virtual void cache_rollback(Stream s, const Tensor& tags, const Tensor& entries, const Tensor& new_len, int ratio,
                              int extent) = 0;

  // ---------------------------------------------------------------- mHC (docs/model.md 3.4)
  // X [T, hc, D] act. fn F32 [mix, hc*D], scale F32 [3], base F32 [mix].
  // Writes y [T, D] act, post F32 [T, hc], comb F32 [T, hc, hc] (Sinkhorn-normalised).
  virtual void hc_pre(Stream s, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X,
                      const Tensor& fn, const Tensor& scale, const Tensor& base, int sinkhorn_iters, float hc_eps,
                      float rms_eps) = 0;
  // hc_pre, then out = rmsnorm(y, norm_w, norm_eps): a sub-layer's input (docs/model.md 4, hc_pre ->
  // RMSNorm) in one op, so that a backend may fuse the two (the CUDA backend does: one kernel
  // launch fewer per sub-layer). y, post and comb are written as by hc_pre. The default runs the
  // two ops.
  virtual void hc_pre_norm(Stream s, const Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                           const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                           int sinkhorn_iters, float hc_eps, float rms_eps, const Tensor& norm_w, float norm_eps) {
    hc_pre(s, y, post, comb, X, fn, scale, base, sinkhorn_iters, hc_eps, rms_eps);
    rmsnorm(s, out, y, norm_w, norm_eps);
  }
  // X_out[t, j, :] = post[t, j] * f[t, :] + sum_i comb[t, i, j] * res[t, i, :].
  virtual void hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& res, const Tensor& post,
                       const Tensor& comb) = 0;
  // f = f1 + f2, then hc_post(X_out, f, res, post, comb): the MoE's routed + shared sum and the
  // FFN sub-layer's hc_post (docs/model.md 4, 6) in one op, so that a backend may fuse them. The
  // default runs add, then hc_post.
  virtual void add_hc_post(Stream s, const Tensor& X_out, const Tensor& f, const Tensor& f1, const Tensor& f2,
                           const Tensor& res, const Tensor& post, const Tensor& comb) {
    add(s, f, f1, f2);
    hc_post(s, X_out, f, res, post, comb);
  }
  // h[t, :] = sum_s (sigmoid(m_s * scale[0] + base[s]) + hc_eps) * X[t, s, :]; fn F32 [hc, hc*D].
  virtual void hc_head(Stream s, const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale,
                       const Tensor& base, float hc_eps, float rms_eps) = 0;
  // Residual expansion (docs/model.md 2): X[t, s, :] = e[t, :] for every stream s.
  virtual void hc_expand(Stream s, const Tensor& X, const Tensor& e) = 0;
  // MTP input (docs/model.md 7): X[t, s, :] = hp[t, s, :] + ep[t, :].
  virtual void mtp_combine(Stream s, const Tensor& X, const Tensor& hp, const Tensor& ep) = 0;

  // ---------------------------------------------------------------- attention (docs/model.md 5)
  // Sliding-window cache insert: cache [B, cap, d] act, tags I32 [B, cap]; k [T, d].
  // Slot pos % cap of row seq[t] gets k[t] and tag pos[t].
  virtual void swa_insert(Stream s, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                          const Tensor& seq) = 0;
  // Compressor state save (docs/model.md 5.3): u, g F32 [T, c*d] (the wkv / wgate GEMM outputs);
  // state_u, state_g F32 [B, S, c*d], state_tags I32 [B, S]. Slot p % S of row seq[t] gets
  // u[t], g[t] + ape[p % ratio] and tag p. ape F32 [ratio, c*d].
  virtual void compressor_save(Stream s, const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                               const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                               const Tensor& seq, int ratio) = 0;
  // Compressor pooling: for every token t with (pos+1) % ratio == 0, entry j = pos / ratio of
  // row seq[t] is pooled from the state (overlap: 2*ratio tokens, previous block's first half
  // channels + current block's second half; else ratio tokens), RMSNorm'ed with norm_w
  // [d] and RoPE'd at position j*ratio with `table`, and written to entries [B, n_max, d]
  // (act). State slots whose tag is not the wanted position count as absent (score -inf).
  virtual void compressor_pool(Stream s, const Tensor& entries, const Tensor& state_u, const Tensor& state_g,
                               const Tensor& state_tags, const Tensor& norm_w, const Tensor& table, const Tensor& pos,
                               const Tensor& seq, int ratio, bool overlap, float rms_eps) = 0;
  // Lightning indexer scoring + top-k (docs/model.md 5.4): q [T, Hi, di] (RoPE applied), w [T, Hi]
  // (raw weights_proj output; the op applies di^-1/2 Hi^-1/2), keys [B, n_max, di].
  // score(t, j) = sum_h w_h * relu(q_h . key_j) for j < n_c = (pos+1)/ratio.
  // sel I32 [T, K]: the top min(K, n_c) j by score (higher first, ties -> lower j), then -1.
  virtual void indexer_topk(Stream s, const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                            const Tensor& pos, const Tensor& seq, int ratio) = 0;
  // Sparse attention with sink (docs/model.md 5.5). q [T, H, Dh]; window keys from swa/swa_tags
  // (positions max(0, p-W+1)..p whose tags match); compressed keys from comp [B, n_max, Dh]:
  // None, All (j < (p+1)/ratio), or Selected (sel [T, K], entries >= 0). Keys are values.
  // sink F32 [H]; scale = Dh^-1/2. o [T, H, Dh].
  virtual void sparse_attention(Stream s, const Tensor& o, const Tensor& q, const Tensor& swa,
                                const Tensor& swa_tags, const Tensor& comp, const Tensor& sel, const Tensor& sink,
                                const Tensor& pos, const Tensor& seq, int window, CompressedKeys mode, int ratio) = 0;

  // ---------------------------------------------------------------- MoE (docs/model.md 6)
  // Routing from F32 logits [T, E]: s = sqrt(softplus(z)); ids I32 [T, k] from tid2eid
  // (I32 [V, k], indexed by tokens[t]) when given, else top-k of s + bias (F32 [E]; ties ->
  // lower index); weights F32 [T, k] = s[ids] / sum * scaling (sum <= 0 -> divide by 1).
  virtual void route(Stream s, const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
                     const Tensor& tid2eid, const Tensor& tokens, float scaling) = 0;
  // out[t] = sum_i weights[t,i] * Expert_{ids[t,i]}(x[t]) with SwiGLU-clamp experts: w1, w3
  // [E, F, D], w2 [E, D, F]. Tokens are permuted by expert and each expert matrix is applied
  // as one grouped call; `workspace` (U8, moe_workspace_bytes) holds the permuted rows.
  virtual void moe_experts(Stream s, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const Tensor& w1, const Tensor& w2, const Tensor& w3, float swiglu_limit,
                           const Tensor& workspace) = 0;
  virtual size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const = 0;
  // out = silu(min(g, L)) * clamp(u, -L, L) (docs/model.md 3.3).
  virtual void swiglu(Stream s, const Tensor& out, const Tensor& g, const Tensor& u, float limit) = 0;
  // Two projections of one input, out1 = a . w1^T and out2 = a . w2^T (wq_a and wkv; a
  // compressor's wkv and wgate), in one op so that a backend may run them as one launch. The
  // default runs the two gemms.
  virtual void gemm_pair(Stream s, const Tensor& out1, const Tensor& out2, const Tensor& a, const Tensor& w1,
                         const Tensor& w2) {
    gemm(s, out1, a, w1);
    gemm(s, out2, a, w2);
  }
  // A dense SwiGLU expert's input half (the shared expert, docs/model.md 6): g = x . w1^T, u = x . w3^T,
  // act = swiglu(g, u, limit), in one op so that a backend may fuse them (the CUDA backend does at
  // decode sizes, and then leaves g and u unwritten: act is the op's result). The default runs
  // the three ops.
  virtual void gemm_swiglu(Stream s, const Tensor& act, const Tensor& g, const Tensor& u, const Tensor& x,
                           const Tensor& w1, const Tensor& w3, float limit) {
    gemm(s, g, x, w1);
    gemm(s, u, x, w3);
    swiglu(s, act, g, u, limit);
  }

 private:
  std::vector<double> host_marks_ms_;  // the default timing marks (host clock, ms)
};

}  // namespace sl
