// Host-side argument checks shared by the backends (model/cpu, model/cuda).
//
// Every op validates its arguments before touching memory and throws sl::Error naming the op,
// the argument and the offending shape/dtype. Both backends implement the same interface, so
// the checks are written once here; a backend adds only what it alone requires (the CUDA
// kernels' alignment and head-dim limits, the CPU reference's F32-only dtypes, host reads of
// index values where the memory is host memory).
//
// The one rule the backends do not share is what counts as a present tensor (see Presence),
// so the helpers that start with a presence check are templates on it. Each backend binds
// them once to its rule in its private header, and its op files call plain check_dtype(...).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"
#include "model/backend.h"
#include "model/kv_fp8_entry.h"

namespace sl::checks {

inline std::string describe(const Tensor& t) {
  if (t.empty()) return "(none)";
  return t.shape.str() + " " + dtype_name(t.dtype);
}

// When an argument counts as given.
enum class Presence {
  // Data behind every argument. The CPU allocator never hands out null (even a zero-element
  // buffer gets a distinct address), so a null tensor there is always a caller's mistake.
  Data,
  // A shape always, data unless there are zero elements: the CUDA arena may back a zero-byte
  // buffer with null, and such a tensor is a valid (empty) argument.
  DataOrZeroSize,
};

template <Presence P>
void check_present(const char* op, const char* arg, const Tensor& t) {
  if constexpr (P == Presence::Data) {
    SL_CHECK(!t.empty(), op, ": ", arg, " is missing (empty tensor)");
  } else {
    SL_CHECK(!t.empty() || t.numel() == 0, op, ": ", arg, " is missing (empty tensor)");
    SL_CHECK(t.shape.n > 0, op, ": ", arg, " is missing (no shape)");
  }
}

template <Presence P>
void check_dtype(const char* op, const char* arg, const Tensor& t, DType want) {
  check_present<P>(op, arg, t);
  SL_CHECK(t.dtype == want, op, ": ", arg, " is ", describe(t), ", expected dtype ", dtype_name(want));
}

// F32 or BF16 (activations, weights, and anything the interface lets be either).
template <Presence P>
void check_float(const char* op, const char* arg, const Tensor& t) {
  check_present<P>(op, arg, t);
  SL_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16, op, ": ", arg, " is ", describe(t),
           ", expected f32 or bf16");
}

template <Presence P>
void check_ndim(const char* op, const char* arg, const Tensor& t, int n) {
  check_present<P>(op, arg, t);
  SL_CHECK(t.ndim() == n, op, ": ", arg, " is ", describe(t), ", expected ", n, " dims");
}

// Exact shape (and presence). `want` may be built from other arguments' dims.
template <Presence P>
void check_shape(const char* op, const char* arg, const Tensor& t, const Shape& want) {
  check_present<P>(op, arg, t);
  SL_CHECK(t.shape == want, op, ": ", arg, " is ", describe(t), ", expected shape ", want.str());
}

// Element count only, for arguments the interface lets be any shape of that size.
template <Presence P>
void check_numel(const char* op, const char* arg, const Tensor& t, int64_t n) {
  check_present<P>(op, arg, t);
  SL_CHECK(t.numel() == n, op, ": ", arg, " is ", describe(t), ", expected ", n, " elements");
}

template <Presence P>
void check_i32(const char* op, const char* arg, const Tensor& t, const Shape& want) {
  check_dtype<P>(op, arg, t, DType::I32);
  check_shape<P>(op, arg, t, want);
}

template <Presence P>
void check_f32(const char* op, const char* arg, const Tensor& t, const Shape& want) {
  check_dtype<P>(op, arg, t, DType::F32);
  check_shape<P>(op, arg, t, want);
}

// True if the byte ranges of two tensors overlap: an output that aliases an input the op
// still has to read after writing.
inline bool overlaps(const Tensor& x, const Tensor& y) {
  const char* xb = static_cast<const char*>(x.data);
  const char* yb = static_cast<const char*>(y.data);
  return xb < yb + y.bytes() && yb < xb + x.bytes();
}

// What float dtypes a backend's kernels take for one class of argument.
enum class Floats {
  F32,        // f32 only (the CPU reference)
  F32OrBF16,  // either, chosen at run time (CUDA element-wise kernels)
  BF16,       // bf16 only (CUDA tensor-core operands)
};

template <Presence P>
void check_floats(const char* op, const char* arg, const Tensor& t, Floats f) {
  switch (f) {
    case Floats::F32: check_dtype<P>(op, arg, t, DType::F32); break;
    case Floats::BF16: check_dtype<P>(op, arg, t, DType::BF16); break;
    case Floats::F32OrBF16: check_float<P>(op, arg, t); break;
  }
}

// A backend's argument rules, the template argument of every per-op validator: its presence
// rule, whether its cache ops take packed FP8 KV caches (`packed_kv`, model/kv_fp8_entry.h),
// the dtypes it takes for activations and weights (`act`), and for the operands of its
// matrix-unit kernels (`mma`: attention q/k/v, indexer q/keys, expert inputs and weights).
template <Presence P, Floats Act, Floats Mma, bool PackedKv = false>
struct Rules {
  static constexpr Presence presence = P;
  static constexpr Floats act = Act;
  static constexpr Floats mma = Mma;
  static constexpr bool packed_kv = PackedKv;
};

template <class R>
void check_act(const char* op, const char* arg, const Tensor& t) {
  check_floats<R::presence>(op, arg, t, R::act);
}
template <class R>
void check_mma(const char* op, const char* arg, const Tensor& t) {
  check_floats<R::presence>(op, arg, t, R::mma);
}

// Which packed FP8 entry layout a U8 cache holds (model/kv_fp8_entry.h).
enum class PackedEntry { Kv, IndexerKey };

// A packed FP8 cache: U8 [B, n, bytes] whose entries hold `values` values in layout `kind`, on a
// backend that reads them. Returns the KV layout's nope width (0 for an indexer key).
template <class R>
int64_t check_packed_cache(const char* op, const char* arg, const Tensor& t, int64_t values, PackedEntry kind) {
  constexpr Presence P = R::presence;
  check_dtype<P>(op, arg, t, DType::U8);
  SL_CHECK(R::packed_kv, op, ": ", arg, " is a packed FP8 cache (", describe(t),
           "); this backend's kernels do not read packed caches (it holds --kv-cache fp8 caches emulated in "
           "its activation dtype)");
  check_ndim<P>(op, arg, t, 3);
  if (kind == PackedEntry::IndexerKey) {
    SL_CHECK(t.dim(2) == kvfp8::indexer_key_bytes(values), op, ": ", arg, " is ", describe(t), ", expected ",
             kvfp8::indexer_key_bytes(values), "-byte packed FP8 keys of ", values, " values");
    return 0;
  }
  const int64_t nope = kvfp8::kv_entry_nope(values, t.dim(2));
  SL_CHECK(nope > 0, op, ": ", arg, " is ", describe(t), ": no packed FP8 KV entry of ", values,
           " values (nope a multiple of 64, rope even) is ", t.dim(2), " bytes");
  return nope;
}

// A cache of entries of `values` values: [B, n, values] in `floats` (the backend's act or mma
// dtypes), or, on a backend that takes them, packed FP8 (U8 [B, n, entry bytes]). Returns the
// packed KV layout's nope width, 0 for packed indexer keys, -1 for a float cache.
template <class R>
int64_t check_cache(const char* op, const char* arg, const Tensor& t, int64_t values, PackedEntry kind, Floats floats) {
  constexpr Presence P = R::presence;
  check_present<P>(op, arg, t);
  if (t.dtype == DType::U8) return check_packed_cache<R>(op, arg, t, values, kind);
  check_floats<P>(op, arg, t, floats);
  check_ndim<P>(op, arg, t, 3);
  check_shape<P>(op, arg, t, {t.dim(0), t.dim(1), values});
  return -1;
}

// ---------------------------------------------------------------- per-op validators
// One per op, validate_<op>(): it checks the shapes, dtypes and aliasing both backends
// require, in one order, and returns the dimensions the op needs. What a backend alone
// requires stays in the backend: the stream check, the CUDA kernels' alignment and size
// limits, and the values of index tensors (pos/seq/ids...): the CUDA backend never reads
// device memory on the host, the CPU backend checks them itself while it runs.

// gemm: out[M, N] = a[M, K] . w[N, K]^T; a and out may be any-rank views whose last dim is K
// (resp. N): the leading dims are rows.
struct GemmDims {
  int64_t M, N, K;
};

template <class R>
GemmDims validate_gemm(const Tensor& out, const Tensor& a, const Tensor& w) {
  constexpr Presence P = R::presence;
  const char* op = "gemm";
  check_act<R>(op, "w", w);
  check_ndim<P>(op, "w", w, 2);
  check_act<R>(op, "a", a);
  check_act<R>(op, "out", out);
  const int64_t N = w.dim(0), K = w.dim(1);
  SL_CHECK(a.ndim() >= 1 && a.dim(-1) == K, op, ": a ", describe(a), " does not end in K = ", K, " (w ",
           describe(w), ")");
  const int64_t M = K ? a.numel() / K : 0;
  SL_CHECK(out.ndim() >= 1 && out.dim(-1) == N && out.numel() == M * N, op, ": out ", describe(out),
           " is not [M = ", M, ", N = ", N, "] for a ", describe(a), " and w ", describe(w));
  SL_CHECK(!overlaps(out, a) && !overlaps(out, w), op, ": out may not alias a or w");
  return {M, N, K};
}

// gemm_grouped: a [M, G*K] (any leading dims; the flat row is G*K), w [G*N, K], out [M, G*N].
struct GemmGroupedDims {
  int64_t M, N, K, G;
};

template <class R>
GemmGroupedDims validate_gemm_grouped(const Tensor& out, const Tensor& a, const Tensor& w, int groups) {
  constexpr Presence P = R::presence;
  const char* op = "gemm_grouped";
  check_act<R>(op, "w", w);
  check_ndim<P>(op, "w", w, 2);
  check_act<R>(op, "a", a);
  check_act<R>(op, "out", out);
  const int64_t G = groups;
  SL_CHECK(G >= 1 && w.dim(0) % G == 0, op, ": w ", describe(w), " rows are not ", G, " equal groups");
  const int64_t N = w.dim(0) / G, K = w.dim(1);
  SL_CHECK(a.ndim() >= 1 && (G * K == 0 || a.numel() % (G * K) == 0), op, ": a ", describe(a),
           " is not rows of G*K = ", G * K, " (w ", describe(w), ", groups ", G, ")");
  const int64_t M = G * K != 0 ? a.numel() / (G * K) : 0;
  SL_CHECK(out.ndim() >= 1 && out.dim(-1) == G * N && out.numel() == M * G * N, op, ": out ", describe(out),
           " is not [M = ", M, ", G*N = ", G * N, "] for a ", describe(a), " and w ", describe(w));
  SL_CHECK(!overlaps(out, a) && !overlaps(out, w), op, ": out may not alias a or w");
  return {M, N, K, G};
}

// gemm_fp8: out[M, N] = a[M, K] . W^T with W as e4m3 codes w U8 [N, K] and their 128 x 128 block
// scales w_scale F32 [ceil(N / 128), K / 128]; K a multiple of 128 (the activation's groups).
// groups G > 1: w [G*N, K] (scales over its G*N rows), a [M, G*K], out [M, G*N] (as gemm_grouped).
constexpr int64_t kFp8Block = 128;

template <class R>
GemmGroupedDims validate_gemm_fp8(const Tensor& out, const Tensor& a, const Tensor& w, const Tensor& w_scale,
                                  int groups) {
  constexpr Presence P = R::presence;
  const char* op = "gemm_fp8";
  check_dtype<P>(op, "w", w, DType::U8);
  check_ndim<P>(op, "w", w, 2);
  const int64_t G = groups, GN = w.dim(0), K = w.dim(1);
  SL_CHECK(G >= 1 && GN % G == 0, op, ": w ", describe(w), " rows are not ", G, " equal groups");
  const int64_t N = GN / G;
  SL_CHECK(K % kFp8Block == 0, op, ": w ", describe(w), ": K = ", K, " is not a multiple of ", kFp8Block,
           " (the activation is quantized in groups of 128)");
  check_f32<P>(op, "w_scale", w_scale, {(GN + kFp8Block - 1) / kFp8Block, K / kFp8Block});
  check_act<R>(op, "a", a);
  check_act<R>(op, "out", out);
  SL_CHECK(a.ndim() >= 1 && (G == 1 ? a.dim(-1) == K : K == 0 || a.numel() % (G * K) == 0), op, ": a ", describe(a),
           G == 1 ? " does not end in K = " : " is not rows of G*K = ", G * K, " (w ", describe(w), ", groups ", G, ")");
  const int64_t M = K ? a.numel() / (G * K) : 0;
  SL_CHECK(out.ndim() >= 1 && out.dim(-1) == GN && out.numel() == M * GN, op, ": out ", describe(out),
           " is not [M = ", M, ", G*N = ", GN, "] for a ", describe(a), " and w ", describe(w));
  SL_CHECK(!overlaps(out, a) && !overlaps(out, w) && !overlaps(out, w_scale), op,
           ": out may not alias a, w or w_scale");
  return {M, N, K, G};
}

// quantize_fp8 / quantize_mxfp4: src F32 [rows, cols] (any leading dims) into the native formats.
struct QuantizeDims {
  int64_t rows, cols;
};

template <Presence P>
QuantizeDims check_quantize_src(const char* op, const Tensor& src) {
  check_dtype<P>(op, "src", src, DType::F32);
  SL_CHECK(src.ndim() >= 1 && src.dim(-1) > 0, op, ": src ", describe(src), " has no last dim");
  return {src.numel() / src.dim(-1), src.dim(-1)};
}

template <class R>
QuantizeDims validate_quantize_fp8(const Tensor& codes, const Tensor& scale, const Tensor& src) {
  constexpr Presence P = R::presence;
  const char* op = "quantize_fp8";
  const auto [rows, cols] = check_quantize_src<P>(op, src);
  check_dtype<P>(op, "codes", codes, DType::U8);
  SL_CHECK(codes.numel() == rows * cols && codes.ndim() >= 1 && codes.dim(-1) == cols, op, ": codes ", describe(codes),
           " is not [", rows, ", ", cols, "] like src ", describe(src));
  check_f32<P>(op, "scale", scale, {(rows + kFp8Block - 1) / kFp8Block, (cols + kFp8Block - 1) / kFp8Block});
  return {rows, cols};
}

template <class R>
QuantizeDims validate_quantize_mxfp4(const Tensor& packed, const Tensor& scales, const Tensor& src) {
  constexpr Presence P = R::presence;
  const char* op = "quantize_mxfp4";
  const auto [rows, cols] = check_quantize_src<P>(op, src);
  SL_CHECK(cols % 32 == 0, op, ": src ", describe(src), ": ", cols, " columns is not a multiple of 32 (one scale per 32 values)");
  check_dtype<P>(op, "packed", packed, DType::U8);
  SL_CHECK(packed.numel() == rows * cols / 2 && packed.ndim() >= 1 && packed.dim(-1) == cols / 2, op, ": packed ",
           describe(packed), " is not [", rows, ", ", cols / 2, "] (two values per byte) for src ", describe(src));
  check_dtype<P>(op, "scales", scales, DType::U8);
  SL_CHECK(scales.numel() == rows * cols / 32 && scales.ndim() >= 1 && scales.dim(-1) == cols / 32, op, ": scales ",
           describe(scales), " is not [", rows, ", ", cols / 32, "] (one per 32 values) for src ", describe(src));
  return {rows, cols};
}

// rmsnorm over the last dim of x; out may be x itself (in place) but not partly overlap it;
// w (optional) holds dim elements.
struct RmsnormDims {
  int64_t rows, dim;
};

template <class R>
RmsnormDims validate_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& w) {
  constexpr Presence P = R::presence;
  const char* op = "rmsnorm";
  check_act<R>(op, "x", x);
  check_act<R>(op, "out", out);
  SL_CHECK(x.ndim() >= 1 && x.dim(-1) > 0, op, ": x ", describe(x), " has no last dim");
  const int64_t dim = x.dim(-1), rows = x.numel() / dim;
  SL_CHECK(out.numel() == x.numel(), op, ": out ", describe(out), " and x ", describe(x), " differ in size");
  SL_CHECK(out.data == x.data || !overlaps(out, x), op, ": out partially overlaps x");
  if (!w.empty()) {
    check_act<R>(op, "w", w);
    check_numel<P>(op, "w", w, dim);
  }
  return {rows, dim};
}

// Element-wise ops over two inputs of one size (add: a, b; swiglu: g, u).
template <class R>
int64_t validate_elementwise2(const char* op, const Tensor& out, const char* a_name, const Tensor& a,
                              const char* b_name, const Tensor& b) {
  check_act<R>(op, a_name, a);
  check_act<R>(op, b_name, b);
  check_act<R>(op, "out", out);
  SL_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), op, ": out ", describe(out), ", ", a_name, " ",
           describe(a), " and ", b_name, " ", describe(b), " differ in size");
  return a.numel();
}

template <class R>
int64_t validate_add(const Tensor& out, const Tensor& a, const Tensor& b) {
  return validate_elementwise2<R>("add", out, "a", a, "b", b);
}

template <class R>
int64_t validate_swiglu(const Tensor& out, const Tensor& g, const Tensor& u) {
  return validate_elementwise2<R>("swiglu", out, "g", g, "u", u);
}

// rope in place on x [T, heads, dim] or [T, dim] with table [P, R] (f32 angles), pos [T].
struct RopeDims {
  int64_t T, heads, dim, P, R;
};

template <class R_>
RopeDims validate_rope(const Tensor& x, const Tensor& pos, const Tensor& table) {
  constexpr Presence P_ = R_::presence;
  const char* op = "rope";
  check_act<R_>(op, "x", x);
  SL_CHECK(x.ndim() == 2 || x.ndim() == 3, op, ": x ", describe(x), " is not [T, heads, dim] or [T, dim]");
  check_dtype<P_>(op, "table", table, DType::F32);
  check_ndim<P_>(op, "table", table, 2);
  const int64_t T = x.dim(0), dim = x.dim(-1), heads = x.ndim() == 3 ? x.dim(1) : 1;
  const int64_t P = table.dim(0), R = table.dim(1);
  SL_CHECK(R % 2 == 0 && R <= dim, op, ": table ", describe(table), " rotates R = ", R,
           " dims; R must be even and fit the head dim of x ", describe(x));
  check_i32<P_>(op, "pos", pos, {T});
  return {T, heads, dim, P, R};
}

// embed: out [T, D] = rows ids [T] of table [V, D]; pos [T] only with zero_pos0.
struct EmbedDims {
  int64_t T, V, D;
};

template <class R>
EmbedDims validate_embed(const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos,
                         bool zero_pos0) {
  constexpr Presence P = R::presence;
  const char* op = "embed";
  check_act<R>(op, "table", table);
  check_ndim<P>(op, "table", table, 2);
  check_dtype<P>(op, "ids", ids, DType::I32);
  check_ndim<P>(op, "ids", ids, 1);
  const int64_t T = ids.dim(0), V = table.dim(0), D = table.dim(1);
  check_act<R>(op, "out", out);
  check_shape<P>(op, "out", out, {T, D});
  if (zero_pos0) check_i32<P>(op, "pos", pos, {T});
  return {T, V, D};
}

// argmax: out [n] (i32) = the column of each row's maximum of logits [n, V] (f32).
struct ArgmaxDims {
  int64_t n, V;
};

template <class R>
ArgmaxDims validate_argmax(const Tensor& out, const Tensor& logits) {
  constexpr Presence P = R::presence;
  const char* op = "argmax";
  check_dtype<P>(op, "logits", logits, DType::F32);
  check_ndim<P>(op, "logits", logits, 2);
  const int64_t n = logits.dim(0), V = logits.dim(1);
  SL_CHECK(V > 0, op, ": logits ", describe(logits), " has no columns");
  check_i32<P>(op, "out", out, {n});
  return {n, V};
}

// gather_rows: out [n, ...] = rows [n] (i32) of in [m, ...], any dtype; out may not alias in.
struct GatherRowsDims {
  int64_t n, m;
};

template <class R>
GatherRowsDims validate_gather_rows(const Tensor& out, const Tensor& in, const Tensor& rows) {
  constexpr Presence P = R::presence;
  const char* op = "gather_rows";
  check_present<P>(op, "in", in);
  check_present<P>(op, "out", out);
  check_dtype<P>(op, "rows", rows, DType::I32);
  check_ndim<P>(op, "rows", rows, 1);
  const int64_t n = rows.dim(0), m = in.dim(0);
  SL_CHECK(out.dtype == in.dtype && out.ndim() >= 1 && out.dim(0) == n && in.ndim() >= 1 &&
               (m == 0 ? out.numel() == 0 : out.numel() == n * (in.numel() / m)),
           op, ": out ", describe(out), " does not hold ", n, " rows of in ", describe(in));
  SL_CHECK(!overlaps(out, in), op, ": out may not alias in");
  return {n, m};
}

// shift_tokens: tokens (B equal sequences, n in all), sampled [B], out [n]; i32 throughout.
struct ShiftTokensDims {
  int64_t B, n;
};

template <class R>
ShiftTokensDims validate_shift_tokens(const Tensor& out, const Tensor& tokens, const Tensor& sampled) {
  constexpr Presence P = R::presence;
  const char* op = "shift_tokens";
  check_dtype<P>(op, "sampled", sampled, DType::I32);
  check_ndim<P>(op, "sampled", sampled, 1);
  check_dtype<P>(op, "tokens", tokens, DType::I32);
  const int64_t B = sampled.dim(0), n = tokens.numel();
  SL_CHECK(B > 0 && n % B == 0, op, ": tokens ", describe(tokens), " is not B = ", B, " equal sequences (sampled ",
           describe(sampled), ")");
  check_i32<P>(op, "out", out, {n});
  SL_CHECK(!overlaps(out, tokens), op, ": out may not alias tokens");
  return {B, n};
}

// ---------------------------------------------------------------- speculative decoding
// B sequences of R = 1 + k rows; every tensor i32.
struct VerifyDims {
  int64_t B, R, k;
};

// verify_tokens: bonus [B], drafts [k, B] (k >= 1) -> out [B*(1+k)].
template <class R_>
VerifyDims validate_verify_tokens(const Tensor& out, const Tensor& bonus, const Tensor& drafts) {
  constexpr Presence P = R_::presence;
  const char* op = "verify_tokens";
  check_dtype<P>(op, "bonus", bonus, DType::I32);
  check_ndim<P>(op, "bonus", bonus, 1);
  const int64_t B = bonus.dim(0);
  check_dtype<P>(op, "drafts", drafts, DType::I32);
  check_ndim<P>(op, "drafts", drafts, 2);
  const int64_t k = drafts.dim(0);
  SL_CHECK(k >= 1, op, ": drafts ", describe(drafts), " holds no draft step");
  check_i32<P>(op, "drafts", drafts, {k, B});
  check_i32<P>(op, "out", out, {B * (1 + k)});
  SL_CHECK(!overlaps(out, bonus) && !overlaps(out, drafts), op, ": out may not alias bonus or drafts");
  return {B, 1 + k, k};
}

// accept_drafts: target [B, R], drafts [k, B] (R = 1 + k, k >= 1), forced [B], pos [B*R] ->
// accepted, bonus, new_len, last_rows [B], mtp_tokens [B*R], draft_pos [k, B]. The outputs
// alias neither the inputs nor each other (the op reads its inputs after writing outputs).
template <class R_>
VerifyDims validate_accept_drafts(const Tensor& accepted, const Tensor& bonus, const Tensor& new_len,
                                  const Tensor& mtp_tokens, const Tensor& last_rows, const Tensor& draft_pos,
                                  const Tensor& target, const Tensor& drafts, const Tensor& forced, const Tensor& pos) {
  constexpr Presence P = R_::presence;
  const char* op = "accept_drafts";
  check_dtype<P>(op, "target", target, DType::I32);
  check_ndim<P>(op, "target", target, 2);
  const int64_t B = target.dim(0), R = target.dim(1), k = R - 1;
  SL_CHECK(k >= 1, op, ": target ", describe(target), " has no draft rows (expected [B, 1 + k], k >= 1)");
  check_i32<P>(op, "drafts", drafts, {k, B});
  check_i32<P>(op, "forced", forced, {B});
  check_i32<P>(op, "pos", pos, {B * R});
  check_i32<P>(op, "accepted", accepted, {B});
  check_i32<P>(op, "bonus", bonus, {B});
  check_i32<P>(op, "new_len", new_len, {B});
  check_i32<P>(op, "mtp_tokens", mtp_tokens, {B * R});
  check_i32<P>(op, "last_rows", last_rows, {B});
  check_i32<P>(op, "draft_pos", draft_pos, {k, B});
  const Tensor* outs[] = {&accepted, &bonus, &new_len, &mtp_tokens, &last_rows, &draft_pos};
  const char* out_names[] = {"accepted", "bonus", "new_len", "mtp_tokens", "last_rows", "draft_pos"};
  const Tensor* ins[] = {&target, &drafts, &forced, &pos};
  for (int i = 0; i < 6; ++i) {
    for (const Tensor* in : ins)
      SL_CHECK(!overlaps(*outs[i], *in), op, ": ", out_names[i], " may not alias an input");
    for (int j = i + 1; j < 6; ++j)
      SL_CHECK(!overlaps(*outs[i], *outs[j]), op, ": ", out_names[i], " and ", out_names[j], " overlap");
  }
  return {B, R, k};
}

// cache_rollback: tags [B, S], new_len [B]; entries [B, n_max, d] (act) optional, then
// ratio >= 1. extent >= 0.
struct CacheRollbackDims {
  int64_t B, S, n_max, d;  // n_max = d = 0 without entries
};

template <class R_>
CacheRollbackDims validate_cache_rollback(const Tensor& tags, const Tensor& entries, const Tensor& new_len, int ratio,
                                          int extent) {
  constexpr Presence P = R_::presence;
  const char* op = "cache_rollback";
  check_dtype<P>(op, "tags", tags, DType::I32);
  check_ndim<P>(op, "tags", tags, 2);
  const int64_t B = tags.dim(0), S = tags.dim(1);
  check_i32<P>(op, "new_len", new_len, {B});
  SL_CHECK(extent >= 0, op, ": extent = ", extent, ", expected >= 0");
  SL_CHECK(!overlaps(tags, new_len), op, ": tags may not alias new_len");
  int64_t n_max = 0, d = 0;
  if (!entries.empty()) {
    // Float entries, or packed FP8 ones (U8: rows of bytes, cleared the same way).
    if (entries.dtype == DType::U8) SL_CHECK(R_::packed_kv, op, ": entries ", describe(entries),
                                             " is a packed FP8 cache, which this backend does not take");
    else check_act<R_>(op, "entries", entries);
    check_ndim<P>(op, "entries", entries, 3);
    n_max = entries.dim(1);
    d = entries.dim(2);
    check_shape<P>(op, "entries", entries, {B, n_max, d});
    SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1 with entries");
    SL_CHECK(!overlaps(entries, tags) && !overlaps(entries, new_len), op, ": entries may not alias tags or new_len");
  }
  return {B, S, n_max, d};
}

// The token arguments of the attention ops: pos [T] and seq [T], i32.
template <Presence P>
void check_tokens(const char* op, const Tensor& pos, const Tensor& seq, int64_t T) {
  check_i32<P>(op, "pos", pos, {T});
  check_i32<P>(op, "seq", seq, {T});
}

// swa_insert: cache [B, cap, d] (or packed FP8 KV entries of d values), tags [B, cap] (i32), k [T, d].
// nope: -1 for a float cache, else the packed FP8 KV entries' nope width (check_packed_cache).
struct SwaInsertDims {
  int64_t B, cap, d, T, nope;
};

template <class R>
SwaInsertDims validate_swa_insert(const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                                  const Tensor& seq) {
  constexpr Presence P = R::presence;
  const char* op = "swa_insert";
  const bool packed = cache.dtype == DType::U8;  // a packed FP8 cache: k gives the entries' width
  if (!packed) check_act<R>(op, "cache", cache);
  check_ndim<P>(op, "cache", cache, 3);
  const int64_t B = cache.dim(0), cap = cache.dim(1);
  SL_CHECK(cap >= 1, op, ": cache ", describe(cache), " has no slots");
  check_i32<P>(op, "tags", tags, {B, cap});
  check_act<R>(op, "k", k);
  check_ndim<P>(op, "k", k, 2);
  const int64_t T = k.dim(0), d = packed ? k.dim(1) : cache.dim(2);
  const int64_t nope = packed ? check_packed_cache<R>(op, "cache", cache, d, PackedEntry::Kv) : -1;
  check_shape<P>(op, "k", k, {T, d});
  check_tokens<P>(op, pos, seq, T);
  return {B, cap, d, T, nope};
}

struct CompressorSaveDims {
  int64_t B, S, cd, T;  // sequences, ring slots, state width (c*d), tokens
};

template <class R>
CompressorSaveDims validate_compressor_save(const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                                            const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                                            const Tensor& seq, int ratio) {
  constexpr Presence P = R::presence;
  const char* op = "compressor_save";
  check_dtype<P>(op, "state_u", state_u, DType::F32);
  check_ndim<P>(op, "state_u", state_u, 3);
  const int64_t B = state_u.dim(0), S = state_u.dim(1), cd = state_u.dim(2);
  SL_CHECK(S >= 1, op, ": state_u ", describe(state_u), " has no slots");
  check_f32<P>(op, "state_g", state_g, {B, S, cd});
  check_i32<P>(op, "state_tags", state_tags, {B, S});
  check_dtype<P>(op, "u", u, DType::F32);
  check_ndim<P>(op, "u", u, 2);
  const int64_t T = u.dim(0);
  check_f32<P>(op, "u", u, {T, cd});
  check_f32<P>(op, "g", g, {T, cd});
  SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  check_f32<P>(op, "ape", ape, {ratio, cd});
  check_tokens<P>(op, pos, seq, T);
  return {B, S, cd, T};
}

// compressor_pool: state_u/state_g [B, S, c*d] (f32; c = 2 with overlap), state_tags [B, S],
// entries [B, n_max, d] (or packed FP8: U8 [B, n_max, entry bytes]), norm_w [d], table [P, R]
// (f32), pos/seq [T]. `nope` says what entries holds: -1 floats, 0 packed indexer keys, > 0
// packed KV entries with that many FP8 values (check_cache), so the backends need not decide again.
struct CompressorPoolDims {
  int64_t B, S, cd, c, d, n_max, P, R, T, nope;
};

template <class R_>
CompressorPoolDims validate_compressor_pool(const Tensor& entries, const Tensor& state_u, const Tensor& state_g,
                                            const Tensor& state_tags, const Tensor& norm_w, const Tensor& table,
                                            const Tensor& pos, const Tensor& seq, int ratio, bool overlap) {
  constexpr Presence P_ = R_::presence;
  const char* op = "compressor_pool";
  check_dtype<P_>(op, "state_u", state_u, DType::F32);
  check_ndim<P_>(op, "state_u", state_u, 3);
  const int64_t B = state_u.dim(0), S = state_u.dim(1), cd = state_u.dim(2);
  const int64_t c = overlap ? 2 : 1;
  SL_CHECK(cd % c == 0, op, ": state_u ", describe(state_u), " last dim is not ", c, " * d");
  const int64_t d = cd / c;
  check_f32<P_>(op, "state_g", state_g, {B, S, cd});
  check_i32<P_>(op, "state_tags", state_tags, {B, S});
  SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  // A block's pooling reads c*ratio consecutive positions from the ring; a smaller ring
  // could never hold them all.
  SL_CHECK(S >= c * ratio, op, ": state ring of ", S, " slots (state_u ", describe(state_u), ") cannot hold ",
           c * ratio, " positions (ratio ", ratio, overlap ? ", overlap)" : ")");
  SL_CHECK(c * ratio <= 256, op, ": ratio ", ratio, " with overlap ", overlap, " exceeds 256 candidates");
  // A packed FP8 cache holds KV entries, or indexer keys when it is exactly their width.
  const PackedEntry kind = entries.dtype == DType::U8 && entries.ndim() == 3 &&
                                   entries.dim(2) == kvfp8::indexer_key_bytes(d)
                               ? PackedEntry::IndexerKey
                               : PackedEntry::Kv;
  const int64_t nope = check_cache<R_>(op, "entries", entries, d, kind, R_::act);
  const int64_t n_max = entries.dim(1);
  check_shape<P_>(op, "entries", entries, {B, n_max, entries.dim(2)});
  check_act<R_>(op, "norm_w", norm_w);
  check_numel<P_>(op, "norm_w", norm_w, d);
  check_dtype<P_>(op, "table", table, DType::F32);
  check_ndim<P_>(op, "table", table, 2);
  const int64_t P = table.dim(0), R = table.dim(1);
  SL_CHECK(R % 2 == 0 && R <= d, op, ": table ", describe(table), " rotates R = ", R,
           " dims; R must be even and at most d = ", d);
  check_dtype<P_>(op, "pos", pos, DType::I32);
  check_ndim<P_>(op, "pos", pos, 1);
  const int64_t T = pos.dim(0);
  check_tokens<P_>(op, pos, seq, T);
  return {B, S, cd, c, d, n_max, P, R, T, nope};
}

// indexer_topk: q [T, Hi, di] and keys [B, n_max, di] (mma operands, or packed FP8 keys), w [T, Hi],
// sel [T, K].
struct IndexerTopkDims {
  int64_t T, Hi, di, B, n_max, K;
};

template <class R>
IndexerTopkDims validate_indexer_topk(const Tensor& sel, const Tensor& q, const Tensor& w, const Tensor& keys,
                                      const Tensor& pos, const Tensor& seq, int ratio) {
  constexpr Presence P = R::presence;
  const char* op = "indexer_topk";
  check_mma<R>(op, "q", q);
  check_ndim<P>(op, "q", q, 3);
  const int64_t T = q.dim(0), Hi = q.dim(1), di = q.dim(2);
  SL_CHECK(Hi >= 1 && di >= 1, op, ": q ", describe(q), " has no heads");
  check_act<R>(op, "w", w);
  check_shape<P>(op, "w", w, {T, Hi});
  check_cache<R>(op, "keys", keys, di, PackedEntry::IndexerKey, R::mma);
  const int64_t B = keys.dim(0), n_max = keys.dim(1);
  check_dtype<P>(op, "sel", sel, DType::I32);
  check_ndim<P>(op, "sel", sel, 2);
  const int64_t K = sel.dim(1);
  check_i32<P>(op, "sel", sel, {T, K});
  SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  check_tokens<P>(op, pos, seq, T);
  return {T, Hi, di, B, n_max, K};
}

// sparse_attention: q, o [T, H, Dh], swa [B, cap, Dh], comp [B, n_max, Dh] (unless mode None; either
// cache may be packed FP8 KV entries of Dh values),
// swa_tags [B, cap], sink [H] (f32), sel [T, K] (mode Selected). Whether o may be q itself is
// the backend's to say (the CPU loop runs in place, the CUDA kernel cannot).
struct SparseAttentionDims {
  int64_t T, H, Dh, B, cap, n_max, K;
};

template <class R>
SparseAttentionDims validate_sparse_attention(const Tensor& o, const Tensor& q, const Tensor& swa,
                                              const Tensor& swa_tags, const Tensor& comp, const Tensor& sel,
                                              const Tensor& sink, const Tensor& pos, const Tensor& seq, int window,
                                              CompressedKeys mode, int ratio) {
  constexpr Presence P = R::presence;
  const char* op = "sparse_attention";
  check_mma<R>(op, "q", q);
  check_ndim<P>(op, "q", q, 3);
  const int64_t T = q.dim(0), H = q.dim(1), Dh = q.dim(2);
  check_mma<R>(op, "o", o);
  check_shape<P>(op, "o", o, {T, H, Dh});
  check_cache<R>(op, "swa", swa, Dh, PackedEntry::Kv, R::mma);
  const int64_t B = swa.dim(0), cap = swa.dim(1);
  SL_CHECK(cap >= 1, op, ": swa ", describe(swa), " has no slots");
  check_i32<P>(op, "swa_tags", swa_tags, {B, cap});
  check_f32<P>(op, "sink", sink, {H});
  SL_CHECK(window >= 1, op, ": window = ", window, ", expected >= 1");
  check_tokens<P>(op, pos, seq, T);
  int64_t n_max = 0, K = 0;
  if (mode != CompressedKeys::None) {
    check_cache<R>(op, "comp", comp, Dh, PackedEntry::Kv, R::mma);
    n_max = comp.dim(1);
    check_shape<P>(op, "comp", comp, {B, n_max, comp.dim(2)});
  }
  if (mode == CompressedKeys::All) SL_CHECK(ratio >= 1, op, ": ratio = ", ratio, ", expected >= 1");
  if (mode == CompressedKeys::Selected) {
    check_dtype<P>(op, "sel", sel, DType::I32);
    check_ndim<P>(op, "sel", sel, 2);
    K = sel.dim(1);
    check_i32<P>(op, "sel", sel, {T, K});
  }
  return {T, H, Dh, B, cap, n_max, K};
}

// route: logits [T, E] (f32), ids [T, k] (i32), weights [T, k] (f32); hash layers (tid2eid
// given): tid2eid [V, k] and tokens [T]; otherwise an optional bias [E].
struct RouteDims {
  int64_t T, E, k, V;
  bool hashed;
};

template <class R>
RouteDims validate_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, const Tensor& bias,
                         const Tensor& tid2eid, const Tensor& tokens) {
  constexpr Presence P = R::presence;
  const char* op = "route";
  check_dtype<P>(op, "logits", logits, DType::F32);
  check_ndim<P>(op, "logits", logits, 2);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_dtype<P>(op, "ids", ids, DType::I32);
  check_ndim<P>(op, "ids", ids, 2);
  const int64_t k = ids.dim(1);
  check_i32<P>(op, "ids", ids, {T, k});
  check_f32<P>(op, "weights", weights, {T, k});
  SL_CHECK(k >= 1 && k <= E, op, ": k = ", k, " experts per token out of E = ", E, " (ids ", describe(ids), ")");
  const bool hashed = !tid2eid.empty();
  int64_t V = 0;
  if (hashed) {
    check_dtype<P>(op, "tid2eid", tid2eid, DType::I32);
    check_ndim<P>(op, "tid2eid", tid2eid, 2);
    V = tid2eid.dim(0);
    check_i32<P>(op, "tid2eid", tid2eid, {V, k});
    check_i32<P>(op, "tokens", tokens, {T});
  } else if (!bias.empty()) {
    check_f32<P>(op, "bias", bias, {E});
  }
  return {T, E, k, V, hashed};
}

// shard_routing: ids / ids_out I32 [T, k], weights / weights_out F32 [T, k], a shard of count >= 1
// experts starting at first >= 0.
struct ShardRoutingDims {
  int64_t T, k;
};

template <class R>
ShardRoutingDims validate_shard_routing(const Tensor& ids_out, const Tensor& weights_out, const Tensor& ids,
                                        const Tensor& weights, int64_t first, int64_t count) {
  constexpr Presence P = R::presence;
  const char* op = "shard_routing";
  check_dtype<P>(op, "ids", ids, DType::I32);
  check_ndim<P>(op, "ids", ids, 2);
  const int64_t T = ids.dim(0), k = ids.dim(1);
  check_f32<P>(op, "weights", weights, {T, k});
  check_i32<P>(op, "ids_out", ids_out, {T, k});
  check_f32<P>(op, "weights_out", weights_out, {T, k});
  SL_CHECK(first >= 0 && count >= 1, op, ": the shard [", first, ", ", first, " + ", count,
           ") must start at 0 or later and hold at least one expert");
  return {T, k};
}

// round_fp8_blocks: t F32 or BF16 with a last dim D; 1 <= block, cols a multiple of block, <= D.
// With pos: t [B, n, D], pos and seq I32 [T], ratio >= 1.
struct RoundFp8Dims {
  int64_t rows, D;
  int64_t T = 0, B = 0, n = 0;  // with pos: tokens, sequences, entries per sequence
};

template <class R>
RoundFp8Dims validate_round_fp8_blocks(const Tensor& t, int64_t cols, int64_t block, const Tensor& pos,
                                       const Tensor& seq, int ratio) {
  constexpr Presence P = R::presence;
  const char* op = "round_fp8_blocks";
  check_float<P>(op, "t", t);
  SL_CHECK(t.shape.n >= 1, op, ": t is ", describe(t), ", expected rows of values");
  const int64_t D = t.shape[t.shape.n - 1], rows = D > 0 ? t.numel() / D : 0;
  SL_CHECK(block >= 1 && cols >= 0 && cols % block == 0 && cols <= D, op, ": ", cols,
           " columns in blocks of ", block, " do not fit rows of ", D, " (t ", describe(t), ")");
  RoundFp8Dims d{rows, D};
  if (pos.empty()) return d;
  check_ndim<P>(op, "t", t, 3);
  d.B = t.dim(0), d.n = t.dim(1);
  check_dtype<P>(op, "pos", pos, DType::I32);
  check_ndim<P>(op, "pos", pos, 1);
  d.T = pos.dim(0);
  check_i32<P>(op, "seq", seq, {d.T});
  SL_CHECK(ratio >= 1, op, ": ratio ", ratio, " must be >= 1");
  return d;
}

// all_reduce_sum: t F32 or BF16, any shape.
template <class R>
int64_t validate_all_reduce_sum(const Tensor& t) {
  check_float<R::presence>("all_reduce_sum", "t", t);
  return t.numel();
}

// moe_experts: x [T, D] (mma), out [T, D] (act, not aliasing x), w1/w3 [E, F, D] and
// w2 [E, D, F] (mma), ids [T, k] (i32), weights [T, k] (f32). The workspace's size follows
// each backend's own layout: the backend checks it.
struct MoeExpertsDims {
  int64_t T, D, E, F, k;
};

// The token side both expert ops share: x [T, D] and out [T, D] (first), ids [T, k] and
// weights [T, k] (after the expert matrices).
template <class R>
std::pair<int64_t, int64_t> check_moe_tokens(const char* op, const Tensor& out, const Tensor& x) {
  constexpr Presence P = R::presence;
  check_mma<R>(op, "x", x);
  check_ndim<P>(op, "x", x, 2);
  const int64_t T = x.dim(0), D = x.dim(1);
  check_act<R>(op, "out", out);
  check_shape<P>(op, "out", out, {T, D});
  SL_CHECK(!overlaps(out, x), op, ": out may not alias x");
  return {T, D};
}
template <class R>
int64_t check_moe_routing(const char* op, const Tensor& ids, const Tensor& weights, int64_t T) {
  constexpr Presence P = R::presence;
  check_dtype<P>(op, "ids", ids, DType::I32);
  check_ndim<P>(op, "ids", ids, 2);
  const int64_t k = ids.dim(1);
  check_i32<P>(op, "ids", ids, {T, k});
  check_f32<P>(op, "weights", weights, {T, k});
  return k;
}

template <class R>
MoeExpertsDims validate_moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                    const Tensor& w1, const Tensor& w2, const Tensor& w3) {
  constexpr Presence P = R::presence;
  const char* op = "moe_experts";
  const auto [T, D] = check_moe_tokens<R>(op, out, x);
  check_mma<R>(op, "w1", w1);
  check_ndim<P>(op, "w1", w1, 3);
  const int64_t E = w1.dim(0), F = w1.dim(1);
  check_shape<P>(op, "w1", w1, {E, F, D});
  check_mma<R>(op, "w3", w3);
  check_shape<P>(op, "w3", w3, {E, F, D});
  check_mma<R>(op, "w2", w2);
  check_shape<P>(op, "w2", w2, {E, D, F});
  return {T, D, E, F, check_moe_routing<R>(op, ids, weights, T)};
}

// moe_experts_mxfp4: as moe_experts, with each expert matrix [rows, cols] as packed e2m1 codes
// U8 [E, rows, cols / 2] and e8m0 scales U8 [E, rows, cols / 32]; D and F multiples of 32 (of 128
// with fp8_act: whole activation groups).
template <class R>
MoeExpertsDims validate_moe_experts_mxfp4(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                          const Tensor& w1, const Tensor& w1_scale, const Tensor& w2,
                                          const Tensor& w2_scale, const Tensor& w3, const Tensor& w3_scale,
                                          bool fp8_act) {
  constexpr Presence P = R::presence;
  const char* op = "moe_experts_mxfp4";
  const auto [T, D] = check_moe_tokens<R>(op, out, x);
  check_dtype<P>(op, "w1", w1, DType::U8);
  check_ndim<P>(op, "w1", w1, 3);
  const int64_t E = w1.dim(0), F = w1.dim(1);
  SL_CHECK(D % 32 == 0 && F % 32 == 0, op, ": D = ", D, " and F = ", F, " must be multiples of 32 (one scale per 32 values)");
  SL_CHECK(!fp8_act || (D % kFp8Block == 0 && F % kFp8Block == 0), op, ": D = ", D, " and F = ", F,
           " must be multiples of ", kFp8Block, " with FP8 activations (one scale per ", kFp8Block, " values)");
  auto check_matrix = [&](const char* name, const Tensor& w, const char* sname, const Tensor& sc, int64_t rows,
                          int64_t cols) {
    check_dtype<P>(op, name, w, DType::U8);
    check_shape<P>(op, name, w, {E, rows, cols / 2});
    check_dtype<P>(op, sname, sc, DType::U8);
    check_shape<P>(op, sname, sc, {E, rows, cols / 32});
  };
  check_matrix("w1", w1, "w1_scale", w1_scale, F, D);
  check_matrix("w3", w3, "w3_scale", w3_scale, F, D);
  check_matrix("w2", w2, "w2_scale", w2_scale, D, F);
  return {T, D, E, F, check_moe_routing<R>(op, ids, weights, T)};
}

// ---------------------------------------------------------------- mHC (hc_*, mtp_combine)
// The residual X [T, hc, D] (act): hc streams of D per token. How many streams a backend
// supports is its own (the CPU reference's per-token arrays, the CUDA kernels' fixed hc).
struct HcLimit {
  int64_t lo, hi;
};

inline void check_hc(const char* op, const char* arg, const Tensor& t, int64_t hc, HcLimit lim) {
  if (lim.lo == lim.hi)
    SL_CHECK(hc == lim.lo, op, ": ", arg, " ", describe(t), " has hc = ", hc, " streams; this backend supports hc = ",
             lim.lo);
  else
    SL_CHECK(hc >= lim.lo && hc <= lim.hi, op, ": ", arg, " ", describe(t), " has hc = ", hc,
             " streams; this backend supports ", lim.lo, "..", lim.hi);
}

struct HcDims {
  int64_t T, hc, D;
};

// The [T, hc, D] argument every mHC op starts from.
template <class R>
HcDims check_hc_streams(const char* op, const char* arg, const Tensor& t) {
  check_act<R>(op, arg, t);
  check_ndim<R::presence>(op, arg, t, 3);
  return {t.dim(0), t.dim(1), t.dim(2)};
}

// hc_pre: X [T, hc, D] -> y [T, D], post [T, hc], comb [T, hc, hc]; fn [mix, hc*D],
// scale [3], base [mix] with mix = (2 + hc) * hc.
template <class R>
HcDims validate_hc_pre(const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X, const Tensor& fn,
                       const Tensor& scale, const Tensor& base, int sinkhorn_iters, HcLimit lim) {
  constexpr Presence P = R::presence;
  const char* op = "hc_pre";
  const auto [T, hc, D] = check_hc_streams<R>(op, "X", X);
  check_hc(op, "X", X, hc, lim);
  const int64_t mix = (2 + hc) * hc;
  check_f32<P>(op, "fn", fn, {mix, hc * D});
  check_f32<P>(op, "scale", scale, {3});
  check_f32<P>(op, "base", base, {mix});
  check_act<R>(op, "y", y);
  check_shape<P>(op, "y", y, {T, D});
  check_f32<P>(op, "post", post, {T, hc});
  check_f32<P>(op, "comb", comb, {T, hc, hc});
  SL_CHECK(sinkhorn_iters >= 1, op, ": sinkhorn_iters = ", sinkhorn_iters, ", expected >= 1");
  SL_CHECK(!overlaps(y, X), op, ": y may not alias X");
  return {T, hc, D};
}

// hc_post: X_out [T, hc, D] from res [T, hc, D], f [T, D], post [T, hc], comb [T, hc, hc].
// X_out may be res itself (in place) but not partly overlap it, nor alias f.
template <class R>
HcDims validate_hc_post(const Tensor& X_out, const Tensor& f, const Tensor& res, const Tensor& post,
                        const Tensor& comb, HcLimit lim) {
  constexpr Presence P = R::presence;
  const char* op = "hc_post";
  const auto [T, hc, D] = check_hc_streams<R>(op, "res", res);
  check_hc(op, "res", res, hc, lim);
  check_act<R>(op, "X_out", X_out);
  check_shape<P>(op, "X_out", X_out, {T, hc, D});
  check_act<R>(op, "f", f);
  check_shape<P>(op, "f", f, {T, D});
  check_f32<P>(op, "post", post, {T, hc});
  check_f32<P>(op, "comb", comb, {T, hc, hc});
  SL_CHECK(!overlaps(X_out, f), op, ": X_out may not alias f");
  SL_CHECK(X_out.data == res.data || !overlaps(X_out, res), op, ": X_out partially overlaps res");
  return {T, hc, D};
}

// hc_head: X [T, hc, D] -> h [T, D]; fn [hc, hc*D], scale [1], base [hc].
template <class R>
HcDims validate_hc_head(const Tensor& h, const Tensor& X, const Tensor& fn, const Tensor& scale, const Tensor& base,
                        HcLimit lim) {
  constexpr Presence P = R::presence;
  const char* op = "hc_head";
  const auto [T, hc, D] = check_hc_streams<R>(op, "X", X);
  check_hc(op, "X", X, hc, lim);
  check_f32<P>(op, "fn", fn, {hc, hc * D});
  check_f32<P>(op, "scale", scale, {1});
  check_f32<P>(op, "base", base, {hc});
  check_act<R>(op, "h", h);
  check_shape<P>(op, "h", h, {T, D});
  SL_CHECK(!overlaps(h, X), op, ": h may not alias X");
  return {T, hc, D};
}

// hc_expand: every stream of X [T, hc, D] = e [T, D].
template <class R>
HcDims validate_hc_expand(const Tensor& X, const Tensor& e) {
  const char* op = "hc_expand";
  const auto [T, hc, D] = check_hc_streams<R>(op, "X", X);
  check_act<R>(op, "e", e);
  check_shape<R::presence>(op, "e", e, {T, D});
  SL_CHECK(!overlaps(X, e), op, ": X may not alias e");
  return {T, hc, D};
}

// mtp_combine: X [T, hc, D] = hp [T, hc, D] + ep [T, D] (broadcast over hc); element-wise,
// so X may be hp itself, but not partly overlap it, nor alias ep.
template <class R>
HcDims validate_mtp_combine(const Tensor& X, const Tensor& hp, const Tensor& ep) {
  constexpr Presence P = R::presence;
  const char* op = "mtp_combine";
  const auto [T, hc, D] = check_hc_streams<R>(op, "hp", hp);
  check_act<R>(op, "X", X);
  check_shape<P>(op, "X", X, {T, hc, D});
  check_act<R>(op, "ep", ep);
  check_shape<P>(op, "ep", ep, {T, D});
  SL_CHECK(X.data == hp.data || !overlaps(X, hp), op, ": X partially overlaps hp");
  SL_CHECK(!overlaps(X, ep), op, ": X may not alias ep");
  return {T, hc, D};
}

}  // namespace sl::checks
