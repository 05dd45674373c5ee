// A tensor is a typed, shaped view of memory that a backend owns (host memory for the CPU
// backend, device memory for the CUDA backend). It never owns or frees anything: the backend's
// arena does. `buffer` identifies the allocation so that schedules can say which op reads and
// writes which buffer, and views (reshape, row slices) keep the id of what they view.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace sl {

enum class DType : uint8_t { F32, BF16, I32, I64, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> d{0, 0, 0, 0};
  int n = 0;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    SL_CHECK(dims.size() <= size_t(kMaxDims), "Shape: at most ", kMaxDims, " dims");
    for (int64_t v : dims) d[n++] = v;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t numel() const {
    if (n == 0) return 0;
    int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= d[i];
    return p;
  }
  bool operator==(const Shape& o) const {
    if (n != o.n) return false;
    for (int i = 0; i < n; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  int buffer = -1;  // allocation id (see Backend::alloc); -1 = no tensor

  bool empty() const { return data == nullptr; }
  int ndim() const { return shape.n; }
  int64_t dim(int i) const { return shape.d[i < 0 ? shape.n + i : i]; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }

  // Same memory, another shape with the same element count.
  Tensor view(Shape s) const {
    SL_CHECK(s.numel() == numel(), "Tensor::view: ", shape.str(), " -> ", s.str(), " changes the element count");
    Tensor t = *this;
    t.shape = s;
    return t;
  }
  // The first s.numel() elements, shaped s: a buffer sized for the largest step serves every
  // smaller one.
  Tensor prefix(Shape s) const {
    SL_CHECK(s.numel() <= numel(), "Tensor::prefix: ", s.str(), " does not fit in ", shape.str());
    Tensor t = *this;
    t.shape = s;
    return t;
  }
  // Rows [begin, end) along dim 0 (contiguous).
  Tensor rows(int64_t begin, int64_t end) const {
    SL_CHECK(shape.n >= 1 && begin >= 0 && begin <= end && end <= shape.d[0], "Tensor::rows: [", begin, ", ", end,
             ") outside ", shape.str());
    Tensor t = *this;
    int64_t row = numel() / (shape.d[0] ? shape.d[0] : 1);
    t.data = static_cast<char*>(data) + size_t(begin * row) * dtype_size(dtype);
    t.shape.d[0] = end - begin;
    return t;
  }
};

}  // namespace sl
