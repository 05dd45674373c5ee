// Stream policies (docs/streams.md): which auxiliary streams exist, who creates (owns) them, and
// which stream each layer's three aux roles run on. Part of model construction: the target
// model and the MTP predictor/layers create their streams as their policy says, so the
// creation order and ownership are those of the code being compared (vLLM before and after
// its MTP fix, TRT-LLM before its fix).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "model/backend.h"

namespace sl {

enum class PolicyKind { Serial, PerLayer, Shared, Global, PerLayerAll, Pool };

struct StreamPolicy {
  PolicyKind kind = PolicyKind::Shared;
  int pool_size = 3;             // pool:K
  int aux_priority = 0;          // CUDA stream priority for aux streams (0 = default; lower = higher)
  bool shared_expert_stream = true;  // MoE shared expert on a process-global stream when T <= 256
  int shared_expert_max_tokens = 256;    // vLLM's VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD
  int phase_a_max_tokens = 1024;         // vLLM's VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD

  // "serial", "per-layer", "shared", "global", "per-layer-all", "pool:K". Throws on anything else.
  static StreamPolicy parse(const std::string& text);
  std::string str() const;
};

// The planned streams of a model with L target layers and N MTP layers: created in order by
// their owners. `roles[layer]` gives the stream index (into `streams`) for aux0..aux2, or -1
// when that role runs on the main stream (serial). Layers 0..L-1 are target layers,
// L..L+N-1 the MTP layers.
struct StreamPlan {
  struct Spec {
    std::string name;   // NVTX / schedule name: "target.aux0", "mtp1.aux2", "L3.aux1", "pool.aux4", ...
    std::string owner;  // "target", "mtp", "mtp.layer1", "L3", "model", "process"
  };
  std::vector<Spec> streams;
  std::vector<std::array<int, 3>> roles;  // per layer
  int shared_expert = -1;                 // index into streams, or -1

  static StreamPlan make(const StreamPolicy& p, int target_layers, int mtp_layers);
};

// The created streams of a model, by layer (what the model code uses at run time).
struct LayerStreams {
  std::array<Stream, 3> aux{};  // == main stream when the role has no stream of its own
  bool has_aux(int role) const { return aux[role].id != 0; }
};

}  // namespace sl
