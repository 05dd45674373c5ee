#include "model/tensor_values.h"

#include "core/bf16.h"
#include "core/error.h"

namespace sl {

std::vector<float> download_floats(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  if (t.dtype == DType::BF16) {
    std::vector<uint16_t> h(v.size());
    be.download(h.data(), t, h.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(h[i]);
  } else {
    SL_CHECK(t.dtype == DType::F32, "download_floats: ", t.shape.str(), " ", dtype_name(t.dtype),
             " is not a float tensor");
    be.download(v.data(), t, v.size() * 4);
  }
  return v;
}

}  // namespace sl
