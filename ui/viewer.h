// The timeline viewer's UI, drawn with Dear ImGui once per frame: a ruler and the tracks of a
// TimelineModel (GPU streams, host NVTX ranges and CUDA API calls), with zoom (mouse wheel, about
// the cursor), pan (left drag), range selection (right drag), item selection (click) and
// hover tooltips; below, panels with the selected item, the selected range's statistics, the
// trace's kernels and streams (from profiler/analysis, computed once at load).
//
// It reads a trace, never live model objects. The window system lives in GlWindow; the viewer
// only needs a current ImGui context, so tests drive it frame by frame.
#pragma once
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "profiler/analysis.h"
#include "profiler/trace_index.h"
#include "profiler/trace.h"
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
};

// Screen rectangle.
struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The color of a kernel, range or call name: stable across runs (a hash of the name).
uint32_t name_color(std::string_view name);  // ImGui's ABGR packing, opaque

class Viewer {
 public:
  // `source` names the trace in the title line (its path).
  Viewer(prof::Trace trace, std::string source, const TimelineOptions& opts = {});
  // Rebuilds the tracks (e.g. streams grouped by role); keeps the window and the range.
  void set_options(const TimelineOptions& opts);
  const TimelineOptions& options() const { return options_; }

  // Draws the whole UI into the current ImGui frame, filling the display.
  void draw();

  const TimelineModel& model() const { return model_; }
  const prof::Trace& trace() const { return trace_; }
  const TimeWindow& window() const { return window_; }
  void set_window(const TimeWindow& w) { window_ = w; }
  void fit() { window_ = fit_window(model_.begin, model_.end); }
  // Selects the time range [a, b) (as a right drag does) and computes its statistics.
  void select_range(Ns a, Ns b);
  const std::optional<RangeStats>& range() const { return range_; }

  // Where the last frame put the time axis: x0 .. x1 is the window [t0, t1); y0 is the top of
  // the first track (scrolled), y1 the bottom of the visible tracks.
  // Reports to `log` (null: off), one line each, what the user's actions changed: the time
  // window, the selected item, the selected range; and once, where the time axis and the
  // tracks are on screen. Lines start with "view: " and give times in microseconds from
  // time_zero(), so that a script (or a bug report) can follow a session.
  void set_event_log(std::FILE* log) { log_ = log; }

  Rect timeline_rect() const { return timeline_; }
  Rect ruler_rect() const { return ruler_; }
  // The time the ruler and --window / --select count from: the trace's base time (what our
  // exports count from), or its first item on the timeline.
  Ns time_zero() const { return zero_; }
  // Top of row `row` of track `track`, relative to the top of the scrolled area (the lanes
  // for streams busy and memory come first).
  float row_top(size_t track, size_t row) const;

 private:
  void draw_header();
  void log_changes();  // compares with the last frame's state, writes what changed
  void draw_ruler(float x0, float x1, float y);
  void draw_tracks(float height);
  // A StepSeries as bars, one per run of pixel columns with the same maximum; returns the
  // value under the mouse's column when the mouse is in the lane.
  std::optional<int64_t> draw_series_lane(const StepSeries& s, const char* label, float top, float x0, float width,
                                          bool levels);
  void draw_panels();
  void draw_item_details();
  void draw_range_stats();
  // A table of the analysis (kernels, streams) with its header row; false when there is none
  // to draw (no analysis: its error is shown instead).
  bool begin_analysis_table(const char* id, std::initializer_list<const char*> headers);
  void draw_kernel_table();
  void draw_stream_table();
  void handle_input(float axis_x0, float axis_width, bool hovered);
  void draw_launch_flow(float origin_y, float x0, float width);
  std::optional<size_t> row_of(size_t track, const Item& it) const;  // the row holding `it`
  uint32_t launch_call(const Item& it);  // index of a GPU item's launch call, or kNoId
  std::string item_name(const Item& it) const;
  std::string where(const Item& it, const Track& track) const;  // "main (stream 13)", "thread 7: NVTX"
  const std::string& short_name(prof::StrId id);
  void item_tooltip(const Item& it, const Track& track) const;

  prof::Trace trace_;
  std::string source_;
  TimelineOptions options_;
  TimelineModel model_;
  std::vector<float> track_top_;  // per track, from the top of the scrolled area; back() = total height
  float lanes_height_ = 0;        // the series lanes above the tracks
  TimeWindow window_;
  Rect timeline_, ruler_;
  Ns zero_ = 0;
  std::optional<prof::AnalysisResult> analysis_;
  std::string analysis_error_;
  std::unordered_map<prof::StrId, std::string> short_names_;
  std::unique_ptr<prof::LaunchIndex> launches_;  // correlation id -> launch call, on first use
  // Interaction state.
  struct Selected {
    size_t track = 0;
    Item item;
  };
  std::optional<Selected> selected_;
  std::optional<Selected> hovered_;
  std::optional<RangeStats> range_;
  bool selecting_ = false;
  // The event log and what it last reported.
  std::FILE* log_ = nullptr;
  bool logged_layout_ = false, logged_selecting_ = false;
  TimeWindow logged_window_{0, 0};
  std::optional<std::pair<ItemKind, uint32_t>> logged_selection_;
  std::optional<std::pair<Ns, Ns>> logged_range_;
  Ns select_from_ = 0;
};

}  // namespace sl::ui
