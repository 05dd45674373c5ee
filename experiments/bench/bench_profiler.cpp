// Profiler throughput against its speed targets (docs/measurement.md 7): analysis of a synthetic
// 10M-event trace (target >= 5M events/s), Kineto JSON export (target >= 2M events/s) and the JSON
// loader on 1M events (target >= 5M events/s; experiments/bench/bench_trace_load.py compares it
// with HTA's), plus the SQLite
// export and the precise JSON loader for reference. Rates are events of the trace model per second; the summary after the
// Google Benchmark table prints wall-clock and CPU-time rates and their ratio to the targets.
//
// Environment: STREAMLAB_BENCH_EVENTS (default 10000000) sets the trace size;
// STREAMLAB_BENCH_WRITE=path writes the benchmark trace as Kineto JSON there (to time HTA on the
// same trace, see tests/hta).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <unistd.h>
#include <string>

#include "profiler/analysis.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;

namespace {

size_t bench_events() {
  const char* e = std::getenv("STREAMLAB_BENCH_EVENTS");
  return e ? size_t(std::strtoull(e, nullptr, 10)) : size_t(10'000'000);
}

const Trace& big_trace() {
  static Trace t = [] {
    SyntheticOptions o;
    o.target_events = bench_events();
    auto t0 = std::chrono::steady_clock::now();
    Trace tr = make_synthetic_trace(o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "synthetic trace: %zu events (%zu kernels, %zu API calls) built in %.1f s, %.1f bytes/event\n",
                 tr.event_count(), tr.kernels.size(), tr.api_calls.size(), s,
                 double(tr.bytes_held()) / double(tr.event_count()));
    if (const char* w = std::getenv("STREAMLAB_BENCH_WRITE")) write_kineto_json_file(tr, w);
    return tr;
  }();
  return t;
}

struct Rate {
  double wall_eps = 0, cpu_eps = 0;
};
std::map<std::string, Rate>& rates() {
  static std::map<std::string, Rate> r;
  return r;
}

// Runs `body` per iteration, recording wall and CPU time; events/s in the table and the summary.
template <class F>
void measure(benchmark::State& state, const std::string& name, size_t events, F&& body) {
  double wall = 0, cpu = 0;
  size_t n = 0;
  for (auto _ : state) {
    auto w0 = std::chrono::steady_clock::now();
    std::clock_t c0 = std::clock();
    body();
    cpu += double(std::clock() - c0) / CLOCKS_PER_SEC;
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    ++n;
  }
  state.SetItemsProcessed(int64_t(events * n));
  state.counters["events"] = double(events);
  rates()[name] = {double(events) * n / wall, double(events) * n / cpu};
}

void BM_Analyze(benchmark::State& state) {
  const Trace& t = big_trace();
  AnalysisOptions o;
  o.range = "L3";
  measure(state, "analysis", t.event_count(), [&] {
    AnalysisResult r = analyze(t, o);
    benchmark::DoNotOptimize(r.whole.busy);
  });
}

void BM_KinetoExport(benchmark::State& state) {
  const Trace& t = big_trace();
  measure(state, "kineto_json_export", t.event_count(), [&] {
    std::FILE* f = std::fopen("/dev/null", "wb");
    size_t n = write_kineto_json(t, f);
    std::fclose(f);
    benchmark::DoNotOptimize(n);
  });
}

const Trace& small_trace() {
  static Trace t = [] {
    SyntheticOptions o;
    o.target_events = std::min<size_t>(bench_events(), 1'000'000);
    return make_synthetic_trace(o);
  }();
  return t;
}

void BM_SqliteExport(benchmark::State& state) {
  const Trace& t = small_trace();
  std::string path = "/tmp/streamlab_bench_" + std::to_string(::getpid()) + ".sqlite";
  measure(state, "sqlite_export_1M", t.event_count(), [&] { write_nsys_sqlite(t, path); });
  std::remove(path.c_str());
}

// The JSON loader (target >= 5M events/s): from text in memory and from a file (the way
// `streamlab analyze / compare / view` load), plus the precise (DOM) loader it falls back to.
void BM_JsonLoad(benchmark::State& state) {
  const Trace& t = small_trace();
  std::string js = kineto_json_string(t);
  measure(state, "json_load_1M", t.event_count(), [&] {
    Trace back = load_kineto_json(js, "bench");
    benchmark::DoNotOptimize(back.kernels.size());
  });
}

void BM_JsonLoadFile(benchmark::State& state) {
  const Trace& t = small_trace();
  std::string path = "/tmp/streamlab_bench_" + std::to_string(::getpid()) + ".json";
  write_kineto_json_file(t, path);
  measure(state, "json_load_file_1M", t.event_count(), [&] {
    Trace back = load_kineto_json_file(path);
    benchmark::DoNotOptimize(back.kernels.size());
  });
  std::remove(path.c_str());
}

void BM_JsonLoadPrecise(benchmark::State& state) {
  const Trace& t = small_trace();
  std::string js = kineto_json_string(t);
  JsonLoadOptions precise;
  precise.fast = false;
  measure(state, "json_load_precise_1M", t.event_count(), [&] {
    Trace back = load_kineto_json(js, "bench", precise);
    benchmark::DoNotOptimize(back.kernels.size());
  });
}

BENCHMARK(BM_Analyze)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_KinetoExport)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_SqliteExport)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_JsonLoad)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_JsonLoadFile)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_JsonLoadPrecise)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const std::map<std::string, double> targets = {
      {"analysis", 5e6}, {"kineto_json_export", 2e6}, {"json_load_1M", 5e6}, {"json_load_file_1M", 5e6}};
  std::printf("\nprofiler throughput (events of the trace model per second)\n");
  std::printf("  %-22s %14s %14s %10s %16s\n", "", "wall M ev/s", "CPU M ev/s", "target", "ratio (wall/CPU)");
  for (const auto& [name, r] : rates()) {
    auto t = targets.find(name);
    if (t != targets.end())
      std::printf("  %-22s %14.2f %14.2f %8.1fM %8.2f / %.2f\n", name.c_str(), r.wall_eps / 1e6, r.cpu_eps / 1e6,
                  t->second / 1e6, r.wall_eps / t->second, r.cpu_eps / t->second);
    else
      std::printf("  %-22s %14.2f %14.2f %10s\n", name.c_str(), r.wall_eps / 1e6, r.cpu_eps / 1e6, "-");
  }
  return 0;
}
