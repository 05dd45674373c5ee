// report.md and report.html: the same content as the terminal report, as documents. The HTML
// is one self-contained file (inline CSS and SVG, PNG screenshots as data URIs), so that it can
// be mailed or attached to a ticket as it is.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/gzip.h"
#include "core/stats.h"
#include "experiments/compare/report.h"
#include "experiments/compare/run_folder.h"
#include "experiments/compare/structure.h"
#include "experiments/compare/svg_plot.h"

namespace sl::compare {

namespace {

std::string md_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else o += c;
  }
  return o;
}

// A file as base64, for a data: URI ("" when unreadable).
std::string base64_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  const std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(in[i])) << 16) | (i + 1 < in.size() ? uint32_t(uint8_t(in[i + 1])) << 8 : 0) |
                       (i + 2 < in.size() ? uint32_t(uint8_t(in[i + 2])) : 0);
    out += tbl[(n >> 18) & 63];
    out += tbl[(n >> 12) & 63];
    out += i + 1 < in.size() ? tbl[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? tbl[n & 63] : '=';
  }
  return out;
}

std::string provenance_line(const nlohmann::json& p) {
  std::string s;
  for (const char* k : {"gpu", "driver", "cuda_runtime_version", "commit", "date", "host"})
    if (p.contains(k)) s += std::string(s.empty() ? "" : ", ") + k + " " + (p[k].is_string() ? p[k].get<std::string>() : p[k].dump());
  return s;
}

}  // namespace

std::string report_markdown(const Report& r) {
  const Comparison& c = r.cmp;
  std::ostringstream os;
  os << "# streamlab compare\n\n" << r.source_line << "\n\n";
  if (r.settings.contains("description")) os << r.settings["description"].get<std::string>() << "\n\n";
  if (!r.provenance.empty()) os << "Provenance: " << provenance_line(r.provenance) << ".\n\n";
  if (!r.resources.empty() && !r.resources.front().system.empty())
    os << "System: " << md_escape(system_words(r.resources.front().system)) << ".\n\n";
  os << "## Verdict\n\n";
  for (const auto& l : verdict_lines(r)) os << "- " << md_escape(l) << "\n";
  os << "\n## Step latency\n\nMedian GPU time per decode step between timing marks on the main stream, +- the median "
        "absolute deviation, processes x steps.\n\n| mode/part |";
  for (const auto& s : c.sides) os << " " << md_escape(s.label) << " |";
  os << "\n|---|";
  for (size_t i = 0; i < c.sides.size(); ++i) os << "---|";
  os << "\n";
  for (const auto& k : keys_present(c)) {
    os << "| " << k << " |";
    for (const auto& s : c.sides) {
      auto it = s.samples.find(k);
      os << " " << (it == s.samples.end() ? "-" : format_latency(summarize(it->second))) << " |";
    }
    os << "\n";
  }
  os << "\n## Differences against " << md_escape(c.sides[c.baseline].label)
     << " (A)\n\n| B | mode/part | B/A - 1 | 95 % interval | margin | verdict |\n|---|---|---|---|---|---|\n";
  for (const auto& d : c.diffs)
    os << "| " << md_escape(c.sides[d.b].label) << " | " << d.key << " | " << format_pct(d.interval.estimate) << " | "
       << format_interval(d.interval) << " | " << format_pct(d.verdict.margin).substr(1) << " | "
       << md_escape(verdict_label(c, d)) << " |\n";
  if (c.baseline_again) {
    os << "\nNoise (" << md_escape(c.sides[c.baseline].label) << " measured twice):";
    for (const auto& [k, d] : c.noise) os << " " << k << " " << format_interval(d) << ";";
    os << " the margin of each row is the larger of the floor and this noise.\n";
  }
  if (!r.resources.empty()) {
    os << "\n## Structure and resources\n\n|  |";
    for (const auto& s : r.resources) os << " " << md_escape(s.label) << " |";
    os << "\n|---|";
    for (size_t i = 0; i < r.resources.size(); ++i) os << "---|";
    os << "\n";
    for (const auto& row : resource_rows(r.resources)) {
      os << "|";
      for (const auto& cell : row) os << " " << md_escape(cell) << " |";
      os << "\n";
    }
    if (const auto lines = aliasing_lines(r.resources); !lines.empty()) {
      os << "\nCUDA streams serving several roles (aliasing):\n\n";
      for (const auto& l : lines) os << "- " << md_escape(l) << "\n";
    }
  }
  if (!r.structure.markdown.empty()) os << "\n" << r.structure.markdown;
  if (!c.notes.empty()) {
    os << "\n## Notes\n\n";
    for (const auto& n : c.notes) os << "- " << md_escape(n) << "\n";
  }
  if (!r.screenshots.empty()) {
    os << "\n## Timelines\n\n";
    for (const auto& [label, png] : r.screenshots)
      os << "- " << md_escape(label) << ": [" << std::filesystem::path(png).filename().string() << "](screenshots/"
         << std::filesystem::path(png).filename().string() << ")\n";
  }
  if (!r.written_by.empty()) os << "\nReport written by streamlab at commit " << r.written_by << ".\n";
  if (!r.files.empty()) {
    os << "\n## Files\n\n";
    for (const auto& f : r.files) os << "- [" << f << "](" << f << ")\n";
  }
  return os.str();
}

std::string report_html(const Report& r) {
  const Comparison& c = r.cmp;
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>streamlab compare</title>\n"
     << "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;"
        "text-align:left}th{background:#f3f3f3}.v{font-weight:bold}svg{display:block;margin:1em 0}"
        "code,pre{background:#f6f6f6}</style></head><body>\n";
  os << "<h1>streamlab compare</h1>\n<p>" << html_escape(r.source_line) << "</p>\n";
  if (r.settings.contains("description"))
    os << "<p>" << html_escape(r.settings["description"].get<std::string>()) << "</p>\n";
  if (!r.provenance.empty()) os << "<p><small>Provenance: " << html_escape(provenance_line(r.provenance)) << "</small></p>\n";
  if (!r.resources.empty() && !r.resources.front().system.empty())
    os << "<p>System: " << html_escape(system_words(r.resources.front().system)) << ".</p>\n";
  os << "<h2>Verdict</h2>\n<ul>\n";
  for (const auto& l : verdict_lines(r)) os << "<li>" << html_escape(l) << "</li>\n";
  os << "</ul>\n<h2>Step latency</h2>\n";
  for (const auto& k : keys_present(c)) {
    std::vector<Series> series;
    for (const auto& s : c.sides) {
      auto it = s.samples.find(k);
      if (it != s.samples.end()) series.push_back({s.label, stats::pooled(it->second)});
    }
    os << svg_distributions("Step time per decode step, " + k + " (dots: steps; box: quartiles; bar: median)", series,
                            "ms")
       << "\n";
  }
  os << "<table><tr><th>B</th><th>mode/part</th><th>median A</th><th>median B</th><th>B/A - 1</th><th>95 % "
        "interval</th><th>margin</th><th>verdict</th></tr>\n";
  for (const auto& d : c.diffs)
    os << "<tr><td>" << html_escape(c.sides[d.b].label) << "</td><td>" << d.key << "</td><td>"
       << html_escape(format_latency(d.sa)) << "</td><td>" << html_escape(format_latency(d.sb)) << "</td><td>"
       << format_pct(d.interval.estimate) << "</td><td>" << format_interval(d.interval) << "</td><td>"
       << format_pct(d.verdict.margin).substr(1) << "</td><td class='v'>" << html_escape(verdict_label(c, d))
       << "</td></tr>\n";
  os << "</table>\n";
  if (c.baseline_again) {
    os << "<p>Noise (" << html_escape(c.sides[c.baseline].label) << " measured twice):";
    for (const auto& [k, d] : c.noise) os << " " << k << " " << format_interval(d) << ";";
    os << " each row's margin is the larger of the floor and this noise.</p>\n";
  }
  if (!r.resources.empty()) {
    os << "<h2>Structure and resources</h2>\n<table><tr><th></th>";
    for (const auto& s : r.resources) os << "<th>" << html_escape(s.label) << "</th>";
    os << "</tr>\n";
    for (const auto& row : resource_rows(r.resources)) {
      os << "<tr>";
      for (const auto& cell : row) os << "<td>" << html_escape(cell) << "</td>";
      os << "</tr>\n";
    }
    os << "</table>\n";
    if (const auto lines = aliasing_lines(r.resources); !lines.empty()) {
      os << "<p>CUDA streams serving several roles (aliasing):</p>\n<ul>";
      for (const auto& l : lines) os << "<li>" << html_escape(l) << "</li>";
      os << "</ul>\n";
    }
  }
  os << r.structure.html;
  if (!r.screenshots.empty()) {
    os << "<h2>Timelines</h2>\n<p>The traced steps of each side in streamlab's viewer, streams grouped by role "
          "(<code>streamlab view TRACE --by-role</code>).</p>\n";
    for (const auto& [label, png] : r.screenshots) {
      const std::string data = base64_file(png);
      if (data.empty()) continue;
      os << "<h3>" << html_escape(label) << "</h3>\n<img style='max-width:100%' alt='timeline of " << html_escape(label)
         << "' src='data:image/png;base64," << data << "'>\n";
    }
  }
  if (!c.notes.empty()) {
    os << "<h2>Notes</h2>\n<ul>\n";
    for (const auto& n : c.notes) os << "<li>" << html_escape(n) << "</li>\n";
    os << "</ul>\n";
  }
  if (!r.files.empty()) {
    os << "<h2>Files</h2>\n<ul>\n";
    for (const auto& f : r.files) os << "<li><a href='" << html_escape(f) << "'>" << html_escape(f) << "</a></li>\n";
    os << "</ul>\n";
  }
  os << "</body></html>\n";
  return os.str();
}

void write_report_files(const Report& r, const std::string& folder) {
  // A folder whose summary is gzipped (recorded folders in the repository: about 1 MB plain, a
  // tenth gzipped) keeps it gzipped, and its reports link the file by that name.
  const std::string plain = folder + "/summary.json";
  const bool gz = summary_path(folder) == plain + ".gz";
  Report rr = r;
  const std::string kPlain = "summary.json", kGz = "summary.json.gz";
  std::replace(rr.files.begin(), rr.files.end(), gz ? kPlain : kGz, gz ? kGz : kPlain);
  nlohmann::json j = report_json(rr);
  // The plan, so that the folder can be read back (compare FOLDER, recorded runs). Compact: with
  // the structure tables it is about 1 MB, a quarter of that indentation, and recorded folders
  // travel with the repository (report.md is the readable form).
  // Gzipped in memory and written in one atomic step: no plain copy appears beside it.
  if (gz)
    write_file_atomic(plain + ".gz", gzip_string(j.dump() + "\n", "'" + plain + ".gz'"));
  else
    write_file_atomic(plain, j.dump() + "\n");
  write_file_atomic(folder + "/report.md", report_markdown(rr));
  write_file_atomic(folder + "/report.html", report_html(rr));
}

}  // namespace sl::compare
