// Model configs: the built-ins load and validate, layer types, every broken constraint is
// rejected naming the key, unknown keys / wrong types are rejected, JSON round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/builtin_configs.h"
#include "model/config.h"

using namespace sl;
using nlohmann::json;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The config files of the source tree, which the binary compiles in.
const std::string kSourceConfigs = STREAMLAB_SOURCE_DIR "/model/configs";

json tiny_json() {
  std::ifstream in(kSourceConfigs + "/tiny.json");
  return json::parse(in);
}

// Parses j (as if it were file "tiny.json") and validates it.
void check(const json& j) {
  ModelConfig c = config_from_json(j, "tiny.json");
  validate(c);
}

std::string types(const ModelConfig& c) {
  std::string s;
  for (int l = 0; l < c.n_layers_total(); ++l) s += std::string(l ? "," : "") + layer_type_name(c.layer_type(l));
  return s;
}

}  // namespace

TEST(Config, BuiltinsLoadAndValidate) {
  auto names = builtin_config_names();
  for (const char* want : {"tiny", "tiny-clamp", "flash", "flash-6l", "flash-2l"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    ModelConfig c;
    ASSERT_NO_THROW(c = load_config(n));
    EXPECT_EQ(c.name, n);
    EXPECT_NO_THROW(validate(c));
    EXPECT_EQ(int(c.compress_ratios.size()), c.num_hidden_layers + 1);
  }
}

TEST(Config, LoadByPathAndUnknownName) {
  ModelConfig c = load_config(kSourceConfigs + "/tiny.json");
  EXPECT_EQ(c.name, "tiny");
  std::string e = error_of([] { load_config("no-such-config"); });
  EXPECT_NE(e.find("no-such-config"), std::string::npos) << e;
  EXPECT_NE(e.find("tiny"), std::string::npos) << e;  // lists the available names
  EXPECT_NE(e.find("flash-6l"), std::string::npos) << e;
  e = error_of([] { load_config("/nonexistent/dir/x.json"); });
  EXPECT_NE(e.find("/nonexistent/dir/x.json"), std::string::npos) << e;
}

TEST(Config, CompiledInConfigsAreTheSourceFiles) {
  // Byte for byte, and all of them: the binary must not need the source tree to find `tiny`.
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(kSourceConfigs))
    if (e.path().extension() == ".json") files.push_back(e.path().stem().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> compiled;
  for (const BuiltinConfigText& t : builtin_config_texts()) {
    compiled.emplace_back(t.name);
    std::ifstream in(kSourceConfigs + "/" + std::string(t.name) + ".json", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, t.json) << t.name;
  }
  EXPECT_EQ(compiled, files);
}

TEST(Config, EnvDirIsSearchedBeforeTheCompiledIn) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / "sl_test_config_dir";
  fs::remove_all(d);
  fs::create_directories(d);
  json j = tiny_json();
  j["hidden_size"] = 512;
  std::ofstream(d / "mine.json") << j.dump();
  j["hidden_size"] = 128;
  std::ofstream(d / "tiny.json") << j.dump();  // shadows the compiled-in tiny
  ::setenv("STREAMLAB_CONFIG_DIR", d.c_str(), 1);
  EXPECT_EQ(config_dir_override(), d.string());
  auto names = builtin_config_names();
  ModelConfig mine = load_config("mine"), tiny = load_config("tiny"), flash = load_config("flash-2l");
  ::unsetenv("STREAMLAB_CONFIG_DIR");
  EXPECT_NE(std::find(names.begin(), names.end(), "mine"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "flash"), names.end());  // the compiled-in ones stay
  EXPECT_EQ(mine.hidden_size, 512);
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(flash.name, "flash-2l");
  EXPECT_NE(load_config("tiny").hidden_size, 128);  // unset: the compiled-in tiny again
  fs::remove_all(d);
}

TEST(Config, TinyValues) {
  ModelConfig c = load_config("tiny");
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_nextn_predict_layers, 2);
  EXPECT_EQ(c.n_layers_total(), 8);
  EXPECT_EQ(c.nope_dim(), 64);
  EXPECT_EQ(c.hc_mix(), 24);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_EQ(c.context_length, 48);
  EXPECT_EQ(c.draft_steps, 2);
  EXPECT_EQ(c.mtp_compress_ratio, 0);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_DOUBLE_EQ(c.yarn_factor, 16.0);
  EXPECT_EQ(c.yarn_original_max_position, 65536);
  EXPECT_DOUBLE_EQ(load_config("tiny-clamp").swiglu_limit, 0.5);
}

TEST(Config, LayerTypesTiny) {
  ModelConfig c = load_config("tiny");
  EXPECT_EQ(types(c), "sliding,sliding,c4a,c128a,c4a,c128a,sliding,sliding");
  EXPECT_EQ(c.layer_ratio(0), 1);
  EXPECT_EQ(c.layer_ratio(2), 4);
  EXPECT_EQ(c.layer_ratio(3), 16);
  EXPECT_EQ(c.layer_ratio(6), 1);  // MTP
  EXPECT_EQ(c.max_compressed_entries(0, 48), 0);
  EXPECT_EQ(c.max_compressed_entries(2, 48), 12);
  EXPECT_EQ(c.max_compressed_entries(3, 48), 3);
  EXPECT_EQ(c.max_compressed_entries(7, 48), 0);
  EXPECT_TRUE(c.layer_is_hash_routed(2));
  EXPECT_FALSE(c.layer_is_hash_routed(3));
  EXPECT_FALSE(c.layer_is_hash_routed(6));
  // The MTP knob changes only the MTP layers.
  c.mtp_compress_ratio = 4;
  EXPECT_EQ(c.layer_type(6), LayerType::C4A);
  EXPECT_EQ(c.layer_type(7), LayerType::C4A);
  c.mtp_compress_ratio = 128;
  EXPECT_EQ(c.layer_type(6), LayerType::C128A);
  EXPECT_EQ(c.layer_ratio(7), 128);
  EXPECT_EQ(c.layer_type(5), LayerType::C128A);
}

TEST(Config, LayerTypesFlash) {
  ModelConfig c = load_config("flash");
  EXPECT_EQ(c.num_hidden_layers, 43);
  EXPECT_EQ(c.n_layers_total(), 44);
  int n[3] = {0, 0, 0};
  for (int l = 0; l < 43; ++l) n[int(c.layer_type(l))]++;
  EXPECT_EQ(n[int(LayerType::Sliding)], 2);
  EXPECT_EQ(n[int(LayerType::C4A)], 21);
  EXPECT_EQ(n[int(LayerType::C128A)], 20);
  for (int l = 2; l < 43; ++l) EXPECT_EQ(c.layer_type(l), l % 2 == 0 ? LayerType::C4A : LayerType::C128A) << l;
  EXPECT_EQ(c.layer_type(43), LayerType::Sliding);
  EXPECT_EQ(c.layer_ratio(3), 128);
  EXPECT_EQ(c.max_compressed_entries(3, 4096), 32);
  EXPECT_EQ(c.max_compressed_entries(4, 4096), 1024);

  EXPECT_EQ(types(load_config("flash-6l")), "sliding,sliding,c4a,c128a,c4a,c128a,sliding");
  EXPECT_EQ(types(load_config("flash-2l")), "c4a,c128a,sliding");
  EXPECT_EQ(load_config("flash-2l").num_hash_layers, 1);
}

TEST(Config, MtpRatioFromCompressRatios) {
  json j = tiny_json();
  j.erase("mtp_compress_ratio");
  j["compress_ratios"] = {0, 0, 4, 16, 4, 16, 4};
  ModelConfig c = config_from_json(j, "tiny.json");
  EXPECT_EQ(c.mtp_compress_ratio, 4);
  EXPECT_EQ(c.layer_type(6), LayerType::C4A);
  j["mtp_compress_ratio"] = 0;  // the knob wins
  EXPECT_EQ(config_from_json(j, "tiny.json").mtp_compress_ratio, 0);
}

struct Broken {
  const char* key;
  json value;
  std::vector<std::string> must_contain;
};

TEST(Config, BrokenConstraintsNameTheKey) {
  const std::vector<Broken> cases = {
      {"head_dim", 32, {"head_dim (32)", "qk_rope_head_dim (64)"}},
      {"qk_rope_head_dim", 63, {"qk_rope_head_dim (63)", "even"}},
      {"num_attention_heads", 5, {"num_attention_heads (5) must be divisible by o_groups (2)"}},
      {"o_groups", 3, {"num_attention_heads (4) must be divisible by o_groups (3)"}},
      {"index_head_dim", 32, {"index_head_dim (32) must be >= qk_rope_head_dim (64)"}},
      {"num_experts_per_tok", 9, {"num_experts_per_tok (9) must be <= n_routed_experts (8)"}},
      {"hc_mult", 2, {"hc_mult must be 4"}},
      {"hc_sinkhorn_iters", 10, {"hc_sinkhorn_iters must be 20"}},
      {"mtp_compress_ratio", 16, {"mtp_compress_ratio must be 0, 4 or 128"}},
      {"compress_ratios", json::array({0, 0, 4, 16, 4, 16}), {"compress_ratios must have num_hidden_layers + 1 = 7 entries, got 6"}},
      {"compress_ratios", json::array({0, 0, -4, 16, 4, 16, 0}), {"compress_ratios[2] (-4)"}},
      {"num_hash_layers", 7, {"num_hash_layers (7) must be <= num_hidden_layers (6)"}},
      {"num_hash_layers", -1, {"num_hash_layers (-1)"}},
      {"batch", 0, {"batch (0) must be >= 1"}},
      {"context_length", 0, {"context_length (0) must be >= 1"}},
      {"draft_steps", -1, {"draft_steps (-1) must be >= 0"}},
      {"prefill_chunk", 0, {"prefill_chunk (0) must be >= 1"}},
      {"num_nextn_predict_layers", -1, {"num_nextn_predict_layers (-1)"}},
      {"vocab_size", 0, {"vocab_size (0) must be > 0"}},
      {"hidden_size", -5, {"hidden_size (-5) must be > 0"}},
      {"sliding_window", 0, {"sliding_window (0)"}},
      {"index_topk", 0, {"index_topk (0)"}},
      {"moe_intermediate_size", 0, {"moe_intermediate_size (0)"}},
      {"n_shared_experts", 0, {"n_shared_experts (0)"}},
      {"swiglu_limit", 0.0, {"swiglu_limit (0)"}},
      {"rms_norm_eps", -1.0, {"rms_norm_eps (-1)"}},
      {"max_position_embeddings", 40, {"max_position_embeddings (40)", "context_length (48)"}},
      {"num_key_value_heads", 8, {"num_key_value_heads must be 1", "got 8"}},
      {"scoring_func", "softmax", {"scoring_func", "sqrtsoftplus"}},
      {"topk_method", "greedy", {"topk_method", "noaux_tc"}},
      {"hidden_act", "gelu", {"hidden_act", "silu"}},
      {"tie_word_embeddings", true, {"tie_word_embeddings must be false"}},
      {"norm_topk_prob", false, {"norm_topk_prob must be true"}},
      {"qk_nope_head_dim", 32, {"head_dim (128) must equal qk_nope_head_dim (32) + qk_rope_head_dim (64)"}},
      {"first_k_dense_replace", 1, {"first_k_dense_replace"}},
      {"n_group", 8, {"n_group"}},
  };
  for (const auto& b : cases) {
    json j = tiny_json();
    j[b.key] = b.value;
    std::string e = error_of([&] { check(j); });
    SCOPED_TRACE(std::string(b.key) + " = " + b.value.dump() + " -> " + e);
    EXPECT_NE(e, "<no error>");
    EXPECT_NE(e.find("tiny"), std::string::npos);  // names the config
    for (const auto& m : b.must_contain) EXPECT_NE(e.find(m), std::string::npos) << "want: " << m;
  }
  // draft steps need an MTP layer.
  json j = tiny_json();
  j["num_nextn_predict_layers"] = 0;
  EXPECT_NE(error_of([&] { check(j); }).find("draft_steps (2) needs num_nextn_predict_layers >= 1"), std::string::npos);
  j["draft_steps"] = 0;
  EXPECT_NO_THROW(check(j));
  // rope_scaling.
  j = tiny_json();
  j["rope_scaling"]["type"] = "linear";
  EXPECT_NE(error_of([&] { check(j); }).find("rope_scaling.type"), std::string::npos);
  j = tiny_json();
  j["rope_scaling"]["beta_fast"] = 0.5;
  EXPECT_NE(error_of([&] { check(j); }).find("rope_scaling.beta_fast"), std::string::npos);
  // Other HCA ratios (>= 2, not 4) are fine; 1 means sliding.
  j = tiny_json();
  j["compress_ratios"] = {1, 0, 4, 2, 4, 128, 0};
  ModelConfig c = config_from_json(j, "tiny.json");
  EXPECT_NO_THROW(validate(c));
  EXPECT_EQ(c.layer_type(0), LayerType::Sliding);
  EXPECT_EQ(c.layer_type(3), LayerType::C128A);
  EXPECT_EQ(c.layer_ratio(3), 2);
}

TEST(Config, ValidateMessageNamesFile) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / "sl_test_broken_cfg.json";
  json j = tiny_json();
  j["num_attention_heads"] = 5;
  std::ofstream(p) << j.dump();
  std::string e = error_of([&] { load_config(p.string()); });
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("num_attention_heads (5) must be divisible by o_groups (2)"), std::string::npos) << e;
  std::ofstream(p) << "{ \"vocab_size\": 12, ";  // invalid JSON
  e = error_of([&] { load_config(p.string()); });
  EXPECT_NE(e.find(p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  fs::remove(p);
}

TEST(Config, UnknownKeyRejected) {
  json j = tiny_json();
  j["hiden_size"] = 256;
  std::string e = error_of([&] { config_from_json(j, "tiny.json"); });
  EXPECT_NE(e.find("hiden_size"), std::string::npos) << e;
  EXPECT_NE(e.find("tiny.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key"), std::string::npos) << e;
  j = tiny_json();
  j["rope_scaling"]["factr"] = 2;
  e = error_of([&] { config_from_json(j, "tiny.json"); });
  EXPECT_NE(e.find("rope_scaling.factr"), std::string::npos) << e;
  // DeepSeek / HF keys we do not use are accepted.
  j = tiny_json();
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  j["transformers_version"] = "4.57.0";
  j["attention_bias"] = false;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["expert_dtype"] = "fp4";
  j["auto_map"] = json::object();
  j["rope_scaling"]["mscale"] = 0;
  EXPECT_NO_THROW(check(j));
}

TEST(Config, WrongTypeRejected) {
  struct W {
    const char* key;
    json value;
    const char* expected;
  };
  for (const W& w : {W{"hidden_size", "256", "an integer"}, W{"hidden_size", 256.5, "an integer"},
                     W{"rope_theta", "10000", "a number"}, W{"swa_layers_use_yarn", 1, "a boolean"},
                     W{"compress_ratios", 4, "an array"}, W{"rope_scaling", "yarn", "an object"},
                     W{"seed", -1, ">= 0"}, W{"vocab_size", 1e12, "an integer"}}) {
    json j = tiny_json();
    j[w.key] = w.value;
    std::string e = error_of([&] { config_from_json(j, "tiny.json"); });
    SCOPED_TRACE(e);
    EXPECT_NE(e.find(w.key), std::string::npos);
    EXPECT_NE(e.find(w.expected), std::string::npos);
    EXPECT_NE(e.find("tiny.json"), std::string::npos);
  }
  json j = tiny_json();
  j["compress_ratios"] = {0, 0, "4", 16, 4, 16, 0};
  std::string e = error_of([&] { config_from_json(j, "tiny.json"); });
  EXPECT_NE(e.find("compress_ratios[2]"), std::string::npos) << e;
  j = tiny_json();
  j.erase("compress_ratios");
  EXPECT_NE(error_of([&] { config_from_json(j, "tiny.json"); }).find("compress_ratios"), std::string::npos);
  EXPECT_NE(error_of([&] { config_from_json(json::array(), "x.json"); }).find("x.json"), std::string::npos);
}

TEST(Config, RoundTrip) {
  for (const auto& n : builtin_config_names()) {
    SCOPED_TRACE(n);
    ModelConfig a = load_config(n);
    a.swa_layers_use_yarn = false;
    a.mtp_zero_embed_pos0 = false;
    a.seed = 0xfedcba9876543210ull;
    a.batch = 3;
    a.mtp_compress_ratio = 128;
    a.rms_norm_eps = 1.234567890123e-6;
    json j = config_to_json(a);
    EXPECT_EQ(j["architectures"][0], "DeepseekV4ForCausalLM");
    EXPECT_EQ(j["model_type"], "deepseek_v4");
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_EQ(j["compress_ratios"].back(), 128);  // the MTP slot carries the knob
    ModelConfig b = config_from_json(json::parse(j.dump()), n + ".json");
    EXPECT_NO_THROW(validate(b));
    EXPECT_EQ(config_to_json(b), j);
    EXPECT_EQ(b.name, n);
    EXPECT_EQ(b.seed, a.seed);
    EXPECT_EQ(b.rms_norm_eps, a.rms_norm_eps);
    EXPECT_EQ(b.mtp_compress_ratio, 128);
    EXPECT_EQ(b.swa_layers_use_yarn, false);
    for (int l = 0; l < a.n_layers_total(); ++l) EXPECT_EQ(a.layer_type(l), b.layer_type(l));
  }
}
