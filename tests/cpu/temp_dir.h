// A scratch folder for a test, removed with everything in it when the test ends.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace sl::test {

struct TempDir {
  std::string path;
  explicit TempDir(const char* prefix = "sl_test") {
    std::string t = (std::filesystem::temp_directory_path() / (std::string(prefix) + "_XXXXXX")).string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace sl::test
