// How each backend op uses its tensor arguments, as declared once in model/ops.def:
// describe_<op>(io, args...) lists every tensor argument with its role. The facade
// (model/ops.h) turns the list into the schedule's reads and writes; the check backend compares
// the results; forwarding backends hand the results to their hook.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "model/backend.h"

namespace sl {

enum class OpRole {
  In,         // read only
  Out,        // written: a result of the op
  InOut,      // read and written (in place or read-modify-write): a result
  Scratch,    // written as the backend's own scratch: not a result
  Selection,  // a result chosen by top-k over scores (may differ between precisions on near ties)
};

// The tensor arguments of one op call, in declaration order. Fixed capacity, no allocation: the
// facade builds one per op call while a schedule is attached.
class OpIo {
 public:
  struct Arg {
    const char* name;
    const Tensor* tensor;
    OpRole role;
  };
  static constexpr int kMaxArgs = 16;

  void in(const char* name, const Tensor& t) { add(name, t, OpRole::In); }
  void out(const char* name, const Tensor& t) { add(name, t, OpRole::Out); }
  void inout(const char* name, const Tensor& t) { add(name, t, OpRole::InOut); }
  void scratch(const char* name, const Tensor& t) { add(name, t, OpRole::Scratch); }
  void selection(const char* name, const Tensor& t) { add(name, t, OpRole::Selection); }

  int size() const { return n_; }
  const Arg& operator[](int i) const { return args_[i]; }
  const Arg* begin() const { return args_; }
  const Arg* end() const { return args_ + n_; }

  static bool reads(OpRole r) { return r == OpRole::In || r == OpRole::InOut; }
  static bool writes(OpRole r) { return r != OpRole::In; }
  // A result: what an op computes for its caller (compared by the check backend).
  static bool result(OpRole r) { return r == OpRole::Out || r == OpRole::InOut || r == OpRole::Selection; }

 private:
  void add(const char* name, const Tensor& t, OpRole role) {
    // Absent optional arguments (no data) are left out, so no consumer has to skip them; so is
    // a zero-element buffer that the CUDA arena backs with null: there is nothing to read or
    // compare in it.
    if (t.empty()) return;
    SL_CHECK(n_ < kMaxArgs, "OpIo: more than ", kMaxArgs, " tensor arguments (", name, ")");
    args_[n_++] = Arg{name, &t, role};
  }
  Arg args_[kMaxArgs] = {};
  int n_ = 0;
};

#define SL_OP(name, params, args, ...) \
  inline void describe_##name(OpIo& io, SL_UNPAREN params) { __VA_ARGS__; }
#include "model/ops.def"
#undef SL_OP

}  // namespace sl
