// What the host pays to enqueue work, per CUDA call: the cost that bounds an eager decode step
// at batch 1, where a step is ~300 kernels of a few microseconds each (bench_decode prints the
// step's enqueue time beside its step time).
//
// Each pattern enqueues its calls N times on streams created here (non-blocking, as the stream
// policies create theirs), times the host from the first call to the last one's return, then
// synchronises and times the whole batch on the device. Reported: host microseconds per
// iteration of the pattern (median of --reps repeats) and device microseconds per iteration. An
// iteration of `fork_join` is the placement the stream policies use for one fork and join: a
// kernel on main, record, wait on aux, a kernel on aux, record, wait on main. The `_behind`
// patterns repeat three of them behind a long spin kernel on both streams (their device time is
// then the spin's, not theirs).
//
//   bench_launch [--iters=1000] [--reps=7] [--out=FILE.json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "experiments/bench/cuda/bench_util.h"

namespace sl {
namespace {

// The size of a typical argument block of the backend's kernels (its HcArgs, AttnArgs, ...).
struct Args128 {
  const void* p[16];
};

__global__ void empty_kernel(int) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Keeps the GPU busy for about `cycles` SM clocks, so that the calls timed after it queue
// behind unfinished work (as in a decode step, where the host runs ahead of the GPU).
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void empty_kernel_128(Args128) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

struct Options {
  int iters = 1000, reps = 7;
  std::string out, command_line;
};

template <class... KArgs, class... Args>
void launch(bool pdl, cudaStream_t st, void (*kernel)(KArgs...), Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = st;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  BENCH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

struct Pattern {
  std::string name, what;
  std::function<void()> once;  // one iteration
  bool behind = false;         // a spin kernel ahead of the timed calls: the GPU is behind
};

struct Result {
  std::string name, what;
  double host_us = 0, device_us = 0;
  std::vector<double> host_samples;
};

void run(const Options& o) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "bench_launch: no CUDA device; nothing measured\n");
    std::exit(2);
  }
  cudaStream_t s0, s1;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, t0, t1;
  BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  BENCH_CUDA_CHECK(cudaEventCreate(&t0));
  BENCH_CUDA_CHECK(cudaEventCreate(&t1));
  Args128 a128{};
  int flip = 0;

  const std::vector<Pattern> patterns = {
      {"launch", "cudaLaunchKernelEx, no attributes, one stream", [&] { launch(false, s0, empty_kernel, 0); }},
      {"launch_pdl", "cudaLaunchKernelEx with the PDL attribute, one stream",
       [&] { launch(true, s0, empty_kernel, 0); }},
      {"launch_pdl_128B", "the same with a 128-byte argument block",
       [&] { launch(true, s0, empty_kernel_128, a128); }},
      {"launch_pdl_2streams", "PDL launches alternating between two streams",
       [&] { launch(true, (flip ^= 1) ? s0 : s1, empty_kernel, 0); }},
      {"record", "cudaEventRecord on one stream", [&] { BENCH_CUDA_CHECK(cudaEventRecord(e0, s0)); }},
      {"record_wait", "cudaEventRecord on one stream + cudaStreamWaitEvent on another",
       [&] {
         BENCH_CUDA_CHECK(cudaEventRecord(e0, s0));
         BENCH_CUDA_CHECK(cudaStreamWaitEvent(s1, e0, 0));
       }},
      {"fork_join", "launch main, record, wait aux, launch aux, record, wait main (PDL launches)",
       [&] {
         launch(true, s0, empty_kernel, 0);
         BENCH_CUDA_CHECK(cudaEventRecord(e0, s0));
         BENCH_CUDA_CHECK(cudaStreamWaitEvent(s1, e0, 0));
         launch(true, s1, empty_kernel, 0);
         BENCH_CUDA_CHECK(cudaEventRecord(e1, s1));
         BENCH_CUDA_CHECK(cudaStreamWaitEvent(s0, e1, 0));
       }},
  };
  // The same calls with the GPU behind: what a host pays when its waits are on unfinished work.
  std::vector<Pattern> all = patterns;
  for (const char* name : {"launch_pdl", "record_wait", "fork_join"})
    for (const Pattern& p : patterns)
      if (p.name == name) {
        Pattern q = p;
        q.name += "_behind";
        q.what += ", GPU busy";
        q.behind = true;
        all.push_back(q);
      }

  using clock = std::chrono::steady_clock;
  std::vector<Result> results;
  for (const Pattern& p : all) {
    Result r;
    r.name = p.name;
    r.what = p.what;
    std::vector<double> dev;
    for (int rep = 0; rep < o.reps + 1; ++rep) {  // the first repeat warms up
      BENCH_CUDA_CHECK(cudaDeviceSynchronize());
      if (p.behind) {  // ~50 ms of spinning on both streams, longer than the timed calls take
        spin_kernel<<<1, 1, 0, s0>>>(100'000'000LL);
        BENCH_CUDA_CHECK(cudaGetLastError());
        spin_kernel<<<1, 1, 0, s1>>>(100'000'000LL);
        BENCH_CUDA_CHECK(cudaGetLastError());
      }
      BENCH_CUDA_CHECK(cudaEventRecord(t0, s0));
      auto h0 = clock::now();
      // Behind the spin, at most 200 iterations: about a decode step's depth of queued work
      // (a step is ~240 launches), not a test of how deep the launch queue goes.
      const int iters = p.behind ? std::min(o.iters, 200) : o.iters;
      for (int i = 0; i < iters; ++i) p.once();
      auto h1 = clock::now();
      BENCH_CUDA_CHECK(cudaEventRecord(e1, s1));  // s1's work (if any) before the stop
      BENCH_CUDA_CHECK(cudaStreamWaitEvent(s0, e1, 0));
      BENCH_CUDA_CHECK(cudaEventRecord(t1, s0));
      BENCH_CUDA_CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      if (rep == 0) continue;
      r.host_samples.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count() / iters);
      dev.push_back(double(ms) * 1e3 / iters);
    }
    r.host_us = bench::median(r.host_samples);
    r.device_us = bench::median(dev);
    results.push_back(r);
    std::fprintf(stderr, "  %-20s host %7.3f us  device %7.3f us per iteration\n", r.name.c_str(), r.host_us,
                 r.device_us);
  }

  std::printf("\n%-20s %10s %12s  %s\n", "pattern", "host us", "device us", "what (per iteration)");
  nlohmann::json out;
  out["provenance"] = bench::provenance(o.command_line);
  out["iters"] = o.iters;
  out["reps"] = o.reps;
  for (const Result& r : results) {
    std::printf("%-20s %10.3f %12.3f  %s\n", r.name.c_str(), r.host_us, r.device_us, r.what.c_str());
    out["patterns"].push_back({{"name", r.name},
                               {"what", r.what},
                               {"host_us_median", r.host_us},
                               {"host_us_samples", r.host_samples},
                               {"device_us", r.device_us}});
  }
  if (!o.out.empty()) {
    bench::write_json_atomic(o.out, out);
    std::printf("wrote %s\n", o.out.c_str());
  }
  BENCH_CUDA_CHECK(cudaEventDestroy(e0));
  BENCH_CUDA_CHECK(cudaEventDestroy(e1));
  BENCH_CUDA_CHECK(cudaEventDestroy(t0));
  BENCH_CUDA_CHECK(cudaEventDestroy(t1));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s0));
  BENCH_CUDA_CHECK(cudaStreamDestroy(s1));
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--iters=")) o.iters = sl::bench::parse_int("--iters=", v, 1, 10000000);
    else if (auto v = flag_value(arg, "--reps=")) o.reps = sl::bench::parse_int("--reps=", v, 1, 10000);
    else if (auto v = flag_value(arg, "--out=")) o.out = v;
    else return false;
    return true;
  };
  return sl::bench::bench_main(
      argc, argv, "bench_launch",
      "bench_launch [--iters=1000] [--reps=7] [--out=FILE.json]\n"
      "Host cost per CUDA call (kernel launches with and without PDL, event records and waits, a\n"
      "fork/join); see the header of bench_launch.cu.\n",
      parse, [&o] {
        SL_CHECK(o.iters > 0 && o.reps > 0, "--iters and --reps must be positive");
        sl::run(o);
        return 0;
      });
}
