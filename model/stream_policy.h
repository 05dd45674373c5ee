// Stream policies (docs/streams.md): which auxiliary streams a model asks for, who asks (owns
// them), and which stream each layer's three aux roles run on; and stream sources: where an
// asked-for stream comes from. Part of model construction: the target model and the MTP
// predictor/layers ask for their streams as their policy says, so the order and ownership are
// those of the code being compared (vLLM before and after its MTP fix, TRT-LLM before its fix).
//
// Two sources, because the compared code does not get its streams the way a C++ engine does:
// - `cuda`: every request creates a CUDA stream (cudaStreamCreateWithPriority), and the engine
//   keeps a cuBLAS handle and workspace per stream. A C++ engine's per-layer streams.
// - `torch`: every request is a `torch.cuda.Stream()` draw. PyTorch keeps one pool of 32 streams
//   per priority per device, created together at the first draw of that priority, and hands
//   them out round-robin in program order for the whole process: draw 33 returns draw 1's
//   stream (aliasing). cuBLAS uses one handle per thread and a workspace per (handle, stream),
//   allocated at the first GEMM on that stream. vLLM's and TensorRT-LLM's PyTorch per-layer
//   streams.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/config.h"

namespace sl {

enum class PolicyKind { Serial, PerLayer, Shared, Global, PerLayerAll, TrtllmPerLayer, Pool };
enum class StreamSource { Cuda, Torch };
// Where a layer's aux work goes in phase B (docs/streams.md):
// - VllmFix: vLLM at the MTP fix (6fb3f7b46): c4a layers run the whole indexer on aux0 while
//   the current stream runs the query path and the main compressor (two-way).
// - VllmHead: current vLLM (0484480bc, vllm/models/deepseek_v4/attention.py): c4a layers run
//   the indexer's query path on aux0 with its compressor on aux2 inside it, the main compressor
//   on aux1, and the indexer's scoring and top-k on the current stream after the join.
enum class Placement { VllmFix, VllmHead };
const char* placement_name(Placement p);  // "vllm-fix", "vllm-head"
Placement parse_placement(const std::string& text);

const char* stream_source_name(StreamSource s);  // "cuda", "torch"
// "cuda" or "torch"; throws on anything else.
StreamSource parse_stream_source(const std::string& text);

struct StreamPolicy {
  PolicyKind kind = PolicyKind::Shared;
  int pool_size = 3;             // pool:K
  int aux_priority = 0;          // CUDA stream priority for aux streams (0 = default; lower = higher)
  bool shared_expert_stream = true;  // MoE shared expert on a process-global stream when T <= 256
  int shared_expert_max_tokens = 256;    // vLLM's VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD
  int phase_a_max_tokens = 1024;         // vLLM's VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD
  StreamSource source = StreamSource::Cuda;
  Placement placement = Placement::VllmFix;
  static constexpr int kTorchPoolSize = 32;  // PyTorch's kStreamsPerPool

  // "serial", "per-layer", "shared", "global", "per-layer-all", "trtllm-per-layer", "pool:K".
  // Throws on anything else.
  static StreamPolicy parse(const std::string& text);
  std::string str() const;  // the policy name (the source is reported on its own)
};

// The planned streams of a model. Layers 0..L-1 are target layers, L..L+N-1 the MTP layers.
// `streams` are the streams the model asks for (requests, or draws under the torch source), in
// program order; `physical` the CUDA streams that exist, in creation order. Under the cuda
// source they are one to one; under the torch source a request is a draw from the pool, and
// two requests can be one physical stream.
struct StreamPlan {
  struct Spec {
    std::string name;   // role name: "target.aux0", "mtp1.aux2", "L3.aux1", "pool.aux4", "shared_expert"
    std::string owner;  // "target", "mtp", "mtp.layer1", "L3", "model", "process"
    int physical = -1;  // index into `physical`
  };
  struct Physical {
    std::string name;    // == the request's name (cuda) or "torch.pool.p<prio>.<k>" (torch)
    std::string owner;   // the requester (cuda) or "torch" (the process-wide pool)
    bool pool = false;   // a pool stream: no cuBLAS handle of its own (model/backend.h)
    std::vector<int> requests;  // indices into `streams` served by this stream
  };
  std::vector<Spec> streams;
  std::vector<Physical> physical;
  std::vector<std::array<int, 3>> roles;  // per layer: index into `streams` for aux0..aux2, or -1
  int shared_expert = -1;                 // index into `streams`, or -1

  // Layer counts and types from the config (trtllm-per-layer gives streams to c4a layers only).
  static StreamPlan make(const StreamPolicy& p, const ModelConfig& c);

  // Physical streams that serve more than one request (torch source past the pool's size).
  std::vector<int> aliased() const;
  // "target.aux0 + mtp9.aux2" for a physical stream: the requests it serves.
  std::string served(int physical_index) const;
  // How a physical stream is named in schedules, NVTX and reports: its request's name (cuda), or
  // its pool slot and every role drawn onto it, "torch.pool.p0.00 = target.aux0 + mtp9.aux1".
  std::string label(int physical_index) const;
};

// The smallest MTP layer count from which two requests of this policy share one physical
// stream (the config's target layers and MTP compress ratio), or -1 if none does up to `limit`.
int first_aliasing_mtp_layers(const StreamPolicy& p, const ModelConfig& c, int limit = 256);

// The created streams of a model, by layer (what the model code uses at run time).
struct LayerStreams {
  std::array<Stream, 3> aux{};  // == main stream when the role has no stream of its own
  bool has_aux(int role) const { return aux[role].id != 0; }
};

}  // namespace sl
