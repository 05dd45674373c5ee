// What built this binary: the git commit of the source tree at build time (with a "-dirty"
// suffix when the tree had uncommitted changes), so that every result can name its code, also
// on a machine that has only the binary. STREAMLAB_COMMIT in the environment overrides it (for
// binaries built from a tree git cannot read).
#pragma once
#include <string>

namespace sl {

std::string build_commit();        // full hash, "-dirty" appended when built from a changed tree
std::string build_commit_short();  // the first 7 characters (+ "-dirty")

}  // namespace sl
