// The time ruler: where time zero is, which ticks a window shows and how they read. Pure
// arithmetic, no ImGui, so that tests check the labels a trace on an absolute clock gets.
//
// Labels count from the time zero in the unit of the visible span, with the decimals the tick
// step needs: ticks one step apart always read differently, however far from the zero they lie.
// (format_duration's 3 significant digits cannot: 5480000.0002 s and 5480000.0004 s are both
// "5480000 s".)
#pragma once
#include <string>
#include <vector>

#include "profiler/trace.h"
#include "ui/time_window.h"
#include "ui/timeline_model.h"

namespace sl::ui {

// The time the ruler, --window and --select count from, in the trace's clock: the trace's base
// time (the tracing session's start, which our exports count from) when it lies no more than
// the trace's span before the first item on the timeline; otherwise that first item. A base
// further away is a reference of another clock, not the trace's start: a PyTorch trace's
// baseTimeNanoseconds may lie far before its events (5.48e15 ns, 63 days, in the trace that
// showed it), and counting from there put "5480000 s" on every tick.
Ns time_zero(const prof::Trace& trace, const TimelineModel& model);

// `ns` after the time zero in the unit of `span` (s from 1 s, ms from 1 ms, us from 1 us, else
// ns) with the decimals that `resolution` ns needs in that unit: format_tick(1300.05e3, 50,
// 400e3) is "1300.05 us".
std::string format_tick(double ns, double resolution, double span);

// A time of an item relative to the time zero, to the nanosecond ("1.234567 ms").
std::string format_instant(double ns);

struct Tick {
  double x = 0;       // pixels from the time axis' left end
  double rel = 0;     // ns after the time zero
  std::string label;
};

// The ticks of window `w` on a time axis `width` pixels wide: at multiples of a 1-2-5 step from
// `zero`, at least `min_px` apart and far enough apart for their labels (`char_px` per
// character, plus a gap).
std::vector<Tick> ruler_ticks(const TimeWindow& w, Ns zero, double width, double min_px, double char_px);

}  // namespace sl::ui
