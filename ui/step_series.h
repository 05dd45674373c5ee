// A quantity that changes at points in time, drawn as a lane above the tracks: how many GPU
// streams are running kernels (overlap made visible) and device memory allocated. The maximum
// over any time range comes from block maxima, so a zoomed-out frame draws one bar per pixel
// column without visiting every change point.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "profiler/trace.h"

namespace sl::ui {

using prof::Ns;

struct StepSeries {
  std::vector<Ns> t;       // change times, ascending, distinct
  std::vector<int64_t> v;  // the value from t[i] until t[i + 1] (0 before t[0])
  int64_t peak = 0;        // largest value
  Ns peak_at = prof::kNoTime;

  bool empty() const { return t.empty(); }
  int64_t at(Ns x) const;              // the value at time x
  int64_t max_over(Ns a, Ns b) const;  // the largest value over [a, b) (b > a)

  static constexpr size_t kBlock = 64;
  std::vector<int64_t> block_max;  // max of v over points [k * kBlock, (k + 1) * kBlock)
};

// From (time, change) pairs in any order; changes at one time apply together.
StepSeries step_series(std::vector<std::pair<Ns, int64_t>> changes);

// The number of streams with a kernel running (each stream's kernels merged first, so that
// kernels overlapping on one stream under programmatic dependent launch count once).
StepSeries streams_busy(const prof::Trace& trace);

// Bytes of device memory allocated inside the window (allocations made before it are unknown).
StepSeries memory_allocated(const prof::Trace& trace);

}  // namespace sl::ui
