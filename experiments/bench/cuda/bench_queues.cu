// Which CUDA streams share a hardware work queue (docs/streams.md, prediction 2). A context has
// CUDA_DEVICE_MAX_CONNECTIONS queues (default 8, at most 32, read once when the context is
// created: one process per setting); streams beyond that share them, and a kernel of one stream
// can then wait behind another stream's blocked work: a false dependency.
//
// The probe, for every pair i < j of --streams non-blocking streams created in order: a spin
// kernel on stream i (--spin-us) and behind it a marker kernel (which must wait for the spin:
// stream order), then a marker kernel on stream j. Markers write the device's global timer. If
// j's marker ran before i's spin ended, the streams have queues of their own; if it ran after, it
// waited behind i's marker in a queue they share. Depth first on purpose: one kernel per stream,
// breadth first, overlaps under any setting (docs/measurement.md 8). Each pair is probed --reps times
// and the majority counts. Printed and written (--out): the matrix, the groups of streams that
// share a queue, and whether the k-th stream created goes to queue k mod Q. A second probe
// blocks m streams at once and finds the m at which an unrelated stream starts to wait: the
// queues in effect when the driver assigns launches to free queues rather than by stream; a third
// blocks one stream, runs k other streams' kernels to completion, then checks whether a fresh
// stream waits: whether streams take queues in turn.
//
//   CUDA_DEVICE_MAX_CONNECTIONS=4 bench_queues [--streams=40] [--spin-us=200] [--reps=3] [--out=FILE.json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "experiments/bench/cuda/bench_util.h"
#include "experiments/bench/cuda/queue_groups.h"

namespace sl {
namespace {

__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread spinning for `ns` nanoseconds of the global timer; writes when it ended.
__global__ void spin_kernel(uint64_t ns, uint64_t* end) {
  const uint64_t t0 = global_timer();
  while (global_timer() - t0 < ns) {
  }
  *end = global_timer();
}

__global__ void marker_kernel(uint64_t* at) { *at = global_timer(); }

struct Options {
  int streams = 40;
  int spin_us = 200;
  int reps = 3;
  std::string out;
  std::string command_line;
};

void run(const Options& o) {
  const char* env = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::string connections = env ? env : "unset (the driver's default, 8)";
  const int n = o.streams;
  std::vector<cudaStream_t> s(static_cast<size_t>(n));  // stream k: the k-th created
  for (auto& st : s) BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  uint64_t* d = nullptr;  // [spin end, marker i, marker j]
  BENCH_CUDA_CHECK(cudaMalloc(&d, 3 * sizeof(uint64_t)));
  const uint64_t spin_ns = uint64_t(o.spin_us) * 1000;
  // Warm-up: module load (both kernels), first launches.
  spin_kernel<<<1, 1, 0, s[0]>>>(1000, d);
  marker_kernel<<<1, 1, 0, s[0]>>>(d + 1);
  BENCH_CUDA_CHECK(cudaGetLastError());
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<std::vector<bool>> aliased(size_t(n), std::vector<bool>(size_t(n), false));
  std::vector<std::vector<double>> lead_us(size_t(n), std::vector<double>(size_t(n), 0));  // spin end - marker j
  const auto t_start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      int votes = 0;
      std::vector<double> leads;
      for (int r = 0; r < o.reps; ++r) {
        spin_kernel<<<1, 1, 0, s[size_t(i)]>>>(spin_ns, d);
        marker_kernel<<<1, 1, 0, s[size_t(i)]>>>(d + 1);
        marker_kernel<<<1, 1, 0, s[size_t(j)]>>>(d + 2);
        BENCH_CUDA_CHECK(cudaGetLastError());
        BENCH_CUDA_CHECK(cudaDeviceSynchronize());
        uint64_t h[3];
        BENCH_CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        // Separate queues: j's marker ran while i spun, well before the spin ended.
        const double lead = (double(h[0]) - double(h[2])) / 1e3;
        leads.push_back(lead);
        if (lead < 0.5 * o.spin_us) ++votes;
      }
      aliased[size_t(i)][size_t(j)] = 2 * votes > o.reps;
      lead_us[size_t(i)][size_t(j)] = bench::median(leads);
    }
    if ((i + 1) % 10 == 0) std::fprintf(stderr, "  probed stream %d of %d\n", i + 1, n);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  // Second probe: block the first m streams (a long spin and a marker behind it on each), then a
  // marker on stream m. If queues were fixed per stream, the pair probe above would show it; if
  // the driver hands a launch to a queue that is free, an unrelated stream waits only once every
  // queue is blocked: the smallest m at which stream m's marker waits is the number of queues in
  // effect. The spin covers the time to launch every blocker (about 2 m launches).
  uint64_t* blk = nullptr;  // spin ends of the m blockers, then the marker
  BENCH_CUDA_CHECK(cudaMalloc(&blk, size_t(n + 1) * sizeof(uint64_t)));
  const uint64_t long_spin_ns = std::max<uint64_t>(spin_ns, uint64_t(n) * 20'000 + 500'000);
  int blocked_at = 0;  // 0: never waited
  std::vector<double> block_lead_us;
  for (int m = 1; m < n; ++m) {
    int votes = 0;
    std::vector<double> leads;
    for (int r = 0; r < o.reps; ++r) {
      for (int i = 0; i < m; ++i) {
        spin_kernel<<<1, 1, 0, s[size_t(i)]>>>(long_spin_ns, blk + i);
        marker_kernel<<<1, 1, 0, s[size_t(i)]>>>(blk + n);  // the blocker's marker: waits for its spin
      }
      marker_kernel<<<1, 1, 0, s[size_t(m)]>>>(blk + m);
      BENCH_CUDA_CHECK(cudaGetLastError());
      BENCH_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint64_t> h(size_t(m) + 1);
      BENCH_CUDA_CHECK(cudaMemcpy(h.data(), blk, h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
      const uint64_t first_end = *std::min_element(h.begin(), h.begin() + m);
      const double lead = (double(first_end) - double(h[size_t(m)])) / 1e3;  // > 0: ran while all spun
      leads.push_back(lead);
      if (lead < 0.5 * double(long_spin_ns) / 1e3) ++votes;
    }
    block_lead_us.push_back(bench::median(leads));
    if (2 * votes > o.reps) {
      blocked_at = m;
      break;
    }
  }

  // Third probe, to tell "a launch goes to a free queue" from "streams take queues in turn as
  // they become active": block stream 0, then run k short kernels to completion, each on a stream
  // of its own (1 .. k), then a marker on stream k + 1. Taking turns, some k lands the marker on
  // stream 0's queue and it waits; given free queues, it never waits.
  const uint64_t turn_spin_ns = uint64_t(n) * 60'000 + 1'000'000;
  std::vector<int> turn_waits;  // the k at which the marker waited
  std::vector<double> turn_lead_us;
  for (int k = 0; k + 1 < n; ++k) {
    int votes = 0;
    std::vector<double> leads;
    for (int r = 0; r < o.reps; ++r) {
      spin_kernel<<<1, 1, 0, s[0]>>>(turn_spin_ns, blk);
      marker_kernel<<<1, 1, 0, s[0]>>>(blk + n);
      for (int i = 1; i <= k; ++i) {
        marker_kernel<<<1, 1, 0, s[size_t(i)]>>>(blk + i);
        BENCH_CUDA_CHECK(cudaStreamSynchronize(s[size_t(i)]));
      }
      marker_kernel<<<1, 1, 0, s[size_t(k + 1)]>>>(blk + k + 1);
      BENCH_CUDA_CHECK(cudaGetLastError());
      BENCH_CUDA_CHECK(cudaDeviceSynchronize());
      uint64_t h[2];
      BENCH_CUDA_CHECK(cudaMemcpy(&h[0], blk, sizeof(uint64_t), cudaMemcpyDeviceToHost));
      BENCH_CUDA_CHECK(cudaMemcpy(&h[1], blk + k + 1, sizeof(uint64_t), cudaMemcpyDeviceToHost));
      const double lead = (double(h[0]) - double(h[1])) / 1e3;
      leads.push_back(lead);
      // A marker that was launched after the spin ended (the host too slow) says nothing: the
      // spin is sized for 60 us per short kernel.
      if (lead < 0.1 * double(turn_spin_ns) / 1e3) ++votes;
    }
    turn_lead_us.push_back(bench::median(leads));
    if (2 * votes > o.reps) turn_waits.push_back(k);
  }
  BENCH_CUDA_CHECK(cudaFree(blk));
  std::printf("turn probe: %s\n", turn_waits.empty()
                                      ? ("a fresh stream never waited behind the blocked one, after 0 .. " +
                                         std::to_string(n - 2) + " other streams ran")
                                            .c_str()
                                      : ("a fresh stream waited after k = " + std::to_string(turn_waits[0]) +
                                         " other streams ran (and " + std::to_string(turn_waits.size() - 1) +
                                         " more k)")
                                            .c_str());
  std::printf("blocking probe: %s\n",
              blocked_at ? ("a stream waits once " + std::to_string(blocked_at) + " other streams are blocked: " +
                            std::to_string(blocked_at) + " queues in effect")
                               .c_str()
                         : ("no stream waited with up to " + std::to_string(n - 1) + " streams blocked").c_str());
  const std::vector<int> group = bench::queue_groups(aliased);
  const int rr = bench::round_robin_queues(aliased, group);
  int groups = 0;
  for (int g : group) groups = std::max(groups, g + 1);
  size_t pairs = 0;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) pairs += aliased[size_t(i)][size_t(j)];

  std::printf("CUDA_DEVICE_MAX_CONNECTIONS=%s: %d streams in %d queue groups, %zu of %d pairs share a queue\n",
              connections.c_str(), n, groups, pairs, n * (n - 1) / 2);
  std::printf("groups by creation order:");
  for (int g : group) std::printf(" %d", g);
  std::printf("\nround robin (k-th stream created -> queue k mod Q): %s\n",
              rr ? ("yes, Q = " + std::to_string(rr)).c_str() : pairs == 0 ? "no (no two streams shared a queue)" : "no");
  nlohmann::json out;
  out["provenance"] = bench::provenance(o.command_line);
  out["CUDA_DEVICE_MAX_CONNECTIONS"] = env ? nlohmann::json(env) : nlohmann::json(nullptr);
  out["streams"] = n;
  out["spin_us"] = o.spin_us;
  out["reps"] = o.reps;
  out["probe_seconds"] = seconds;
  out["groups"] = group;
  out["queue_groups"] = groups;
  out["round_robin_queues"] = rr;
  out["aliased_pairs"] = pairs;
  out["blocked_streams_before_wait"] = blocked_at;  // 0: none up to streams - 1
  out["blocking_probe_lead_us"] = block_lead_us;   // per m: first blocker's spin end - stream m's marker
  out["blocking_spin_us"] = double(long_spin_ns) / 1e3;
  out["turn_probe_waits_at_k"] = turn_waits;   // empty: never
  out["turn_probe_lead_us"] = turn_lead_us;     // per k: spin end - the fresh stream's marker
  out["turn_spin_us"] = double(turn_spin_ns) / 1e3;
  for (int i = 0; i < n; ++i) {
    std::string row;
    for (int j = 0; j < n; ++j) row += j <= i ? '.' : aliased[size_t(i)][size_t(j)] ? '1' : '0';
    out["aliased"].push_back(row);
    out["lead_us_median"].push_back(lead_us[size_t(i)]);
  }
  if (!o.out.empty()) {
    bench::write_json_atomic(o.out, out);
    std::printf("wrote %s\n", o.out.c_str());
  }
  BENCH_CUDA_CHECK(cudaFree(d));
  for (auto& st : s) BENCH_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--streams=")) o.streams = sl::bench::parse_int("--streams=", v, 1, 1024);
    else if (auto v = flag_value(arg, "--spin-us=")) o.spin_us = sl::bench::parse_int("--spin-us=", v, 0, 1000000);
    else if (auto v = flag_value(arg, "--reps=")) o.reps = sl::bench::parse_int("--reps=", v, 1, 10000);
    else if (auto v = flag_value(arg, "--out=")) o.out = v;
    else return false;
    return true;
  };
  return sl::bench::bench_main(
      argc, argv, "bench_queues",
      "CUDA_DEVICE_MAX_CONNECTIONS=Q bench_queues [--streams=40] [--spin-us=200] [--reps=3] [--out=FILE.json]\n"
      "Which streams share a hardware queue: a depth-first probe of every pair; see bench_queues.cu.\n",
      parse, [&o] {
        SL_CHECK(o.streams >= 2 && o.streams <= 256, "--streams must be 2 .. 256");
        // The marker on stream j starts up to ~50 us after the spin (launch latency): shorter
        // spins would read every pair as sharing.
        SL_CHECK(o.spin_us >= 200 && o.spin_us <= 100000, "--spin-us must be 200 .. 100000");
        SL_CHECK(o.reps >= 1 && o.reps <= 99, "--reps must be 1 .. 99");
        sl::run(o);
        return 0;
      });
}
