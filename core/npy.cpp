#include "core/npy.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"

namespace sl {

namespace {

static_assert(sizeof(float) == 4, "float must be 32-bit");

const char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// A tiny parser for exactly what NumPy writes: string, bool and tuple-of-int values.
struct HeaderParser {
  const std::string& s;
  const std::string& path;
  size_t i = 0;

  [[noreturn]] void bad(const std::string& what) const {
    fail(path, ": malformed .npy header (", what, " at offset ", i, "): ", s);
  }
  void ws() {
    while (i < s.size() && std::isspace(uint8_t(s[i]))) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad(std::string("expected '") + c + "'");
  }
  std::string str() {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) bad("expected a string");
    char q = s[i++];
    size_t b = i;
    while (i < s.size() && s[i] != q) ++i;
    if (i >= s.size()) bad("unterminated string");
    return s.substr(b, i++ - b);
  }
  bool boolean() {
    ws();
    if (s.compare(i, 4, "True") == 0) {
      i += 4;
      return true;
    }
    if (s.compare(i, 5, "False") == 0) {
      i += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> v;
    expect('(');
    while (true) {
      if (eat(')')) break;
      ws();
      if (i >= s.size() || !std::isdigit(uint8_t(s[i]))) bad("expected a non-negative integer in shape");
      int64_t x = 0;
      while (i < s.size() && std::isdigit(uint8_t(s[i]))) {
        if (x > (int64_t(1) << 50)) bad("shape entry too large");
        x = x * 10 + (s[i++] - '0');
      }
      ws();
      if (i < s.size() && s[i] == 'L') ++i;  // Python 2 long suffix
      v.push_back(x);
      if (eat(')')) break;
      expect(',');
    }
    return v;
  }
};

void read_exact(std::ifstream& in, void* dst, size_t n, const std::string& path, const char* what) {
  in.read(static_cast<char*>(dst), std::streamsize(n));
  if (size_t(in.gcount()) != n)
    fail(path, ": truncated .npy file: expected ", n, " bytes of ", what, ", got ", size_t(in.gcount()));
}

}  // namespace

namespace {

// `expected` names the dtypes the caller accepts, for the error message.
NpyArray read_npy_impl(const std::string& path, const char* expected) {
  require_regular_file(path, ".npy file");  // a FIFO would block the read forever
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, ": cannot open .npy file: ", std::strerror(errno));
  const size_t file_size = size_t(in.tellg());
  in.seekg(0);
  char magic[6];
  read_exact(in, magic, 6, path, "magic");
  if (std::memcmp(magic, kMagic, 6) != 0) fail(path, ": not a .npy file (bad magic; expected \\x93NUMPY)");
  uint8_t ver[2];
  read_exact(in, ver, 2, path, "version");
  size_t hlen = 0;
  if (ver[0] == 1) {
    uint8_t b[2];
    read_exact(in, b, 2, path, "header length");
    hlen = size_t(b[0]) | size_t(b[1]) << 8;
  } else if (ver[0] == 2 || ver[0] == 3) {
    uint8_t b[4];
    read_exact(in, b, 4, path, "header length");
    hlen = size_t(b[0]) | size_t(b[1]) << 8 | size_t(b[2]) << 16 | size_t(b[3]) << 24;
    if (hlen > (size_t(1) << 26)) fail(path, ": .npy header length ", hlen, " is implausibly large");
  } else {
    fail(path, ": unsupported .npy format version ", int(ver[0]), ".", int(ver[1]), " (expected 1.0, 2.0 or 3.0)");
  }
  std::string header(hlen, '\0');
  read_exact(in, header.data(), hlen, path, "header");

  HeaderParser P{header, path};
  std::string descr;
  bool have_descr = false, have_shape = false, have_fortran = false, fortran = false;
  std::vector<int64_t> shape;
  P.expect('{');
  while (!P.eat('}')) {
    std::string key = P.str();
    P.expect(':');
    if (key == "descr") {
      descr = P.str();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = P.boolean();
      have_fortran = true;
    } else if (key == "shape") {
      shape = P.tuple();
      have_shape = true;
    } else {
      P.bad("unknown key '" + key + "'");
    }
    if (P.eat('}')) break;
    P.expect(',');
  }
  if (!have_descr || !have_shape || !have_fortran)
    fail(path, ": .npy header lacks ", !have_descr ? "'descr'" : !have_shape ? "'shape'" : "'fortran_order'", ": ",
         header);
  if (fortran) fail(path, ": fortran_order arrays are not supported (save a C-order array, e.g. np.ascontiguousarray)");

  NpyArray a;
  if (descr == "<f4") a.dtype = DType::F32;
  else if (descr == "<i4") a.dtype = DType::I32;
  else if (descr == "<i8") a.dtype = DType::I64;
  else
    fail(path, ": expected dtype ", expected, ", got ", descr);
  a.shape = shape;
  // Check the size against the file before allocating (a corrupt shape must not allocate TBs).
  const size_t data_off = size_t(in.tellg());
  const size_t avail = file_size > data_off ? file_size - data_off : 0;
  size_t numel = 1;
  for (int64_t d : shape) {
    if (d != 0 && numel > avail / size_t(d)) numel = avail + 1;  // saturate: certainly too large
    else numel *= size_t(d);
  }
  if (numel > avail || numel * dtype_size(a.dtype) > avail) {
    std::string sh;
    for (size_t k = 0; k < shape.size(); ++k) sh += (k ? ", " : "") + std::to_string(shape[k]);
    fail(path, ": truncated .npy file: shape (", sh, ") of ", descr, " needs more data than the ", avail,
         " bytes after the header");
  }
  size_t bytes = numel * dtype_size(a.dtype);
  // More data than the header describes is as wrong as less: a file written with another shape.
  if (bytes < avail) {
    std::string sh;
    for (size_t k = 0; k < shape.size(); ++k) sh += (k ? ", " : "") + std::to_string(shape[k]);
    fail(path, ": the header's shape (", sh, ") of ", descr, " covers ", bytes, " bytes, but ", avail,
         " bytes follow the header (", avail - bytes, " too many)");
  }
  // NumPy's own limit: the nonzero dimensions' product, in bytes, fits an int64. A shape such as
  // (2**50, 2**50, 0) has no elements and so passes the size checks above, but its numel()
  // would overflow.
  int64_t nonzero = 1;
  for (int64_t d : shape) {
    if (d == 0) continue;
    if (nonzero > std::numeric_limits<int64_t>::max() / int64_t(dtype_size(a.dtype)) / d) {
      std::string sh;
      for (size_t k = 0; k < shape.size(); ++k) sh += (k ? ", " : "") + std::to_string(shape[k]);
      fail(path, ": .npy shape (", sh, ") of ", descr, " is too large: its size in bytes overflows 64 bits");
    }
    nonzero *= d;
  }
  a.data.resize(bytes);
  read_exact(in, a.data.data(), bytes, path, "array data");
  return a;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  return read_npy_impl(path, "float32, int32 or int64 (<f4, <i4 or <i8)");
}

std::vector<int64_t> read_npy_int64(const std::string& path, std::vector<int64_t>* shape) {
  NpyArray a = read_npy_impl(path, "int32 or int64");
  if (a.dtype == DType::F32) fail(path, ": expected dtype int32 or int64, got <f4");
  if (shape) *shape = a.shape;
  std::vector<int64_t> v(size_t(a.numel()));
  // Not for an empty array: memcpy from its null buffer is undefined even for 0 bytes.
  if (a.dtype == DType::I64) {
    if (!v.empty()) std::memcpy(v.data(), a.data.data(), a.data.size());
  } else
    for (size_t i = 0; i < v.size(); ++i) v[i] = a.ptr<int32_t>()[i];
  return v;
}

std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>* shape) {
  NpyArray a = read_npy_impl(path, "float32 (<f4)");
  if (a.dtype != DType::F32)
    fail(path, ": expected dtype float32 (<f4), got ", a.dtype == DType::I32 ? "<i4" : "<i8");
  if (shape) *shape = a.shape;
  std::vector<float> v(size_t(a.numel()));
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), a.data.size());  // as above
  return v;
}

void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data) {
  const char* descr = nullptr;
  switch (dtype) {
    case DType::F32: descr = "<f4"; break;
    case DType::I32: descr = "<i4"; break;
    case DType::I64: descr = "<i8"; break;
    default: fail(path, ": write_npy supports f32, i32 and i64, got ", dtype_name(dtype));
  }
  std::string sh = "(";
  size_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    SL_CHECK(shape[i] >= 0, path, ": write_npy: negative dimension");
    sh += std::to_string(shape[i]);
    sh += (shape.size() == 1 ? ",)" : i + 1 < shape.size() ? ", " : ")");
    numel *= size_t(shape[i]);
  }
  if (shape.empty()) sh += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
  // Pad with spaces + '\n' so that magic + version + length + header is a multiple of 64.
  int version = 1;
  size_t pre = 10;
  if ((header.size() + 1 + pre + 63) / 64 * 64 - pre > 65535) {
    version = 2;
    pre = 12;
  }
  size_t total = (pre + header.size() + 1 + 63) / 64 * 64;
  header.append(total - pre - header.size() - 1, ' ');
  header.push_back('\n');

  // Through AtomicFile (core/atomic_file.h): the destination is checked (a device node or a
  // missing folder is refused), and a failed or killed write leaves it as it was.
  AtomicFile out(path);
  std::FILE* f = out.file();
  auto put = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) fail(path, ": write failed: ", std::strerror(errno));
  };
  put(kMagic, 6);
  const char ver[2] = {char(version), 0};
  put(ver, 2);
  const size_t hl = header.size();
  if (version == 1) {
    const char b[2] = {char(hl & 0xff), char(hl >> 8)};
    put(b, 2);
  } else {
    const char b[4] = {char(hl & 0xff), char((hl >> 8) & 0xff), char((hl >> 16) & 0xff), char((hl >> 24) & 0xff)};
    put(b, 4);
  }
  put(header.data(), header.size());
  put(data, numel * dtype_size(dtype));
  out.commit();
}

}  // namespace sl
