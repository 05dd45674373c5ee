#include "ui/time_window.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sl::ui {

void TimeWindow::zoom(double factor, double anchor, double max_span) {
  if (!(factor > 0)) return;
  const double new_span = std::clamp(span() / factor, kMinSpan, std::max(kMinSpan, max_span));
  const double f = (anchor - t0) / span();  // where the anchor sits, 0..1
  t0 = anchor - f * new_span;
  t1 = t0 + new_span;
}

void TimeWindow::pan_pixels(double dx, double width) {
  if (width <= 0) return;
  const double dt = dx / width * span();
  t0 -= dt;
  t1 -= dt;
}

void TimeWindow::keep_near(double begin, double end) {
  const double s = span();
  // At least a tenth of the window stays on the trace.
  if (t1 < begin + 0.1 * s) t0 = begin - 0.9 * s, t1 = t0 + s;
  if (t0 > end - 0.1 * s) t0 = end - 0.1 * s, t1 = t0 + s;
}

TimeWindow fit_window(Ns begin, Ns end, double margin) {
  if (!(end > begin)) return {-TimeWindow::kMinSpan / 2, TimeWindow::kMinSpan / 2, begin};
  const double pad = double(end - begin) * margin;
  return {-pad, double(end - begin) + pad, begin};
}

double tick_step(double span, double width, double min_px) {
  if (!(span > 0) || !(width > 0)) return 1.0;
  const double min_step = span * min_px / width;  // ns per tick at least
  double p = std::pow(10.0, std::floor(std::log10(min_step)));
  for (;; p *= 10.0)
    for (double m : {1.0, 2.0, 5.0})
      if (m * p >= min_step) return m * p;
}

std::string format_duration(double ns) {
  if (ns == 0) return "0";
  // The unit follows the value rounded to the 3 digits shown: 999999.9 ns is "1.00 ms", not "1000 us".
  const double p = std::pow(10.0, std::floor(std::log10(std::fabs(ns))) - 2);
  const double a = std::round(std::fabs(ns) / p) * p;
  const char* unit = "ns";
  double v = std::copysign(a, ns);
  if (a >= 1e9) unit = "s", v /= 1e9;
  else if (a >= 1e6) unit = "ms", v /= 1e6;
  else if (a >= 1e3) unit = "us", v /= 1e3;
  char buf[32];
  const double av = std::fabs(v);
  std::snprintf(buf, sizeof buf, av >= 100 ? "%.0f %s" : av >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return buf;
}

}  // namespace sl::ui
