// NumPy .npy files (format versions 1.0, 2.0 and 3.0 for reading; 1.0 for writing, or 2.0
// when the header needs it): little-endian float32, int32 and int64 arrays in C order. Used
// for token inputs and for dumping activations/logits to compare with other implementations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sl {

struct NpyArray {
  DType dtype = DType::F32;     // F32, I32 or I64
  std::vector<int64_t> shape;   // empty = a 0-d scalar (one element)
  std::vector<uint8_t> data;    // numel * dtype_size bytes, little-endian, C order
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  template <class T>
  const T* ptr() const { return reinterpret_cast<const T*>(data.data()); }
};

// Reads an array of dtype <f4, <i4 or <i8. Errors name the file and what was expected
// (bad magic, unsupported version, dtype, fortran_order, truncated data).
NpyArray read_npy(const std::string& path);
// Reads an integer array (int32 or int64 in the file), widened to int64; e.g. token ids.
std::vector<int64_t> read_npy_int64(const std::string& path, std::vector<int64_t>* shape = nullptr);
// Reads a float32 array.
std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>* shape = nullptr);

// Writes `data` (numel(shape) elements of dtype F32, I32 or I64) as a C-order .npy file.
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data);

}  // namespace sl
