// The timeline viewer's UI, drawn with Dear ImGui once per frame: a ruler and the tracks of a
// TimelineModel (GPU streams, host NVTX ranges and CUDA API calls), with zoom (mouse wheel, about
// the cursor), pan (left drag), range selection (right drag), item selection (click) and
// hover tooltips; below, panels with the selected item, the selected range's statistics, the
// trace's kernels and streams (from profiler/analysis, computed once at load).
//
// A/B mode stacks two traces on one time axis: each trace is a block (a header naming its file,
// its lanes and tracks), both aligned at the start of one instance of an NVTX range
// (alignment.h), zoom, pan and selection shared. Streams are grouped by role in one order, so
// that the tracks of one role line up; a selected range shows the role-matched diff table
// (range_diff.h) from the profiles made at load.
//
// Ranks mode stacks the traces of one job's ranks (distributedInfo, profiler/job_ranks.h), rank 0
// on top, on the shared clock they were recorded on (no shift): what each GPU ran at the same
// moment, e.g. where one rank waits in its all-reduce for a slower one. Each block keeps its own
// analysis; a selected range shows every rank's busy time side by side.
//
// It reads traces, never live model objects. The window system lives in GlWindow; the viewer
// only needs a current ImGui context, so tests drive it frame by frame.
#pragma once
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "profiler/analysis.h"
#include "profiler/trace_index.h"
#include "profiler/trace.h"
#include "profiler/trace_profile.h"
#include "ui/alignment.h"
#include "ui/range_diff.h"
#include "ui/range_stats.h"
#include "ui/time_window.h"
#include "ui/timeline_model.h"

namespace sl::ui {

// Sizes of the timeline, in pixels (tests compute where things land from these).
struct TimelineLayout {
  static constexpr float kHeaderWidth = 230.f;  // track labels, left of the time axis
  static constexpr float kRulerHeight = 24.f;
  static constexpr float kRowHeight = 18.f;
  static constexpr float kTrackGap = 8.f;       // between tracks
  static constexpr float kLaneHeight = 30.f;    // the lanes above the tracks (streams busy, memory)
  static constexpr float kPanelHeight = 270.f;  // the panels below the timeline
  static constexpr float kBlockHeaderHeight = 22.f;  // A/B mode: the bar naming a block's trace
};

// Screen rectangle.
struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The color of a kernel, range or call name: stable across runs (a hash of the name).
uint32_t name_color(std::string_view name);  // ImGui's ABGR packing, opaque

// One trace on the timeline and what the viewer computed from it at load.
struct TraceBlock {
  std::string name;    // "A", "B"; "rank 0", ... in ranks mode; "" in single mode
  std::string source;  // the trace's path
  prof::Trace trace;
  TimelineModel model;
  Ns zero = 0;    // the ruler's time zero in this trace's clock (A/B: the alignment point)
  Ns offset = 0;  // zero minus the first block's zero: time t of the first block's clock is t + offset here
  Ns start = 0;   // the trace's own start (ruler.h time_zero), which the alignment point is reported from
  std::optional<prof::AnalysisResult> analysis;  // single mode
  std::optional<prof::TraceProfile> profile;     // A/B mode; its analysis serves as the analysis
  std::string analysis_error;
  std::optional<RangeStats> range;  // the selected range on this trace
  // Layout from the top of the scrolled area: the block starts at `top` (its header in A/B
  // mode), then the lanes, then the tracks; track_top.back() is the block's bottom.
  float top = 0, lanes_top = 0;
  std::vector<float> track_top;
  std::unordered_map<prof::StrId, std::string> short_names;
  std::unique_ptr<prof::LaunchIndex> launches;  // correlation id -> launch call, on first use

  const prof::AnalysisResult* analysis_result() const {
    return profile ? &profile->analysis : analysis ? &*analysis : nullptr;
  }
};

// How the A/B view lines up its two traces.
struct CompareOptions {
  std::optional<AlignSpec> align;  // none: default_alignment()
};

// One trace of a job's ranks, with the file it came from.
struct RankTrace {
  prof::Trace trace;
  std::string source;
};

class Viewer {
 public:
  // `source` names the trace in the title line (its path).
  Viewer(prof::Trace trace, std::string source, const TimelineOptions& opts = {});
  // A/B mode: `a` above `b`, aligned as `compare` says; opts.standard_role_order is set. Throws
  // sl::Error (naming the file) when a trace lacks the range to align at.
  Viewer(prof::Trace a, std::string source_a, prof::Trace b, std::string source_b, const CompareOptions& compare,
         TimelineOptions opts);
  // Ranks mode: the traces of one job, stacked by rank (each must name a distinct rank; throws
  // sl::Error naming the file otherwise), on their shared clock; opts.standard_role_order is set.
  Viewer(std::vector<RankTrace> ranks, TimelineOptions opts);
  // Rebuilds the tracks (e.g. streams grouped by role); keeps the window and the range.
  void set_options(const TimelineOptions& opts);
  const TimelineOptions& options() const { return options_; }

  // Draws the whole UI into the current ImGui frame, filling the display.
  void draw();

  bool ab() const { return mode_ == Mode::AB; }
  bool ranks() const { return mode_ == Mode::Ranks; }
  size_t block_count() const { return blocks_.size(); }
  const TraceBlock& block(size_t i) const { return blocks_.at(i); }
  // The first block's (the only one's, in single mode).
  const TimelineModel& model() const { return blocks_[0].model; }
  const prof::Trace& trace() const { return blocks_[0].trace; }
  // The time window, on the first block's clock (the others see it shifted by their offset).
  const TimeWindow& window() const { return window_; }
  void set_window(const TimeWindow& w) { window_ = w; }
  void fit();
  // Selects the time range [a, b) of the first block's clock (as a right drag does) and computes
  // its statistics on every block, and in A/B mode the role diff.
  void select_range(Ns a, Ns b);
  const std::optional<RangeStats>& range() const { return blocks_[0].range; }
  const std::optional<RangeDiff>& range_diff() const { return diff_; }
  // "decode:0": the range instance the A/B view aligns at ("" when at the traces' starts).
  const std::string& alignment() const { return alignment_; }

  // Reports to `log` (null: off), one line each, what the user's actions changed: the time
  // window, the selected item, the selected range, the open panel; and once, where the time
  // axis, the tracks and the panels' tabs are on screen. Lines start with "view: " and give times in microseconds from
  // time_zero(), so that a script (or a bug report) can follow a session.
  void set_event_log(std::FILE* log) { log_ = log; }

  // Where the last frame put the time axis: x0 .. x1 is the window [t0, t1); y0 is the top of
  // the first track (scrolled), y1 the bottom of the visible tracks.
  Rect timeline_rect() const { return timeline_; }
  Rect ruler_rect() const { return ruler_; }
  // The time the ruler and --window / --select count from, on the first block's clock: the
  // trace's start (ruler.h), or in A/B mode the alignment point.
  Ns time_zero() const { return blocks_[0].zero; }
  // Top of row `row` of track `track` (numbered over all blocks, A's tracks first), relative
  // to the top of the scrolled area (a block's header and lanes come before its tracks).
  float row_top(size_t track, size_t row) const;

 private:
  struct Selected {
    size_t block = 0, track = 0;  // track: in its block
    Item item;
  };
  // What the tracks' pass of a frame needs: the scrolled origin, the visible rows, the axis.
  struct Frame {
    float origin_x = 0, origin_y = 0, view_top = 0, view_bottom = 0, axis_x0 = 0, axis_width = 1;
    float mouse_x = 0, mouse_y = 0;
    bool hovered = false;
    std::optional<std::pair<const char*, int64_t>> lane_value;  // hovered lane and its value there
    std::optional<std::pair<uint32_t, float>> cluster;          // hovered cluster: items, total ns
  };

  void load_block(TraceBlock& b);  // the analysis (single) or the profile (A/B)
  void relayout();
  TimeWindow block_window(size_t b) const;
  std::pair<Ns, Ns> extent() const;  // all blocks' items, on the first block's clock
  size_t first_track(size_t block) const;  // global index of the block's first track
  void draw_header();
  void draw_analysis_line(const TraceBlock& b);
  std::string window_text() const;
  void log_layout();
  void log_changes();  // compares with the last frame's state, writes what changed
  void log_range();
  void draw_ruler(float x0, float x1, float y);
  void draw_tracks(float height);
  void draw_block(size_t b, Frame& f);
  void draw_block_header(size_t b, const Frame& f);
  void draw_track(size_t b, size_t ti, const TimeWindow& w, Frame& f);
  // A StepSeries as bars, one per run of pixel columns with the same maximum; returns the
  // value under the mouse's column when the mouse is in the lane.
  std::optional<int64_t> draw_series_lane(const StepSeries& s, const char* label, float top, const TimeWindow& w,
                                          const Frame& f, bool levels);
  void draw_panels();
  bool begin_tab(const char* name);  // BeginTabItem, noting where the tab is and which is open
  void draw_item_details();
  void draw_range_stats();
  void draw_range_diff();
  void draw_range_ranks();
  void draw_range_role_table(const RangeDiff& d);
  // A table of a block's analysis (kernels, streams) with its header row, `height` pixels
  // tall (0: the rest of the panel); false when there is none to draw (its error is shown).
  bool begin_analysis_table(const TraceBlock& b, const char* id, std::initializer_list<const char*> headers,
                            float height);
  void draw_kernel_table(const TraceBlock& b, float height);
  void draw_stream_table(const TraceBlock& b, float height);
  void handle_input(float axis_x0, float axis_width, bool hovered);
  void draw_launch_flow(const Frame& f);
  std::optional<size_t> row_of(size_t block, size_t track, const Item& it) const;  // the row holding `it`
  uint32_t launch_call(size_t block, const Item& it);  // index of a GPU item's launch call, or kNoId
  std::string item_name(const TraceBlock& b, const Item& it) const;
  std::string where(const TraceBlock& b, const Item& it, const Track& track) const;  // "main (stream 13)", ...
  const std::string& short_name(TraceBlock& b, prof::StrId id);
  void item_tooltip(const Selected& s) const;
  std::string at(const TraceBlock& b, Ns t) const;  // a time of block b relative to its zero

  enum class Mode { Single, AB, Ranks };
  Mode mode_ = Mode::Single;
  bool stacked() const { return blocks_.size() > 1; }  // a header bar per block
  std::vector<TraceBlock> blocks_;
  TimelineOptions options_;
  std::optional<AlignSpec> align_;  // A/B: the range instance at time 0 (none: the traces' starts)
  std::string alignment_;           // as --align takes it, "" for none
  TimeWindow window_;
  Rect timeline_, ruler_;
  float content_height_ = 0;  // all blocks
  // Interaction state.
  std::optional<Selected> selected_;
  std::optional<Selected> hovered_;
  std::optional<std::pair<Ns, Ns>> selection_;  // the selected range on the first block's clock (shaded)
  std::optional<RangeDiff> diff_;
  bool selecting_ = false;
  Ns select_from_ = 0;
  // The event log and what it last reported.
  std::FILE* log_ = nullptr;
  bool logged_layout_ = false, logged_selecting_ = false, logged_tabs_ = false;
  TimeWindow logged_window_{0, 0};
  std::optional<std::tuple<size_t, ItemKind, uint32_t>> logged_selection_;
  std::optional<std::pair<Ns, Ns>> logged_range_;
  std::map<std::string, Rect> tabs_;  // the panels' tab buttons on screen, by name
  std::string open_tab_, logged_tab_;
};

}  // namespace sl::ui
