#include "core/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sl {

bool is_gzip_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char m[2] = {0, 0};
  if (!f.read(reinterpret_cast<char*>(m), 2)) return false;
  return m[0] == 0x1f && m[1] == 0x8b;
}

bool has_gz_suffix(const std::string& path) {
  if (path.size() < 3) return false;
  const std::string end = path.substr(path.size() - 3);
  return end[0] == '.' && (end[1] == 'g' || end[1] == 'G') && (end[2] == 'z' || end[2] == 'Z');
}

void gunzip_file(const std::string& path, const std::function<void(const char*, size_t)>& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  SL_CHECK(f, "cannot open '", path, "': ", std::strerror(errno));
  struct Close {
    std::FILE* f;
    ~Close() { std::fclose(f); }
  } close_f{f};
  z_stream z{};
  SL_CHECK(inflateInit2(&z, 15 + 16) == Z_OK, "'", path, "': cannot start zlib");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end_z{&z};
  std::vector<char> in(size_t(1) << 20), buf(size_t(1) << 20);
  bool eof = false;
  for (;;) {
    if (z.avail_in == 0 && !eof) {
      const size_t n = std::fread(in.data(), 1, in.size(), f);
      SL_CHECK(!std::ferror(f), "cannot read '", path, "': ", std::strerror(errno));
      eof = n < in.size();
      z.next_in = reinterpret_cast<Bytef*>(in.data());
      z.avail_in = uInt(n);
    }
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = uInt(buf.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (buf.size() > z.avail_out) out(buf.data(), buf.size() - z.avail_out);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0 && eof) return;
      if (z.avail_in == 0) {  // more input may follow: another member, or trailing nothing
        const int c = std::fgetc(f);
        if (c == EOF) return;
        std::ungetc(c, f);
      }
      inflateReset(&z);  // another gzip member follows (concatenated files)
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && eof)
      fail("'", path, "': the gzip data ends early (a truncated file)");
    if (rc != Z_OK && rc != Z_BUF_ERROR) fail("'", path, "': damaged gzip data (", z.msg ? z.msg : "error " + std::to_string(rc), ")");
  }
}

std::string gunzip_file(const std::string& path) {
  std::string text;
  gunzip_file(path, [&](const char* p, size_t n) { text.append(p, n); });
  return text;
}

struct GzipWriter::Stream {
  z_stream z{};
  std::vector<unsigned char> buf = std::vector<unsigned char>(1 << 18);
  bool finished = false;
};

GzipWriter::GzipWriter(Sink sink, std::string what) : z_(new Stream), sink_(std::move(sink)), what_(std::move(what)) {
  SL_CHECK(deflateInit2(&z_->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, what_, ": cannot start zlib");
}

GzipWriter::GzipWriter(std::FILE* out, std::string what)
    : GzipWriter(
          [out, what](const char* p, size_t n) {
            SL_CHECK(std::fwrite(p, 1, n, out) == n, what, ": write failed: ", std::strerror(errno));
          },
          what) {}

GzipWriter::~GzipWriter() { deflateEnd(&z_->z); }

void GzipWriter::deflate_into_sink(int flush) {
  for (;;) {
    z_->z.next_out = z_->buf.data();
    z_->z.avail_out = uInt(z_->buf.size());
    const int rc = deflate(&z_->z, flush);
    SL_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, what_, ": compression failed (", rc, ")");
    const size_t have = z_->buf.size() - z_->z.avail_out;
    if (have) sink_(reinterpret_cast<const char*>(z_->buf.data()), have);
    if (flush == Z_FINISH ? rc == Z_STREAM_END : z_->z.avail_out != 0) return;
  }
}

void GzipWriter::write(const char* p, size_t n) {
  SL_CHECK(!z_->finished, what_, ": written after the gzip stream was finished");
  // zlib counts in uInt: feed a piece of more than 4 GiB in slices.
  while (n > 0) {
    const size_t k = std::min<size_t>(n, size_t(1) << 30);
    z_->z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
    z_->z.avail_in = uInt(k);
    deflate_into_sink(Z_NO_FLUSH);
    p += k;
    n -= k;
  }
}

void GzipWriter::finish() {
  if (z_->finished) return;
  z_->z.next_in = nullptr;
  z_->z.avail_in = 0;
  deflate_into_sink(Z_FINISH);
  z_->finished = true;
}

void gzip_file_into(const std::string& src, std::FILE* out) {
  std::FILE* in = std::fopen(src.c_str(), "rb");
  SL_CHECK(in, "cannot open '", src, "': ", std::strerror(errno));
  try {
    GzipWriter z(out, "gzip of '" + src + "'");
    std::vector<char> buf(size_t(1) << 20);
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), in)) > 0;) z.write(buf.data(), n);
    SL_CHECK(!std::ferror(in), "reading '", src, "' failed: ", std::strerror(errno));
    z.finish();
  } catch (...) {
    std::fclose(in);
    throw;
  }
  std::fclose(in);
}

std::string gzip_string(std::string_view in, const std::string& what) {
  std::string out;
  GzipWriter z([&](const char* p, size_t n) { out.append(p, n); }, what);
  z.write(in.data(), in.size());
  z.finish();
  return out;
}

void gzip_file_in_place(const std::string& path) {
  AtomicFile out(path + ".gz");
  gzip_file_into(path, out.file());
  out.commit();
  std::error_code ec;
  std::filesystem::remove(path, ec);
  SL_CHECK(!ec, "cannot remove '", path, "' after compressing it: ", ec.message());
}

std::string plain_or_gz(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  if (std::filesystem::exists(path + ".gz", ec)) return path + ".gz";
  return path;
}

}  // namespace sl
