#include "core/build_info.h"

#include <cstdlib>

#include "sl_git_commit.h"

namespace sl {

std::string build_commit() {
  if (const char* env = std::getenv("STREAMLAB_COMMIT"); env && *env) return env;
  return std::string(STREAMLAB_GIT_COMMIT) + (STREAMLAB_GIT_DIRTY ? "-dirty" : "");
}

std::string build_commit_short() {
  const std::string full = build_commit();
  const bool dirty = full.size() > 6 && full.compare(full.size() - 6, 6, "-dirty") == 0;
  const std::string hash = dirty ? full.substr(0, full.size() - 6) : full;
  return (hash == "unknown" ? hash : hash.substr(0, 7)) + (dirty ? "-dirty" : "");
}

}  // namespace sl
