#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"

namespace sl {

namespace {
struct DTypeInfo {
  StDType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {StDType::BOOL, "BOOL", 1},       {StDType::U8, "U8", 1},           {StDType::I8, "I8", 1},
    {StDType::I16, "I16", 2},         {StDType::U16, "U16", 2},         {StDType::I32, "I32", 4},
    {StDType::U32, "U32", 4},         {StDType::I64, "I64", 8},         {StDType::U64, "U64", 8},
    {StDType::F16, "F16", 2},         {StDType::BF16, "BF16", 2},       {StDType::F32, "F32", 4},
    {StDType::F64, "F64", 8},         {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1},
    {StDType::F8_E8M0, "F8_E8M0", 1},
};
}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}
size_t st_dtype_size(StDType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}
bool st_dtype_is_fp8(StDType t) { return t == StDType::F8_E4M3 || t == StDType::F8_E5M2 || t == StDType::F8_E8M0; }
bool st_dtype_from_name(const std::string& s, StDType* out) {
  for (const auto& d : kDTypes)
    if (s == d.name) {
      *out = d.t;
      return true;
    }
  return false;
}

std::string StTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ------------------------------------------------------------------------------------ reading

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_regular_file(path, "safetensors file");  // a FIFO would block open() forever
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open safetensors file: ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, ": truncated safetensors file: ", size, " bytes, expected at least the 8-byte header length");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail(path, ": mmap of ", size, " bytes failed: ", std::strerror(e));
  map_ = m;
  map_size_ = size;

  try {
    const uint8_t* base = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(base[i]) << (8 * i);
    if (n > size - 8)
      fail(path, ": truncated safetensors file: header length is ", n, " bytes but only ", size - 8,
           " bytes follow the length field");
    const char* hdr = reinterpret_cast<const char*>(base + 8);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(hdr, hdr + n);
    } catch (const nlohmann::json::exception& ex) {
      fail(path, ": bad safetensors header JSON (", n, " bytes): ", ex.what());
    }
    if (!j.is_object()) fail(path, ": bad safetensors header: expected a JSON object, got ", j.type_name());
    const size_t data_start = 8 + size_t(n);
    const size_t data_size = size - data_start;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& name = it.key();
      const auto& v = it.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail(path, ": __metadata__ must be an object of strings");
        for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
          if (!m2.value().is_string()) fail(path, ": __metadata__.", m2.key(), " must be a string");
          metadata_[m2.key()] = m2.value().get<std::string>();
        }
        continue;
      }
      auto where = [&]() { return path + ": tensor '" + name + "'"; };
      if (!v.is_object()) fail(where(), ": header entry must be an object");
      if (!v.contains("dtype") || !v["dtype"].is_string()) fail(where(), ": missing or non-string 'dtype'");
      if (!v.contains("shape") || !v["shape"].is_array()) fail(where(), ": missing or non-array 'shape'");
      if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
        fail(where(), ": missing 'data_offsets' [begin, end]");
      StTensor t;
      t.name = name;
      std::string ds = v["dtype"].get<std::string>();
      if (!st_dtype_from_name(ds, &t.dtype)) fail(where(), ": unsupported dtype '", ds, "'");
      uint64_t numel = 1;
      for (const auto& d : v["shape"]) {
        if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
          fail(where(), ": shape entries must be non-negative integers, got ", v["shape"].dump());
        uint64_t dv = d.get<uint64_t>();
        // StTensor::shape holds int64: a larger entry would read back negative.
        if (dv > uint64_t(std::numeric_limits<int64_t>::max()))
          fail(where(), ": shape entry ", dv, " in ", v["shape"].dump(), " does not fit a 64-bit signed integer");
        if (dv != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dv)
          fail(where(), ": shape ", v["shape"].dump(), " is too large");
        numel *= dv;
        t.shape.push_back(int64_t(dv));
      }
      const auto& off = v["data_offsets"];
      for (const auto& o : off)
        if (!o.is_number_integer() || (!o.is_number_unsigned() && o.get<int64_t>() < 0))
          fail(where(), ": data_offsets must be non-negative integers, got ", off.dump());
      uint64_t b = off[0].get<uint64_t>(), e2 = off[1].get<uint64_t>();
      if (b > e2) fail(where(), ": data_offsets ", off.dump(), " has begin > end");
      if (e2 > data_size)
        fail(where(), ": data_offsets ", off.dump(), " out of range: the data section has ", data_size,
             " bytes (truncated file?)");
      uint64_t want = numel * st_dtype_size(t.dtype);
      if (e2 - b != want)
        fail(where(), ": data_offsets ", off.dump(), " span ", e2 - b, " bytes, expected ", want, " for ", ds, " ",
             t.shape_str());
      t.data = base + data_start + b;
      t.bytes = size_t(want);
      if (index_.count(name)) fail(where(), ": duplicate tensor name");
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    // Two tensors over the same bytes would load as each other's data: offsets must not overlap.
    std::vector<const StTensor*> by_start;
    for (const auto& t : tensors_) by_start.push_back(&t);
    std::sort(by_start.begin(), by_start.end(), [](const StTensor* a, const StTensor* b) { return a->data < b->data; });
    for (size_t i = 1; i < by_start.size(); ++i)
      if (by_start[i - 1]->bytes > 0 && by_start[i]->bytes > 0 &&
          by_start[i - 1]->data + by_start[i - 1]->bytes > by_start[i]->data)
        fail(path, ": tensors '", by_start[i - 1]->name, "' and '", by_start[i]->name,
             "' overlap in the data section (their data_offsets intersect)");
  } catch (...) {
    close();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { close(); }

void SafetensorsFile::close() {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_size_(o.map_size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
  o.map_size_ = 0;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_size_ = o.map_size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.map_ = nullptr;
    o.map_size_ = 0;
  }
  return *this;
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ------------------------------------------------------------------------------------ writing

SafetensorsWriter::SafetensorsWriter(std::string path) : path_(std::move(path)) {}

void SafetensorsWriter::add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                            Producer producer) {
  SL_CHECK(!finished_, path_, ": add('", name, "') after finish()");
  SL_CHECK(!name.empty() && name != "__metadata__", path_, ": invalid tensor name '", name, "'");
  for (const auto& e : entries_) SL_CHECK(e.name != name, path_, ": tensor '", name, "' added twice");
  size_t numel = 1;
  for (int64_t d : shape) {
    SL_CHECK(d >= 0, path_, ": tensor '", name, "' has a negative dimension");
    numel *= size_t(d);
  }
  size_t bytes = numel * st_dtype_size(dtype);
  entries_.push_back(Entry{name, dtype, shape, offset_, offset_ + bytes, std::move(producer)});
  offset_ += bytes;
}

void SafetensorsWriter::add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                            const void* data) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= size_t(d < 0 ? 0 : d);
  size_t bytes = numel * st_dtype_size(dtype);
  add(name, dtype, shape, [data, bytes](const Sink& sink) { sink(data, bytes); });
}

void SafetensorsWriter::finish() {
  SL_CHECK(!finished_, path_, ": finish() called twice");
  finished_ = true;
  // Lay the data out by element size, largest first (as HF's writer does), so that every
  // tensor starts at a multiple of its element size: with the 8-aligned header, views into
  // the mapping are naturally aligned for their dtype.
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return st_dtype_size(a.dtype) > st_dtype_size(b.dtype); });
  size_t off = 0;
  for (auto& e : entries_) {
    const size_t bytes = e.end - e.begin;
    e.begin = off;
    e.end = off + bytes;
    off += bytes;
  }
  nlohmann::ordered_json h;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata_) meta[k] = v;
  h["__metadata__"] = meta;
  for (const auto& e : entries_) {
    nlohmann::ordered_json t;
    t["dtype"] = st_dtype_name(e.dtype);
    t["shape"] = e.shape;
    t["data_offsets"] = {e.begin, e.end};
    h[e.name] = t;
  }
  std::string hdr = h.dump();
  while (hdr.size() % 8) hdr.push_back(' ');

  std::string tmp = path_ + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(path_, ": cannot open for writing: ", std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) {
      int e = errno;
      std::fclose(f);
      f = nullptr;
      std::remove(tmp.c_str());
      fail(path_, ": write failed: ", std::strerror(e));
    }
  };
  try {
    uint8_t len[8];
    uint64_t n = hdr.size();
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
    put(len, 8);
    put(hdr.data(), hdr.size());
    for (const auto& e : entries_) {
      size_t want = e.end - e.begin, got = 0;
      e.producer([&](const void* p, size_t bytes) {
        if (got + bytes > want)
          fail(path_, ": tensor '", e.name, "': producer wrote more than the expected ", want, " bytes");
        put(p, bytes);
        got += bytes;
      });
      if (got != want) fail(path_, ": tensor '", e.name, "': producer wrote ", got, " bytes, expected ", want);
    }
  } catch (...) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    fail(path_, ": close failed: ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) fail(path_, ": cannot rename ", tmp, " into place: ", ec.message());
}

}  // namespace sl
