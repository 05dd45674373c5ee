// .npy and .safetensors: round trips, hand-assembled files with known bytes, and corrupt or
// truncated files, which must give an sl::Error naming the file (never a crash).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "core/npy.h"
#include "core/safetensors.h"

using namespace sl;
namespace fs = std::filesystem;

namespace {

class TmpDir {
 public:
  TmpDir() {
    path_ = fs::temp_directory_path() / ("sl_test_io_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TmpDir() { fs::remove_all(path_); }
  std::string file(const std::string& n) const { return (path_ / n).string(); }

 private:
  fs::path path_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(n >> (8 * i));
  return s;
}

// A .npy v1.0 file from a header dict (padded as numpy does) and raw data.
std::string npy_v1(const std::string& dict, const std::string& data) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string s("\x93NUMPY\x01\x00", 8);
  s += char(h.size() & 0xff);
  s += char(h.size() >> 8);
  return s + h + data;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

}  // namespace

// ------------------------------------------------------------------------------------ npy

TEST(Npy, RoundTrip) {
  TmpDir d;
  std::vector<float> f = {1.5f, -2.25f, 3.0f, 0.f, 1e-30f, -7.f};
  write_npy(d.file("f.npy"), DType::F32, {2, 3}, f.data());
  NpyArray a = read_npy(d.file("f.npy"));
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 24u);
  EXPECT_EQ(std::memcmp(a.data.data(), f.data(), 24), 0);
  std::vector<int64_t> shape;
  EXPECT_EQ(read_npy_f32(d.file("f.npy"), &shape), f);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));

  std::vector<int32_t> i32 = {1, -2, 2147483647, 5};
  write_npy(d.file("i32.npy"), DType::I32, {4}, i32.data());
  EXPECT_EQ(read_npy_int64(d.file("i32.npy"), &shape), (std::vector<int64_t>{1, -2, 2147483647, 5}));
  EXPECT_EQ(shape, (std::vector<int64_t>{4}));

  std::vector<int64_t> i64 = {int64_t(1) << 40, -3, 0, 7, 8, 9, 10, 11};
  write_npy(d.file("i64.npy"), DType::I64, {2, 2, 2}, i64.data());
  EXPECT_EQ(read_npy_int64(d.file("i64.npy"), &shape), i64);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(read_npy(d.file("i64.npy")).dtype, DType::I64);

  // 0-d scalar and an empty array.
  float s = 4.f;
  write_npy(d.file("s.npy"), DType::F32, {}, &s);
  a = read_npy(d.file("s.npy"));
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.numel(), 1);
  EXPECT_EQ(a.ptr<float>()[0], 4.f);
  write_npy(d.file("e.npy"), DType::I32, {0, 5}, nullptr);
  a = read_npy(d.file("e.npy"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(a.data.empty());
  // Empty arrays through the typed readers (tests/fuzz: a memcpy from a null buffer).
  write_npy(d.file("e64.npy"), DType::I64, {0, 5}, nullptr);
  EXPECT_TRUE(read_npy_int64(d.file("e64.npy"), &shape).empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{0, 5}));
  write_npy(d.file("ef.npy"), DType::F32, {3, 0}, nullptr);
  EXPECT_TRUE(read_npy_f32(d.file("ef.npy"), &shape).empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 0}));
}

TEST(Npy, WrittenHeaderIsNumpyFormat) {
  TmpDir d;
  std::vector<int32_t> v = {7, 8, 9};
  write_npy(d.file("v.npy"), DType::I32, {3}, v.data());
  std::string b = read_bytes(d.file("v.npy"));
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t hl = uint8_t(b[8]) | size_t(uint8_t(b[9])) << 8;
  EXPECT_EQ((10 + hl) % 64, 0u);
  std::string h = b.substr(10, hl);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(h.rfind("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 0), 0u) << h;
  EXPECT_EQ(b.size(), 10 + hl + 12);
  EXPECT_EQ(b.substr(10 + hl), raw(v));
}

TEST(Npy, HandBuiltFiles) {
  TmpDir d;
  // v1.0, as numpy writes it.
  std::vector<float> f = {0.5f, 1.f, -1.f, 2.f};
  write_bytes(d.file("a.npy"), npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", raw(f)));
  std::vector<int64_t> shape;
  EXPECT_EQ(read_npy_f32(d.file("a.npy"), &shape), f);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
  // Unusual spacing, key order and a trailing comma-less dict.
  write_bytes(d.file("b.npy"), npy_v1("{\"shape\":(4,),\"fortran_order\":False,\"descr\":\"<f4\"}", raw(f)));
  EXPECT_EQ(read_npy_f32(d.file("b.npy")), f);
  // v2.0: 4-byte header length.
  std::vector<int64_t> t = {3, 1, 4, 1, 5};
  std::string h = "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }";
  while ((12 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string v2("\x93NUMPY\x02\x00", 8);
  v2 += std::string{char(h.size() & 0xff), char(h.size() >> 8), 0, 0};
  write_bytes(d.file("c.npy"), v2 + h + raw(t));
  EXPECT_EQ(read_npy_int64(d.file("c.npy")), t);
}

TEST(Npy, Errors) {
  TmpDir d;
  auto expect_err = [&](const std::string& file, const std::string& bytes, const std::string& what,
                        bool ints = false) {
    write_bytes(d.file(file), bytes);
    std::string e = error_of([&] {
      if (ints) read_npy_int64(d.file(file));
      else read_npy(d.file(file));
    });
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << "want '" << what << "' in: " << e;
  };
  std::string f8(16, '\0');
  expect_err("tokens.npy", npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f8),
             "expected dtype int32 or int64, got <f8", true);
  expect_err("tokf.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f8),
             "expected dtype int32 or int64, got <f4", true);
  expect_err("be.npy", npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", f8), "got >f4");
  expect_err("fo.npy", npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f8),
             "fortran_order arrays are not supported");
  expect_err("magic.npy", "NOTNUMPY" + f8, "bad magic");
  expect_err("ver.npy", std::string("\x93NUMPY\x05\x00", 8) + f8, "version 5.0");
  expect_err("short.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f8), "truncated");
  expect_err("huge.npy",
             npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000, 1000000), }", f8),
             "truncated");
  expect_err("nokey.npy", npy_v1("{'descr': '<f4', 'shape': (4,), }", f8), "fortran_order");
  expect_err("junk.npy", npy_v1("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,), }", f8), "malformed");
  expect_err("empty.npy", "", "truncated");
  // No elements (a zero dimension), but a size in bytes past 64 bits: numel() would overflow.
  expect_err("zero_huge.npy",
             npy_v1("{'descr': '<i8', 'fortran_order': False, 'shape': (1125899906842624, 1125899906842624, 0), }", ""),
             "overflows 64 bits", true);
  EXPECT_NE(error_of([&] { read_npy(d.file("missing.npy")); }).find("missing.npy"), std::string::npos);
  std::vector<int32_t> iv = {1};
  write_npy(d.file("int.npy"), DType::I32, {1}, iv.data());
  EXPECT_NE(error_of([&] { read_npy_f32(d.file("int.npy")); }).find("int.npy: expected dtype float32 (<f4), got <i4"),
            std::string::npos);

  // Every truncation of a valid file is an error, never a crash or a short read.
  std::vector<int32_t> v = {1, 2, 3, 4, 5, 6};
  write_npy(d.file("ok.npy"), DType::I32, {2, 3}, v.data());
  std::string good = read_bytes(d.file("ok.npy"));
  for (size_t n = 0; n < good.size(); ++n) {
    write_bytes(d.file("cut.npy"), good.substr(0, n));
    std::string e = error_of([&] { read_npy(d.file("cut.npy")); });
    EXPECT_NE(e.find("cut.npy"), std::string::npos) << n << ": " << e;
  }
}

// ------------------------------------------------------------------------------------ safetensors

TEST(Safetensors, RoundTrip) {
  TmpDir d;
  std::vector<float> a = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  std::vector<uint16_t> b = {float_to_bf16(1.5f), float_to_bf16(-2.f), float_to_bf16(3.25f)};
  std::vector<int64_t> c = {10, -20, int64_t(1) << 50};
  std::vector<int32_t> big(1000);
  for (int i = 0; i < 1000; ++i) big[i] = i * 7 - 3;
  {
    SafetensorsWriter w(d.file("m.safetensors"));
    w.add("a", StDType::F32, {2, 3}, a.data());
    w.add("layers.0.b", StDType::BF16, {3}, b.data());
    w.add("c", StDType::I64, {3, 1}, c.data());
    // Streamed in uneven pieces.
    w.add("big", StDType::I32, {10, 100}, [&](const SafetensorsWriter::Sink& sink) {
      sink(big.data(), 4 * 333);
      sink(big.data() + 333, 4 * 667);
    });
    w.add("empty", StDType::F32, {0, 4}, nullptr);
    w.add("scalar", StDType::F32, {}, a.data());
    w.set_metadata("note", "hello");
    EXPECT_EQ(w.data_bytes(), 24u + 6u + 24u + 4000u + 0u + 4u);
    w.finish();
  }
  EXPECT_FALSE(fs::exists(d.file("m.safetensors.partial")));
  std::string bytes = read_bytes(d.file("m.safetensors"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);  // header padded to 8 bytes
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 6 + 24 + 4000 + 4);
  auto hdr = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(hdr["__metadata__"]["format"], "pt");
  EXPECT_EQ(hdr["__metadata__"]["note"], "hello");
  EXPECT_EQ(hdr["a"]["dtype"], "F32");
  EXPECT_EQ(hdr["layers.0.b"]["shape"], nlohmann::json::array({3}));

  SafetensorsFile f(d.file("m.safetensors"));
  EXPECT_EQ(f.path(), d.file("m.safetensors"));
  EXPECT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const StTensor* t = f.find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->bytes, 24u);
  EXPECT_EQ(std::memcmp(t->data, a.data(), 24), 0);
  t = f.find("layers.0.b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDType::BF16);
  EXPECT_EQ(std::memcmp(t->data, b.data(), 6), 0);
  t = f.find("c");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape_str(), "[3, 1]");
  EXPECT_EQ(std::memcmp(t->data, c.data(), 24), 0);
  t = f.find("big");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->numel(), 1000);
  EXPECT_EQ(std::memcmp(t->data, big.data(), 4000), 0);
  t = f.find("empty");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes, 0u);
  t = f.find("scalar");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->numel(), 1);
  EXPECT_EQ(f.find("nope"), nullptr);
  // Data is laid out largest element first, so every view is aligned to its element size.
  for (const auto& tt : f.tensors())
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tt.data) % st_dtype_size(tt.dtype), 0u) << tt.name;
  EXPECT_EQ(hdr["c"]["data_offsets"][0], 0);  // the first I64 tensor comes first

  // Move keeps the mapping alive.
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(std::memcmp(g.find("a")->data, a.data(), 24), 0);
}

TEST(Safetensors, HandBuiltFile) {
  TmpDir d;
  // Two tensors: x = F32 [2] {1, -2}, y = I64 [1] {42}; y's data comes first in the file.
  std::string header =
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("y":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}})";
  std::vector<int64_t> y = {42};
  std::vector<float> x = {1.f, -2.f};
  write_bytes(d.file("h.safetensors"), safetensors_bytes(header, raw(y) + raw(x)));
  SafetensorsFile f(d.file("h.safetensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  const StTensor* tx = f.find("x");
  const StTensor* ty = f.find("y");
  ASSERT_TRUE(tx && ty);
  float xv[2];
  std::memcpy(xv, tx->data, 8);
  EXPECT_EQ(xv[0], 1.f);
  EXPECT_EQ(xv[1], -2.f);
  int64_t yv;
  std::memcpy(&yv, ty->data, 8);
  EXPECT_EQ(yv, 42);
  // Every dtype string of the format parses (FP8 included: the loader decides what it accepts).
  for (const char* s : {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64",
                        "F8_E4M3", "F8_E5M2", "F8_E8M0"}) {
    StDType t;
    ASSERT_TRUE(st_dtype_from_name(s, &t)) << s;
    EXPECT_STREQ(st_dtype_name(t), s);
    EXPECT_EQ(st_dtype_is_fp8(t), std::string(s).rfind("F8_", 0) == 0);
  }
  EXPECT_EQ(st_dtype_size(StDType::BF16), 2u);
  EXPECT_EQ(st_dtype_size(StDType::F8_E4M3), 1u);
}

TEST(Safetensors, CorruptFilesGiveErrors) {
  TmpDir d;
  auto expect_err = [&](const std::string& file, const std::string& bytes, const std::string& what) {
    write_bytes(d.file(file), bytes);
    std::string e = error_of([&] { SafetensorsFile f(d.file(file)); });
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << "want '" << what << "' in: " << e;
  };
  const std::string data(16, '\0');
  expect_err("empty.safetensors", "", "truncated");
  expect_err("short.safetensors", "abc", "truncated");
  expect_err("hlen.safetensors", le64(1000) + "{}", "header length is 1000");
  expect_err("json.safetensors", safetensors_bytes("{\"x\": [1, 2", data), "bad safetensors header JSON");
  expect_err("notobj.safetensors", safetensors_bytes("[1, 2]", data), "expected a JSON object");
  expect_err("dtype.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", data),
             "tensor 'w': unsupported dtype 'F7'");
  expect_err("range.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data),
             "tensor 'w': data_offsets [0,32] out of range");
  expect_err("span.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
             "tensor 'w': data_offsets [0,8] span 8 bytes, expected 12");
  expect_err("order.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data), "begin > end");
  expect_err("neg.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data),
             "tensor 'w': shape entries must be non-negative");
  expect_err("noshape.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", data),
             "tensor 'w': missing or non-array 'shape'");
  expect_err("nooff.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", data),
             "tensor 'w': missing 'data_offsets'");
  expect_err("huge.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", data),
             "tensor 'w'");
  // An entry past int64 would read back as a negative dimension (tests/fuzz).
  expect_err("int64.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", data),
             "tensor 'w': shape entry 18446744073709551615");
  expect_err("meta.safetensors", safetensors_bytes(R"({"__metadata__":{"format":1}})", data), "__metadata__");
  EXPECT_NE(error_of([&] { SafetensorsFile f(d.file("missing.safetensors")); }).find("missing.safetensors"),
            std::string::npos);

  // Every truncation of a valid file is an error naming the file.
  std::vector<float> v(10, 1.f);
  {
    SafetensorsWriter w(d.file("ok.safetensors"));
    w.add("v", StDType::F32, {10}, v.data());
    w.add("u", StDType::F32, {2, 5}, v.data());
    w.finish();
  }
  std::string good = read_bytes(d.file("ok.safetensors"));
  for (size_t n = 0; n < good.size(); ++n) {
    write_bytes(d.file("cut.safetensors"), good.substr(0, n));
    std::string e = error_of([&] { SafetensorsFile f(d.file("cut.safetensors")); });
    EXPECT_NE(e.find("cut.safetensors"), std::string::npos) << n << ": " << e;
  }
}

TEST(Safetensors, WriterErrors) {
  TmpDir d;
  std::vector<float> v(4, 0.f);
  {
    SafetensorsWriter w(d.file("short.safetensors"));
    w.add("t", StDType::F32, {4}, [&](const SafetensorsWriter::Sink& sink) { sink(v.data(), 8); });
    std::string e = error_of([&] { w.finish(); });
    EXPECT_NE(e.find("short.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("'t'"), std::string::npos) << e;
    EXPECT_NE(e.find("wrote 8 bytes, expected 16"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(d.file("short.safetensors")));
  EXPECT_FALSE(fs::exists(d.file("short.safetensors.partial")));
  {
    SafetensorsWriter w(d.file("long.safetensors"));
    w.add("t", StDType::F32, {1}, [&](const SafetensorsWriter::Sink& sink) { sink(v.data(), 8); });
    EXPECT_NE(error_of([&] { w.finish(); }).find("more than"), std::string::npos);
  }
  SafetensorsWriter w(d.file("dup.safetensors"));
  w.add("t", StDType::F32, {1}, v.data());
  EXPECT_NE(error_of([&] { w.add("t", StDType::F32, {1}, v.data()); }).find("added twice"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsWriter(d.file("nodir/x.safetensors")).finish(); }).find("nodir"),
            std::string::npos);
}
