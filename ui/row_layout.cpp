#include "ui/row_layout.h"

#include <algorithm>
#include <cmath>

namespace sl::ui {

std::vector<Box> layout_row(const Row& row, const TimeWindow& w, float width, float min_px) {
  std::vector<Box> out;
  const auto& items = row.items;
  auto clipped = [&](const Item& it, float& x0, float& x1) {
    x0 = float(std::max(0.0, w.x_of_ns(it.start, width)));
    x1 = float(std::min(double(width), w.x_of_ns(it.end, width)));
  };
  // The first item ending inside the window (items ending exactly at t0 are not visible).
  for (size_t i = first_ending_after(row, w.origin + Ns(std::floor(w.t0))); i < items.size(); ++i) {
    if (w.rel(items[i].start) >= w.t1) break;
    if (w.rel(items[i].end) <= w.t0) continue;
    float x0, x1;
    clipped(items[i], x0, x1);
    Box b{x0, std::max(x1, x0 + 1.f), uint32_t(i), 1};
    if (x1 - x0 < min_px) {
      // A narrow item starts a cluster. As in Tracy, whole runs of items that end within
      // min_px of the cluster are taken by one binary search (ends are sorted: the row's items
      // are disjoint), so a zoomed-out frame costs a search per box, not a step per item.
      const Ns right_edge = w.origin + Ns(std::ceil(w.t1));
      for (;;) {
        const Ns reach = std::min(w.ns_at(double(b.x1 + min_px), double(width)), right_edge);
        const auto run_end = std::upper_bound(items.begin() + ptrdiff_t(i) + 1, items.end(), reach,
                                              [](Ns v, const Item& x) { return v < x.end; });
        const size_t j = size_t(run_end - items.begin());  // items i+1 .. j-1 end by `reach`
        if (j > i + 1) {
          b.count += uint32_t(j - i - 1);
          i = j - 1;
          float n0, n1;
          clipped(items[i], n0, n1);
          b.x1 = std::max(b.x1, std::max(n1, n0 + 1.f));
        }
        // The next item joins if it is narrow too and starts within min_px.
        if (i + 1 >= items.size() || w.rel(items[i + 1].start) >= w.t1) break;
        float n0, n1;
        clipped(items[i + 1], n0, n1);
        if (n1 - n0 >= min_px || n0 - b.x1 >= min_px) break;
        b.x1 = std::max(b.x1, std::max(n1, n0 + 1.f));
        ++b.count;
        ++i;
      }
    }
    // At least 1 px, inside the timeline: a sliver at the right edge grows leftwards.
    b.x1 = std::min(b.x1, width);
    if (b.x1 - b.x0 < 1.f) b.x0 = std::max(0.f, b.x1 - 1.f);
    out.push_back(b);
  }
  return out;
}

}  // namespace sl::ui
