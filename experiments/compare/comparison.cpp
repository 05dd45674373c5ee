#include "experiments/compare/comparison.h"

#include <algorithm>

#include "core/error.h"

namespace sl::compare {

std::string sample_key(const std::string& mode, const std::string& part) { return mode + "/" + part; }

LatencySummary summarize(const stats::Groups& g) {
  LatencySummary s;
  const std::vector<double> all = stats::pooled(g);
  s.processes = stats::group_count(g);
  s.samples = all.size();
  if (all.empty()) return s;
  s.median_ms = stats::median(all);
  s.spread_pct = s.median_ms > 0 ? 100 * stats::mad(all) / s.median_ms : 0;
  s.min_ms = *std::min_element(all.begin(), all.end());
  s.max_ms = *std::max_element(all.begin(), all.end());
  return s;
}

void add_measurement(Side& side, const Measurement& m) {
  for (const auto& mode : m.modes) {
    const std::vector<double>* parts[] = {&mode.step_ms, &mode.target_ms, &mode.draft_ms};
    for (size_t p = 0; p < 3; ++p)
      if (!parts[p]->empty()) side.samples[sample_key(mode.mode, kParts[p])].push_back(*parts[p]);
  }
  if (side.policy.empty()) side.policy = m.policy;
  if (side.system.empty()) side.system = m.stream_source;
  side.runs.push_back(m);
}

namespace {

// Keys with samples on both sides, in a fixed order (modes, then parts).
std::vector<std::string> shared_keys(const Side& a, const Side& b) {
  std::vector<std::string> keys;
  for (const char* mode : kModes)
    for (const char* part : kParts) {
      const std::string k = sample_key(mode, part);
      auto ia = a.samples.find(k), ib = b.samples.find(k);
      if (ia != a.samples.end() && ib != b.samples.end() && stats::group_count(ia->second) &&
          stats::group_count(ib->second))
        keys.push_back(k);
    }
  return keys;
}

}  // namespace

namespace {

// The settings a step time depends on besides the policy, as "key value" pairs, of one
// measurement (the GPU from its provenance): sides or runs whose settings differ are not
// differences of policy alone.
std::vector<std::pair<std::string, std::string>> setup_of(const Measurement& m) {
  std::string gpu;
  if (m.provenance.is_object() && m.provenance.contains("gpu") && m.provenance["gpu"].is_string())
    gpu = m.provenance["gpu"].get<std::string>();
  return {{"GPU", gpu},
          {"config", m.config},
          {"layers", std::to_string(m.layers)},
          {"MTP layers", std::to_string(m.mtp_layers) + " of compress " + std::to_string(m.mtp_compress)},
          {"batch", std::to_string(m.batch)},
          {"context", std::to_string(m.context)},
          {"draft steps", std::to_string(m.draft_steps)},
          {"weights", m.weights},
          {"KV cache", m.kv_cache},
          {"expert ranks", std::to_string(m.expert_ranks)}};
}

// "GPU H200 against cpu, batch 1 against 8", or "" when the two setups agree.
std::string setup_difference(const Measurement& x, const Measurement& y) {
  const auto a = setup_of(x), b = setup_of(y);
  std::string out;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].second != b[i].second)
      out += (out.empty() ? "" : ", ") + a[i].first + " " + a[i].second + " against " + b[i].second;
  return out;
}

}  // namespace

Comparison compare_sides(std::vector<Side> sides, size_t baseline, std::optional<size_t> baseline_again,
                         std::optional<size_t> reference, const CompareOptions& o) {
  SL_CHECK(sides.size() >= 2, "compare: needs at least two sides, got ", sides.size());
  SL_CHECK(baseline < sides.size(), "compare: baseline index ", baseline, " out of range");
  for (const auto& s : sides)
    SL_CHECK(!s.samples.empty(), "compare: '", s.label, "' (", s.origin, ") has no step timings to compare");
  Comparison c;
  c.sides = std::move(sides);
  c.baseline = baseline;
  c.baseline_again = baseline_again;
  c.reference = reference;
  const Side& a = c.sides[baseline];
  if (baseline_again) {
    for (const auto& k : shared_keys(a, c.sides[*baseline_again]))
      c.noise[k] = stats::bootstrap_relative_diff(a.samples.at(k), c.sides[*baseline_again].samples.at(k), o.bootstrap);
  } else {
    c.notes.push_back("the baseline was measured once: the equivalence margin is the floor (" +
                      std::to_string(int(o.margin_floor * 100 + 0.5)) + " %), not the measured noise");
  }
  for (size_t b = 0; b < c.sides.size(); ++b) {
    if (b == baseline || (baseline_again && b == *baseline_again)) continue;
    const Side& sb = c.sides[b];
    const std::vector<std::string> keys = shared_keys(a, sb);
    if (keys.empty())
      c.notes.push_back("'" + sb.label + "' shares no step timing (mode and part) with '" + a.label + "'");
    for (const auto& k : keys) {
      MetricDiff d;
      d.key = k;
      d.a = baseline;
      d.b = b;
      d.sa = summarize(a.samples.at(k));
      d.sb = summarize(sb.samples.at(k));
      d.interval = stats::bootstrap_relative_diff(a.samples.at(k), sb.samples.at(k), o.bootstrap);
      auto noise = c.noise.find(k);
      const double margin =
          noise == c.noise.end() ? o.margin_floor : stats::equivalence_margin(noise->second, o.margin_floor);
      c.margin[k] = margin;
      d.verdict = stats::judge(d.interval, margin, int(std::min(d.sa.processes, d.sb.processes)));
      c.diffs.push_back(std::move(d));
    }
  }
  // Sides (or the runs of one side) measured with other settings: said, since the verdict would
  // otherwise read as the policy's (a CPU run of tiny beside an H200 run of flash-6l).
  // Per side: runs measured with other settings (said, since the verdict would otherwise read as
  // the policy's: a CPU run of tiny beside an H200 run of flash-6l), and one process only.
  const Side& base = c.sides[baseline];
  for (size_t i = 0; i < c.sides.size(); ++i) {
    const Side& s = c.sides[i];
    for (size_t r = 1; r < s.runs.size(); ++r)
      if (const std::string d = setup_difference(s.runs[0], s.runs[r]); !d.empty()) {
        c.notes.push_back("'" + s.label + "' mixes runs of different settings (" + d + ")");
        break;
      }
    if (i != baseline && !base.runs.empty() && !s.runs.empty())
      if (const std::string d = setup_difference(base.runs[0], s.runs[0]); !d.empty())
        c.notes.push_back("'" + s.label + "' was measured with other settings than '" + base.label + "' (" + d +
                          "): its difference is not the policy's alone");
    size_t processes = 0;
    for (const auto& [k, g] : s.samples) processes = std::max(processes, g.size());
    if (s.one_process)
      c.notes.push_back("'" + s.label +
                        "' is one process: its interval holds step-to-step noise only, not the "
                        "process-to-process noise of repeated runs");
    else if (processes == 1)  // a live side of --repetitions 1: no less a single process
      c.notes.push_back("'" + s.label +
                        "' ran as one process (--repetitions 1): its interval holds step-to-step noise only, not "
                        "the process-to-process noise of repeated runs; its verdicts are not to be trusted");
  }
  return c;
}

std::vector<std::string> keys_present(const Comparison& c) {
  std::vector<std::string> keys;
  for (const char* mode : kModes)
    for (const char* part : kParts) {
      const std::string k = sample_key(mode, part);
      for (const auto& s : c.sides)
        if (s.samples.count(k)) {
          keys.push_back(k);
          break;
        }
    }
  return keys;
}

const MetricDiff* find_diff(const Comparison& c, size_t b, const std::string& key) {
  for (const auto& d : c.diffs)
    if (d.b == b && d.key == key) return &d;
  return nullptr;
}

std::vector<const MetricDiff*> slower_than(const Comparison& c, double pct) {
  std::vector<const MetricDiff*> out;
  for (const auto& d : c.diffs) {
    if (c.reference && d.b == *c.reference) continue;  // the no-overlap reference is expected to be slower
    const bool whole_step = d.key.size() > 5 && d.key.compare(d.key.size() - 5, 5, "/step") == 0;
    if (whole_step && d.interval.lo > pct / 100) out.push_back(&d);
  }
  return out;
}

}  // namespace sl::compare
