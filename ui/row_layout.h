// What one row draws for the visible window: boxes in pixels, each one item or a cluster of
// items too narrow to draw apart (Tracy merges such zones the same way, so that a zoomed-out
// view of 100k kernels costs a few hundred boxes, not 100k).
#pragma once
#include <cstdint>
#include <vector>

#include "ui/time_window.h"
#include "ui/timeline_model.h"

namespace sl::ui {

struct Box {
  float x0 = 0, x1 = 0;  // pixels from the timeline's left edge, clipped to [0, width]
  uint32_t first = 0;    // index of the first item in the row
  uint32_t count = 1;    // > 1: a cluster of `count` consecutive items
};

// Items shorter than `min_px` are merged with following narrow items that start less than
// `min_px` after the cluster's end; a box is at least 1 px wide so that every item shows.
std::vector<Box> layout_row(const Row& row, const TimeWindow& w, float width, float min_px = 3.f);

}  // namespace sl::ui
