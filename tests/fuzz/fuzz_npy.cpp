// libFuzzer target: the .npy reader (core/npy.h read_npy, read_npy_int64, read_npy_f32). Each
// input is written to a scratch file. Expected: sl::Error, or an array whose data is exactly
// numel x dtype size bytes; the typed readers must agree with read_npy. Anything else aborts.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sl::fuzz::ScratchFile file("array.npy");
  const std::string& path = file.write(data, size);
  sl::NpyArray a;
  try {
    a = sl::read_npy(path);
  } catch (const sl::Error&) {
    return 0;
  }
  const int64_t n = a.numel();
  if (n < 0 || uint64_t(n) * sl::dtype_size(a.dtype) != a.data.size())
    sl::fuzz::broken("read_npy: " + std::to_string(a.data.size()) + " bytes of data for " + std::to_string(n) +
                     " elements");
  std::vector<int64_t> shape;
  try {
    if (a.dtype == sl::DType::F32) {
      std::vector<float> v = sl::read_npy_f32(path, &shape);
      if (int64_t(v.size()) != n || shape != a.shape) sl::fuzz::broken("read_npy_f32 disagrees with read_npy");
    } else {
      std::vector<int64_t> v = sl::read_npy_int64(path, &shape);
      if (int64_t(v.size()) != n || shape != a.shape) sl::fuzz::broken("read_npy_int64 disagrees with read_npy");
    }
  } catch (const sl::Error& e) {
    sl::fuzz::broken(std::string("a typed reader refused what read_npy read: ") + e.what());
  }
  return 0;
}
