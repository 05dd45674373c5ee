#include "experiments/compare/structure.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/gzip.h"
#include "experiments/compare/svg_plot.h"
#include "profiler/analysis.h"
#include "profiler/trace_io.h"

namespace sl::compare {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One side's traces, analysed.
struct SideTrace {
  std::string label;
  std::string file;
  prof::AnalysisResult eager;
  size_t graph_replay_streams = 0;  // distinct streams that ran kernels in a traced graph replay
  bool has_graph = false;
};

double ms(prof::Ns ns) { return double(ns) / 1e6; }

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

json side_json(const SideTrace& s) {
  const auto& w = s.eager.whole;
  json conc = json::array();
  for (prof::Ns t : w.concurrency) conc.push_back(t);
  return {{"label", s.label},
          {"trace", s.file},
          {"streams_with_kernels", streams_with_kernels(s.eager)},
          {"busy_ns", w.busy},
          {"span_ns", w.span},
          {"stream_overlap_fraction", w.stream_overlap_fraction},
          {"aux_hidden_fraction", w.aux_hidden_fraction},
          {"concurrency_ns", conc},
          {"queue_wait_total_ns", s.eager.queue_wait.total},
          {"launch_delay_median_ns", s.eager.launch_delay.median},
          {"suspected_false_dependencies", s.eager.suspected_false_deps},
          {"cuda_event_records", s.eager.resources.cuda_event_records},
          {"stream_waits", s.eager.resources.stream_waits},
          {"graph_replay_streams", s.has_graph ? json(s.graph_replay_streams) : json()}};
}

std::string text_of(const std::vector<SideTrace>& sides) {
  std::ostringstream os;
  os << "from the traces (eager steps; graph replay for its streams)\n";
  auto row = [&](const std::string& name, auto cell) {
    std::string n = "  " + name;
    n.resize(std::max<size_t>(n.size(), 34), ' ');
    os << n;
    for (const auto& s : sides) {
      std::string c = cell(s);
      c.resize(std::max<size_t>(c.size(), 20), ' ');
      os << c;
    }
    os << "\n";
  };
  row("", [](const SideTrace& s) { return s.label; });
  row("streams with GPU work", [](const SideTrace& s) { return std::to_string(streams_with_kernels(s.eager)); });
  row("streams used by graph replay",
      [](const SideTrace& s) { return s.has_graph ? std::to_string(s.graph_replay_streams) : std::string("-"); });
  row("event records / stream waits", [](const SideTrace& s) {
    return std::to_string(s.eager.resources.cuda_event_records) + " / " + std::to_string(s.eager.resources.stream_waits);
  });
  row("GPU busy per traced window", [](const SideTrace& s) { return fmt("%.3f ms", ms(s.eager.whole.busy)); });
  row("time with >= 2 streams busy",
      [](const SideTrace& s) { return fmt("%.1f %% of busy", 100 * s.eager.whole.stream_overlap_fraction); });
  row("aux work hidden under main",
      [](const SideTrace& s) { return fmt("%.1f %%", 100 * s.eager.whole.aux_hidden_fraction); });
  row("queue wait (sum)", [](const SideTrace& s) { return fmt("%.3f ms", ms(s.eager.queue_wait.total)); });
  row("suspected false dependencies",
      [](const SideTrace& s) { return std::to_string(s.eager.suspected_false_deps); });
  row("launch delay (median)", [](const SideTrace& s) { return fmt("%.1f us", s.eager.launch_delay.median / 1e3); });
  return os.str();
}

std::string html_of(const std::vector<SideTrace>& sides) {
  // The concurrency profile: time at exactly k kernels running, per side.
  size_t kmax = 0;
  for (const auto& s : sides) kmax = std::max(kmax, s.eager.whole.concurrency.size());
  std::vector<std::string> cats;
  for (size_t k = 0; k < kmax; ++k) cats.push_back(std::to_string(k) + " running");
  std::vector<Series> series;
  for (const auto& s : sides) {
    Series x{s.label, {}};
    for (size_t k = 0; k < kmax; ++k)
      x.values.push_back(k < s.eager.whole.concurrency.size() ? ms(s.eager.whole.concurrency[k]) : 0);
    series.push_back(x);
  }
  std::ostringstream os;
  os << "<h2>Concurrency and overlap (traced eager steps)</h2>\n"
     << svg_bars("Time at exactly k kernels running", cats, series, "ms per traced window") << "\n";
  std::vector<Series> hidden;
  for (const auto& s : sides) hidden.push_back({s.label, {100 * s.eager.whole.aux_hidden_fraction,
                                                          100 * s.eager.whole.stream_overlap_fraction}});
  os << svg_bars("Aux work hidden under the main stream, and time with >= 2 streams busy",
                 {"aux hidden", ">= 2 streams busy"}, hidden, "%")
     << "\n";
  return os.str();
}

StructureReport render(const std::vector<SideTrace>& sides) {
  StructureReport r;
  if (sides.empty()) return r;
  r.json = json::object();
  r.json["sides"] = json::array();
  for (const auto& s : sides) r.json["sides"].push_back(side_json(s));
  r.text = text_of(sides);
  r.markdown = "## From the traces\n\n```\n" + r.text + "```\n";
  r.html = html_of(sides);
  return r;
}

SideTrace analyse(const std::string& label, const std::string& file) {
  SideTrace s;
  s.label = label;
  s.file = file;
  const prof::Trace t = prof::load_trace(file);
  s.eager = prof::analyze(t);
  return s;
}

size_t kernel_streams(const std::string& file) {
  const prof::Trace t = prof::load_trace(file);
  std::set<uint32_t> st;
  for (const auto& k : t.kernels) st.insert(k.stream);
  return st.size();
}

}  // namespace

StructureReport structure_of_folder(const std::string& folder, const Comparison& c) {
  std::vector<SideTrace> sides;
  for (const auto& side : c.sides)
    for (const auto& m : side.traced_runs) {
      std::string eager, graph;
      for (const auto& w : m.traced) {
        const std::string dir = folder + "/traces/";
        if (w.mode == "eager") eager = plain_or_gz(dir + w.trace_json);
        if (w.mode == "graph") graph = plain_or_gz(dir + w.trace_json);
      }
      if (eager.empty()) continue;
      SL_CHECK(fs::exists(eager), "the trace '", eager, "' of ", side.label, "'s traced run is missing");
      SideTrace s = analyse(side.label, eager);
      if (!graph.empty() && fs::exists(graph)) {
        s.graph_replay_streams = kernel_streams(graph);
        s.has_graph = true;
      }
      sides.push_back(std::move(s));
      break;
    }
  return render(sides);
}

StructureReport structure_of_inputs(const std::vector<std::string>& inputs, const Comparison& c) {
  std::vector<SideTrace> sides;
  size_t side = 0;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) continue;
    if (side < c.sides.size()) sides.push_back(analyse(c.sides[side].label, in));
    ++side;
  }
  return render(sides);
}

}  // namespace sl::compare
