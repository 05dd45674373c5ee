// Shared by the GPU benchmarks: provenance of a measurement (GPU, driver, CUDA, commit, date,
// command line), writing a result file atomically, and `--key=value` flags read before Google
// Benchmark sees the rest.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <errno.h>  // program_invocation_short_name
#include <ctime>
#include <unistd.h>  // environ
#include <fstream>
#include <functional>
#include <vector>

#include <benchmark/benchmark.h>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/error.h"

// Every CUDA call of a benchmark: a failure throws sl::Error naming the benchmark, the call and
// CUDA's error string (the backend's own calls go through model/cuda/cuda_check.h instead).
#define BENCH_CUDA_CHECK(call)                                                                    \
  do {                                                                                            \
    const cudaError_t bench_err_ = (call);                                                        \
    SL_CHECK(bench_err_ == cudaSuccess, program_invocation_short_name, ": ", #call, " failed: ",  \
             cudaGetErrorName(bench_err_), " (", cudaGetErrorString(bench_err_), ")");            \
  } while (0)

namespace sl::bench {

inline std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

// The STREAMLAB_* tuning variables and CUDA_DEVICE_MAX_CONNECTIONS set in the environment (they
// change what a run measures;
// STREAMLAB_COMMIT and STREAMLAB_CONFIG_DIR are recorded elsewhere or change nothing).
inline nlohmann::json tuning_environment() {
  nlohmann::json env = nlohmann::json::object();
  for (char** e = ::environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    // STREAMLAB_* knobs, and the driver's queue count (it changes what concurrency can do).
    const bool knob = kv.rfind("STREAMLAB_", 0) == 0 || kv.rfind("CUDA_DEVICE_MAX_CONNECTIONS=", 0) == 0;
    if (!knob || eq == std::string::npos) continue;
    const std::string key = kv.substr(0, eq);
    if (key == "STREAMLAB_COMMIT" || key == "STREAMLAB_CONFIG_DIR") continue;
    env[key] = kv.substr(eq + 1);
  }
  return env;
}

// The commit is the one the binary was built from (core/build_info.h; STREAMLAB_COMMIT, which
// scripts/gpu_round.sh sets from the pack's COMMIT file, overrides it), so that a bench run by
// hand still names its code.
inline nlohmann::json provenance(const std::string& command) {
  cudaDeviceProp prop{};
  int dev = 0, drv = 0, rt = 0;
  SL_CHECK(cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
               cudaDriverGetVersion(&drv) == cudaSuccess && cudaRuntimeGetVersion(&rt) == cudaSuccess,
           "provenance: CUDA device queries failed");
  std::time_t t = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return {{"gpu", prop.name},
          {"sm_count", prop.multiProcessorCount},
          {"memory_bytes", prop.totalGlobalMem},
          {"cuda_driver_version", drv},
          {"cuda_runtime_version", rt},
          {"commit", build_commit()},
          {"date", date},
          {"command", command},
          {"environment", tuning_environment()}};
}

// Writes next to the target, then renames: a reader never sees half a file.
inline void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp);
  f << j.dump(2) << "\n";
  f.close();
  SL_CHECK(f.good(), "could not write ", tmp);
  SL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "could not rename ", tmp, " to ", path);
}

// The items of a flag value separated by `sep` ("a,b" -> {"a", "b"}).
inline std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string::npos) j = s.size();
    v.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return v;
}

// Whether all of s is one decimal integer that fits a long long (then in n).
inline bool whole_integer(const std::string& s, long long& n) {
  size_t used = 0;
  try {
    n = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return !s.empty() && used == s.size();
}

// One integer flag value in [lo, hi]; anything else (a word, a fraction, a number out of range)
// is an error naming the flag, the value and the range.
inline int parse_int(const char* flag, const std::string& v, long long lo, long long hi) {
  long long n = 0;
  SL_CHECK(whole_integer(v, n) && n >= lo && n <= hi, flag, v, ": expected an integer in ", lo, " .. ", hi);
  return int(n);
}

// The comma-separated integers of a flag value ("1,8" -> {1, 8}).
inline std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (const std::string& item : split(s)) {
    long long n = 0;
    SL_CHECK(whole_integer(item, n) && n >= INT_MIN && n <= INT_MAX, "expected comma-separated integers, not '", s,
             "'");
    v.push_back(int(n));
  }
  return v;
}

// The median of samples (the upper one of an even count; 0 for none).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth, counting bytes read plus bytes written (docs/measurement.md):
// the yardstick that bytes floors and "% of copy bandwidth" are measured against, in the same run.
inline double copy_bandwidth_bytes_per_s(std::vector<double>* samples_out) {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&a, bytes));
  BENCH_CUDA_CHECK(cudaMalloc(&b, bytes));
  BENCH_CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  BENCH_CUDA_CHECK(cudaEventCreate(&e0));
  BENCH_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> bw;
  for (int i = 0; i < 23; ++i) {
    BENCH_CUDA_CHECK(cudaEventRecord(e0));
    BENCH_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    BENCH_CUDA_CHECK(cudaEventRecord(e1));
    BENCH_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) bw.push_back(2.0 * double(bytes) / (double(ms) * 1e-3));
  }
  BENCH_CUDA_CHECK(cudaFree(a));
  BENCH_CUDA_CHECK(cudaFree(b));
  BENCH_CUDA_CHECK(cudaEventDestroy(e0));
  BENCH_CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(bw.begin(), bw.end());
  if (samples_out) *samples_out = bw;
  return bw[bw.size() / 2];
}

// The value of `arg` when it is `key` followed by the value ("--steps=" + "20"), else null.
inline const char* flag_value(const char* arg, const char* key) {
  const size_t n = std::strlen(key);
  return std::strncmp(arg, key, n) == 0 ? arg + n : nullptr;
}

// The shared main(): our `--key=value` flags go to `parse` (true = consumed), `--help` prints
// `usage`, the rest go to Google Benchmark; an argument neither takes is an error (a stray word
// from a script must not run a benchmark other than the one asked for); errors are reported as
// "NAME: error: ..." (exit 1).
inline int bench_main(int argc, char** argv, const char* name, const char* usage,
                      const std::function<bool(const char*)>& parse, const std::function<int()>& run) {
  std::vector<char*> rest{argv[0]};
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--help") == 0) {
        std::printf("%s", usage);
        return 0;
      }
      if (!parse(argv[i])) rest.push_back(argv[i]);
    }
    int rc = int(rest.size());
    benchmark::Initialize(&rc, rest.data());
    if (rc > 1) throw std::runtime_error(std::string("unknown argument '") + rest[1] + "' (--help lists the options)");
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace sl::bench
