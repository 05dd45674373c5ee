#include "model/cuda/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace sl {

namespace {

// The NCCL entry points streamlab calls, resolved from the library at run time.
struct NcclApi {
  std::string path;
  int version = 0;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

template <class F>
void resolve(void* lib, const std::string& path, const char* name, F& f) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  SL_CHECK(f != nullptr, "NCCL: ", path, " has no ", name, " (not an NCCL 2 library?)");
}

// Loaded once per process; an error is kept and repeated to every caller.
const NcclApi& nccl_api() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    // The library the user named, and only it; else the loader's search (LD_LIBRARY_PATH, ld.so.cache).
    std::vector<std::string> tried;
    const char* env = std::getenv("STREAMLAB_NCCL_LIBRARY");
    tried.emplace_back(env && *env ? env : "libnccl.so.2");
    void* lib = nullptr;
    std::string why;
    for (const std::string& p : tried) {
      lib = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        api.path = p;
        break;
      }
      why += "\n  " + p + ": " + ::dlerror();
    }
    if (!lib) {
      error = "NCCL: cannot load the library that a multi-GPU run needs; tried:" + why +
              "\n(install NCCL, add its folder to LD_LIBRARY_PATH, or set STREAMLAB_NCCL_LIBRARY to libnccl.so.2's path;"
              " pip's nvidia-nccl-cu13 has it under nvidia/nccl/lib)";
      return;
    }
    try {
      resolve(lib, api.path, "ncclGetVersion", api.get_version);
      resolve(lib, api.path, "ncclGetUniqueId", api.get_unique_id);
      resolve(lib, api.path, "ncclCommInitRank", api.comm_init_rank);
      resolve(lib, api.path, "ncclCommDestroy", api.comm_destroy);
      resolve(lib, api.path, "ncclCommAbort", api.comm_abort);
      resolve(lib, api.path, "ncclAllReduce", api.all_reduce);
      resolve(lib, api.path, "ncclGetErrorString", api.error_string);
      SL_CHECK(api.get_version(&api.version) == ncclSuccess, "NCCL: ncclGetVersion failed in ", api.path);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  SL_CHECK(error.empty(), error);
  return api;
}

class Nccl final : public NcclCommunicator {
 public:
  Nccl(Communicator& bootstrap) : boot_(bootstrap), api_(nccl_api()) {
    ncclUniqueId id{};
    if (boot_.rank() == 0) check("ncclGetUniqueId", api_.get_unique_id(&id));
    boot_.broadcast(&id, sizeof id);  // every rank needs rank 0's id to join
    // A rank failing inside the init leaves the others waiting in NCCL's bootstrap: watched too.
    start_watchdog();
    try {
      check("ncclCommInitRank", api_.comm_init_rank(&comm_, boot_.world(), id, boot_.rank()));
    } catch (...) {
      stop_watchdog();  // no destructor runs for a constructor that throws
      throw;
    }
  }
  ~Nccl() override {
    stop_watchdog();
    if (!comm_) return;
    // A group that was aborted (a rank failed) may never finish a destroy: abort instead.
    if (aborted_)
      api_.comm_abort(comm_);
    else
      api_.comm_destroy(comm_);
  }

  int rank() const override { return boot_.rank(); }
  int world() const override { return boot_.world(); }
  void all_reduce_sum(float* buf, size_t n) override { boot_.all_reduce_sum(buf, n); }
  void all_gather(const float* in, float* out, size_t n) override { boot_.all_gather(in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override { boot_.reduce_scatter_sum(in, out, n); }
  void all_to_all(const float* in, float* out, size_t n) override { boot_.all_to_all(in, out, n); }
  void broadcast(void* data, size_t bytes) override { boot_.broadcast(data, bytes); }
  void abort(const std::string& why) override {
    // The host group tells the other ranks (their watchdogs end them); NCCL's abort ends this
    // rank's in-flight collectives.
    stop_watchdog();
    if (!aborted_ && comm_) api_.comm_abort(comm_);
    aborted_ = true;
    comm_ = nullptr;
    boot_.abort(why);
  }
  bool peer_gone(int timeout_ms, std::string* why) override { return boot_.peer_gone(timeout_ms, why); }
  void finish() override {
    stop_watchdog();  // the others' normal exits must not look like failures from here on
    boot_.finish();
  }
  void set_on_peer_gone(std::function<void(const std::string& why)> handler) override {
    std::lock_guard<std::mutex> lock(handler_mu_);
    on_peer_gone_ = std::move(handler);
  }

  void all_reduce_sum_device(void* buf, size_t n, DType dt, cudaStream_t stream) override {
    SL_CHECK(!aborted_, "NCCL all-reduce after the group was aborted");
    SL_CHECK(dt == DType::F32 || dt == DType::BF16, "NCCL all-reduce: ", dtype_name(dt), " is not F32 or BF16");
    check("ncclAllReduce", api_.all_reduce(buf, buf, n, dt == DType::F32 ? ncclFloat32 : ncclBfloat16, ncclSum, comm_,
                                           stream));
  }
  std::string describe() const override {
    const int v = api_.version;
    // NCCL encodes 2.28.3 as 22803 (since 2.9: major * 10000 + minor * 100 + patch).
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
           ", from " + api_.path;
  }

 private:
  void check(const char* call, ncclResult_t r) const {
    SL_CHECK(r == ncclSuccess, "NCCL rank ", boot_.rank(), " of ", boot_.world(), ": ", call, " failed: ",
             api_.error_string(r), " (", int(r), ")");
  }

  void start_watchdog() {
    watchdog_ = std::thread([this] {
      std::string why;
      while (!stop_.load()) {
        if (!boot_.peer_gone(200, &why) || stop_.load()) continue;
        std::function<void(const std::string&)> handler;
        {
          std::lock_guard<std::mutex> lock(handler_mu_);
          handler = on_peer_gone_;
        }
        const std::string msg = "NCCL rank " + std::to_string(boot_.rank()) + " of " + std::to_string(boot_.world()) +
                                ": " + why + "; GPU work waiting for it would never end";
        if (handler) handler(msg);
        std::fprintf(stderr, "streamlab: error: %s, so this rank ends here\n", msg.c_str());
        std::fflush(nullptr);
        std::_Exit(1);
      }
    });
  }
  void stop_watchdog() {
    stop_ = true;
    if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
  }

  Communicator& boot_;
  const NcclApi& api_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::thread watchdog_;
  std::atomic<bool> stop_{false};
  std::mutex handler_mu_;
  std::function<void(const std::string&)> on_peer_gone_;
};

}  // namespace

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap) {
  return std::make_unique<Nccl>(bootstrap);
}

}  // namespace sl
