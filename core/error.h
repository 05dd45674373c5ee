// Errors with context. Every failure a user can hit says where it happened (which file,
// which layer, which CUDA call) and what was expected; nothing aborts silently.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from any streamable pieces: fail("layer ", l, ": bad shape").
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

}  // namespace sl

// SL_CHECK(cond, pieces...): throws sl::Error with the pieces when cond is false.
#define SL_CHECK(cond, ...)                              \
  do {                                                   \
    if (!(cond)) ::sl::fail(__VA_ARGS__);                \
  } while (0)
