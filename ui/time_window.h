// The visible time window of the timeline and its mapping to pixels: zoom about the cursor, pan
// by a drag, fit to the trace, and the ruler's tick spacing. Pure arithmetic, no ImGui, so that
// tests check it against hand-computed values.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace sl::ui {

using Ns = int64_t;  // trace nanoseconds (prof::Ns)

struct TimeWindow {
  // Visible [t0, t1) in nanoseconds after `origin`. Relative, because trace times are CUPTI
  // timestamps near 1e18 ns, where a double resolves only 256 ns.
  double t0 = 0, t1 = 1;
  Ns origin = 0;

  double span() const { return t1 - t0; }
  // Pixel offset of relative time t in a timeline `width` pixels wide (not clamped).
  double x_of(double t, double width) const { return (t - t0) / span() * width; }
  double t_of(double x, double width) const { return t0 + x / width * span(); }
  // The same for trace timestamps.
  double rel(Ns t) const { return double(t - origin); }
  double x_of_ns(Ns t, double width) const { return x_of(rel(t), width); }
  Ns ns_at(double x, double width) const { return origin + Ns(std::llround(t_of(x, width))); }

  // Zooms by `factor` (> 1 zooms in) keeping relative time `anchor` at the same pixel. The span stays
  // within [kMinSpan, max_span].
  void zoom(double factor, double anchor, double max_span);
  // Moves the window by `dx` pixels of a `width`-pixel timeline (dx > 0: earlier times come
  // into view, as when the content is dragged right).
  void pan_pixels(double dx, double width);
  // Keeps the window overlapping [begin, end] (relative times): it may not leave the trace.
  void keep_near(double begin, double end);

  static constexpr double kMinSpan = 10.0;  // ns: below that, CUPTI timestamps say nothing
};

// The window showing trace times [begin, end] with `margin` (a fraction of the span) on both
// sides, its origin at begin; a window of kMinSpan around begin when the range is empty.
TimeWindow fit_window(Ns begin, Ns end, double margin = 0.02);

// Ruler tick step in ns: the smallest 1, 2 or 5 x 10^k with at least `min_px` pixels between
// ticks when `span` ns fill `width` pixels.
double tick_step(double span, double width, double min_px);

// "1.5 ms", "250 us", "40 ns": a duration with a unit that keeps 3 significant digits.
std::string format_duration(double ns);

}  // namespace sl::ui
