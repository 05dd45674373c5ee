// `streamlab view TRACE [TRACE_B]`: the interactive timeline (ui/), of one trace or two (A/B). Built only with STREAMLAB_UI (the GPU
// machines are headless); elsewhere the command exists and says how to get it.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "experiments/cli/commands.h"
#ifdef STREAMLAB_HAVE_UI
#include "ui/viewer_app.h"
#endif

namespace sl::cli {

void add_view_command(CLI::App& app) {
  struct Opts {
    std::string trace, trace_b, align, screenshot, window, select, size = "1600x1000";
    std::vector<std::string> more;
    bool ab = false;
    int frames = 0;
    bool by_role = false;
    bool log = false;
  };
  auto o = std::make_shared<Opts>();
#ifdef STREAMLAB_HAVE_UI
  const std::string built = "";
#else
  // Said in --help too, not only when the command runs: a user reading the help of a GPU build
  // (no ImGui / GLFW there) should not have to find out by trying.
  const std::string built = " [NOT IN THIS BUILD: streamlab was built without the viewer (STREAMLAB_UI=OFF)]";
#endif
  CLI::App* cmd = app.add_subcommand(
      "view", "Interactive timeline of a trace (our JSON, PyTorch/Kineto JSON or our SQLite): GPU streams, NVTX "
              "ranges, CUDA API calls; wheel zooms, left drag pans, right drag selects a range, click selects; two traces: the A/B view; "
              "the traces of one job's ranks (distributedInfo): the ranks view" + built);
  cmd->add_option("trace", o->trace, "trace file")->required()->check(CLI::ExistingFile);
  cmd->add_option("trace_b", o->trace_b, "a second trace: the A/B view, both on one time axis, B under A, streams "
                                         "grouped by role, a selected range compared role by role")
      ->check(CLI::ExistingFile);
  cmd->add_option("more", o->more, "the ranks view: further traces of the same job; all the traces are stacked by rank "
                                   "(distributedInfo) on their shared clock, a selected range shown on every rank")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--ab", o->ab, "two traces that are ranks 0 and 1 of one job open as its ranks; --ab compares them "
                               "as A/B instead");
  cmd->add_option("--align", o->align, "A/B: the NVTX range NAME[:INDEX] (INDEX from 0, in time order) whose start is "
                                       "time 0 in both traces (default: the first decode, else the first "
                                       "ProfilerStep, else each trace's start)");
  cmd->add_option("--screenshot", o->screenshot,
                  "render in a hidden window and write the last frame as PNG, then exit (headless: xvfb-run -a)");
  cmd->add_option("--frames", o->frames, "render this many frames in a hidden window, then exit (default with "
                                         "--screenshot: 3)")->check(CLI::Range(1, 100000));
  cmd->add_option("--size", o->size, "window size WIDTHxHEIGHT in pixels")->capture_default_str();
  cmd->add_option("--window", o->window, "initial time window START:END, in microseconds from the trace's start (its base time, which "
                  "our exports count from; the ruler shows the same; A/B: from the alignment point)");
  cmd->add_option("--select", o->select, "select the range START:END (microseconds from the trace's start) at start");
  cmd->add_flag("--by-role", o->by_role, "one track per stream role (aux0, aux1, ...) instead of one per stream");
  cmd->add_flag("--log", o->log, "report on stderr what the session changes: time window, selected item, selected "
                                 "range (times in microseconds from the trace's start), and where the tracks are");
  cmd->callback([o] {
#ifdef STREAMLAB_HAVE_UI
    ui::ViewerOptions v;
    v.trace = o->trace;
    v.trace_b = o->trace_b;
    v.align = o->align;
    v.more_traces = o->more;
    v.ab = o->ab;
    v.screenshot = o->screenshot;
    v.frames = o->frames;
    v.window_us = o->window;
    v.select_us = o->select;
    v.group_streams_by_role = o->by_role;
    v.log_events = o->log;
    if (std::sscanf(o->size.c_str(), "%dx%d", &v.width, &v.height) != 2)
      throw Error("--size '" + o->size + "': expected WIDTHxHEIGHT, e.g. 1600x1000");
    const int rc = ui::run_viewer(v);
    if (rc != 0) std::exit(rc);
#else
    throw Error("this streamlab was built without the viewer (STREAMLAB_UI=OFF); build with the default preset, "
                "which needs Debian's libimgui-dev, libglfw3-dev and libstb-dev");
#endif
  });
}

}  // namespace sl::cli
