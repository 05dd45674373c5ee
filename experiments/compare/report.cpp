#include "experiments/compare/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/stats.h"

namespace sl::compare {

using nlohmann::json;

std::string format_pct(double f, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%+.*f %%", decimals, 100 * f);
  return buf;
}

std::string format_interval(const stats::DiffInterval& d) {
  return "[" + format_pct(d.lo) + ", " + format_pct(d.hi) + "]";
}

std::string format_bytes(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

std::string format_latency(const LatencySummary& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f ms +-%.1f %% (%zux%zu)", s.median_ms, s.spread_pct, s.processes,
                s.processes ? s.samples / s.processes : 0);
  return buf;
}

SideResources resources_of(const Side& s) {
  SideResources r;
  r.label = s.label;
  r.system = s.system;
  std::vector<double> setup;
  for (const auto& m : s.runs) {
    setup.push_back(m.stream_setup_ms);
    r.streams_created = m.streams_created;
    r.stream_names = m.stream_names;
    r.stream_owners = m.stream_owners;
    r.events_created = m.events_created;
    r.library_bytes = std::max(r.library_bytes, m.library_bytes);
    r.peak_bytes = std::max(r.peak_bytes, m.peak_bytes);
    r.weights_bytes = m.weights_bytes;
    r.connections = m.connections;
    r.graph_scope = m.graph_scope;
    r.placement = m.placement;
    r.cublas_handles = m.cublas_handles;
    r.cublas_workspaces = m.cublas_workspaces;
    r.aliased = m.aliased;
    if (const ModeSamples* g = m.mode("graph")) {
      r.graph_nodes = g->graph_nodes;
      r.graph_edges = g->graph_edges;
      if (g->graphs.size() > 1) {
        // Per graph too: "834 / 1031 (target 300 / 350, draft0 ...)" is in the JSON; the table
        // keeps the totals and the count.
        r.graph_count = g->graphs.size();
      }
    }
  }
  r.stream_setup_ms = stats::median(setup);
  for (const auto& m : s.traced_runs)
    for (const auto& w : m.traced) {
      const double on = stats::median(w.traced_step_ms), off = stats::median(w.untraced_step_ms);
      if (off <= 0) continue;
      (w.mode == "graph" ? r.tracing_ratio_graph : r.tracing_ratio_eager) = on / off;
    }
  return r;
}

namespace {

std::string mode_words(const std::string& key) {
  const std::string mode = key.substr(0, key.find('/')), part = key.substr(key.find('/') + 1);
  const std::string m = mode == "graph" ? "graph replay" : mode == "eager" ? "eager" : mode;
  const std::string p = part == "step" ? "whole step" : part == "target" ? "target forward" : "draft steps";
  return m + ", " + p;
}

std::string verdict_words(const Report& r, const MetricDiff& d) {
  const std::string a = r.cmp.sides[d.a].label, b = r.cmp.sides[d.b].label;
  const bool inconclusive = d.verdict.verdict == stats::Verdict::Inconclusive;
  std::string s = b + " vs " + a + ", " + mode_words(d.key) + ": " +
                  (inconclusive ? std::string("inconclusive") : verdict_label(r.cmp, d)) + " (" + b + "/" + a +
                  " - 1 = " + format_pct(d.interval.estimate) + ", 95 % interval " + format_interval(d.interval) +
                  ", margin +-" + format_pct(d.verdict.margin).substr(1) + ")";
  if (inconclusive)
    s += d.verdict.repetitions_needed
             ? "; about " + std::to_string(d.verdict.repetitions_needed) + " repetitions would settle it"
             : "; the difference sits on the margin";
  return s;
}

bool is_whole_step(const std::string& key) { return key.size() > 5 && key.compare(key.size() - 5, 5, "/step") == 0; }

}  // namespace

std::vector<std::string> verdict_lines(const Report& r) {
  std::vector<std::string> out;
  // Whole steps first (graph replay, then eager), contenders before the reference; then parts.
  for (int pass = 0; pass < 2; ++pass)
    for (const char* mode : {"graph", "eager"})
      for (const auto& d : r.cmp.diffs) {
        if (d.key.rfind(mode, 0) != 0 || is_whole_step(d.key) != (pass == 0)) continue;
        out.push_back(verdict_words(r, d));
      }
  return out;
}

namespace {

std::string pad(std::string s, size_t w) {
  s.append(s.size() < w ? w - s.size() : 1, ' ');
  return s;
}

std::string latency_table(const Comparison& c) {
  std::ostringstream os;
  os << pad("  mode/part", 16);
  for (const auto& s : c.sides) os << pad(s.label, 34);
  os << "\n";
  for (const auto& k : keys_present(c)) {
    os << pad("  " + k, 16);
    for (const auto& s : c.sides) {
      auto it = s.samples.find(k);
      os << pad(it == s.samples.end() ? "-" : format_latency(summarize(it->second)), 34);
    }
    os << "\n";
  }
  return os.str();
}

std::string diff_table(const Comparison& c) {
  std::ostringstream os;
  os << "  " << pad("B", 22) << pad("mode/part", 14) << pad("B/A - 1", 11) << pad("95 % interval", 22)
     << pad("margin", 9) << "verdict\n";
  for (const auto& d : c.diffs) {
    const std::string v = verdict_label(c, d);
    os << "  " << pad(c.sides[d.b].label, 22) << pad(d.key, 14) << pad(format_pct(d.interval.estimate), 11)
       << pad(format_interval(d.interval), 22) << pad(format_pct(d.verdict.margin).substr(1), 9) << v << "\n";
  }
  return os.str();
}

std::string resources_table(const std::vector<SideResources>& res) {
  std::ostringstream os;
  os << pad("", 32);
  for (const auto& r : res) os << pad(r.label, 20);
  os << "\n";
  for (const auto& row : resource_rows(res)) {
    os << pad("  " + row[0], 32);
    for (size_t i = 1; i < row.size(); ++i) os << pad(row[i], 20);
    os << "\n";
  }
  return os.str();
}

std::string noise_lines(const Comparison& c) {
  if (!c.baseline_again) return "";
  std::ostringstream os;
  os << "noise (" << c.sides[c.baseline].label << " measured twice, A vs A):";
  for (const auto& [k, d] : c.noise) os << "  " << k << " " << format_interval(d);
  os << "\n";
  return os.str();
}

}  // namespace

std::string verdict_label(const Comparison& c, const MetricDiff& d) {
  switch (d.verdict.verdict) {
    case stats::Verdict::AFaster: return c.sides[d.a].label + " faster";
    case stats::Verdict::BFaster: return c.sides[d.b].label + " faster";
    case stats::Verdict::NoDifference: return "no meaningful difference";
    case stats::Verdict::Inconclusive:
      return d.verdict.repetitions_needed
                 ? "inconclusive (~" + std::to_string(d.verdict.repetitions_needed) + " repetitions would settle it)"
                 : "inconclusive";
  }
  return "";
}

std::vector<std::string> aliasing_lines(const std::vector<SideResources>& res) {
  std::vector<std::string> out;
  std::vector<std::vector<std::string>> seen;
  for (const auto& r : res) {
    if (r.aliased.empty() || std::find(seen.begin(), seen.end(), r.aliased) != seen.end()) continue;
    seen.push_back(r.aliased);  // the baseline measured again aliases as the baseline did
    for (const auto& a : r.aliased) out.push_back(r.label + ": " + a);
  }
  return out;
}

std::vector<std::vector<std::string>> resource_rows(const std::vector<SideResources>& res) {
  auto ms = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f ms", v);
    return std::string(b);
  };
  auto ratio = [](const std::optional<double>& x) {
    if (!x) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", *x);
    return std::string(b);
  };
  std::vector<std::vector<std::string>> rows;
  auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> x{name};
    for (const auto& s : res) x.push_back(cell(s));
    rows.push_back(x);
  };
  row("streams created", [](const SideResources& s) { return std::to_string(s.streams_created); });
  row("stream setup (host)", [&](const SideResources& s) { return ms(s.stream_setup_ms); });
  row("events created", [](const SideResources& s) { return std::to_string(s.events_created); });
  row("placement", [](const SideResources& s) { return s.placement; });
  row("aliased CUDA streams", [](const SideResources& s) { return std::to_string(s.aliased.size()); });
  row("cuBLAS handles / workspaces", [](const SideResources& s) {
    return s.cublas_handles ? std::to_string(s.cublas_handles) + " / " + std::to_string(s.cublas_workspaces)
                            : std::string("-");
  });
  row("library workspaces", [](const SideResources& s) { return format_bytes(s.library_bytes); });
  row("peak device memory", [](const SideResources& s) { return format_bytes(s.peak_bytes); });
  row("graph nodes / edges", [](const SideResources& s) {
    if (!s.graph_nodes) return std::string("-");
    std::string t = std::to_string(s.graph_nodes) + " / " + std::to_string(s.graph_edges);
    if (s.graph_count > 1) t += " in " + std::to_string(s.graph_count) + " graphs (" + s.graph_scope + ")";
    return t;
  });
  row("hardware queues", [](const SideResources& s) {
    return s.connections.empty() ? std::string("8 (default)") : s.connections;
  });
  row("tracing on/off, eager", [&](const SideResources& s) { return ratio(s.tracing_ratio_eager); });
  row("tracing on/off, graph", [&](const SideResources& s) { return ratio(s.tracing_ratio_graph); });
  return rows;
}

std::string system_words(const std::string& system) {
  if (system == "cuda") return "a C++ engine creating its own CUDA streams (cudaStreamCreateWithPriority, a cuBLAS "
                               "handle and workspace per stream)";
  if (system == "torch")
    return "PyTorch drawing its streams from its pool (torch.cuda.Stream(): 32 per priority, round-robin, aliasing "
           "past 32; one cuBLAS handle, a workspace per stream at its first GEMM), as vLLM and TensorRT-LLM's "
           "PyTorch backend get theirs";
  if (system.rfind("cpu-reference", 0) == 0)
    return "the CPU reference (streams are labels, ops run one by one: tests only)";
  return system;
}

std::string report_text(const Report& r) {
  std::ostringstream os;
  os << r.source_line << "\n";
  if (r.settings.contains("description")) os << r.settings["description"].get<std::string>() << "\n";
  if (!r.resources.empty() && !r.resources.front().system.empty())
    os << "system: " << system_words(r.resources.front().system) << "\n";
  os << "\nverdict\n";
  for (const auto& l : verdict_lines(r)) os << "  - " << l << "\n";
  os << "\nstep latency (median +- median absolute deviation, processes x steps)\n" << latency_table(r.cmp);
  os << "\ndifferences against " << r.cmp.sides[r.cmp.baseline].label << " (A)\n" << diff_table(r.cmp);
  os << noise_lines(r.cmp);
  if (!r.resources.empty()) os << "\nstructure and resources\n" << resources_table(r.resources);
  if (const auto lines = aliasing_lines(r.resources); !lines.empty()) {
    os << "CUDA streams serving several roles (aliasing):\n";
    for (const auto& l : lines) os << "  " << l << "\n";
  }
  if (!r.structure.text.empty()) os << "\n" << r.structure.text;
  if (!r.cmp.notes.empty()) {
    os << "\nnotes\n";
    for (const auto& n : r.cmp.notes) os << "  - " << n << "\n";
  }
  return os.str();
}

namespace {

json interval_json(const stats::DiffInterval& d) {
  return {{"estimate", d.estimate}, {"lo", d.lo}, {"hi", d.hi}};
}

json latency_json(const LatencySummary& s) {
  return {{"processes", s.processes}, {"samples", s.samples}, {"median_ms", s.median_ms},
          {"spread_pct", s.spread_pct}, {"min_ms", s.min_ms},   {"max_ms", s.max_ms}};
}

std::string side_role(const Comparison& c, size_t i) {
  if (i == c.baseline) return "baseline";
  if (c.baseline_again && i == *c.baseline_again) return "baseline again";
  if (c.reference && i == *c.reference) return "reference";
  return "contender";
}

}  // namespace

json report_json(const Report& r) {
  json sides = json::array();
  for (size_t i = 0; i < r.cmp.sides.size(); ++i) {
    const Side& s = r.cmp.sides[i];
    json lat = json::object();
    for (const auto& [k, g] : s.samples) lat[k] = latency_json(summarize(g));
    json side{{"label", s.label}, {"role", side_role(r.cmp, i)}, {"policy", s.policy}, {"origin", s.origin},
              {"system", s.system}, {"one_process", s.one_process}, {"latency", lat}};
    if (i < r.resources.size()) {
      const SideResources& x = r.resources[i];
      side["resources"] = {{"streams_created", x.streams_created},
                           {"stream_names", x.stream_names},
                           {"stream_owners", x.stream_owners},
                           {"stream_setup_ms", x.stream_setup_ms},
                           {"events_created", x.events_created},
                           {"library_bytes", x.library_bytes},
                           {"peak_bytes", x.peak_bytes},
                           {"graph_nodes", x.graph_nodes},
                           {"graph_edges", x.graph_edges},
                           {"connections", x.connections},
                           {"tracing_ratio_eager", x.tracing_ratio_eager ? json(*x.tracing_ratio_eager) : json()},
                           {"tracing_ratio_graph", x.tracing_ratio_graph ? json(*x.tracing_ratio_graph) : json()}};
    }
    sides.push_back(side);
  }
  json diffs = json::array();
  for (const auto& d : r.cmp.diffs)
    diffs.push_back({{"key", d.key},
                     {"a", r.cmp.sides[d.a].label},
                     {"b", r.cmp.sides[d.b].label},
                     {"latency_a", latency_json(d.sa)},
                     {"latency_b", latency_json(d.sb)},
                     {"relative_difference", interval_json(d.interval)},
                     {"margin", d.verdict.margin},
                     {"verdict", stats::to_string(d.verdict.verdict)},
                     {"repetitions_needed", d.verdict.repetitions_needed},
                     {"reason", d.verdict.reason}});
  json noise = json::object();
  for (const auto& [k, d] : r.cmp.noise) noise[k] = interval_json(d);
  return {{"schema", "streamlab.compare/1"},
          {"source", r.source_line},
          {"provenance", r.provenance},
          {"settings", r.settings},
          {"verdict", verdict_lines(r)},
          {"sides", sides},
          {"noise", noise},
          {"differences", diffs},
          {"structure", r.structure.json},
          {"notes", r.cmp.notes},
          {"files", r.files},
          {"report_written_by", r.written_by}};
}

}  // namespace sl::compare
