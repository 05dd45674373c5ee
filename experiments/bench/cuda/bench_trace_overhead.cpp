// Tracing overhead (docs/measurement.md 6): decode step time with CUPTI tracing on against off, in
// one process, same model and inputs. CUPTI must attach before CUDA initialises (latency
// timestamps), so the order is: tracing ON window, then stop (every activity kind disabled,
// unsubscribed), then two OFF windows; the two OFF windows measured back to back give the
// run-to-run noise that the ON/OFF ratio must be read against.
//
// What each part of the default record set costs is measured by switching parts off
// (--no-latency-timestamps, --no-runtime, --no-cuda-events, --no-memory, --no-nvtx,
// --no-op-ranges (NVTX ranges per op; step / layer / phase ranges stay): one process
// per variant, since latency timestamps are fixed before CUDA initialises). --graph measures
// the steps as CUDA-graph replays (captured before the windows).
//
//   bench_trace_overhead [--config=flash-2l] [--batch=8] [--context=1024] [--policy=shared]
//                        [--steps=20] [--graph] [--no-...] [--out=FILE.json]
//                        [google-benchmark flags]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "experiments/bench/cuda/bench_util.h"
#include "core/rng.h"
#include "model/cuda/cuda_backend.h"
#include "model/deepseek_v4.h"
#include "profiler/cupti/cupti_session.h"

namespace sl {
namespace {

struct Options {
  std::string config = "flash-2l", policy = "shared", out, command_line;
  std::string source = "cuda";  // --stream-source
  WeightFormat weights = WeightFormat::Bf16;  // --weights
  int batch = 8, context = 1024, steps = 20;
  bool graph = false;
  bool op_ranges = true;  // op-level NVTX ranges (step / layer / phase ranges are always on)
  prof::SessionOptions session;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Registers one measured window; `before` / `after` run around its steps (tracing on / off).
void add_window(const std::string& name, DeepSeekV4& model, Backend& be, int steps, bool graph,
                std::vector<double>& ms, std::function<void()> before, std::function<void()> after) {
  benchmark::RegisterBenchmark(name.c_str(), [&model, &be, &ms, graph, before, after](benchmark::State& st) {
    if (before) before();
    for (auto _ : st) {
      be.synchronize();
      auto t0 = std::chrono::steady_clock::now();
      if (graph)
        model.decode_step_graph();
      else
        model.decode_step();
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ms.push_back(t);
      st.SetIterationTime(t * 1e-3);
    }
    if (after) after();
  })->UseManualTime()->Iterations(steps)->Unit(benchmark::kMillisecond);
}

char** g_argv = nullptr;

int run(const Options& o) {
  // As `streamlab run --trace` does: NVTX ranges are recorded too (they are part of the cost).
  if (o.session.nvtx) prof::CuptiSession::reexec_with_nvtx_injection(g_argv, "bench_trace_overhead");
  auto& session = prof::CuptiSession::instance();
  const prof::SessionState state = session.start(o.session);  // before any CUDA call
  if (state != prof::SessionState::Tracing) {
    std::fprintf(stderr, "bench_trace_overhead: CUPTI not tracing (%s); nothing measured\n", session.message().c_str());
    return 2;
  }
  std::string why;
  SL_CHECK(cuda_available(&why), "bench_trace_overhead: no CUDA device (", why, ")");
  ModelConfig c = load_config(o.config);
  c.batch = o.batch;
  c.context_length = o.context;
  validate(c);
  RunShape shape;
  shape.batch = o.batch;
  shape.max_positions = o.context + 3 * o.steps + 8 + c.draft_steps + 2;
  shape.max_seq_tokens = std::min(o.context, std::max(1, c.prefill_chunk / o.batch));
  shape.weights = o.weights;
  auto be = make_cuda_backend({});
  StreamPolicy policy = StreamPolicy::parse(o.policy);
  policy.source = parse_stream_source(o.source);
  DeepSeekV4 model(*be, c, policy, shape);
  model.init_random(c.seed);
  model.ops().set_op_ranges(o.op_ranges);
  std::vector<int32_t> prompt(size_t(o.batch) * size_t(o.context));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(splitmix64(i + 5) % uint64_t(c.vocab_size));
  model.prefill(prompt, o.context);
  for (int i = 0; i < 3; ++i) {  // warm-up: module loads, CUPTI code generation (and the capture)
    if (o.graph)
      model.decode_step_graph();
    else
      model.decode_step();
  }

  // Google Benchmark runs once per process: the three windows are registered in order and the
  // tracing state changes inside them (on for the first, then stopped for good).
  std::vector<double> on, off1, off2;
  prof::Trace trace;
  const std::string mode = o.graph ? "/graph" : "/eager";
  add_window("decode/tracing:on" + mode, model, *be, o.steps, o.graph, on, [&] { session.begin_window(); },
             [&] {
               trace = session.end_window();
               session.stop();
             });
  add_window("decode/tracing:off" + mode, model, *be, o.steps, o.graph, off1, nullptr, nullptr);
  add_window("decode/tracing:off_repeat" + mode, model, *be, o.steps, o.graph, off2, nullptr, nullptr);
  benchmark::RunSpecifiedBenchmarks();

  const double m_on = median(on), m_off1 = median(off1), m_off2 = median(off2);
  const auto& k = trace.counts;
  std::printf("\n%-22s %10s\n", "window", "median ms");
  std::printf("%-22s %10.3f\n%-22s %10.3f\n%-22s %10.3f\n", "tracing on", m_on, "tracing off", m_off1,
              "tracing off (repeat)", m_off2);
  std::printf("overhead ratio on/off: %.3f   noise off(repeat)/off: %.3f   (target on/off <= 1.05)\n", m_on / m_off1,
              m_off2 / m_off1);
  std::printf("records: %zu kernels, dropped %llu, zero timestamps %llu, end<start %llu, overhead records %llu\n",
              trace.kernels.size(), (unsigned long long)k.dropped, (unsigned long long)k.zero_timestamps,
              (unsigned long long)k.end_before_start, (unsigned long long)k.overhead_records);

  nlohmann::json j{{"provenance", bench::provenance(o.command_line)},
                   {"config", o.config},
                   {"policy", o.policy},
                   {"stream_source", o.source},
                   {"weights", weight_format_name(o.weights)},
                   {"batch", o.batch},
                   {"context", o.context},
                   {"mode", o.graph ? "graph" : "eager"},
                   {"records_enabled",
                    {{"latency_timestamps", o.session.latency_timestamps},
                     {"runtime_api", o.session.runtime_api},
                     {"cuda_events", o.session.cuda_events},
                     {"memory", o.session.memory},
                     {"nvtx", o.session.nvtx},
                     {"op_ranges", o.op_ranges}}},
                   {"step_ms", {{"on", on}, {"off", off1}, {"off_repeat", off2}}},
                   {"median_ms", {{"on", m_on}, {"off", m_off1}, {"off_repeat", m_off2}}},
                   {"ratio_on_off", m_on / m_off1},
                   {"noise_off_repeat_off", m_off2 / m_off1},
                   {"records",
                    {{"kernels", trace.kernels.size()},
                     {"dropped", k.dropped},
                     {"zero_timestamps", k.zero_timestamps},
                     {"end_before_start", k.end_before_start},
                     {"overhead_records", k.overhead_records}}}};
  if (!o.out.empty()) bench::write_json_atomic(o.out, j);
  return k.clean() ? 0 : 3;
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::g_argv = argv;
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--config=")) o.config = v;
    else if (auto v = flag_value(arg, "--policy=")) o.policy = v;
    else if (auto v = flag_value(arg, "--stream-source=")) o.source = (sl::parse_stream_source(v), v);
    else if (auto v = flag_value(arg, "--weights=")) o.weights = sl::parse_weight_format(v);
    else if (auto v = flag_value(arg, "--out=")) o.out = v;
    else if (auto v = flag_value(arg, "--batch=")) o.batch = sl::bench::parse_int("--batch=", v, 1, 4096);
    else if (auto v = flag_value(arg, "--context=")) o.context = sl::bench::parse_int("--context=", v, 1, 1 << 20);
    else if (auto v = flag_value(arg, "--steps=")) o.steps = sl::bench::parse_int("--steps=", v, 1, 100000);
    else if (!std::strcmp(arg, "--graph")) o.graph = true;
    else if (!std::strcmp(arg, "--no-latency-timestamps")) o.session.latency_timestamps = false;
    else if (!std::strcmp(arg, "--no-runtime")) o.session.runtime_api = false;
    else if (!std::strcmp(arg, "--no-cuda-events")) o.session.cuda_events = false;
    else if (!std::strcmp(arg, "--no-memory")) o.session.memory = false;
    else if (!std::strcmp(arg, "--no-nvtx")) o.session.nvtx = false;
    else if (!std::strcmp(arg, "--no-op-ranges")) o.op_ranges = false;
    else return false;
    return true;
  };
  return sl::bench::bench_main(
      argc, argv, "bench_trace_overhead",
      "bench_trace_overhead [--config=flash-2l] [--batch=8] [--context=1024] [--policy=shared]\n"
      "                     [--stream-source=cuda|torch] [--weights=bf16|native|native-w4a8]\n"
      "                     [--steps=20] [--graph] [--no-latency-timestamps] [--no-runtime]\n"
      "                     [--no-cuda-events] [--no-memory] [--no-nvtx] [--no-op-ranges]\n"
      "                     [--out=FILE.json]\n"
      "Decode step time with CUPTI tracing on vs off in one process (CUDA).\n",
      parse, [&o] { return sl::run(o); });
}
