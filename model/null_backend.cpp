#include "model/null_backend.h"

#include <cstring>
#include <vector>

namespace sl {
namespace {

class NullBackend final : public Backend {
 public:
  std::string name() const override { return "null"; }
  DType act_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }

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

  void init_uniform(Stream, const Tensor&, uint64_t, uint64_t, float, float) override {}
  void fill(Stream, const Tensor&, float) override {}
  void copy(Stream, const Tensor&, const Tensor&) override {}
  void gemm(Stream s, const Tensor&, const Tensor&, const Tensor&) override { note_gemm(s); }
  void gemm_grouped(Stream s, const Tensor&, const Tensor&, const Tensor&, int) override { note_gemm(s); }
  void gemm_pair(Stream s, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    note_gemm(s);
  }
  void gemm_swiglu(Stream s, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   float) override {
    note_gemm(s);
  }
  void rmsnorm(Stream, const Tensor&, const Tensor&, const Tensor&, float) override {}
  void add(Stream, const Tensor&, const Tensor&, const Tensor&) override {}
  void rope(Stream, const Tensor&, const Tensor&, const Tensor&, bool) override {}
  void embed(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) override {}
  void argmax(Stream, const Tensor&, const Tensor&) override {}
  void gather_rows(Stream, const Tensor&, const Tensor&, const Tensor&) override {}
  void shift_tokens(Stream, const Tensor&, const Tensor&, const Tensor&) override {}
  void verify_tokens(Stream, const Tensor&, const Tensor&, const Tensor&) override {}
  void accept_drafts(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void cache_rollback(Stream, const Tensor&, const Tensor&, const Tensor&, int, int) override {}
  void hc_pre(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
              const Tensor&, int, float, float) override {}
  void hc_post(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void hc_head(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
               float) override {}
  void hc_expand(Stream, const Tensor&, const Tensor&) override {}
  void mtp_combine(Stream, const Tensor&, const Tensor&, const Tensor&) override {}
  void swa_insert(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void compressor_save(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const Tensor&, const Tensor&, int) override {}
  void compressor_pool(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const Tensor&, const Tensor&, int, bool, float) override {}
  void indexer_topk(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, int) override {}
  void sparse_attention(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, int, CompressedKeys,
                        int) override {}
  void route(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
             float) override {}
  void moe_experts(Stream, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&, float, const Tensor&) override {}
  size_t moe_workspace_bytes(int64_t, int, int, int, int) const override { return 1; }
  void swiglu(Stream, const Tensor&, const Tensor&, const Tensor&, float) override {}

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // as the CUDA backend's
  void add_workspace() {
    ++stats_.blas_workspaces;
    stats_.library_bytes += kWorkspaceBytes;
  }
  void note_gemm(Stream s) {
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
