// `streamlab --version`: what a bug report needs to name the binary: the release, the commit it
// was built from, and the CUDA / CUPTI it was built against and finds at run time (a binary
// built with CUDA 13.0 on a driver that supports less reports "no GPU" everywhere else).
#include <string>

#include "core/build_info.h"
#include "experiments/cli/commands.h"

#if STREAMLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cupti.h>
#endif

namespace sl::cli {

namespace {

// 13000 -> "13.0" (CUDA's encoding: 1000 * major + 10 * minor).
std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

std::string version_text() {
  std::string s = "streamlab " STREAMLAB_VERSION "\ncommit " + build_commit() + "\n";
#if STREAMLAB_HAVE_CUDA
  s += "built with CUDA " + cuda_version_text(CUDART_VERSION) + ", CUPTI API " + std::to_string(CUPTI_API_VERSION) + "\n";
  int runtime = 0, driver = 0;
  uint32_t cupti = 0;
  // Version queries need no device and create no context; a failure is reported, not hidden.
  s += cudaRuntimeGetVersion(&runtime) == cudaSuccess ? "CUDA runtime " + cuda_version_text(runtime) + "\n"
                                                      : std::string("CUDA runtime: version query failed\n");
  if (cudaDriverGetVersion(&driver) != cudaSuccess)
    s += "CUDA driver: version query failed\n";
  else
    s += driver == 0 ? std::string("CUDA driver: none found (no GPU runs here)\n")
                     : "CUDA driver supports up to " + cuda_version_text(driver) + "\n";
  s += cuptiGetVersion(&cupti) == CUPTI_SUCCESS ? "CUPTI API " + std::to_string(cupti) + " at run time\n"
                                                : std::string("CUPTI: version query failed\n");
#else
  s += "built without CUDA (CPU reference backend only; no tracing)\n";
#endif
#if STREAMLAB_HAVE_UI
  s += "viewer: built in (streamlab view)\n";
#else
  s += "viewer: not built\n";
#endif
  s.pop_back();  // CLI11 adds the final newline
  return s;
}

}  // namespace sl::cli
