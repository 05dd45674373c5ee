// libFuzzer target: the model config parser and validator (model/config.h load_config: a
// config.json file parsed, checked key by key, then validated against docs/model.md section 11).
// Each input is written to a scratch file named *.json. Expected: a valid config or sl::Error;
// anything else aborts. A config that loads must also survive what its users do with it: per-
// layer types, and the round trip through config_to_json (which must load and validate again,
// and give the same JSON).
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sl::fuzz::ScratchFile file("config.json");
  const std::string& path = file.write(data, size);
  sl::ModelConfig c;
  try {
    c = sl::load_config(path);
  } catch (const sl::Error&) {
    return 0;
  }
  try {
    for (int l = 0; l < c.n_layers_total(); ++l) {
      (void)c.layer_type(l);
      (void)c.max_compressed_entries(l, c.max_position_embeddings);
    }
    const nlohmann::json j = sl::config_to_json(c);
    sl::ModelConfig back = sl::config_from_json(j, "round trip");
    sl::validate(back);
    if (sl::config_to_json(back) != j) sl::fuzz::broken("config_to_json -> config_from_json is not a round trip");
  } catch (const sl::Error& e) {
    sl::fuzz::broken(std::string("a config that loaded fails afterwards: ") + e.what());
  }
  return 0;
}
