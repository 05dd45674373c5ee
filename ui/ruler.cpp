#include "ui/ruler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sl::ui {

Ns time_zero(const prof::Trace& trace, const TimelineModel& model) {
  const Ns base = trace.base_time;
  if (base == prof::kNoTime || base <= 0 || base > model.begin) return model.begin;
  return model.begin - base <= model.end - model.begin ? base : model.begin;
}

std::string format_tick(double ns, double resolution, double span) {
  const double unit = span >= 1e9 ? 1e9 : span >= 1e6 ? 1e6 : span >= 1e3 ? 1e3 : 1.0;
  const char* name = unit == 1e9 ? "s" : unit == 1e6 ? "ms" : unit == 1e3 ? "us" : "ns";
  // Decimals for the resolution in this unit: 0.2 -> 1, 0.05 -> 2, 5 -> 0 (the 1e-9 keeps 0.1
  // at 1 against log10's rounding).
  const double r = resolution > 0 ? resolution / unit : 1.0;
  const int decimals = std::clamp(int(std::ceil(-std::log10(r) - 1e-9)), 0, 9);
  double v = ns / unit;
  if (std::fabs(v) < 0.5 * std::pow(10.0, -decimals)) v = 0;  // no "-0.0"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, name);
  return buf;
}

std::string format_instant(double ns) { return format_tick(ns, 1.0, std::fabs(ns)); }

namespace {

std::vector<Tick> ticks_at_step(const TimeWindow& w, Ns zero, double width, double step) {
  std::vector<Tick> out;
  // Multiples of the step from the time zero, relative to it (k * step, not a running sum:
  // labels stay exact multiples).
  const double base = w.rel(zero);
  const double k0 = std::ceil((w.t0 - base) / step);
  for (double k = k0;; k += 1) {
    const double t = base + k * step;
    if (!(t < w.t1) || out.size() > 1000) break;
    out.push_back({w.x_of(t, width), k * step, format_tick(k * step, step, w.span())});
  }
  return out;
}

}  // namespace

std::vector<Tick> ruler_ticks(const TimeWindow& w, Ns zero, double width, double min_px, double char_px) {
  if (!(width > 0) || !(w.span() > 0)) return {};
  constexpr double kLabelGap = 12;  // pixels between one label's end and the next tick
  double step = tick_step(w.span(), width, min_px);
  std::vector<Tick> ticks = ticks_at_step(w, zero, width, step);
  size_t longest = 0;
  for (const Tick& t : ticks) longest = std::max(longest, t.label.size());
  const double need = double(longest) * char_px + kLabelGap;
  if (need > step / w.span() * width) {
    // Long labels (far from the zero, or fine steps): a coarser step. Its labels are no
    // longer (fewer decimals), so one retry suffices.
    step = tick_step(w.span(), width, need);
    ticks = ticks_at_step(w, zero, width, step);
  }
  return ticks;
}

}  // namespace sl::ui
