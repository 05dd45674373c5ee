// A line every few seconds while a long phase runs (allocating and initialising the weights of a
// big config, loading a checkpoint, a prefill done in one chunk): a run that has printed nothing
// for minutes looks hung. The phases report no fraction done, so the line says what runs and for
// how long. It goes to `out` (stderr under --json), from a thread of its own, and stops when the
// ticker is destroyed.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace sl::cli {

class PhaseTicker {
 public:
  PhaseTicker(std::FILE* out, std::string phase, double every_s = 10.0)
      : out_(out), phase_(std::move(phase)), every_(every_s), thread_([this] { tick(); }) {}
  ~PhaseTicker() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  PhaseTicker(const PhaseTicker&) = delete;
  PhaseTicker& operator=(const PhaseTicker&) = delete;

 private:
  void tick() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(m_);
    while (!cv_.wait_for(lock, std::chrono::duration<double>(every_), [this] { return done_; })) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(out_, "%s: still running (%.0f s)\n", phase_.c_str(), s);
      std::fflush(out_);
    }
  }

  std::FILE* out_;
  std::string phase_;
  double every_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace sl::cli
