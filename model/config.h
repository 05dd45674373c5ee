// Model configuration: the DeepSeek V4 config.json keys (docs/model.md section 1) plus streamlab's
// run knobs. Loaded from JSON (a built-in name such as `tiny`, or a path), overridden from the
// command line, then validated: a bad config is rejected with the key and the broken constraint.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sl {

// Per-layer attention type (docs/model.md 1.2). Stored as a type, not inferred from the ratio
// value at use sites: the HCA ratio may be shrunk (tiny uses 16) while c4a stays 4.
enum class LayerType { Sliding, C4A, C128A };
const char* layer_type_name(LayerType t);  // "sliding", "c4a", "c128a"

// Bounds that validate() enforces on counts (far above any real model; they turn typos into
// errors instead of endless allocations).
constexpr int kMaxLayers = 4096;   // target layers, MTP layers, draft steps
constexpr int kMaxBatch = 65536;   // sequences per step

struct ModelConfig {
  std::string name = "custom";

  // ---- DeepSeek config.json keys (docs/model.md 1.1) ----
  int vocab_size = 0;
  int hidden_size = 0;                 // D
  int num_hidden_layers = 0;           // L
  int num_attention_heads = 0;         // H
  int head_dim = 0;                    // Dh
  int qk_rope_head_dim = 64;           // R
  int q_lora_rank = 0;                 // Lq
  int o_groups = 0;                    // G
  int o_lora_rank = 0;                 // Lo
  int sliding_window = 0;              // W
  int index_n_heads = 0;               // Hi
  int index_head_dim = 0;              // di
  int index_topk = 0;                  // K_idx
  int n_routed_experts = 0;            // E
  int num_experts_per_tok = 0;         // k
  int moe_intermediate_size = 0;       // F
  int n_shared_experts = 1;
  double routed_scaling_factor = 1.5;
  int num_hash_layers = 0;
  double swiglu_limit = 10.0;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  double yarn_factor = 16.0;                   // rope_scaling.factor
  int yarn_original_max_position = 65536;      // rope_scaling.original_max_position_embeddings
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  int max_position_embeddings = 1048576;
  std::vector<int> compress_ratios;            // L + 1 entries; the last is the MTP slot
  int num_nextn_predict_layers = 1;            // N, the number of MTP layers

  // ---- streamlab knobs (file or command line) ----
  int mtp_compress_ratio = 0;        // 0 (the real checkpoint: sliding-window MTP), 4 or 128
  bool swa_layers_use_yarn = true;   // docs/model.md 3.2 and 12.2: true = vLLM, false = reference/HF
  bool mtp_zero_embed_pos0 = true;   // docs/model.md 7 and 12.2: vLLM's behaviour
  int batch = 1;                     // sequences per step
  int context_length = 32;           // prompt tokens per sequence
  int draft_steps = 1;               // k, MTP draft steps per decode step
  int prefill_chunk = 4096;          // prefill runs in chunks of at most this many tokens per sequence
  unsigned long long seed = 0;       // weight initialisation

  // ---- derived ----
  int n_layers_total() const { return num_hidden_layers + num_nextn_predict_layers; }
  int nope_dim() const { return head_dim - qk_rope_head_dim; }
  int hc_mix() const { return (2 + hc_mult) * hc_mult; }  // 24 for hc = 4
  // Ratio as the attention uses it: 1 for sliding-only layers (vLLM's max(1, r)).
  int layer_ratio(int layer) const;            // layer in [0, L) target, [L, L+N) MTP
  LayerType layer_type(int layer) const;
  bool layer_is_hash_routed(int layer) const { return layer < num_hash_layers; }
  int max_compressed_entries(int layer, int max_positions) const;
};

// Resolves a config name (`tiny`, `flash`, `flash-6l`, ...: $STREAMLAB_CONFIG_DIR/<name>.json,
// else the compiled-in one) or a path to a JSON file (anything ending in .json or holding a '/'). Throws sl::Error naming the file and the key on any problem.
ModelConfig load_config(const std::string& name_or_path);
ModelConfig config_from_json(const nlohmann::json& j, const std::string& source);
// Validates every constraint of docs/model.md section 11; throws naming the key and constraint.
void validate(const ModelConfig& c);
// The MTP layers' compress ratio (0, 4 or 128): the knob and the MTP slot of compress_ratios.
void set_mtp_compress_ratio(ModelConfig& c, int ratio);
// DeepSeek layout (the keys of docs/model.md 1.1, plus streamlab's knobs under their own names).
nlohmann::json config_to_json(const ModelConfig& c);
// Names of the built-in configs: those compiled in (model/configs at build time) and the *.json
// files of $STREAMLAB_CONFIG_DIR, which are searched first (a folder of one's own configs, or
// model/configs itself while editing them without a rebuild).
std::vector<std::string> builtin_config_names();
// $STREAMLAB_CONFIG_DIR, or "" when unset.
std::string config_dir_override();

}  // namespace sl
