#include "experiments/compare/measurement.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sl::compare {

using nlohmann::json;

const ModeSamples* Measurement::mode(const std::string& name) const {
  for (const auto& m : modes)
    if (m.mode == name) return &m;
  return nullptr;
}

json to_json(const Measurement& m) {
  json modes = json::array();
  for (const auto& s : m.modes) {
    json j{{"mode", s.mode},         {"step_ms", s.step_ms}, {"target_ms", s.target_ms},
           {"draft_ms", s.draft_ms}, {"host_ms", s.host_ms}, {"enqueue_ms", s.enqueue_ms}};
    if (s.mode == "graph")
      j["graph"] = {{"nodes", s.graph_nodes},
                    {"edges", s.graph_edges},
                    {"capture_ms", s.capture_ms},
                    {"instantiate_ms", s.instantiate_ms}};
    if (!s.graphs.empty()) {
      json gs = json::array();
      for (const auto& g : s.graphs) gs.push_back({{"name", g.name}, {"nodes", g.nodes}, {"edges", g.edges}});
      j["graph"]["graphs"] = gs;
    }
    modes.push_back(j);
  }
  json traced = json::array();
  for (const auto& t : m.traced)
    traced.push_back({{"mode", t.mode},
                      {"trace_json", t.trace_json},
                      {"trace_sqlite", t.trace_sqlite},
                      {"traced_step_ms", t.traced_step_ms},
                      {"untraced_step_ms", t.untraced_step_ms},
                      {"rank_traces", t.rank_traces}});
  return {{"schema", m.schema},
          {"provenance", m.provenance},
          {"stream_source", m.stream_source},
          {"model",
           {{"config", m.config},
            {"layers", m.layers},
            {"mtp_layers", m.mtp_layers},
            {"mtp_compress", m.mtp_compress},
            {"batch", m.batch},
            {"context", m.context},
            {"draft_steps", m.draft_steps},
            {"weights", m.weights},
            {"kv_cache", m.kv_cache},
            {"expert_ranks", m.expert_ranks},
            {"attention_tp", m.attention_tp}}},
          {"policy",
           {{"name", m.policy},
            {"aux_priority", m.aux_priority},
            {"shared_expert_stream", m.shared_expert_stream},
            {"connections", m.connections},
            {"placement", m.placement},
            {"graph_scope", m.graph_scope}}},
          {"resources",
           {{"streams_created", m.streams_created},
            {"stream_names", m.stream_names},
            {"stream_owners", m.stream_owners},
            {"stream_setup_ms", m.stream_setup_ms},
            {"events_created", m.events_created},
            {"weights_bytes", m.weights_bytes},
            {"activations_bytes", m.activations_bytes},
            {"peak_bytes", m.peak_bytes},
            {"library_bytes", m.library_bytes},
            {"cublas_handles", m.cublas_handles},
            {"cublas_workspaces", m.cublas_workspaces},
            {"aliased", m.aliased}}},
          {"modes", modes},
          {"traced", traced}};
}

namespace {

// Field access with the file and the JSON path in every error.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  const json& at(const char* key) const {
    SL_CHECK(j_.is_object(), where_, ": expected an object");
    auto it = j_.find(key);
    SL_CHECK(it != j_.end(), where_, ": missing field \"", key, "\"");
    return *it;
  }
  Reader sub(const char* key) const { return Reader(at(key), where_ + "." + key); }
  std::string str(const char* key) const {
    const json& v = at(key);
    SL_CHECK(v.is_string(), where_, ".", key, ": expected a string");
    return v.get<std::string>();
  }
  double num(const char* key) const {
    const json& v = at(key);
    SL_CHECK(v.is_number(), where_, ".", key, ": expected a number");
    return v.get<double>();
  }
  int integer(const char* key) const {
    const json& v = at(key);
    SL_CHECK(v.is_number_integer() && v.get<int64_t>() >= -(int64_t(1) << 31) && v.get<int64_t>() < (int64_t(1) << 31),
             where_, ".", key, ": expected an integer");
    return v.get<int>();
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    SL_CHECK(v.is_boolean(), where_, ".", key, ": expected true or false");
    return v.get<bool>();
  }
  // Times in ms: finite, not negative and at most kMaxMs; `positive` also refuses anything below
  // a nanosecond (a step that took no time is a broken measurement, and a ratio against it would
  // be infinite or flip the verdict; so would a step of 1e308 ms, which made the interval NaN).
  static constexpr double kMaxMs = 1e7, kMinPositiveMs = 1e-6;
  std::vector<double> times(const char* key, bool positive = false) const {
    const json& v = at(key);
    SL_CHECK(v.is_array(), where_, ".", key, ": expected an array of numbers");
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const json& x = v[i];
      SL_CHECK(x.is_number() && std::isfinite(x.get<double>()), where_, ".", key, "[", i, "]: expected a finite number");
      const double t = x.get<double>();
      SL_CHECK((positive ? t >= kMinPositiveMs : t >= 0) && t <= kMaxMs, where_, ".", key, "[", i, "]: ", t,
               " ms, expected a time ", positive ? "of 1 ns (1e-06 ms)" : "of 0", " to ", kMaxMs, " ms (2.8 hours)");
      out.push_back(t);
    }
    return out;
  }
  std::vector<std::string> strs(const char* key) const {
    const json& v = at(key);
    SL_CHECK(v.is_array(), where_, ".", key, ": expected an array of strings");
    std::vector<std::string> out;
    for (const auto& x : v) {
      SL_CHECK(x.is_string(), where_, ".", key, ": expected strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  const json& raw() const { return j_; }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

}  // namespace

Measurement measurement_from_json(const json& j, const std::string& origin) {
  Reader r(j, origin);
  Measurement m;
  m.schema = r.str("schema");
  SL_CHECK(m.schema == kMeasurementSchema, origin, ": schema \"", m.schema, "\", expected \"", kMeasurementSchema,
           "\" (written by another streamlab version?)");
  m.provenance = r.at("provenance");
  SL_CHECK(m.provenance.is_object(), origin, ".provenance: expected an object");
  m.stream_source = r.str("stream_source");
  const Reader model = r.sub("model");
  m.config = model.str("config");
  m.layers = model.integer("layers");
  m.mtp_layers = model.integer("mtp_layers");
  m.mtp_compress = model.integer("mtp_compress");
  m.batch = model.integer("batch");
  m.context = model.integer("context");
  m.draft_steps = model.integer("draft_steps");
  m.weights = model.raw().value("weights", std::string("bf16"));
  m.kv_cache = model.raw().value("kv_cache", std::string("bf16"));
  m.expert_ranks = model.raw().contains("expert_ranks") ? model.integer("expert_ranks") : 1;
  m.attention_tp = model.raw().contains("attention_tp") && model.boolean("attention_tp");
  SL_CHECK(m.expert_ranks >= 1 && m.expert_ranks <= 1024, origin, ".model.expert_ranks: ", m.expert_ranks,
           " is outside 1..1024");
  const Reader pol = r.sub("policy");
  m.policy = pol.str("name");
  m.aux_priority = pol.str("aux_priority");
  m.shared_expert_stream = pol.boolean("shared_expert_stream");
  m.connections = pol.str("connections");
  // Fields added later: absent in older files, which were all vllm-fix, step, and had no counts.
  m.placement = pol.raw().value("placement", std::string("vllm-fix"));
  m.graph_scope = pol.raw().value("graph_scope", std::string("step"));
  const Reader res = r.sub("resources");
  m.streams_created = res.integer("streams_created");
  m.stream_names = res.strs("stream_names");
  m.stream_owners = res.strs("stream_owners");
  m.stream_setup_ms = res.num("stream_setup_ms");
  m.events_created = res.integer("events_created");
  m.weights_bytes = res.num("weights_bytes");
  m.activations_bytes = res.num("activations_bytes");
  m.peak_bytes = res.num("peak_bytes");
  m.library_bytes = res.num("library_bytes");
  if (res.raw().contains("cublas_handles")) m.cublas_handles = res.integer("cublas_handles");
  if (res.raw().contains("cublas_workspaces")) m.cublas_workspaces = res.integer("cublas_workspaces");
  if (res.raw().contains("aliased")) m.aliased = res.strs("aliased");
  const json& modes = r.at("modes");
  SL_CHECK(modes.is_array(), origin, ".modes: expected an array");
  for (size_t i = 0; i < modes.size(); ++i) {
    const Reader mr(modes[i], origin + ".modes[" + std::to_string(i) + "]");
    ModeSamples s;
    s.mode = mr.str("mode");
    SL_CHECK(s.mode == "eager" || s.mode == "graph", mr.where(), ".mode: \"", s.mode, "\", expected eager or graph");
    for (const ModeSamples& earlier : m.modes)
      SL_CHECK(earlier.mode != s.mode, mr.where(), ".mode: \"", s.mode,
               "\" is listed twice (each mode's samples come once; a copy would weigh them double)");
    s.step_ms = mr.times("step_ms", true);
    s.target_ms = mr.times("target_ms");
    s.draft_ms = mr.times("draft_ms");
    s.host_ms = mr.times("host_ms");
    s.enqueue_ms = mr.times("enqueue_ms");
    SL_CHECK(s.target_ms.size() == s.step_ms.size() && s.draft_ms.size() == s.step_ms.size(), mr.where(),
             ": step_ms, target_ms and draft_ms must have one value per step");
    if (s.mode == "graph") {
      const Reader g = mr.sub("graph");
      s.graph_nodes = size_t(g.integer("nodes"));
      s.graph_edges = size_t(g.integer("edges"));
      s.capture_ms = g.num("capture_ms");
      s.instantiate_ms = g.num("instantiate_ms");
      if (g.raw().contains("graphs")) {
        const json& gs = g.at("graphs");
        SL_CHECK(gs.is_array(), g.where(), ".graphs: expected an array");
        for (size_t k = 0; k < gs.size(); ++k) {
          const Reader gr(gs[k], g.where() + ".graphs[" + std::to_string(k) + "]");
          s.graphs.push_back({gr.str("name"), size_t(gr.integer("nodes")), size_t(gr.integer("edges"))});
        }
      }
    }
    m.modes.push_back(std::move(s));
  }
  const json& traced = r.at("traced");
  SL_CHECK(traced.is_array(), origin, ".traced: expected an array");
  for (size_t i = 0; i < traced.size(); ++i) {
    const Reader tr(traced[i], origin + ".traced[" + std::to_string(i) + "]");
    TracedWindow t;
    t.mode = tr.str("mode");
    t.trace_json = tr.str("trace_json");
    t.trace_sqlite = tr.str("trace_sqlite");
    t.traced_step_ms = tr.times("traced_step_ms", true);
    t.untraced_step_ms = tr.times("untraced_step_ms", true);
    if (traced[i].contains("rank_traces")) {
      const json& rt = traced[i].at("rank_traces");
      SL_CHECK(rt.is_array(), origin, ".traced[", i, "].rank_traces: expected an array of file names");
      for (const auto& f : rt) {
        SL_CHECK(f.is_string(), origin, ".traced[", i, "].rank_traces: expected an array of file names");
        t.rank_traces.push_back(f.get<std::string>());
      }
    }
    m.traced.push_back(std::move(t));
  }
  return m;
}

Measurement read_measurement(const std::string& path) {
  std::ifstream f(path);
  SL_CHECK(f, "cannot read the measurement '", path, "'");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    fail("'", path, "' is not valid JSON: ", e.what());
  }
  try {
    return measurement_from_json(j, "'" + path + "'");
  } catch (const json::exception& e) {
    // (nlohmann's own words name neither the file nor the field.)
    fail("'", path, "': a field holds a value of the wrong type (", e.what(), ")");
  }
}

}  // namespace sl::compare
