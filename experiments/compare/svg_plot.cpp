#include "experiments/compare/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/stats.h"

namespace sl::compare {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

// A colour per series, distinguishable and readable on white.
const char* colour(size_t i) {
  static const char* c[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  return c[i % 8];
}

std::string num(double v) {
  char b[32];
  if (std::fabs(v) >= 100) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 10) std::snprintf(b, sizeof b, "%.1f", v);
  else std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// A "nice" upper bound for an axis (1, 2, 5 x 10^k at or above v).
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

std::string legend(const std::vector<Series>& series, int x, int y) {
  std::ostringstream os;
  for (size_t i = 0; i < series.size(); ++i) {
    os << "<rect x='" << x << "' y='" << y + 16 * int(i) << "' width='10' height='10' fill='" << colour(i) << "'/>"
       << "<text x='" << x + 14 << "' y='" << y + 9 + 16 * int(i) << "' font-size='11'>" << html_escape(series[i].name)
       << "</text>";
  }
  return os.str();
}

}  // namespace

std::string svg_bars(const std::string& title, const std::vector<std::string>& categories,
                     const std::vector<Series>& series, const std::string& unit, bool stacked) {
  const int left = 60, top = 28, plot_h = 180, bottom = 60;
  const int group_w = std::max(30, stacked ? 40 : int(18 * series.size()) + 14);
  const int plot_w = std::max(200, group_w * int(categories.size()));
  const int legend_w = 170;
  const int W = left + plot_w + 20 + legend_w, H = top + plot_h + bottom;
  double vmax = 0;
  for (size_t c = 0; c < categories.size(); ++c) {
    double stack = 0;
    for (const auto& s : series) {
      const double v = c < s.values.size() ? s.values[c] : 0;
      stack += std::max(0.0, v);
      vmax = std::max(vmax, stacked ? stack : v);
    }
  }
  const double ymax = nice_max(vmax);
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " "
     << H << "' role='img'><title>" << html_escape(title) << "</title>";
  os << "<text x='" << left << "' y='16' font-size='13' font-weight='bold'>" << html_escape(title) << "</text>";
  for (int t = 0; t <= 4; ++t) {  // horizontal grid with labels
    const double v = ymax * t / 4;
    const int y = top + plot_h - int(plot_h * t / 4);
    os << "<line x1='" << left << "' x2='" << left + plot_w << "' y1='" << y << "' y2='" << y
       << "' stroke='#ddd'/><text x='" << left - 4 << "' y='" << y + 4 << "' font-size='10' text-anchor='end'>"
       << num(v) << "</text>";
  }
  os << "<text x='12' y='" << top + plot_h / 2 << "' font-size='10' transform='rotate(-90 12 " << top + plot_h / 2
     << ")' text-anchor='middle'>" << html_escape(unit) << "</text>";
  for (size_t c = 0; c < categories.size(); ++c) {
    const int gx = left + int(c) * group_w + 7;
    double stack = 0;
    for (size_t i = 0; i < series.size(); ++i) {
      const double v = c < series[i].values.size() ? std::max(0.0, series[i].values[c]) : 0;
      const int h = int(std::lround(plot_h * v / ymax));
      const int x = stacked ? gx : gx + int(i) * 18;
      const int y = top + plot_h - h - (stacked ? int(std::lround(plot_h * stack / ymax)) : 0);
      os << "<rect x='" << x << "' y='" << y << "' width='" << (stacked ? 26 : 16) << "' height='" << h
         << "' fill='" << colour(i) << "'><title>" << html_escape(series[i].name + ", " + categories[c] + ": " + num(v) +
                                                                   " " + unit)
         << "</title></rect>";
      stack += v;
    }
    os << "<text x='" << gx + (stacked ? 13 : int(9 * series.size())) << "' y='" << top + plot_h + 14
       << "' font-size='10' text-anchor='end' transform='rotate(-35 " << gx + (stacked ? 13 : int(9 * series.size()))
       << " " << top + plot_h + 14 << ")'>" << html_escape(categories[c]) << "</text>";
  }
  os << "<line x1='" << left << "' x2='" << left + plot_w << "' y1='" << top + plot_h << "' y2='" << top + plot_h
     << "' stroke='#333'/>";
  os << legend(series, left + plot_w + 20, top) << "</svg>";
  return os.str();
}

std::string svg_distributions(const std::string& title, const std::vector<Series>& series, const std::string& unit) {
  const int left = 170, top = 28, row_h = 34, plot_w = 460, bottom = 36;
  const int W = left + plot_w + 30, H = top + row_h * int(series.size()) + bottom;
  double lo = 0, hi = 0;
  bool any = false;
  for (const auto& s : series)
    for (double v : s.values) {
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
  if (!any) hi = 1;
  const double pad = std::max((hi - lo) * 0.08, hi * 0.002 + 1e-9);
  lo -= pad;
  hi += pad;
  auto X = [&](double v) { return left + int(std::lround(plot_w * (v - lo) / (hi - lo))); };
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " "
     << H << "' role='img'><title>" << html_escape(title) << "</title>";
  os << "<text x='10' y='16' font-size='13' font-weight='bold'>" << html_escape(title) << "</text>";
  for (int t = 0; t <= 4; ++t) {
    const double v = lo + (hi - lo) * t / 4;
    os << "<line x1='" << X(v) << "' x2='" << X(v) << "' y1='" << top << "' y2='" << H - bottom
       << "' stroke='#eee'/><text x='" << X(v) << "' y='" << H - bottom + 14
       << "' font-size='10' text-anchor='middle'>" << num(v) << "</text>";
  }
  os << "<text x='" << left + plot_w / 2 << "' y='" << H - 6 << "' font-size='10' text-anchor='middle'>"
     << html_escape(unit) << "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    const int y = top + row_h * int(i) + row_h / 2;
    const auto& v = series[i].values;
    os << "<text x='" << left - 8 << "' y='" << y + 4 << "' font-size='11' text-anchor='end'>"
       << html_escape(series[i].name) << "</text>";
    if (v.empty()) continue;
    const double q1 = stats::quantile(v, 0.25), q3 = stats::quantile(v, 0.75), med = stats::median(v);
    os << "<rect x='" << X(q1) << "' y='" << y - 9 << "' width='" << std::max(1, X(q3) - X(q1))
       << "' height='18' fill='" << colour(i) << "' fill-opacity='0.25' stroke='" << colour(i) << "'/>";
    for (size_t k = 0; k < v.size(); ++k)  // dots, jittered vertically so that equal values stay visible
      os << "<circle cx='" << X(v[k]) << "' cy='" << y - 6 + int(k * 7 % 13) << "' r='1.8' fill='" << colour(i)
         << "'/>";
    os << "<line x1='" << X(med) << "' x2='" << X(med) << "' y1='" << y - 12 << "' y2='" << y + 12
       << "' stroke='#000' stroke-width='2'><title>median " << num(med) << " " << html_escape(unit)
       << "</title></line>";
  }
  os << "</svg>";
  return os.str();
}

}  // namespace sl::compare
