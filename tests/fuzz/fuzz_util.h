// Shared by the libFuzzer targets in this folder (docs/fuzzing.md).
//
// Readers that take a path (SQLite traces, configs, safetensors, .npy) get each input through a
// scratch file: one per process (parallel fuzzing jobs do not share it), in /dev/shm when there
// is one so that the per-input write stays in memory.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

namespace sl::fuzz {

class ScratchFile {
 public:
  // `name` is the file's name inside the process's scratch folder (its extension can matter:
  // a config path must end in .json).
  explicit ScratchFile(const std::string& name) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir_ = (base / ("streamlab-fuzz-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_, ec);
    path_ = dir_ + "/" + name;
    // libFuzzer leaves through exit(): the folder goes with the process (not after a crash).
    static std::string* to_remove = new std::string(dir_);
    static const bool registered = [] {
      std::atexit([] {
        std::error_code e;
        std::filesystem::remove_all(*to_remove, e);
      });
      return true;
    }();
    (void)registered;
  }

  // Replaces the file's content with the input; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::fprintf(stderr, "fuzz: cannot write the scratch file %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }

 private:
  std::string dir_, path_;
};

// A property of a successful load does not hold: a bug, reported as a crash.
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace sl::fuzz
