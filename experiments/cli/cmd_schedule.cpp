// `streamlab schedule`: which streams a policy creates (count, names, owners) and the per-layer
// fork/join structure of one decode step, recorded on the null backend (no GPU, no weight
// memory: any config, flash included). With --verify on, of a verifying step (docs/speculative.md),
// whose own bookkeeping ops are counted too.
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/communicator.h"
#include "core/schedule.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/model_options.h"
#include "experiments/cli/stream_report.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"

namespace sl::cli {
namespace {

struct ScheduleOptions {
  ModelOptions model;
  SpeculativeOptions spec;
  bool json = false;
  bool full = false;
};

// Groups the recorded entries by (forward, layer, phase) using the scope path the model writes
// ("decode/target/L3.c4a/attn/phase_a", "decode/draft1/mtp1.sliding/ffn/moe").
nlohmann::json layer_structure(const Schedule& sched) {
  static const std::regex layer_re(R"(^(L\d+|mtp\d+)\.(\w+)$)");
  struct Phase {
    nlohmann::json forks = nlohmann::json::array(), joins = nlohmann::json::array();
    std::map<std::string, nlohmann::json> branches;  // aux stream -> {ops, waits, records}
    int main_ops = 0;
  };
  struct Layer {
    std::string forward, layer, type;
    std::vector<std::string> order;
    std::map<std::string, Phase> phases;
  };
  std::vector<Layer> layers;
  for (const auto& e : sched.entries()) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= e.scope.size(); ++i)
      if (i == e.scope.size() || e.scope[i] == '/') {
        parts.push_back(e.scope.substr(start, i - start));
        start = i + 1;
      }
    int li = -1;
    for (size_t i = 0; i < parts.size(); ++i)
      if (std::regex_match(parts[i], layer_re)) li = int(i);
    if (li < 1) continue;  // not inside a layer
    std::smatch lm;
    std::regex_match(parts[size_t(li)], lm, layer_re);
    const std::string forward = parts[size_t(li) - 1];
    std::string phase = "other";
    for (size_t i = size_t(li) + 1; i < parts.size(); ++i)
      if (parts[i] == "phase_a" || parts[i] == "phase_b" || parts[i] == "moe") phase = parts[i];
    if (layers.empty() || layers.back().forward != forward || layers.back().layer != lm[1].str())
      layers.push_back({forward, lm[1].str(), lm[2].str(), {}, {}});
    Layer& L = layers.back();
    if (!L.phases.count(phase)) L.order.push_back(phase);
    Phase& P = L.phases[phase];
    const std::string stream = sched.stream_name(e.stream);
    const bool on_main = e.stream == 0;
    if (on_main) {
      if (e.kind == ScheduleEntry::Record) P.forks.push_back(sched.event_name(e.event));
      else if (e.kind == ScheduleEntry::Wait) P.joins.push_back(sched.event_name(e.event));
      else ++P.main_ops;
      continue;
    }
    auto& br = P.branches[stream];
    if (br.is_null()) br = {{"stream", stream}, {"waits", nlohmann::json::array()}, {"ops", nlohmann::json::array()},
                            {"records", nlohmann::json::array()}};
    if (e.kind == ScheduleEntry::Op) br["ops"].push_back(e.name);
    else br[e.kind == ScheduleEntry::Wait ? "waits" : "records"].push_back(sched.event_name(e.event));
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& L : layers) {
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& name : L.order) {
      Phase& P = L.phases[name];
      if (name == "other" && P.branches.empty()) continue;
      nlohmann::json br = nlohmann::json::array();
      for (auto& [s, b] : P.branches) br.push_back(b);
      phases.push_back({{"phase", name}, {"forks", P.forks}, {"branches", br}, {"joins", P.joins},
                        {"main_ops", P.main_ops}});
    }
    out.push_back({{"forward", L.forward}, {"layer", L.layer}, {"type", L.type}, {"phases", phases}});
  }
  return out;
}

std::string join(const nlohmann::json& a, const char* sep = " ") {
  std::string s;
  for (const auto& x : a) {
    if (!s.empty()) s += sep;
    s += x.get<std::string>();
  }
  return s;
}

void schedule(const ScheduleOptions& o) {
  ModelConfig cfg = resolve_config(o.model);
  const StreamPolicy policy = resolve_policy(o.model);
  // A short prompt suffices: the decode step's structure does not depend on its length.
  cfg.context_length = std::min(cfg.context_length, 8);
  const AcceptRule accept = resolve_accept_rule(o.spec);
  auto be = make_null_backend();
  RunShape shape = run_shape(cfg, o.model, 1, false, o.spec.on());
  // Expert parallelism: rank 0's schedule (a group whose collectives this backend never calls).
  const auto group = schedule_only_group(*be, o.model);
  const int ranks = o.model.expert_ranks;
  const bool comm_stream = ranks > 1 && !shape.expert_all_to_all;
  DeepSeekV4 model(*be, cfg, policy, shape);
  model.set_accept_rule(accept);
  std::vector<int32_t> prompt(size_t(cfg.batch) * size_t(cfg.context_length), 1);
  model.prefill(prompt, cfg.context_length);
  Schedule sched;
  model.describe_streams(sched);
  model.ops().attach_schedule(&sched);
  model.decode_step();
  model.ops().attach_schedule(nullptr);

  const auto& plan = model.stream_plan();
  const auto hazards = sched.hazards();
  // A verifying step's own ops (outside the layers' structure): how often each ran.
  std::map<std::string, int> verify_ops;
  if (o.spec.on())
    for (const auto& e : sched.entries())
      if (e.kind == ScheduleEntry::Op &&
          (e.name == "verify_tokens" || e.name == "accept_drafts" || e.name.rfind("rollback.", 0) == 0))
        ++verify_ops[e.name];
  const nlohmann::json layers = layer_structure(sched);
  size_t events = sched.events().size();
  const MemoryStats res = be->memory();  // the null backend's count of what the CUDA backend would hold
  const int alias_from = first_aliasing_mtp_layers(policy, cfg);
  if (o.json) {
    nlohmann::json j;
    j["config"] = cfg.name;
    j["policy"] = policy.str();
    j["stream_source"] = stream_source_name(policy.source);
    j["target_layers"] = cfg.num_hidden_layers;
    j["mtp_layers"] = cfg.num_nextn_predict_layers;
    j["mtp_compress_ratio"] = cfg.mtp_compress_ratio;
    j["verify"] = o.spec.on();
    if (o.spec.on()) j["verify_ops"] = verify_ops;
    j["streams_requested"] = plan.streams.size();
    j["streams_created"] = plan.physical.size() + (comm_stream ? 1 : 0);  // + the comm stream
    j["expert_ranks"] = ranks;
    j["expert_scheme"] = ranks > 1 ? nlohmann::json(o.model.expert_scheme) : nlohmann::json(nullptr);
    j["attention_tp"] = o.model.attention_tp;
    j["aux_streams_requested"] = plan.streams.size() - (plan.shared_expert >= 0 ? 1 : 0);
    j["stream_plan"] = stream_plan_json(plan, policy, alias_from);
    j["predicted_resources"] = {{"cuda_streams", res.streams_created},
                                {"cublas_handles", res.blas_handles},
                                {"cublas_workspaces", res.blas_workspaces},
                                {"cublas_workspace_bytes", res.library_bytes}};
    j["events_created"] = events;
    j["layers"] = layers;
    j["hazards"] = hazards;
    if (o.full) j["schedule"] = sched.to_json();
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("policy %s, stream source %s, config %s: %d target layers, %d MTP layers (compress ratio %d)\n",
              policy.str().c_str(), stream_source_name(policy.source), cfg.name.c_str(), cfg.num_hidden_layers,
              cfg.num_nextn_predict_layers, cfg.mtp_compress_ratio);
  print_stream_plan(stdout, plan, policy, alias_from);
  if (comm_stream)
    std::printf("  comm             expert parallelism (rank 0 of %d): each MoE layer's all-reduce; a stream "
                "besides the plan's\n", ranks);
  else if (ranks > 1)
    std::printf("  (expert parallelism, rank 0 of %d, all-to-all: each MoE layer's exchange runs inside its "
                "routed-experts op on the main stream; no comm stream)\n", ranks);
  std::printf("predicted resources (CUDA backend): %zu CUDA streams besides main, %zu cuBLAS handles, %zu cuBLAS "
              "workspaces (%.0f MiB)\n",
              res.streams_created, res.blas_handles, res.blas_workspaces, double(res.library_bytes) / 1048576.0);
  std::printf("events created: %zu\n", events);
  if (o.spec.on()) {
    std::printf("decode step verifies %d drafts per sequence (%d tokens); its bookkeeping ops:", cfg.draft_steps,
                1 + cfg.draft_steps);
    for (const auto& [name, n] : verify_ops) std::printf(" %s x%d", name.c_str(), n);
    std::printf("\n");
  }
  std::printf("\nfork/join structure of one decode step:\n");
  for (const auto& L : layers) {
    std::printf("  %s %s (%s)\n", L["forward"].get<std::string>().c_str(), L["layer"].get<std::string>().c_str(),
                L["type"].get<std::string>().c_str());
    for (const auto& P : L["phases"]) {
      std::printf("    %-8s", P["phase"].get<std::string>().c_str());
      if (P["branches"].empty()) {
        std::printf(" serial on main (%d ops)\n", P["main_ops"].get<int>());
        continue;
      }
      std::printf(" fork %s |", join(P["forks"]).c_str());
      for (const auto& b : P["branches"])
        std::printf(" %s: %s -> %s |", b["stream"].get<std::string>().c_str(), join(b["ops"], ",").c_str(),
                    join(b["records"]).c_str());
      std::printf(" join %s\n", join(P["joins"]).c_str());
    }
  }
  std::printf("\nhazards (unordered cross-stream buffer accesses): %zu\n", hazards.size());
  for (const auto& h : hazards) std::printf("  %s\n", h.c_str());
  if (o.full) std::printf("\n%s", sched.to_text().c_str());
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "Print the streams a policy creates and the per-layer fork/join structure of a decode step");
  add_model_options(cmd, o->model);
  add_speculative_options(cmd, o->spec);
  cmd->add_flag("--json", o->json, "print as JSON");
  cmd->add_flag("--full", o->full, "also print every recorded op, record and wait");
  cmd->callback([o] { schedule(*o); });
}

}  // namespace sl::cli
