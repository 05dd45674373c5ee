// gzip files (zlib): the traces a compare run keeps are text that compresses about tenfold, and
// run folders ship in the repository. Loaders read a gzip file as if it were plain (the format is
// recognised by its magic bytes, not by the name).
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace sl {

bool is_gzip_file(const std::string& path);  // starts with 1f 8b; false when unreadable
// A name that asks for gzip output: ends in ".gz", in any case ("T.JSON.GZ").
bool has_gz_suffix(const std::string& path);
// The decompressed content (every gzip member), handed to `out` piece by piece as it is
// inflated: neither the file nor its content is held whole. Throws sl::Error naming the file on
// a damaged or truncated stream (after `out` saw the good part).
void gunzip_file(const std::string& path, const std::function<void(const char*, size_t)>& out);
// The whole decompressed content.
std::string gunzip_file(const std::string& path);
// `in` gzipped (one member). `what` names the content in an error.
std::string gzip_string(std::string_view in, const std::string& what);
// Compresses a stream of unknown length (a trace being written) piece by piece into `sink` (or
// an open file), so that neither the text nor its compressed form is held whole. finish() ends
// the gzip stream; destroyed without finish(), the output holds an unfinished stream (a caller's
// AtomicFile then discards it). `what` names the destination in errors.
class GzipWriter {
 public:
  using Sink = std::function<void(const char*, size_t)>;
  GzipWriter(Sink sink, std::string what);
  GzipWriter(std::FILE* out, std::string what);  // write errors are sl::Error naming `what`
  ~GzipWriter();
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;
  void write(const char* p, size_t n);
  void finish();

 private:
  void deflate_into_sink(int flush);
  struct Stream;
  std::unique_ptr<Stream> z_;
  Sink sink_;
  std::string what_;
};

// Streams the file `src` through a GzipWriter into `out` (finished). Errors name `src`.
void gzip_file_into(const std::string& src, std::FILE* out);

// Compresses `path` into `path + ".gz"` (written atomically, streamed), then removes `path`.
void gzip_file_in_place(const std::string& path);
// `path` if it exists, else `path + ".gz"` if that exists, else `path` (for the error message).
std::string plain_or_gz(const std::string& path);

}  // namespace sl
