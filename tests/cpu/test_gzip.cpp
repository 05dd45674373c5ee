// Gzipped traces read as the plain files they came from (core/gzip.h, load_trace).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tests/cpu/temp_dir.h"
#include "core/gzip.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

namespace fs = std::filesystem;
using namespace sl::prof;

namespace {
struct TempDir : sl::test::TempDir {
  TempDir() : sl::test::TempDir("sl_gz") {}
};
}  // namespace

TEST(Gzip, JsonAndSqliteTracesLoadTheSameGzipped) {
  TempDir d;
  const Trace t = make_sample_trace();
  const std::string json = d.path + "/t.json", db = d.path + "/t.sqlite";
  write_kineto_json_file(t, json);
  write_nsys_sqlite(t, db);
  const Trace plain_json = load_trace(json), plain_db = load_trace(db);
  sl::gzip_file_in_place(json);
  sl::gzip_file_in_place(db);
  EXPECT_FALSE(fs::exists(json));
  ASSERT_TRUE(sl::is_gzip_file(json + ".gz"));
  EXPECT_EQ(sl::plain_or_gz(json), json + ".gz");
  EXPECT_EQ(detect_trace_format(db + ".gz"), TraceFormat::Sqlite);
  EXPECT_EQ(first_difference(load_trace(json + ".gz"), plain_json), "");
  EXPECT_EQ(first_difference(load_trace(db + ".gz"), plain_db), "");
}

TEST(Gzip, TruncatedOrDamagedDataIsAnError) {
  TempDir d;
  const std::string json = d.path + "/t.json";
  write_kineto_json_file(make_sample_trace(), json);
  sl::gzip_file_in_place(json);
  std::ifstream in(json + ".gz", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(d.path + "/cut.gz", std::ios::binary) << all.substr(0, all.size() / 2);
  EXPECT_THROW(load_trace(d.path + "/cut.gz"), sl::Error);
  all[all.size() / 2] ^= 0x55;
  all[all.size() / 2 + 1] ^= 0x55;
  std::ofstream(d.path + "/bad.gz", std::ios::binary) << all;
  EXPECT_THROW(load_trace(d.path + "/bad.gz"), sl::Error);
}

// gzip_string's output is a gzip file that gunzip_file reads back byte for byte (empty and
// binary content included); zlib's own gzip format, checked by its magic bytes.
TEST(Gzip, StringRoundTrip) {
  TempDir d;
  std::string binary(70000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = char((i * 2654435761u) >> 13);
  for (const std::string& s : {std::string(), std::string("{\"a\": 1}\n"), binary}) {
    const std::string path = d.path + "/s.gz";
    std::ofstream(path, std::ios::binary) << sl::gzip_string(s, "test");
    ASSERT_TRUE(sl::is_gzip_file(path));
    EXPECT_EQ(sl::gunzip_file(path), s);
  }
}

// GzipWriter streams: pieces of any size (empty, one byte, larger than its buffer) make one gzip
// stream that gunzip_file reads back as their concatenation.
TEST(Gzip, WriterStreamsPiecesIntoOneStream) {
  TempDir d;
  std::string expected;
  const std::string path = d.path + "/w.gz";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    sl::GzipWriter z(f, "test");
    for (size_t n : {size_t(0), size_t(1), size_t(300), size_t(1) << 20, size_t(7)}) {
      std::string piece(n, '\0');
      for (size_t i = 0; i < n; ++i) piece[i] = char((expected.size() + i) * 2654435761u >> 11);
      z.write(piece.data(), piece.size());
      expected += piece;
    }
    z.finish();
    EXPECT_THROW(z.write("x", 1), sl::Error);
    std::fclose(f);
  }
  ASSERT_TRUE(sl::is_gzip_file(path));
  EXPECT_EQ(sl::gunzip_file(path), expected);
}

// A Kineto export to a name ending in .gz is the plain export, gzipped (it used to be plain JSON
// under a .gz name).
TEST(Gzip, KinetoExportToGzNameIsGzipped) {
  TempDir d;
  const Trace t = make_sample_trace();
  write_kineto_json_file(t, d.path + "/t.json");
  write_kineto_json_file(t, d.path + "/t.json.gz");
  ASSERT_TRUE(sl::is_gzip_file(d.path + "/t.json.gz"));
  std::ifstream in(d.path + "/t.json", std::ios::binary);
  const std::string plain((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(sl::gunzip_file(d.path + "/t.json.gz"), plain);
}
