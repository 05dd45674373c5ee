// The built-in model configs (model/configs/*.json), compiled into the binary by
// cmake/embed_configs.cmake so that streamlab finds `tiny` or `flash` from any directory and
// after `cmake --install`, with no source tree beside it.
#pragma once
#include <span>
#include <string_view>

namespace sl {

struct BuiltinConfigText {
  std::string_view name;  // file stem: "tiny", "flash-6l", ...
  std::string_view json;  // the file's bytes as they were at build time
};

// Sorted by name.
std::span<const BuiltinConfigText> builtin_config_texts();

}  // namespace sl
