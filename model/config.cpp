// Model configuration: parsing DeepSeek's config.json layout (plus streamlab's knobs),
// validation against docs/model.md section 11, and the built-in configs (model/configs, compiled
// into the binary; STREAMLAB_CONFIG_DIR names a folder searched before them).
#include "model/config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "model/builtin_configs.h"

namespace sl {

namespace fs = std::filesystem;
using nlohmann::json;

const char* layer_type_name(LayerType t) {
  switch (t) {
    case LayerType::Sliding: return "sliding";
    case LayerType::C4A: return "c4a";
    case LayerType::C128A: return "c128a";
  }
  return "?";
}

int ModelConfig::layer_ratio(int layer) const {
  SL_CHECK(layer >= 0 && layer < n_layers_total(), "config ", name, ": layer ", layer, " outside [0, ",
           n_layers_total(), ")");
  if (layer >= num_hidden_layers) return std::max(1, mtp_compress_ratio);
  SL_CHECK(layer < int(compress_ratios.size()), "config ", name, ": compress_ratios has ", compress_ratios.size(),
           " entries, layer ", layer, " has none");
  return std::max(1, compress_ratios[layer]);
}

LayerType ModelConfig::layer_type(int layer) const {
  int r = layer_ratio(layer);
  if (r == 1) return LayerType::Sliding;
  if (r == 4) return LayerType::C4A;  // overlap + indexer are tied to the value 4 (docs/model.md 11, constraint 5)
  return LayerType::C128A;            // any other ratio > 1: heavily compressed, all entries attended
}

int ModelConfig::max_compressed_entries(int layer, int max_positions) const {
  if (layer_type(layer) == LayerType::Sliding) return 0;
  return max_positions / layer_ratio(layer);
}

// ------------------------------------------------------------------------------------ parsing

namespace {

// Keys of DeepSeek / HF config.json files that streamlab does not use. They are accepted and
// ignored; any other unknown key is an error (it is most likely a typo).
const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> k = {
      "_name_or_path",  "architectures",   "attention_bias", "attention_dropout", "auto_map",
      "aux_loss_alpha", "bos_token_id",    "dtype",          "eos_token_id",      "ep_size",
      "expert_dtype",   "initializer_range", "intermediate_size", "moe_layer_freq", "pad_token_id",
      "pretraining_tp", "quantization_config", "rope_interleave", "seq_aux",       "torch_dtype",
      "transformers_version", "use_cache", "model_type",
  };
  return k;
}

std::string json_type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

struct Parser {
  const std::string& src;
  std::string where(const std::string& key) const { return "config " + src + ": key '" + key + "'"; }

  [[noreturn]] void wrong_type(const std::string& key, const char* expected, const json& v) const {
    fail(where(key), " must be ", expected, ", got ", json_type_name(v), " (", v.dump(), ")");
  }
  int get_int(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int>::max())) fail(where(key), " = ", u, " does not fit an int");
      return int(u);
    }
    auto i = v.get<int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
      fail(where(key), " = ", i, " does not fit an int");
    return int(i);
  }
  double get_double(const std::string& key, const json& v) const {
    if (!v.is_number()) wrong_type(key, "a number", v);
    return v.get<double>();
  }
  bool get_bool(const std::string& key, const json& v) const {
    if (!v.is_boolean()) wrong_type(key, "a boolean", v);
    return v.get<bool>();
  }
  std::string get_string(const std::string& key, const json& v) const {
    if (!v.is_string()) wrong_type(key, "a string", v);
    return v.get<std::string>();
  }
  unsigned long long get_u64(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) wrong_type(key, "a non-negative integer", v);
    if (!v.is_number_unsigned() && v.get<int64_t>() < 0) fail(where(key), " must be >= 0, got ", v.dump());
    return v.get<unsigned long long>();
  }
};

std::string stem_of(const std::string& source) {
  fs::path p(source);
  if (p.extension() == ".json") return p.stem().string();
  return source;
}

}  // namespace

ModelConfig config_from_json(const json& j, const std::string& source) {
  Parser P{source};
  if (!j.is_object()) fail("config ", source, ": expected a JSON object at top level, got ", j.type_name());
  ModelConfig c;
  c.name = stem_of(source);
  bool have_mtp_ratio = false;
  bool have_ratios = false;
  int qk_nope = -1;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    // DeepSeek keys used by the model.
    if (k == "vocab_size") c.vocab_size = P.get_int(k, v);
    else if (k == "hidden_size") c.hidden_size = P.get_int(k, v);
    else if (k == "num_hidden_layers") c.num_hidden_layers = P.get_int(k, v);
    else if (k == "num_attention_heads") c.num_attention_heads = P.get_int(k, v);
    else if (k == "head_dim") c.head_dim = P.get_int(k, v);
    else if (k == "qk_rope_head_dim") c.qk_rope_head_dim = P.get_int(k, v);
    else if (k == "q_lora_rank") c.q_lora_rank = P.get_int(k, v);
    else if (k == "o_groups") c.o_groups = P.get_int(k, v);
    else if (k == "o_lora_rank") c.o_lora_rank = P.get_int(k, v);
    else if (k == "sliding_window") c.sliding_window = P.get_int(k, v);
    else if (k == "index_n_heads") c.index_n_heads = P.get_int(k, v);
    else if (k == "index_head_dim") c.index_head_dim = P.get_int(k, v);
    else if (k == "index_topk") c.index_topk = P.get_int(k, v);
    else if (k == "n_routed_experts") c.n_routed_experts = P.get_int(k, v);
    else if (k == "num_experts_per_tok") c.num_experts_per_tok = P.get_int(k, v);
    else if (k == "moe_intermediate_size") c.moe_intermediate_size = P.get_int(k, v);
    else if (k == "n_shared_experts") c.n_shared_experts = P.get_int(k, v);
    else if (k == "routed_scaling_factor") c.routed_scaling_factor = P.get_double(k, v);
    else if (k == "num_hash_layers") c.num_hash_layers = P.get_int(k, v);
    else if (k == "swiglu_limit") c.swiglu_limit = P.get_double(k, v);
    else if (k == "hc_mult") c.hc_mult = P.get_int(k, v);
    else if (k == "hc_sinkhorn_iters") c.hc_sinkhorn_iters = P.get_int(k, v);
    else if (k == "hc_eps") c.hc_eps = P.get_double(k, v);
    else if (k == "rms_norm_eps") c.rms_norm_eps = P.get_double(k, v);
    else if (k == "rope_theta") c.rope_theta = P.get_double(k, v);
    else if (k == "compress_rope_theta") c.compress_rope_theta = P.get_double(k, v);
    else if (k == "max_position_embeddings") c.max_position_embeddings = P.get_int(k, v);
    else if (k == "num_nextn_predict_layers") c.num_nextn_predict_layers = P.get_int(k, v);
    else if (k == "compress_ratios") {
      if (!v.is_array()) P.wrong_type(k, "an array of integers", v);
      c.compress_ratios.clear();
      for (size_t i = 0; i < v.size(); ++i) c.compress_ratios.push_back(P.get_int(k + "[" + std::to_string(i) + "]", v[i]));
      have_ratios = true;
    } else if (k == "rope_scaling") {
      if (!v.is_object()) P.wrong_type(k, "an object", v);
      for (auto r = v.begin(); r != v.end(); ++r) {
        const std::string rk = "rope_scaling." + r.key();
        if (r.key() == "type" || r.key() == "rope_type") {
          std::string t = P.get_string(rk, r.value());
          if (t != "yarn") fail(P.where(rk), " must be \"yarn\", got \"", t, "\"");
        } else if (r.key() == "factor") c.yarn_factor = P.get_double(rk, r.value());
        else if (r.key() == "original_max_position_embeddings") c.yarn_original_max_position = P.get_int(rk, r.value());
        else if (r.key() == "beta_fast") c.yarn_beta_fast = P.get_double(rk, r.value());
        else if (r.key() == "beta_slow") c.yarn_beta_slow = P.get_double(rk, r.value());
        else if (r.key() == "mscale" || r.key() == "mscale_all_dim") {
          // vLLM forces both to 0 (magnitude factor 1, docs/model.md 3.2); accepted and ignored.
          P.get_double(rk, r.value());
        } else
          fail("config ", source, ": unknown key '", rk, "'");
      }
    }
    // DeepSeek keys whose value is fixed for this architecture: checked, not stored.
    else if (k == "num_key_value_heads") {
      int n = P.get_int(k, v);
      if (n != 1) fail("config ", source, ": num_key_value_heads must be 1 (one shared K=V latent), got ", n);
    } else if (k == "qk_nope_head_dim") {
      qk_nope = P.get_int(k, v);
    } else if (k == "scoring_func") {
      std::string s = P.get_string(k, v);
      if (s != "sqrtsoftplus") fail("config ", source, ": scoring_func must be \"sqrtsoftplus\", got \"", s, "\"");
    } else if (k == "topk_method") {
      std::string s = P.get_string(k, v);
      if (s != "noaux_tc") fail("config ", source, ": topk_method must be \"noaux_tc\", got \"", s, "\"");
    } else if (k == "norm_topk_prob") {
      if (!P.get_bool(k, v)) fail("config ", source, ": norm_topk_prob must be true");
    } else if (k == "hidden_act") {
      std::string s = P.get_string(k, v);
      if (s != "silu") fail("config ", source, ": hidden_act must be \"silu\", got \"", s, "\"");
    } else if (k == "tie_word_embeddings") {
      if (P.get_bool(k, v)) fail("config ", source, ": tie_word_embeddings must be false (embed and head are separate)");
    } else if (k == "n_group" || k == "topk_group") {
      // Absent in V4 (no group-limited routing); tolerated only as null or 1.
      if (!v.is_null() && P.get_int(k, v) != 1)
        fail("config ", source, ": ", k, " must be absent, null or 1 (V4 has no group-limited routing), got ", v.dump());
    } else if (k == "first_k_dense_replace") {
      if (!v.is_null() && P.get_int(k, v) != 0)
        fail("config ", source, ": first_k_dense_replace must be absent or 0 (every V4 layer is MoE), got ", v.dump());
    }
    // streamlab knobs.
    else if (k == "mtp_compress_ratio") {
      c.mtp_compress_ratio = P.get_int(k, v);
      have_mtp_ratio = true;
    } else if (k == "swa_layers_use_yarn") c.swa_layers_use_yarn = P.get_bool(k, v);
    else if (k == "mtp_zero_embed_pos0") c.mtp_zero_embed_pos0 = P.get_bool(k, v);
    else if (k == "batch") c.batch = P.get_int(k, v);
    else if (k == "context_length") c.context_length = P.get_int(k, v);
    else if (k == "draft_steps") c.draft_steps = P.get_int(k, v);
    else if (k == "prefill_chunk") c.prefill_chunk = P.get_int(k, v);
    else if (k == "seed") c.seed = P.get_u64(k, v);
    else if (ignored_keys().count(k)) {
      // DeepSeek / HF key streamlab does not use.
    } else {
      fail("config ", source, ": unknown key '", k, "' (not a DeepSeek V4 config key nor a streamlab knob)");
    }
  }

  if (!have_ratios) fail("config ", source, ": missing key 'compress_ratios' (num_hidden_layers + 1 entries)");
  if (qk_nope >= 0 && qk_nope + c.qk_rope_head_dim != c.head_dim)
    fail("config ", source, ": head_dim (", c.head_dim, ") must equal qk_nope_head_dim (", qk_nope,
         ") + qk_rope_head_dim (", c.qk_rope_head_dim, ")");
  if (!have_mtp_ratio) {
    // The MTP slot of compress_ratios (0 in the real checkpoint); vLLM ignores it, the knob
    // defaults to it.
    if (c.num_hidden_layers >= 0 && size_t(c.num_hidden_layers) < c.compress_ratios.size())
      c.mtp_compress_ratio = c.compress_ratios[c.num_hidden_layers];
  }
  return c;
}

namespace {

void validate_with(const ModelConfig& c, const std::string& prefix) {
  auto bad = [&](const auto&... pieces) { fail(prefix, ": ", pieces...); };
  auto positive = [&](const char* key, auto v) {
    if (!(v > 0)) bad(key, " (", v, ") must be > 0");
  };

  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("head_dim", c.head_dim);
  positive("qk_rope_head_dim", c.qk_rope_head_dim);
  positive("q_lora_rank", c.q_lora_rank);
  positive("o_groups", c.o_groups);
  positive("o_lora_rank", c.o_lora_rank);
  positive("sliding_window", c.sliding_window);
  positive("index_n_heads", c.index_n_heads);
  positive("index_head_dim", c.index_head_dim);
  positive("index_topk", c.index_topk);
  positive("n_routed_experts", c.n_routed_experts);
  positive("num_experts_per_tok", c.num_experts_per_tok);
  positive("moe_intermediate_size", c.moe_intermediate_size);
  if (c.n_shared_experts < 1)
    bad("n_shared_experts (", c.n_shared_experts, ") must be >= 1 (the V4 MoE always has a shared expert)");
  positive("routed_scaling_factor", c.routed_scaling_factor);
  positive("swiglu_limit", c.swiglu_limit);
  positive("hc_eps", c.hc_eps);
  positive("rms_norm_eps", c.rms_norm_eps);
  positive("rope_theta", c.rope_theta);
  positive("compress_rope_theta", c.compress_rope_theta);
  positive("max_position_embeddings", c.max_position_embeddings);
  positive("rope_scaling.original_max_position_embeddings", c.yarn_original_max_position);
  if (!(c.yarn_factor >= 1)) bad("rope_scaling.factor (", c.yarn_factor, ") must be >= 1");
  if (!(c.yarn_beta_slow > 0 && c.yarn_beta_fast > c.yarn_beta_slow))
    bad("rope_scaling.beta_fast (", c.yarn_beta_fast, ") must be > rope_scaling.beta_slow (", c.yarn_beta_slow,
        ") > 0");

  // 1. Dh = N + R with R even (the nope part N = head_dim - qk_rope_head_dim).
  if (c.head_dim < c.qk_rope_head_dim)
    bad("head_dim (", c.head_dim, ") must equal nope + qk_rope_head_dim, so it must be >= qk_rope_head_dim (",
        c.qk_rope_head_dim, ")");
  if (c.qk_rope_head_dim % 2 != 0)
    bad("qk_rope_head_dim (", c.qk_rope_head_dim, ") must be even (RoPE rotates pairs)");
  // 2. The indexer uses the same R.
  if (c.index_head_dim < c.qk_rope_head_dim)
    bad("index_head_dim (", c.index_head_dim, ") must be >= qk_rope_head_dim (", c.qk_rope_head_dim,
        ") (the indexer applies RoPE to its last qk_rope_head_dim dims)");
  // 3. Contiguous head groups for wo_a.
  if (c.num_attention_heads % c.o_groups != 0)
    bad("num_attention_heads (", c.num_attention_heads, ") must be divisible by o_groups (", c.o_groups, ")");
  // 4. hc = 4 and 20 Sinkhorn iterations are baked into shapes and kernels.
  if (c.hc_mult != 4) bad("hc_mult must be 4, got ", c.hc_mult);
  if (c.hc_sinkhorn_iters != 20) bad("hc_sinkhorn_iters must be 20, got ", c.hc_sinkhorn_iters);
  // 5. compress_ratios: L + 1 entries; each 0/1 (sliding), 4 (c4a) or another value >= 2 (HCA).
  if (int(c.compress_ratios.size()) != c.num_hidden_layers + 1)
    bad("compress_ratios must have num_hidden_layers + 1 = ", c.num_hidden_layers + 1, " entries, got ",
        c.compress_ratios.size());
  for (size_t i = 0; i < c.compress_ratios.size(); ++i)
    if (c.compress_ratios[i] < 0)
      bad("compress_ratios[", i, "] (", c.compress_ratios[i],
          ") must be 0 or 1 (sliding only), 4 (c4a) or another ratio >= 2 (c128a/HCA)");
  if (c.mtp_compress_ratio != 0 && c.mtp_compress_ratio != 4 && c.mtp_compress_ratio != 128)
    bad("mtp_compress_ratio must be 0, 4 or 128, got ", c.mtp_compress_ratio);
  // 6. Routing.
  if (c.num_experts_per_tok > c.n_routed_experts)
    bad("num_experts_per_tok (", c.num_experts_per_tok, ") must be <= n_routed_experts (", c.n_routed_experts, ")");
  if (c.index_topk < 1) bad("index_topk (", c.index_topk, ") must be >= 1");
  // 7. Hash layers are the first num_hash_layers target layers; the MTP (index L) is never one.
  if (c.num_hash_layers < 0) bad("num_hash_layers (", c.num_hash_layers, ") must be >= 0");
  if (c.num_hash_layers > c.num_hidden_layers)
    bad("num_hash_layers (", c.num_hash_layers, ") must be <= num_hidden_layers (", c.num_hidden_layers,
        ") (the MTP layer, index num_hidden_layers, is never hash-routed)");
  if (c.num_nextn_predict_layers < 0)
    bad("num_nextn_predict_layers (", c.num_nextn_predict_layers, ") must be >= 0");
  // Bounds on counts, named, so that a typo fails here instead of as an allocation that never
  // ends (a model of 2e9 layers holds 2e9 layer records even on the null backend). Far above any
  // real DeepSeek model: V4 Pro has 61 layers and 1 MTP layer.
  if (c.num_hidden_layers > kMaxLayers) bad("num_hidden_layers (", c.num_hidden_layers, ") must be <= ", kMaxLayers);
  if (c.num_nextn_predict_layers > kMaxLayers)
    bad("num_nextn_predict_layers (", c.num_nextn_predict_layers, ") must be <= ", kMaxLayers);

  // Run knobs.
  if (c.batch < 1) bad("batch (", c.batch, ") must be >= 1");
  if (c.batch > kMaxBatch) bad("batch (", c.batch, ") must be <= ", kMaxBatch);
  if (c.context_length < 1) bad("context_length (", c.context_length, ") must be >= 1");
  if (c.draft_steps < 0) bad("draft_steps (", c.draft_steps, ") must be >= 0");
  if (c.draft_steps > kMaxLayers) bad("draft_steps (", c.draft_steps, ") must be <= ", kMaxLayers);
  if (c.draft_steps > 0 && c.num_nextn_predict_layers < 1)
    bad("draft_steps (", c.draft_steps, ") needs num_nextn_predict_layers >= 1 (got ", c.num_nextn_predict_layers,
        ")");
  if (c.prefill_chunk < 1) bad("prefill_chunk (", c.prefill_chunk, ") must be >= 1");
  if (int64_t(c.context_length) + c.draft_steps + 1 > c.max_position_embeddings)
    bad("context_length (", c.context_length, ") + draft_steps (", c.draft_steps,
        ") + 1 must be <= max_position_embeddings (", c.max_position_embeddings, ")");
}

}  // namespace

void set_mtp_compress_ratio(ModelConfig& c, int ratio) {
  c.mtp_compress_ratio = ratio;
  if (!c.compress_ratios.empty()) c.compress_ratios.back() = ratio;
}

void validate(const ModelConfig& c) { validate_with(c, "config " + c.name); }

json config_to_json(const ModelConfig& c) {
  json j;
  j["architectures"] = json::array({"DeepseekV4ForCausalLM"});
  j["model_type"] = "deepseek_v4";
  j["torch_dtype"] = "bfloat16";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = c.head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["q_lora_rank"] = c.q_lora_rank;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["sliding_window"] = c.sliding_window;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["n_routed_experts"] = c.n_routed_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_shared_experts"] = c.n_shared_experts;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["num_hash_layers"] = c.num_hash_layers;
  j["swiglu_limit"] = c.swiglu_limit;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["rope_scaling"] = {{"type", "yarn"},
                       {"factor", c.yarn_factor},
                       {"original_max_position_embeddings", c.yarn_original_max_position},
                       {"beta_fast", c.yarn_beta_fast},
                       {"beta_slow", c.yarn_beta_slow}};
  j["max_position_embeddings"] = c.max_position_embeddings;
  std::vector<int> ratios = c.compress_ratios;
  if (c.num_hidden_layers >= 0) {
    ratios.resize(size_t(c.num_hidden_layers) + 1, 0);
    ratios[c.num_hidden_layers] = c.mtp_compress_ratio;
  }
  j["compress_ratios"] = ratios;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["scoring_func"] = "sqrtsoftplus";
  j["topk_method"] = "noaux_tc";
  j["norm_topk_prob"] = true;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  // streamlab knobs.
  j["mtp_compress_ratio"] = c.mtp_compress_ratio;
  j["swa_layers_use_yarn"] = c.swa_layers_use_yarn;
  j["mtp_zero_embed_pos0"] = c.mtp_zero_embed_pos0;
  j["batch"] = c.batch;
  j["context_length"] = c.context_length;
  j["draft_steps"] = c.draft_steps;
  j["prefill_chunk"] = c.prefill_chunk;
  j["seed"] = c.seed;
  return j;
}

std::string config_dir_override() {
  const char* env = std::getenv("STREAMLAB_CONFIG_DIR");
  return env ? env : "";
}

namespace {

// `name`.json in the override folder, or "" when there is none.
std::string override_config_path(const std::string& name) {
  const std::string dir = config_dir_override();
  if (dir.empty()) return "";
  std::error_code ec;
  const fs::path p = fs::path(dir) / (name + ".json");
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

const BuiltinConfigText* compiled_in_config(std::string_view name) {
  for (const BuiltinConfigText& t : builtin_config_texts())
    if (t.name == name) return &t;
  return nullptr;
}

ModelConfig parse_config(std::string_view text, const std::string& origin, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("config ", origin, ": invalid JSON: ", e.what());
  }
  ModelConfig c = config_from_json(j, origin);
  c.name = name;
  validate_with(c, "config " + origin);
  return c;
}

}  // namespace

std::vector<std::string> builtin_config_names() {
  std::set<std::string> names;
  for (const BuiltinConfigText& t : builtin_config_texts()) names.insert(std::string(t.name));
  if (const std::string dir = config_dir_override(); !dir.empty()) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (!ec)
      for (const auto& e : it)
        if (e.is_regular_file(ec) && e.path().extension() == ".json") names.insert(e.path().stem().string());
  }
  return {names.begin(), names.end()};
}

ModelConfig load_config(const std::string& name_or_path) {
  std::error_code ec;
  const bool is_path = fs::is_regular_file(name_or_path, ec) ||
                       (name_or_path.size() >= 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0) ||
                       name_or_path.find('/') != std::string::npos;
  std::string path = is_path ? name_or_path : override_config_path(name_or_path);
  if (path.empty()) {
    if (const BuiltinConfigText* t = compiled_in_config(name_or_path))
      return parse_config(t->json, "built-in " + name_or_path, name_or_path);
    std::ostringstream os;
    auto names = builtin_config_names();
    for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
    const std::string dir = config_dir_override();
    fail("unknown config '", name_or_path, "': not a file, and no built-in config of that name",
         dir.empty() ? std::string() : " (nor in STREAMLAB_CONFIG_DIR=" + dir + ")",
         "; available: ", names.empty() ? std::string("none") : os.str());
  }
  if (!fs::exists(path, ec)) fail("config file ", path, " not found");
  require_regular_file(path, "config file");  // a FIFO would block the read forever
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("config ", path, ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("config ", path, ": read error");
  return parse_config(text.str(), path, fs::path(path).stem().string());
}

}  // namespace sl
