// The trace sections of a compare report: each side's traced run profiled once
// (profiler/trace_profile.h), every contender diffed against the baseline
// (profiler/trace_diff.h), rendered as a terminal table, markdown and HTML with plots.
#include "experiments/compare/structure.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/gzip.h"
#include "experiments/compare/svg_plot.h"
#include "experiments/compare/trace_side.h"
#include "profiler/profile_report.h"
#include "profiler/trace_diff.h"
#include "profiler/trace_io.h"
#include "profiler/trace_profile.h"

namespace sl::compare {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One side's traces, profiled.
struct SideTrace {
  std::string label;
  std::string file;               // the eager (or only) trace
  prof::TraceProfile profile;
  std::optional<size_t> graph_replay_streams;  // streams with kernels in a traced graph replay
};

double us(prof::Ns ns) { return double(ns) / 1e3; }

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

size_t streams_with_kernels(const prof::AnalysisResult& a) {
  size_t n = 0;
  for (const auto& s : a.streams) n += s.kernels > 0;
  return n;
}

prof::ProfileOptions profile_options(const prof::Trace& t) {
  prof::ProfileOptions o;
  o.roles.step_range = default_step_range(t);  // the same steps as the latency figures
  return o;
}

SideTrace profile_side(const std::string& label, const std::string& file) {
  SideTrace s;
  s.label = label;
  s.file = file;
  const prof::Trace t = prof::load_trace(file);
  s.profile = prof::profile_trace(t, profile_options(t));
  return s;
}

size_t kernel_streams(const std::string& file) {
  const prof::Trace t = prof::load_trace(file);
  std::set<uint32_t> st;
  for (const auto& k : t.kernels) st.insert(k.stream);
  return st.size();
}

const prof::WaitTotals& waits(const SideTrace& s) { return s.profile.waits.total; }

// ---- terminal

std::string side_table(const std::vector<SideTrace>& sides) {
  std::ostringstream os;
  os << "from the traces (the traced run of each side: eager steps; graph replay for its streams)\n";
  auto row = [&](const std::string& name, auto cell) {
    std::string n = "  " + name;
    n.resize(std::max<size_t>(n.size(), 38), ' ');
    os << n;
    for (const auto& s : sides) {
      std::string c = cell(s);
      c.resize(std::max<size_t>(c.size() + 1, 20), ' ');
      os << c;
    }
    os << "\n";
  };
  row("", [](const SideTrace& s) { return s.label; });
  row("streams with GPU work", [](const SideTrace& s) { return std::to_string(streams_with_kernels(s.profile.analysis)); });
  row("streams used by graph replay", [](const SideTrace& s) {
    return s.graph_replay_streams ? std::to_string(*s.graph_replay_streams) : std::string("-");
  });
  row("event records / stream waits", [](const SideTrace& s) {
    const auto& a = s.profile.analysis.resources.api;
    return std::to_string(std::max(a.event_records, s.profile.analysis.resources.cuda_event_records)) + " / " +
           std::to_string(std::max(a.stream_wait_events, s.profile.analysis.resources.stream_waits));
  });
  row("time with >= 2 streams busy",
      [](const SideTrace& s) { return fmt("%.1f %% of busy", 100 * s.profile.analysis.whole.stream_overlap_fraction); });
  row("aux work hidden under main",
      [](const SideTrace& s) { return fmt("%.1f %%", 100 * s.profile.analysis.whole.aux_hidden_fraction); });
  row("waits: own stream (us)", [](const SideTrace& s) { return fmt("%.1f", us(waits(s).own_stream)); });
  row("waits: another stream's event (us)", [](const SideTrace& s) { return fmt("%.1f", us(waits(s).event)); });
  row("waits: unrelated work (us)", [](const SideTrace& s) { return fmt("%.1f", us(waits(s).unrelated)); });
  row("waits: host launch gap (us)", [](const SideTrace& s) { return fmt("%.1f", us(waits(s).launch_gap)); });
  row("critical path per step (us)", [](const SideTrace& s) { return fmt("%.1f", us(s.profile.mean_step_latency())); });
  row("  of which host (launch-bound)", [](const SideTrace& s) {
    prof::Ns host = 0, all = 0;
    for (const auto& p : s.profile.paths) {
      host += p.by_kind[size_t(prof::SegmentKind::Host)];
      all += p.latency();
    }
    return all ? fmt("%.1f %%", 100.0 * double(host) / double(all)) : std::string("-");
  });
  return os.str();
}

// ---- HTML plots

std::string html_plots(const std::vector<SideTrace>& sides) {
  std::ostringstream os;
  os << "<h2>Overlap, waits and the critical path (traced runs)</h2>\n";
  size_t kmax = 0;
  for (const auto& s : sides) kmax = std::max(kmax, s.profile.streams_busy.size());
  std::vector<std::string> cats;
  for (size_t k = 0; k < kmax; ++k) cats.push_back(std::to_string(k) + " streams busy");
  std::vector<Series> busy;
  for (const auto& s : sides) {
    Series x{s.label, {}};
    for (size_t k = 0; k < kmax; ++k) x.values.push_back(k < s.profile.streams_busy.size() ? us(s.profile.streams_busy[k]) / 1e3 : 0);
    busy.push_back(x);
  }
  os << svg_bars("Concurrency profile: time at exactly k streams running kernels", cats, busy, "ms per traced window")
     << "\n";
  std::set<std::string> groups;
  for (const auto& s : sides)
    for (const auto& g : s.profile.aux_hidden)
      if (g.aux_time > 0) groups.insert(g.group);
  if (!groups.empty()) {
    std::vector<Series> hidden;
    for (const auto& s : sides) {
      Series x{s.label, {}};
      for (const auto& gname : groups) {
        double v = 0;
        for (const auto& g : s.profile.aux_hidden)
          if (g.group == gname) v = 100 * g.fraction;
        x.values.push_back(v);
      }
      hidden.push_back(x);
    }
    os << svg_bars("Aux work hidden under the main stream, per layer type", {groups.begin(), groups.end()}, hidden, "%")
       << "\n";
  }
  // Wait attribution and the critical path: one stacked bar per side.
  std::vector<std::string> side_names;
  for (const auto& s : sides) side_names.push_back(s.label);
  std::vector<Series> wait_series{{"own stream", {}}, {"another stream's event", {}}, {"unrelated work", {}},
                                  {"host launch gap", {}}, {"inside a graph", {}}};
  for (const auto& s : sides) {
    const auto& w = waits(s);
    wait_series[0].values.push_back(us(w.own_stream) / 1e3);
    wait_series[1].values.push_back(us(w.event) / 1e3);
    wait_series[2].values.push_back(us(w.unrelated) / 1e3);
    wait_series[3].values.push_back(us(w.launch_gap) / 1e3);
    wait_series[4].values.push_back(us(w.in_graph) / 1e3);
  }
  os << svg_bars("Launch-to-start time of kernels, by what they waited for", side_names, wait_series,
                 "ms per traced window", true)
     << "\n";
  std::vector<Series> path_series;
  for (size_t k = 0; k < prof::kSegmentKinds; ++k) path_series.push_back({prof::to_string(prof::SegmentKind(k)), {}});
  for (const auto& s : sides) {
    const double steps = std::max<size_t>(s.profile.paths.size(), 1);
    for (size_t k = 0; k < prof::kSegmentKinds; ++k) {
      prof::Ns t = 0;
      for (const auto& p : s.profile.paths) t += p.by_kind[k];
      path_series[k].values.push_back(us(t) / steps);
    }
  }
  os << svg_bars("Critical path of a step, by segment kind (mean over traced steps)", side_names, path_series,
                 "us per step", true)
     << "\n";
  return os.str();
}

StructureReport render(const std::vector<SideTrace>& sides) {
  StructureReport r;
  if (sides.empty()) return r;
  r.json = json::object();
  r.json["sides"] = json::array();
  for (const auto& s : sides) {
    json j = prof::profile_to_json(s.profile);
    j["label"] = s.label;
    j["trace"] = s.file;
    j["graph_replay_streams"] = s.graph_replay_streams ? json(*s.graph_replay_streams) : json();
    r.json["sides"].push_back(std::move(j));
  }
  r.json["diffs"] = json::array();
  std::string diffs_text, diffs_full;
  for (size_t i = 1; i < sides.size(); ++i) {
    prof::DiffOptions o;
    o.label_a = sides[0].label;
    o.label_b = sides[i].label;
    const prof::TraceDiff d = prof::diff_profiles(sides[0].profile, sides[i].profile, o);
    json j = prof::diff_to_json(d);
    j["a"] = sides[0].label;
    j["b"] = sides[i].label;
    r.json["diffs"].push_back(std::move(j));
    diffs_text += "\n" + prof::diff_to_text(d, 5);
    diffs_full += "\n" + prof::diff_to_text(d, 20);
  }
  const std::string table = side_table(sides);
  r.text = table + diffs_text;
  r.markdown = "## From the traces\n\n```\n" + table + diffs_full + "```\n";
  r.html = html_plots(sides) + "<h3>Role-matched differences</h3>\n<pre>" + html_escape(table + diffs_full) +
           "</pre>\n";
  return r;
}

}  // namespace

StructureReport structure_of_folder(const std::string& folder, const Comparison& c) {
  std::vector<SideTrace> sides;
  // The baseline first: every diff is against it.
  std::vector<size_t> order{c.baseline};
  for (size_t i = 0; i < c.sides.size(); ++i)
    if (i != c.baseline) order.push_back(i);
  for (size_t i : order) {
    const Side& side = c.sides[i];
    for (const auto& m : side.traced_runs) {
      std::string eager, graph;
      for (const auto& w : m.traced) {
        const std::string dir = folder + "/traces/";
        if (w.mode == "eager") eager = plain_or_gz(dir + w.trace_json);
        if (w.mode == "graph") graph = plain_or_gz(dir + w.trace_json);
      }
      if (eager.empty()) continue;
      SL_CHECK(fs::exists(eager), "the trace '", eager, "' of ", side.label, "'s traced run is missing");
      SideTrace s = profile_side(side.label, eager);
      if (!graph.empty() && fs::exists(graph)) s.graph_replay_streams = kernel_streams(graph);
      sides.push_back(std::move(s));
      break;
    }
  }
  return render(sides);
}

StructureReport structure_of_inputs(const std::vector<std::string>& inputs, const std::vector<std::string>& labels) {
  std::vector<SideTrace> sides;
  for (size_t i = 0; i < inputs.size() && i < labels.size(); ++i)
    if (!fs::is_directory(inputs[i])) sides.push_back(profile_side(labels[i], inputs[i]));
  return render(sides);
}

}  // namespace sl::compare
