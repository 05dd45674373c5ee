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

#include "core/error.h"
#include "core/tensor.h"

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

// ---------------------------------------------------------------- per-op validators
// One per op whose checks both backends share: it checks shapes and dtypes exactly as both
// did, and returns the dimensions the op needs. Token index values (pos/seq) are not read
// here: the CUDA backend never reads device memory on the host, the CPU backend checks them
// itself.

struct CompressorSaveDims {
  int64_t B, S, cd, T;  // sequences, ring slots, state width (c*d), tokens
};

template <Presence P>
CompressorSaveDims compressor_save(const Tensor& state_u, const Tensor& state_g, const Tensor& state_tags,
                                   const Tensor& u, const Tensor& g, const Tensor& ape, const Tensor& pos,
                                   const Tensor& seq, int ratio) {
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
  check_i32<P>(op, "pos", pos, {T});
  check_i32<P>(op, "seq", seq, {T});
  return {B, S, cd, T};
}

}  // namespace sl::checks
