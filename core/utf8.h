// Text from outside (a SQLite trace written by another tool) may hold bytes that are not UTF-8;
// JSON writers then throw (nlohmann) or write a file no JSON reader accepts (our Kineto writer
// copies bytes). Such text is made valid once, where it is read.
#pragma once
#include <string>
#include <string_view>

namespace sl {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

// `s` with each byte that does not start or continue a well-formed sequence replaced by U+FFFD
// (the replacement character), as most decoders show it; `s` itself when it is valid.
std::string valid_utf8(std::string_view s);

}  // namespace sl
