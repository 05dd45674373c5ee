// The viewer's picture of a trace: a list of tracks (one per GPU stream, then NVTX ranges and
// CUDA API calls per host thread), each a few rows of items that never overlap within a row.
// Built once when a trace is loaded; drawing then only looks at what the visible window holds.
//
// Rows are what make drawing cheap (Tracy's approach): items of one row are disjoint and sorted
// by start, so their ends are sorted too, and the first visible item is a binary search away.
// Overlapping items of one track (nested NVTX ranges; kernels that overlap on one stream under
// programmatic dependent launch) go to further rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/trace.h"
#include "ui/step_series.h"

namespace sl::ui {

using prof::Ns;

enum class ItemKind : uint8_t { Kernel, Memcpy, Memset, Nvtx, Api };
const char* to_string(ItemKind k);

struct Item {
  Ns start = 0, end = 0;
  prof::StrId name = 0;
  uint32_t index = 0;  // into the trace's vector of this kind (kernels, memcpys, ...)
  ItemKind kind = ItemKind::Kernel;
};

// Disjoint items sorted by start.
struct Row {
  std::vector<Item> items;
};

enum class TrackKind : uint8_t { GpuStream, HostNvtx, HostApi };

struct Track {
  TrackKind kind = TrackKind::GpuStream;
  uint32_t id = 0;   // stream id (the first, when grouped by role), or thread id for host tracks
  std::vector<uint32_t> streams;  // GPU tracks: the streams whose work it shows
  uint32_t pid = 0;
  std::string label; // "main (stream 13)", "thread 4711: NVTX", ...
  std::vector<Row> rows;
  uint64_t items = 0;
  Ns busy = 0;       // union of the track's item intervals
};

struct TimelineModel {
  std::vector<Track> tracks;
  StepSeries streams_busy;  // GPU streams running kernels, over time (the overlap lane)
  StepSeries memory;        // device memory allocated inside the window (empty: none traced)
  Ns begin = 0, end = 0;  // earliest start and latest end over all items (0, 0 when empty)
  uint64_t items = 0;
  // Records with a zero (unknown) start time in a trace on an absolute clock, left off: one
  // would stretch the timeline from 0 to the CUPTI clock's 1e18 ns. Records that end before
  // they start are drawn zero-length.
  uint64_t invalid_items = 0;
};

struct TimelineOptions {
  // One track per stream role instead of per stream: streams named "<owner>.<role>"
  // ("L3.aux0", "mtp1.aux0", "target.aux0") share the track of their role ("aux0"). With
  // per-layer streams a trace has 3 lanes per layer (docs/streams.md: 90 in DeepSeek V4 Pro); by
  // role it has 3, and overlap within a role shows as extra rows.
  bool group_streams_by_role = false;
  // With group_streams_by_role: role tracks in one fixed order, main, aux0, aux1, aux2,
  // shared_expert, other named roles by name, then unnamed streams by id; instead of the order
  // of each role's first stream id. Two traces then list their roles alike (the A/B view: a
  // per-layer trace's aux0 track sits where a shared-pool trace's does).
  bool standard_role_order = false;
};

// The place of a stream role in the standard order: 0 main, 1..3 aux0..aux2, 4 shared_expert,
// 5 any other named role, 6 an unnamed stream ("stream N").
int standard_role_rank(const std::string& role);

// The trace must be finalized. Kernels, memcpys and memsets go to their stream's track; NVTX
// ranges (marks as zero-length items) and API calls to their thread's tracks.
TimelineModel build_timeline(const prof::Trace& trace, const TimelineOptions& opts = {});

// Puts items (any order) into rows: each item goes to the first row whose last item ended at or
// before its start, taking items by (start ascending, end descending) so that an enclosing
// item lands in a lower row than what it encloses.
std::vector<Row> assign_rows(std::vector<Item> items);

// Index of the first item of `row` that ends after `t` (items.size() when none).
size_t first_ending_after(const Row& row, Ns t);

// The item of `row` covering time `t` (start <= t < end), or nullptr.
const Item* item_at(const Row& row, Ns t);

}  // namespace sl::ui
