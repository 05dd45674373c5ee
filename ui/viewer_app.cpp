#include "ui/viewer_app.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "profiler/job_ranks.h"
#include "profiler/trace_io.h"
#include "ui/gl_window.h"
#include "ui/screenshot.h"
#include "ui/viewer.h"

namespace sl::ui {

std::pair<double, double> parse_us_range(const std::string& spec, const std::string& what) {
  const size_t colon = spec.find(':');
  char* end = nullptr;
  auto number = [&](const std::string& s) {
    const double v = std::strtod(s.c_str(), &end);
    // Finite and at most 1e12 us (11.6 days) either way: the nanoseconds must fit an int64 with
    // room. Negative: before the time zero (in A/B mode, B's items before the alignment point).
    if (s.empty() || *end != '\0' || !std::isfinite(v) || std::fabs(v) > 1e12)
      throw Error(what + " '" + spec + "': expected START:END in microseconds (-1e12 .. 1e12)");
    return v;
  };
  if (colon == std::string::npos) throw Error(what + " '" + spec + "': expected START:END in microseconds");
  const double a = number(spec.substr(0, colon)), b = number(spec.substr(colon + 1));
  if (!(b > a)) throw Error(what + " '" + spec + "': END must be after START");
  return {a, b};
}

namespace {

prof::Trace load(const std::string& path) {
  std::fprintf(stderr, "loading %s ...\n", path.c_str());
  prof::Trace trace = prof::load_trace(path);
  if (!trace.counts.clean())
    std::fprintf(stderr, "warning: %s has record problems (dropped or malformed records); the timeline shows what is there\n",
                 path.c_str());
  return trace;
}

void report_block(const Viewer& v, size_t i) {
  const TraceBlock& b = v.block(i);
  const std::string who = b.name.empty() ? "" : b.name + ": ";
  std::fprintf(stderr, "%s%llu items on %zu tracks\n", who.c_str(), (unsigned long long)b.model.items,
               b.model.tracks.size());
  if (b.model.invalid_items)
    std::fprintf(stderr, "warning: %s%llu records with a zero start time left off the timeline\n", who.c_str(),
                 (unsigned long long)b.model.invalid_items);
  if (v.ab())
    std::fprintf(stderr, "%saligned at %s, %.3f us after the trace's start\n", who.c_str(),
                 v.alignment().empty() ? "its start" : v.alignment().c_str(), double(b.zero - b.start) / 1e3);
}

}  // namespace

int run_viewer(const ViewerOptions& o) {
  if (o.width < 320 || o.height < 240 || o.width > 16384 || o.height > 16384)
    throw Error("viewer: window size " + std::to_string(o.width) + "x" + std::to_string(o.height) +
                " is out of range (320x240 .. 16384x16384)");
  std::optional<std::pair<double, double>> win, sel;
  if (!o.window_us.empty()) win = parse_us_range(o.window_us, "--window");
  if (!o.select_us.empty()) sel = parse_us_range(o.select_us, "--select");
  std::vector<std::string> paths{o.trace};
  if (!o.trace_b.empty()) paths.push_back(o.trace_b);
  if (!o.more_traces.empty() && o.trace_b.empty()) throw Error("viewer: more traces given without a second one");
  paths.insert(paths.end(), o.more_traces.begin(), o.more_traces.end());
  std::optional<AlignSpec> align;
  if (!o.align.empty()) {
    if (paths.size() != 2) throw Error("--align '" + o.align + "': aligning needs two traces (view A B); the ranks view keeps one clock");
    align = parse_align(o.align);
  }
  if (o.ab && paths.size() != 2) throw Error("--ab compares two traces (view A B)");
  TimelineOptions to;
  to.group_streams_by_role = o.group_streams_by_role;
  std::vector<prof::Trace> traces;
  for (const std::string& p : paths) traces.push_back(load(p));
  std::vector<prof::RankClaim> claims;
  for (size_t i = 0; i < traces.size(); ++i) claims.push_back({paths[i], traces[i].rank, traces[i].world_size});
  // Several traces are ranks of one job unless two are asked to be compared (--ab, --align) or
  // are not a whole job (two runs to compare).
  const bool ranks_view = paths.size() > 2 || (paths.size() == 2 && !o.ab && !align && prof::whole_job(claims));
  std::unique_ptr<Viewer> made;
  if (paths.size() == 1) {
    made = std::make_unique<Viewer>(std::move(traces[0]), o.trace, to);
  } else if (ranks_view) {
    prof::check_rank_claims(claims);
    std::fprintf(stderr, "ranks view: %zu traces of one job, stacked by rank on their shared clock%s\n", paths.size(),
                 paths.size() == 2 ? " (--ab compares the two as A/B instead)" : "");
    std::vector<RankTrace> ranks;
    for (size_t i = 0; i < traces.size(); ++i) ranks.push_back({std::move(traces[i]), paths[i]});
    made = std::make_unique<Viewer>(std::move(ranks), to);
  } else {
    to.group_streams_by_role = true;  // roles line up the two traces' streams
    made = std::make_unique<Viewer>(std::move(traces[0]), o.trace, std::move(traces[1]), o.trace_b,
                                    CompareOptions{align}, to);
  }
  Viewer& viewer = *made;
  for (size_t i = 0; i < viewer.block_count(); ++i) report_block(viewer, i);
  if (o.log_events) viewer.set_event_log(stderr);
  const Ns begin = viewer.time_zero();
  if (win) viewer.set_window({win->first * 1e3, win->second * 1e3, begin});
  if (sel) viewer.select_range(begin + Ns(std::llround(sel->first * 1e3)), begin + Ns(std::llround(sel->second * 1e3)));

  const bool batch = o.frames > 0 || !o.screenshot.empty();
  const int frames = o.frames > 0 ? o.frames : 3;  // a screenshot alone: layout settles in 2 frames
  const std::string title = "streamlab view: " + o.trace +
                            (viewer.ranks()  ? " and " + std::to_string(paths.size() - 1) + " more ranks"
                             : viewer.ab() ? " vs " + o.trace_b
                                           : "");
  GlWindow window(o.width, o.height, title, !batch);
  for (int f = 0; batch ? f < frames : !window.should_close(); ++f) {
    window.begin_frame(batch ? 0.0 : 0.25);
    viewer.draw();
    window.end_frame();
    if (batch && f + 1 == frames && !o.screenshot.empty()) {
      int w = 0, h = 0;
      const auto px = window.read_pixels(w, h);
      write_png(o.screenshot, px, w, h);
      std::fprintf(stderr, "wrote %s (%dx%d)\n", o.screenshot.c_str(), w, h);
    }
    window.present();
  }
  return 0;
}

}  // namespace sl::ui
