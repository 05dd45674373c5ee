// Decode step time against the bytes floor (docs/measurement.md 7), on the CUDA backend.
//
// floor = bytes a decode step must read / measured device-to-device copy bandwidth, where the
// bytes are: every dense weight of each layer execution (target layers once, the MTP layer of
// each draft step), the routed experts actually used (distinct experts of the execution x 3
// matrices), the LM head once per head call, the embedding rows, and the KV each query must
// read (its window, its compressed entries, and the indexer keys). Weights count as they are held
// (--weights=native: FP8 codes plus their block scales, MXFP4 pairs plus their e8m0 scales, the
// rest in bf16); KV entries as a real cache holds them (--kv-cache=fp8: vLLM's FP8 layout, 584
// bytes per flash entry; the caches are packed so under --kernel-variants=fp8-kv=packed, else
// hold the same values in bf16, a gap the ratio then includes). The ratio printed is the
// median step time over that floor, measured in this run. Each batch is measured eager (the
// host enqueues every kernel) and, with the same model and caches, through one CUDA graph
// replayed per step (--modes picks).
//
//   bench_decode [--config=flash-6l] [--batches=1,8] [--policy=shared] [--context=4096]
//                [--mtp-layers=1] [--draft-steps=1] [--steps=20] [--modes=eager,graph]
//                [--no-shared-expert-stream] [--weights=bf16|native|native-w4a8] [--kernel-variants=SPEC] [--out=FILE.json]
//                [google-benchmark flags]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "experiments/bench/cuda/bench_util.h"
#include "core/rng.h"
#include "model/cuda/cuda_backend.h"
#include "model/deepseek_v4.h"
#include "model/weights.h"

namespace sl {
namespace {

struct Options {
  std::string config = "flash-6l", policy = "shared", out;
  std::string source = "cuda", placement = "vllm-fix", graph_scope = "step";
  std::vector<int> batches{1, 8};
  std::vector<std::string> modes{"eager", "graph"};
  int context = 4096, mtp_layers = 1, draft_steps = 1, steps = 20;
  int mtp_compress = -1;  // -1: the config's
  bool shared_expert_stream = true;
  std::string command_line;
  std::string kernel_variants;  // --kernel-variants= (model/kernel_variants.h)
  WeightFormat weights = WeightFormat::Bf16;  // --weights=
  bool kv_fp8 = false;  // --kv-cache=fp8: FP8 caches (packed under fp8-kv=packed) and the floor in FP8 bytes
};

// Bytes of the dense (non-routed-expert) weights under a name prefix, as the backend holds
// them (native: FP8 codes and their block scales); the routing table is read one row per token,
// counted separately.
size_t dense_bytes(const std::vector<WeightSpec>& specs, const std::string& prefix, DType wdt, WeightFormat fmt) {
  size_t n = 0;
  for (const auto& s : specs) {
    if (s.name.rfind(prefix, 0) != 0) continue;
    if (s.name.find(".ffn.experts.") != std::string::npos || s.name.find("tid2eid") != std::string::npos) continue;
    n += held_bytes(s, wdt, fmt);
  }
  return n;
}

// Bytes of one routed expert (w1, w2, w3) as held: bf16, or MXFP4 pairs and their scales.
size_t expert_bytes(const std::vector<WeightSpec>& specs, DType wdt, WeightFormat fmt) {
  size_t n = 0;
  for (const auto& s : specs)
    if (s.stack_index == 0 && s.name.rfind("layers.0.", 0) == 0) n += held_bytes(s, wdt, fmt);
  return n;
}

struct Floor {
  size_t weights = 0, experts = 0, head = 0, kv = 0;
  size_t total() const { return weights + experts + head + kv; }
};

// The bytes one decode step must read, from the recorded routing and the positions.
Floor decode_floor(const ModelConfig& c, const std::vector<RoutingRecord>& routing, int B, int pos, DType wdt,
                   WeightFormat fmt, bool kv_fp8) {
  ModelWeights w;
  const auto specs = weight_specs(c, w);
  const size_t a = dtype_size(wdt);
  const size_t D = size_t(c.hidden_size), Dh = size_t(c.head_dim);
  Floor f;
  const size_t one_expert = expert_bytes(specs, wdt, fmt);
  for (const auto& r : routing) {
    const bool mtp = r.layer >= c.num_hidden_layers;
    const std::string prefix =
        mtp ? "mtp." + std::to_string(r.layer - c.num_hidden_layers) + "." : "layers." + std::to_string(r.layer) + ".";
    f.weights += dense_bytes(specs, prefix, wdt, fmt);
    if (c.layer_is_hash_routed(r.layer)) f.weights += size_t(r.tokens) * size_t(c.num_experts_per_tok) * 4;
    std::set<int32_t> distinct(r.ids.begin(), r.ids.end());
    f.experts += distinct.size() * one_expert;
    // KV read by each query at its position p (target: pos; draft step s: pos + s).
    const int p = pos + std::max(r.draft_step, 0);
    const int ratio = c.layer_ratio(r.layer);
    const size_t window = size_t(std::min(p + 1, c.sliding_window));
    const size_t n_c = size_t((p + 1) / ratio);
    // An entry as a real cache holds it: bf16, or vLLM's FP8 layout (kv_cache.h).
    const size_t entry = kv_entry_bytes(c, wdt, kv_fp8), key = indexer_key_bytes(c, wdt, kv_fp8);
    size_t per_query = window * entry;
    switch (c.layer_type(r.layer)) {
      case LayerType::C128A: per_query += n_c * entry; break;
      case LayerType::C4A:
        per_query += std::min(n_c, size_t(c.index_topk)) * entry + n_c * key;
        break;
      default: break;
    }
    f.kv += size_t(B) * per_query;
  }
  // LM head (target + each draft step), the final norms and hc_head, the embedding rows.
  const int head_calls = 1 + (c.num_nextn_predict_layers > 0 ? c.draft_steps : 0);
  f.head += size_t(head_calls) * (size_t(c.vocab_size) * D * a + size_t(B) * D * a);
  f.head += dense_bytes(specs, "norm.", wdt, fmt) + dense_bytes(specs, "hc_head_", wdt, fmt);
  return f;
}

struct BatchResult {
  int batch = 0;
  std::string mode;  // eager or graph
  std::vector<double> step_ms;
  // Host time until the enqueue (eager) or the replay call (graph) returned, per step: when it
  // is close to step_ms the step is bound by the host's launch rate, not by the GPU.
  std::vector<double> enqueue_ms;
  Floor floor;
  Backend::GraphStats graph;
};

void run(const Options& o) {
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "bench_decode: no CUDA device (%s); nothing measured\n", why.c_str());
    std::exit(2);
  }
  std::vector<double> bw_samples;
  const double bw = bench::copy_bandwidth_bytes_per_s(&bw_samples);
  std::printf("device-to-device copy: median %.1f GB/s (read + write), %zu samples, min %.1f max %.1f\n", bw / 1e9,
              bw_samples.size(), bw_samples.front() / 1e9, bw_samples.back() / 1e9);
  std::vector<BatchResult> results;
  // Google Benchmark runs at most once per process (a second RunSpecifiedBenchmarks fails), so
  // every (batch, mode) is registered first. The first mode of a batch builds the model and
  // prefills; the later modes of that batch reuse it (same weights, caches one step further);
  // the last one frees it.
  struct Live {
    std::unique_ptr<Backend> be;
    std::unique_ptr<DeepSeekV4> model;
    ModelConfig cfg;
  };
  auto live = std::make_shared<Live>();
  results.resize(o.batches.size() * o.modes.size());
  for (size_t bi = 0; bi < o.batches.size(); ++bi)
    for (size_t mi = 0; mi < o.modes.size(); ++mi) {
      const int B = o.batches[bi];
      const std::string mode = o.modes[mi];
      const size_t ri = bi * o.modes.size() + mi;
      const std::string name = "decode/" + o.config + "/" + o.policy + "/batch:" + std::to_string(B) + "/" + mode;
      benchmark::RegisterBenchmark(name.c_str(), [&o, &results, live, ri, mi, B, mode](benchmark::State& st) {
        if (mi == 0) {
          live->model.reset();
          live->be.reset();
          ModelConfig c = load_config(o.config);
          c.batch = B;
          c.context_length = o.context;
          c.num_nextn_predict_layers = o.mtp_layers;
          c.draft_steps = o.draft_steps;
          if (o.mtp_compress >= 0) set_mtp_compress_ratio(c, o.mtp_compress);
          validate(c);
          RunShape shape;
          shape.batch = B;
          shape.max_positions = o.context + int(o.modes.size()) * (o.steps + 8) + c.draft_steps + 2;
          shape.max_seq_tokens = std::min(o.context, std::max(1, c.prefill_chunk / B));
          shape.record_routing = true;
          shape.weights = o.weights;
          shape.kv_fp8 = o.kv_fp8;
          live->cfg = c;
          CudaBackendOptions bo;
          bo.variants = KernelVariants::parse(o.kernel_variants);
          live->be = make_cuda_backend(bo);
          StreamPolicy policy = StreamPolicy::parse(o.policy);
          policy.shared_expert_stream = o.shared_expert_stream;
          policy.source = parse_stream_source(o.source);
          policy.placement = parse_placement(o.placement);
          live->model = std::make_unique<DeepSeekV4>(*live->be, c, policy, shape);
          live->model->set_graph_scope(parse_graph_scope(o.graph_scope));
          live->model->init_random(c.seed);
          std::vector<int32_t> prompt(size_t(B) * size_t(o.context));
          for (size_t i = 0; i < prompt.size(); ++i)
            prompt[i] = int32_t(splitmix64(i + 17) % uint64_t(c.vocab_size));
          std::fprintf(stderr, "batch %d: prefill of %d tokens per sequence...\n", B, o.context);
          live->model->prefill(prompt, o.context);
        }
        Backend& be = *live->be;
        DeepSeekV4& model = *live->model;
        const bool graph = mode == "graph";
        // Only the device work of a step (enqueue or replay, to completion) is timed.
        using clock = std::chrono::steady_clock;
        double enqueue_ms = 0;
        auto step = [&]() {
          model.decode_prepare();
          be.synchronize();
          auto t0 = clock::now();
          if (graph)
            model.decode_replay();
          else
            model.decode_enqueue();
          auto t1 = clock::now();
          be.synchronize();
          double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
          enqueue_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
          model.decode_collect();
          return ms;
        };
        for (int i = 0; i < 3; ++i) step();  // warm-up (the graph's capture is in the first)
        BatchResult& r = results[ri];
        r.batch = B;
        r.mode = mode;
        if (graph) r.graph = model.graph_stats();
        for (auto _ : st) {
          const double ms = step();
          r.step_ms.push_back(ms);
          r.enqueue_ms.push_back(enqueue_ms);
          st.SetIterationTime(ms * 1e-3);
        }
        // The routing of the last measured step, at the last step's positions.
        r.floor = decode_floor(live->cfg, model.routing(), B, model.position() - 1, be.weight_dtype(), o.weights,
                               o.kv_fp8);
        if (mi + 1 == o.modes.size()) {
          live->model.reset();
          live->be.reset();
        }
      })->UseManualTime()->Iterations(o.steps)->Unit(benchmark::kMillisecond);
    }
  benchmark::RunSpecifiedBenchmarks();

  nlohmann::json out;
  out["provenance"] = bench::provenance(o.command_line);
  out["copy_bandwidth_GBps"] = {{"median", bw / 1e9}, {"samples", bw_samples}};
  out["config"] = o.config;
  out["policy"] = o.policy;
  out["kernel_variants"] = KernelVariants::parse(o.kernel_variants).str();
  out["shared_expert_stream"] = o.shared_expert_stream;
  out["stream_source"] = o.source;
  out["placement"] = o.placement;
  out["graph_scope"] = o.graph_scope;
  out["context"] = o.context;
  out["mtp_layers"] = o.mtp_layers;
  out["mtp_compress"] = o.mtp_compress >= 0 ? o.mtp_compress : load_config(o.config).mtp_compress_ratio;
  out["draft_steps"] = o.draft_steps;
  out["weights"] = weight_format_name(o.weights);
  // The floor's KV bytes: a bf16 cache, or vLLM's FP8 layout; the run's caches are packed in those
  // bytes ("packed", as run --json records it), or with fp8-kv=emulated hold the same values in
  // bf16 ("emulated": the floor then counts fewer bytes than the caches hold).
  out["kv_cache"] = o.kv_fp8 ? "fp8" : "bf16";
  if (o.kv_fp8) out["kv_cache_storage"] = KernelVariants::parse(o.kernel_variants).fp8_kv_packed ? "packed" : "emulated";
  out["modes"] = o.modes;
  std::printf("\n%-6s %-6s %12s %12s %12s %12s %12s %8s\n", "batch", "mode", "median ms", "enqueue ms", "floor GB",
              "floor ms", "experts GB", "ratio");
  for (auto& r : results) {
    if (r.step_ms.empty()) continue;  // filtered out (--benchmark_filter)
    std::vector<double> s = r.step_ms;
    std::sort(s.begin(), s.end());
    const double med = s[s.size() / 2];
    std::vector<double> q = r.enqueue_ms;
    std::sort(q.begin(), q.end());
    const double enq_med = q[q.size() / 2];
    const double floor_ms = double(r.floor.total()) / bw * 1e3;
    std::printf("%-6d %-6s %12.3f %12.3f %12.3f %12.3f %12.3f %8.2f\n", r.batch, r.mode.c_str(), med, enq_med,
                r.floor.total() / 1e9, floor_ms, r.floor.experts / 1e9, med / floor_ms);
    nlohmann::json g;
    if (r.mode == "graph")
      g = {{"nodes", r.graph.nodes}, {"edges", r.graph.edges}, {"capture_ms", r.graph.capture_ms},
           {"instantiate_ms", r.graph.instantiate_ms}};
    out["batches"].push_back({{"batch", r.batch},
                              {"mode", r.mode},
                              {"graph", g},
                              {"step_ms", r.step_ms},
                              {"median_ms", med},
                              {"enqueue_ms", r.enqueue_ms},
                              {"median_enqueue_ms", enq_med},
                              {"floor_bytes",
                               {{"total", r.floor.total()},
                                {"dense_weights", r.floor.weights},
                                {"routed_experts", r.floor.experts},
                                {"head_and_embedding", r.floor.head},
                                {"kv", r.floor.kv}}},
                              {"floor_ms", floor_ms},
                              {"ratio_to_floor", med / floor_ms}});
  }
  if (!o.out.empty()) {
    bench::write_json_atomic(o.out, out);
    std::printf("wrote %s\n", o.out.c_str());
  }
}

std::vector<std::string> parse_modes(const std::string& s) {
  const std::vector<std::string> v = bench::split(s);
  for (const auto& item : v)
    SL_CHECK(item == "eager" || item == "graph", "bench_decode: --modes takes eager and/or graph, not '", item, "'");
  SL_CHECK(!v.empty(), "bench_decode: --modes is empty");
  return v;
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--config=")) o.config = v;
    else if (auto v = flag_value(arg, "--policy=")) o.policy = v;
    else if (auto v = flag_value(arg, "--kernel-variants=")) o.kernel_variants = (sl::KernelVariants::parse(v), v);
    else if (auto v = flag_value(arg, "--out=")) o.out = v;
    else if (auto v = flag_value(arg, "--batches=")) o.batches = sl::bench::parse_ints(v);
    else if (auto v = flag_value(arg, "--context=")) o.context = sl::bench::parse_int("--context=", v, 1, 1 << 20);
    else if (auto v = flag_value(arg, "--mtp-layers=")) o.mtp_layers = sl::bench::parse_int("--mtp-layers=", v, 0, 64);
    else if (auto v = flag_value(arg, "--mtp-compress=")) o.mtp_compress = sl::bench::parse_int("--mtp-compress=", v, 0, 1 << 20);
    else if (auto v = flag_value(arg, "--draft-steps=")) o.draft_steps = sl::bench::parse_int("--draft-steps=", v, 0, 64);
    else if (auto v = flag_value(arg, "--steps=")) o.steps = sl::bench::parse_int("--steps=", v, 1, 100000);
    else if (auto v = flag_value(arg, "--modes=")) o.modes = sl::parse_modes(v);
    else if (std::strcmp(arg, "--no-shared-expert-stream") == 0) o.shared_expert_stream = false;
    else if (auto v = flag_value(arg, "--stream-source=")) o.source = (sl::parse_stream_source(v), v);
    else if (auto v = flag_value(arg, "--placement=")) o.placement = (sl::parse_placement(v), v);
    else if (auto v = flag_value(arg, "--graph-scope=")) o.graph_scope = (sl::parse_graph_scope(v), v);
    else if (auto v = flag_value(arg, "--weights=")) o.weights = sl::parse_weight_format(v);
    else if (auto v = flag_value(arg, "--kv-cache=")) {
      if (std::strcmp(v, "fp8") != 0 && std::strcmp(v, "bf16") != 0)
        throw sl::Error(std::string("--kv-cache=") + v + ": expected bf16 or fp8");
      o.kv_fp8 = std::strcmp(v, "fp8") == 0;
    }
    else return false;
    return true;
  };
  static const std::string usage = std::string(
      "bench_decode [--config=flash-6l] [--batches=1,8] [--policy=shared] [--context=4096]\n"
      "             [--mtp-layers=1] [--mtp-compress=0|4|128] [--draft-steps=1] [--steps=20] [--modes=eager,graph]\n"
      "             [--no-shared-expert-stream] [--stream-source=cuda|torch] [--placement=vllm-fix|vllm-head]\n"
      "             [--graph-scope=step|split] [--weights=bf16|native|native-w4a8] [--kv-cache=bf16|fp8] [--kernel-variants=SPEC]\n"
      "             [--out=FILE.json]\n"
      "  --kv-cache=fp8: FP8 KV caches (emulated: the values held in bf16; packed in vLLM's bytes under\n"
      "                  --kernel-variants=fp8-kv=packed) and the floor's KV in FP8 bytes\n"
      "  --kernel-variants: ") + sl::kKernelVariantsHelp + "\n"
      "Decode step time (CUDA) against the bytes floor; see the header of bench_decode.cpp.\n";
  return sl::bench::bench_main(
      argc, argv, "bench_decode", usage.c_str(),
      parse, [&o] {
        sl::run(o);
        return 0;
      });
}
