// `streamlab view`: loads a trace (any format trace_io reads), two for the A/B view, or the traces
// of one job's ranks for the ranks view, opens the
// viewer's window and runs it until closed; or, for scripts and CI, renders a fixed number of frames in a hidden window
// and writes the last one as a PNG.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace sl::ui {

struct ViewerOptions {
  std::string trace;                 // path
  // A/B mode: a second trace, stacked under the first on one time axis, aligned at the start of
  // the range --align names ("" = the default, Viewer's CompareOptions), streams grouped by role.
  std::string trace_b;
  std::string align;
  // Ranks mode: more traces after the first two; all of them one job's ranks (distributedInfo),
  // stacked by rank on their shared clock. Two traces that are a whole job (ranks 0 and 1 of a
  // world of 2) open in ranks mode too, unless `ab` (or an --align) asks for the A/B view.
  std::vector<std::string> more_traces;
  bool ab = false;
  std::string screenshot;            // PNG of the last frame ("" = none)
  int frames = 0;                    // > 0: render this many frames, then exit (hidden window)
  int width = 1600, height = 1000;   // window size in pixels
  // Initial window in microseconds after the trace's first event ("" = the whole trace),
  // "START:END"; and a range to select at start, same form.
  std::string window_us, select_us;
  bool group_streams_by_role = false;  // one track per stream role (aux0, ...) at start
  bool log_events = false;             // report the session's changes on stderr (Viewer::set_event_log)
};

// Returns the process exit code. Throws sl::Error on bad input (unreadable trace, bad window
// spec, no display).
int run_viewer(const ViewerOptions& opts);

// Parses "START:END" (microseconds, END > START, both within +-1e12). Throws sl::Error naming `what` otherwise.
std::pair<double, double> parse_us_range(const std::string& spec, const std::string& what);

}  // namespace sl::ui
