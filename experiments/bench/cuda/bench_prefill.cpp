// Prefill time against the token count, per stream placement (docs/streams.md, prediction 5: overlap
// pays only while kernels leave SMs free; at large token counts the big GEMMs fill the GPU,
// which is why vLLM runs phase A on aux streams only up to 1024 tokens).
//
// Variants, each one model (flash-shaped config, batch 1) prefilling prompts of every --tokens
// size in one chunk: `serial` (no aux streams), `shared` (aux streams, phase A parallel up to
// 1024 tokens: vLLM's rule), `shared-phase-a-always` (phase A parallel at every size). Each
// (variant, size) prefills once to warm up, then --reps times; the median device time (host
// timer around the prefill, synchronised) is reported with the ratios serial / shared and
// shared-phase-a-always / shared.
//
//   bench_prefill [--config=flash-6l] [--tokens=256,1024,4096,8192] [--reps=5] [--out=FILE.json]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "experiments/bench/cuda/bench_util.h"
#include "model/cuda/cuda_backend.h"
#include "model/deepseek_v4.h"

namespace sl {
namespace {

struct Options {
  std::string config = "flash-6l", out, command_line;
  std::string source = "cuda";  // --stream-source
  WeightFormat weights = WeightFormat::Bf16;  // --weights
  std::string kernel_variants;                // --kernel-variants= (model/kernel_variants.h)
  std::vector<int> tokens{256, 1024, 4096, 8192};
  int reps = 5;
};

struct Variant {
  const char* name;
  const char* policy;
  int phase_a_max_tokens;
};
const Variant kVariants[] = {{"serial", "serial", 1024},
                             {"shared", "shared", 1024},
                             {"shared-phase-a-always", "shared", INT_MAX}};

void run(const Options& o) {
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "bench_prefill: no CUDA device (%s); nothing measured\n", why.c_str());
    std::exit(2);
  }
  const int max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  struct Live {
    std::unique_ptr<Backend> be;
    std::unique_ptr<DeepSeekV4> model;
  };
  auto live = std::make_shared<Live>();
  std::map<std::pair<std::string, int>, std::vector<double>> samples;  // (variant, tokens) -> ms
  const size_t nv = std::size(kVariants);
  for (size_t vi = 0; vi < nv; ++vi)
    for (size_t ti = 0; ti < o.tokens.size(); ++ti) {
      const Variant v = kVariants[vi];
      const int T = o.tokens[ti];
      const std::string name = "prefill/" + o.config + "/" + v.name + "/tokens:" + std::to_string(T);
      benchmark::RegisterBenchmark(name.c_str(), [&o, &samples, live, v, T, ti, max_t](benchmark::State& st) {
        if (ti == 0) {  // the variant's model, shared by its sizes
          live->model.reset();
          live->be.reset();
          ModelConfig c = load_config(o.config);
          c.batch = 1;
          c.context_length = max_t;
          validate(c);
          RunShape shape;
          shape.batch = 1;
          shape.max_positions = max_t + c.draft_steps + 8;
          shape.max_seq_tokens = max_t;  // every prompt in one chunk
          shape.weights = o.weights;
          CudaBackendOptions bo;
          bo.variants = KernelVariants::parse(o.kernel_variants);
          live->be = make_cuda_backend(bo);
          StreamPolicy policy = StreamPolicy::parse(v.policy);
          policy.phase_a_max_tokens = v.phase_a_max_tokens;
          policy.source = parse_stream_source(o.source);
          live->model = std::make_unique<DeepSeekV4>(*live->be, c, policy, shape);
          live->model->init_random(c.seed);
          std::fprintf(stderr, "%s: model built\n", v.name);
        }
        const ModelConfig& c = live->model->config();
        std::vector<int32_t> prompt(static_cast<size_t>(T));
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(splitmix64(i + 17) % uint64_t(c.vocab_size));
        using clock = std::chrono::steady_clock;
        live->model->prefill(prompt, T);  // warm-up: heuristics, first launches at this size
        live->be->synchronize();
        for (auto _ : st) {
          const auto t0 = clock::now();
          live->model->prefill(prompt, T);
          live->be->synchronize();
          const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
          samples[{v.name, T}].push_back(ms);
          st.SetIterationTime(ms * 1e-3);
        }
      })->UseManualTime()->Iterations(o.reps)->Unit(benchmark::kMillisecond);
    }
  benchmark::RunSpecifiedBenchmarks();
  live->model.reset();
  live->be.reset();

  std::printf("\n%-8s %14s %14s %24s %14s %18s\n", "tokens", "serial ms", "shared ms", "shared-phase-a-always ms",
              "serial/shared", "always/shared");
  nlohmann::json out;
  out["provenance"] = bench::provenance(o.command_line);
  out["config"] = o.config;
  out["reps"] = o.reps;
  out["stream_source"] = o.source;
  out["weights"] = weight_format_name(o.weights);
  out["kernel_variants"] = KernelVariants::parse(o.kernel_variants).str();
  for (int T : o.tokens) {
    const double s = bench::median(samples[{"serial", T}]), sh = bench::median(samples[{"shared", T}]),
                 al = bench::median(samples[{"shared-phase-a-always", T}]);
    std::printf("%-8d %14.3f %14.3f %24.3f %14.3f %18.3f\n", T, s, sh, al, s / sh, al / sh);
    out["sizes"].push_back({{"tokens", T},
                            {"serial_ms", samples[{"serial", T}]},
                            {"shared_ms", samples[{"shared", T}]},
                            {"shared_phase_a_always_ms", samples[{"shared-phase-a-always", T}]},
                            {"median_ms", {{"serial", s}, {"shared", sh}, {"shared_phase_a_always", al}}},
                            {"serial_over_shared", s / sh},
                            {"always_over_shared", al / sh}});
  }
  if (!o.out.empty()) {
    bench::write_json_atomic(o.out, out);
    std::printf("wrote %s\n", o.out.c_str());
  }
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--config=")) o.config = v;
    else if (auto v = flag_value(arg, "--tokens=")) o.tokens = sl::bench::parse_ints(v);
    else if (auto v = flag_value(arg, "--reps=")) o.reps = sl::bench::parse_int("--reps=", v, 1, 10000);
    else if (auto v = flag_value(arg, "--out=")) o.out = v;
    else if (auto v = flag_value(arg, "--stream-source=")) o.source = (sl::parse_stream_source(v), v);
    else if (auto v = flag_value(arg, "--weights=")) o.weights = sl::parse_weight_format(v);
    else if (auto v = flag_value(arg, "--kernel-variants=")) o.kernel_variants = (sl::KernelVariants::parse(v), v);
    else return false;
    return true;
  };
  static const std::string usage = std::string(
      "bench_prefill [--config=flash-6l] [--tokens=256,1024,4096,8192] [--reps=5] [--stream-source=cuda|torch]\n"
      "              [--weights=bf16|native|native-w4a8] [--kernel-variants=SPEC] [--out=FILE.json]\n"
      "  --kernel-variants: ") + sl::kKernelVariantsHelp + "\n"
      "Prefill time per token count: serial, shared (phase A parallel up to 1024 tokens), shared with\n"
      "phase A always parallel; see bench_prefill.cpp.\n";
  return sl::bench::bench_main(
      argc, argv, "bench_prefill", usage.c_str(),
      parse, [&o] {
        SL_CHECK(!o.tokens.empty() && o.reps >= 1, "--tokens must list sizes and --reps be >= 1");
        for (int t : o.tokens) SL_CHECK(t >= 1 && t <= 65536, "--tokens: ", t, " is outside 1 .. 65536");
        sl::run(o);
        return 0;
      });
}
