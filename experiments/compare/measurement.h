// One child process's measurement (`streamlab measure`), as compare and sweep read it back.
//
// compare runs every policy in child processes of its own (a context's queues, memory pools
// and module loads must not leak from one policy into the next) and reads each child's JSON
// file. This header is the one definition of that file: the child writes it with to_json, the
// parent reads it with measurement_from_json, which checks the schema and every field it uses
// and names the file and field on any mismatch.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sl::compare {

inline constexpr const char* kMeasurementSchema = "streamlab.measure/1";

// Decode-step timings of one execution mode in one process.
struct ModeSamples {
  std::string mode;                // "eager" (the host enqueues every op) or "graph" (CUDA graph replay)
  std::vector<double> step_ms;     // whole step, GPU time between timing marks on the main stream
  std::vector<double> target_ms;   // the target forward (logits and greedy token)
  std::vector<double> draft_ms;    // the MTP draft steps after it
  std::vector<double> host_ms;     // host wall clock from enqueue to completion (synchronize)
  std::vector<double> enqueue_ms;  // host time until the enqueue / replay call returned
  // Graph mode: the captured decode step (sums over its graphs).
  size_t graph_nodes = 0, graph_edges = 0;
  double capture_ms = 0, instantiate_ms = 0;
  // Each graph of the step ("step", or "target", "draft0", "drafts1+" under --graph-scope split).
  struct Graph {
    std::string name;
    size_t nodes = 0, edges = 0;
  };
  std::vector<Graph> graphs;
};

// A traced window of one mode (CUPTI), with untraced steps of the same process beside it: the
// tracing on/off ratio is read inside one process, so that process-to-process noise stays out.
struct TracedWindow {
  std::string mode;
  std::string trace_json;           // file names relative to the measurement file's folder
  std::string trace_sqlite;         // "" when not written
  std::vector<double> traced_step_ms;    // host wall clock per step while tracing
  std::vector<double> untraced_step_ms;  // the same steps after tracing stopped
  // A split model: the other ranks' traces of the same window (rank r at index r - 1), each
  // naming its rank in distributedInfo; empty otherwise (and in files before it existed).
  std::vector<std::string> rank_traces;
};

struct Measurement {
  std::string schema = kMeasurementSchema;
  nlohmann::json provenance;        // gpu, driver, runtime, commit, date, command, host, environment
  // Which system the figures are true of: "cuda" (streamlab's engine creates every stream itself:
  // cudaStreamCreateWithPriority, a cuBLAS handle and workspace per stream, as a C++ engine
  // would), "torch" (streams drawn from PyTorch's pool, as vLLM gets them; docs/streams.md) or
  // "cpu-reference:<source>" (tests: the CPU reference, with the source it modelled).
  std::string stream_source = "cuda";
  // The model and shape.
  std::string config;
  int layers = 0, mtp_layers = 0, mtp_compress = 0, batch = 0, context = 0, draft_steps = 0;
  std::string weights = "bf16";  // --weights: bf16 | native | native-w4a8 (files before it existed: bf16)
  std::string kv_cache = "bf16";  // --kv-cache: bf16 | fp8 (files before it existed: bf16)
  // Expert parallelism: the ranks the model was split over (rank 0 measured) and whether the
  // attention's heads were split too (files before it existed: 1, false).
  int expert_ranks = 1;
  bool attention_tp = false;
  // The stream policy.
  std::string policy;
  std::string aux_priority = "default";
  bool shared_expert_stream = true;
  std::string connections;          // CUDA_DEVICE_MAX_CONNECTIONS as set; "" = unset (driver default 8)
  std::string placement = "vllm-fix";  // --placement (files before it existed: vllm-fix)
  std::string graph_scope = "step";    // --graph-scope (files before it existed: step)
  // Resources.
  int streams_created = 0;
  std::vector<std::string> stream_names, stream_owners;
  double stream_setup_ms = 0;
  int events_created = 0;
  double weights_bytes = 0, activations_bytes = 0, peak_bytes = 0, library_bytes = 0;
  int cublas_handles = 0, cublas_workspaces = 0;  // 0 in files before they were recorded
  std::vector<std::string> aliased;  // torch source: "pool stream = role + role" per shared stream
  std::vector<ModeSamples> modes;
  std::vector<TracedWindow> traced;

  const ModeSamples* mode(const std::string& name) const;
};

nlohmann::json to_json(const Measurement& m);
// `origin` names the file in errors. Throws sl::Error on a wrong schema or a missing / mistyped
// field.
Measurement measurement_from_json(const nlohmann::json& j, const std::string& origin);
Measurement read_measurement(const std::string& path);

}  // namespace sl::compare
