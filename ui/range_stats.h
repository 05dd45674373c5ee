// Statistics of a selected time range [a, b): what each track did inside it and which kernels
// took the GPU time, with the overlap across streams (time with >= 2 GPU streams busy, the
// figure `streamlab analyze` reports as stream overlap). Computed when the selection changes,
// from the model's rows: a binary search per row, then only the items in the range.
#pragma once
#include <string>
#include <vector>

#include "ui/timeline_model.h"

namespace sl::ui {

struct TrackTime {
  size_t track = 0;    // index into TimelineModel::tracks
  uint64_t items = 0;  // items overlapping the range
  Ns busy = 0;         // union of their intervals, clipped to the range
};

struct NameTime {
  std::string name;
  uint64_t count = 0;  // kernels overlapping the range
  Ns time = 0;         // their time inside the range
};

struct RangeStats {
  Ns a = 0, b = 0;
  std::vector<TrackTime> tracks;   // tracks with items in the range, in model order
  std::vector<NameTime> kernels;   // by time inside the range, descending
  Ns gpu_busy = 0;                 // time with a kernel running on >= 1 stream
  Ns stream_overlap = 0;           // time with kernels running on >= 2 streams
};

RangeStats range_stats(const TimelineModel& model, const prof::Trace& trace, Ns a, Ns b);

}  // namespace sl::ui
