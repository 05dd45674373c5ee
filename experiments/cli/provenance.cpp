#include "experiments/cli/provenance.h"

#include <unistd.h>

#include <cctype>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/build_info.h"
#if STREAMLAB_HAVE_CUDA
#include <cuda_runtime.h>

#include "model/cuda/cuda_backend.h"
#endif

extern char** environ;

namespace sl::cli {

namespace {

// The kernel driver's version ("580.159.04"), from the file the NVIDIA kernel module publishes;
// "" when absent. cudaDriverGetVersion only gives the CUDA version the driver supports.
std::string nvidia_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  std::istringstream words(line);
  std::string w;
  while (words >> w)
    if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) && w.find('.') != std::string::npos) return w;
  return "";
}

}  // namespace

bool gpu_present(std::string* why) {
#if STREAMLAB_HAVE_CUDA
  return cuda_available(why);
#else
  if (why) *why = "this streamlab was built without CUDA";
  return false;
#endif
}

std::string connections_setting() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  return v ? v : "";
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find_first_of(" \"'") != std::string::npos) a = "'" + a + "'";
    s += (i ? " " : "") + a;
  }
  return s;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return date;
}

nlohmann::json provenance(const std::string& command) {
  const std::string date = utc_now();
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  nlohmann::json env = nlohmann::json::object();
  for (char** e = ::environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k == "CUDA_DEVICE_MAX_CONNECTIONS" || (k.rfind("STREAMLAB_", 0) == 0 && k != "STREAMLAB_CONFIG_DIR"))
      env[k] = kv.substr(eq + 1);
  }
  nlohmann::json p{{"commit", build_commit()}, {"date", date},        {"host", host},
                   {"command", command},       {"environment", env}};
  std::string why;
  if (!gpu_present(&why)) {
    p["gpu"] = "none (" + why + ")";
    return p;
  }
#if STREAMLAB_HAVE_CUDA
  cudaDeviceProp prop{};
  int dev = 0, drv = 0, rt = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
      cudaDriverGetVersion(&drv) == cudaSuccess && cudaRuntimeGetVersion(&rt) == cudaSuccess) {
    p["gpu"] = prop.name;
    p["sm_count"] = prop.multiProcessorCount;
    p["memory_bytes"] = prop.totalGlobalMem;
    p["driver"] = nvidia_driver_version();
    p["cuda_driver_version"] = drv;
    p["cuda_runtime_version"] = rt;
  } else {
    p["gpu"] = "unknown (CUDA device queries failed)";
  }
#endif
  return p;
}

}  // namespace sl::cli
