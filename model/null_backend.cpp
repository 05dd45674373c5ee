#include "model/null_backend.h"

#include <cstring>
#include <vector>

#include "model/kernel_variants.h"

namespace sl {
namespace {

class NullBackend final : public Backend {
 public:
  std::string name() const override { return "null"; }
  DType act_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }
  // FP8 KV caches as the CUDA backend holds them by default (its fp8-kv variant's default), so
  // that a schedule lists the ops and cache bytes of a default GPU run.
  bool packed_kv_caches() const override { return KernelVariants{}.fp8_kv_packed; }

  Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) override {
    Tensor t;
    // A distinct, never dereferenced address per buffer (so views and empty() behave).
    t.data = reinterpret_cast<void*>(uintptr_t(1) << 40 | uintptr_t(names_.size() + 1) << 20);
    t.dtype = dtype;
    t.shape = shape;
    t.buffer = int(names_.size());
    names_.push_back(name);
    (kind == AllocKind::Weight ? stats_.weights_bytes : stats_.activations_bytes) += t.bytes();
    stats_.peak_bytes = stats_.weights_bytes + stats_.activations_bytes;
    return t;
  }
  std::string buffer_name(int b) const override {
    return b >= 0 && size_t(b) < names_.size() ? names_[size_t(b)] : "?";
  }
  void upload(Stream, const Tensor&, const void*, size_t) override {}
  void download(void* host, const Tensor&, size_t bytes) override { std::memset(host, 0, bytes); }
  MemoryStats memory() const override { return stats_; }

  // Streams carry the CUDA backend's per-stream resources as counts (model/cuda/cuda_backend_impl.h),
  // so that `schedule` predicts handles and workspaces without a GPU: an engine stream has a
  // cuBLAS handle and workspace from creation; a pool stream none, and a workspace from its
  // first GEMM op.
  Stream create_stream(const std::string&, int) override {
    pool_.push_back(false);
    add_workspace();
    ++stats_.blas_handles;
    ++stats_.streams_created;
    return Stream{++streams_};
  }
  Stream create_pool_stream(const std::string&, int) override {
    pool_.push_back(true);
    ++stats_.streams_created;
    return Stream{++streams_};
  }
  void destroy_stream(Stream) override {}
  Event create_event(const std::string&) override { return Event{events_++}; }
  void record(Event, Stream) override {}
  void wait(Stream, Event) override {}
  void synchronize() override {}

  // Every op (model/ops.def) does nothing, except that a GEMM op gives a pool stream its
  // workspace, as the CUDA backend does (note_gemm).
#define SL_OP(name, params, args, ...) \
  void name(Stream s, SL_UNPAREN params) override { note_op(#name, s); }
#include "model/ops.def"
#undef SL_OP

  size_t moe_workspace_bytes(int64_t, int, int, int, int) const override { return 1; }

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // as the CUDA backend's
  void add_workspace() {
    ++stats_.blas_workspaces;
    stats_.library_bytes += kWorkspaceBytes;
  }
  // The GEMM ops are those the CUDA backend runs through cuBLAS (gemm, gemm_grouped,
  // gemm_pair, gemm_swiglu).
  void note_op(const char* op, Stream s) {
    if (std::strncmp(op, "gemm", 4) != 0) return;
    const size_t i = size_t(s.id);
    if (i < pool_.size() && pool_[i]) {
      pool_[i] = false;  // has its workspace now
      add_workspace();
    }
  }

  std::vector<std::string> names_;
  MemoryStats stats_ = [] {
    MemoryStats m;  // the main stream: one handle and its workspace
    m.blas_handles = 1;
    m.blas_workspaces = 1;
    m.library_bytes = kWorkspaceBytes;
    return m;
  }();
  std::vector<bool> pool_{false};  // by stream id: a pool stream that has not run a GEMM yet
  int streams_ = 0;
  int events_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_null_backend() { return std::make_unique<NullBackend>(); }

}  // namespace sl
