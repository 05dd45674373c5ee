// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, ...,
// "__metadata__": {...}}, then the raw little-endian data; offsets are relative to the end of
// the header. Reading maps the file and hands out views without copying (flash-size
// checkpoints are hundreds of GB); writing streams each tensor from a callback so a large
// tensor never has to exist on the host in one piece.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sl {

enum class StDType : uint8_t { BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0 };

const char* st_dtype_name(StDType t);  // "F32", "BF16", ... as in the header
size_t st_dtype_size(StDType t);
bool st_dtype_is_fp8(StDType t);
// Parses a header dtype string; returns false for an unknown one.
bool st_dtype_from_name(const std::string& s, StDType* out);

struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; valid while the file object lives
  size_t bytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_str() const;
};

// A read-only, memory-mapped safetensors file. Every structural problem (truncated file,
// header longer than the file, bad JSON, unknown dtype, offsets out of range or not matching
// dtype x shape) is an sl::Error naming the file and, where there is one, the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;

  const std::string& path() const { return path_; }
  // Tensors in header order of their data offsets.
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void close();
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Streams a safetensors file: declare every tensor (name, dtype, shape, producer), then
// finish() writes the header and calls each producer in declaration order. A producer must
// hand exactly dtype_size x numel bytes to `sink` (in as many pieces as it likes); anything
// else is an error naming the tensor. The header is padded with spaces to a multiple of 8
// bytes (as HF's writer does) and carries __metadata__ {"format": "pt"}. The data is laid
// out by element size, largest first (also as HF does), so every tensor in the file is
// aligned to its element size; producers run in that order (declaration order within a size).
class SafetensorsWriter {
 public:
  using Sink = std::function<void(const void* data, size_t bytes)>;
  using Producer = std::function<void(const Sink& sink)>;

  explicit SafetensorsWriter(std::string path);
  void add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape, Producer producer);
  // Convenience: the data is already on the host (must stay valid until finish()).
  void add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape, const void* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t data_bytes() const { return offset_; }  // sum of the declared tensors' bytes
  void finish();

 private:
  struct Entry {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    size_t begin, end;
    Producer producer;
  };
  std::string path_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
  size_t offset_ = 0;
  bool finished_ = false;
};

}  // namespace sl
