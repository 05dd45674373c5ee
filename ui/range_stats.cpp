#include "ui/range_stats.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "ui/intervals.h"

namespace sl::ui {

RangeStats range_stats(const TimelineModel& model, const prof::Trace& trace, Ns a, Ns b) {
  RangeStats r;
  r.a = std::min(a, b);
  r.b = std::max(a, b);
  std::unordered_map<prof::StrId, size_t> name_slot;
  std::vector<std::pair<Ns, int>> edges;  // GPU streams' merged intervals: (time, +1 / -1)
  for (size_t ti = 0; ti < model.tracks.size(); ++ti) {
    const Track& t = model.tracks[ti];
    TrackTime tt;
    tt.track = ti;
    std::vector<std::pair<Ns, Ns>> iv;
    std::map<uint32_t, std::vector<std::pair<Ns, Ns>>> kernel_iv;  // by stream: a track may hold several
    for (const Row& row : t.rows) {
      for (size_t i = first_ending_after(row, r.a); i < row.items.size() && row.items[i].start < r.b; ++i) {
        const Item& it = row.items[i];
        const Ns s = std::max(it.start, r.a), e = std::min(it.end, r.b);
        ++tt.items;
        iv.emplace_back(s, e);
        if (it.kind == ItemKind::Kernel) {
          kernel_iv[trace.kernels[it.index].stream].emplace_back(s, e);
          auto [slot, fresh] = name_slot.try_emplace(it.name, r.kernels.size());
          if (fresh) r.kernels.push_back({trace.str(it.name), 0, 0});
          r.kernels[slot->second].count += 1;
          r.kernels[slot->second].time += e - s;
        }
      }
    }
    if (tt.items == 0) continue;
    for (auto [s, e] : merge_intervals(std::move(iv))) tt.busy += e - s;
    // Busy and overlap count kernels per stream, as the analysis does (a stream's kernels
    // overlapping under programmatic dependent launch count once).
    for (auto& [stream, kv] : kernel_iv)
      for (auto [s, e] : merge_intervals(std::move(kv)))
        if (e > s) edges.emplace_back(s, +1), edges.emplace_back(e, -1);
    r.tracks.push_back(tt);
  }
  // Sweep: at equal times the ends (-1) come first, so touching intervals do not overlap.
  std::sort(edges.begin(), edges.end());
  int running = 0;
  for (size_t i = 0; i < edges.size(); ++i) {
    running += edges[i].second;
    if (i + 1 < edges.size()) {
      const Ns dt = edges[i + 1].first - edges[i].first;
      if (running >= 1) r.gpu_busy += dt;
      if (running >= 2) r.stream_overlap += dt;
    }
  }
  std::sort(r.kernels.begin(), r.kernels.end(), [](const NameTime& x, const NameTime& y) {
    return x.time != y.time ? x.time > y.time : x.name < y.name;
  });
  return r;
}

}  // namespace sl::ui
