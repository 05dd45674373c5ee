// Small inline SVG plots for report.html (no scripts, no external files: the report is one
// self-contained page). Two kinds: grouped bars (one group per category, one bar per series)
// and distributions (one row per series: every sample as a dot, the median as a bar, the
// interquartile range as a box).
#pragma once
#include <string>
#include <vector>

namespace sl::compare {

struct Series {
  std::string name;
  std::vector<double> values;  // bars: one per category; distributions: the samples
};

// `stacked`: the series of a category stack into one bar instead of standing side by side.
std::string svg_bars(const std::string& title, const std::vector<std::string>& categories,
                     const std::vector<Series>& series, const std::string& unit, bool stacked = false);

std::string svg_distributions(const std::string& title, const std::vector<Series>& series, const std::string& unit);

// Escapes text for HTML / SVG.
std::string html_escape(const std::string& s);

}  // namespace sl::compare
