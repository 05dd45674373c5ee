#include "core/communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "core/error.h"

namespace sl {

namespace {

// The shared state of a fake group: each collective is two barrier phases. In the first, every
// rank posts its input pointer; in the second (once all have posted) every rank reads what it
// needs from the others' inputs into its own output; a third barrier keeps a rank from reusing
// its input before the others have read it.
struct FakeGroup {
  explicit FakeGroup(int world) : world(world), posted(size_t(world), nullptr) {}
  const int world;
  std::vector<const float*> posted;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  unsigned long long generation = 0;
  std::string aborted;  // non-empty: why the group was aborted

  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    SL_CHECK(aborted.empty(), "collective aborted: ", aborted);
    const unsigned long long gen = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !aborted.empty(); });
      SL_CHECK(generation != gen, "collective aborted: ", aborted);
    }
  }
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted.empty()) aborted = why.empty() ? "(no reason given)" : why;
    cv.notify_all();
  }
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return g_->world; }
  void abort(const std::string& why) override { g_->abort(why); }
  bool peer_gone(int timeout_ms, std::string* why) override {
    std::unique_lock<std::mutex> lock(g_->mu);
    g_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !g_->aborted.empty(); });
    if (g_->aborted.empty()) return false;
    if (why) *why = g_->aborted;
    return true;
  }

  void all_reduce_sum(float* buf, size_t n) override {
    std::vector<float> sum(n, 0.f);
    exchange(buf, [&] {
      for (int r = 0; r < g_->world; ++r)
        for (size_t i = 0; i < n; ++i) sum[i] += g_->posted[size_t(r)][i];
    });
    std::copy(sum.begin(), sum.end(), buf);
  }
  void all_gather(const float* in, float* out, size_t n) override {
    exchange(in, [&] {
      for (int r = 0; r < g_->world; ++r) std::copy(g_->posted[size_t(r)], g_->posted[size_t(r)] + n, out + size_t(r) * n);
    });
  }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    exchange(in, [&] {
      std::fill(out, out + n, 0.f);
      for (int r = 0; r < g_->world; ++r)
        for (size_t i = 0; i < n; ++i) out[i] += g_->posted[size_t(r)][size_t(rank_) * n + i];
    });
  }
  void all_to_all(const float* in, float* out, size_t n) override {
    exchange(in, [&] {
      for (int r = 0; r < g_->world; ++r) {
        const float* src = g_->posted[size_t(r)] + size_t(rank_) * n;
        std::copy(src, src + n, out + size_t(r) * n);
      }
    });
  }
  void broadcast(void* data, size_t bytes) override {
    exchange(static_cast<const float*>(data), [&] {
      if (rank_ != 0) std::memcpy(data, g_->posted[0], bytes);
    });
  }

 private:
  // Posts `in`, waits for every rank, runs `read` (which reads the posted inputs and writes only
  // this rank's own buffers), and waits again before anyone's input may change.
  template <class Read>
  void exchange(const float* in, Read read) {
    {
      std::lock_guard<std::mutex> lock(g_->mu);
      g_->posted[size_t(rank_)] = in;
    }
    g_->barrier();
    read();
    g_->barrier();
  }

  std::shared_ptr<FakeGroup> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_fake_group(int world) {
  SL_CHECK(world >= 1 && world <= 1024, "make_fake_group: world ", world, " is outside 1..1024");
  auto g = std::make_shared<FakeGroup>(world);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<FakeCommunicator>(g, r));
  return out;
}

}  // namespace sl
