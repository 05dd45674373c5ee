// libFuzzer target: the safetensors reader (core/safetensors.h SafetensorsFile, which maps the
// file). Each input is written to a scratch file. Expected: sl::Error, or a file whose tensors
// keep the reader's promises: each tensor's shape has no negative dimension, its bytes are
// dtype size x numel and lie inside the
// mapping (every byte is read here), and find() returns it. Anything else aborts.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sl::fuzz::ScratchFile file("model.safetensors");
  const std::string& path = file.write(data, size);
  try {
    sl::SafetensorsFile f(path);
    size_t total = 0;
    for (const sl::StTensor& t : f.tensors()) {
      for (int64_t d : t.shape)
        if (d < 0) sl::fuzz::broken("tensor '" + t.name + "': negative dimension in shape " + t.shape_str());
      if (t.numel() < 0 || uint64_t(t.numel()) * sl::st_dtype_size(t.dtype) != t.bytes)
        sl::fuzz::broken("tensor '" + t.name + "': " + std::to_string(t.bytes) + " bytes for shape " + t.shape_str());
      if (f.find(t.name) != &t) sl::fuzz::broken("find('" + t.name + "') does not return the tensor");
      total += t.bytes;
      if (total > size) sl::fuzz::broken("the tensors hold more bytes than the file");
      unsigned sum = 0;
      for (size_t i = 0; i < t.bytes; ++i) sum += t.data[i];  // out of the mapping: a crash
      (void)sum;
    }
    for (const auto& [k, v] : f.metadata()) (void)(k.size() + v.size());
  } catch (const sl::Error&) {
  }
  return 0;
}
