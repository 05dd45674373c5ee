// `streamlab check-races`: the happens-before check over the stream schedule a model records for
// a prefill and a decode step (with --verify on, a verifying step: target, acceptance, rollback,
// drafts), on the null backend (no GPU, any config). Every pair of accesses to one buffer from two
// streams must be ordered by the program order of a stream and the event records / waits between
// streams; an unordered pair is a race, reported with both ops, their layers and streams and the
// buffer. Exit 0: no race; 1: races (listed); 2: bad arguments.
//
// --plant NAME runs a model with a fault planted on purpose (DeepSeekV4::plant_fault), to see the
// checker catch it.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schedule.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/model_options.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"

namespace sl::cli {
namespace {

struct CheckRacesOptions {
  ModelOptions model;
  SpeculativeOptions spec;
  std::string plant;
  int steps = 2;
  bool json = false;
};

int check_races(const CheckRacesOptions& o) {
  ModelConfig cfg = resolve_config(o.model);
  const StreamPolicy policy = resolve_policy(o.model);
  cfg.context_length = std::min(cfg.context_length, 8);  // the structure does not depend on it
  SL_CHECK(o.steps >= 1 && o.steps <= 64, "check-races: --steps must be in [1, 64], not ", o.steps);
  auto be = make_null_backend();
  const auto group = schedule_only_group(*be, o.model);  // a split model: rank 0's schedule
  DeepSeekV4 model(*be, cfg, policy, run_shape(cfg, o.model, o.steps, false, o.spec.on()));
  model.set_accept_rule(resolve_accept_rule(o.spec));
  model.plant_fault(o.plant);

  struct Part {
    std::string name;
    std::vector<std::string> hazards;
    size_t entries = 0;
  };
  std::vector<Part> parts;
  auto recorded = [&](const std::string& name, auto&& work) {
    Schedule sched;
    model.describe_streams(sched);
    model.ops().attach_schedule(&sched);
    work();
    model.ops().attach_schedule(nullptr);
    parts.push_back({name, sched.hazards(), sched.entries().size()});
  };
  std::vector<int32_t> prompt(size_t(cfg.batch) * size_t(cfg.context_length), 1);
  recorded("prefill", [&] { model.prefill(prompt, cfg.context_length); });
  for (int s = 1; s <= o.steps; ++s)
    recorded("decode step " + std::to_string(s) + (o.spec.on() ? " (verifying)" : ""), [&] { model.decode_step(); });

  size_t races = 0;
  for (const auto& p : parts) races += p.hazards.size();
  // A fault with no site under this policy changed nothing: say so, with a status of its own (2),
  // rather than report a "no race" that reads as the fault having been checked (and 1, races found,
  // is what a test of a planted fault expects).
  if (!o.plant.empty() && model.planted_sites() == 0) {
    std::fprintf(stderr, "streamlab: error: check-races: nothing was planted: --plant %s has no site under policy %s "
                 "with %d MTP layers of compress %d (no aux stream forks or joins there; try another policy, or MTP "
                 "compress 4)\n", o.plant.c_str(), policy.str().c_str(), cfg.num_nextn_predict_layers,
                 cfg.mtp_compress_ratio);
    return 2;
  }
  const std::string what = "policy " + policy.str() + ", source " + stream_source_name(policy.source) +
                           ", placement " + placement_name(policy.placement) + ", config " + cfg.name + " (" +
                           std::to_string(cfg.num_nextn_predict_layers) + " MTP layers, compress " +
                           std::to_string(cfg.mtp_compress_ratio) + ")" +
                           (o.plant.empty() ? "" : ", planted fault " + o.plant);
  if (o.json) {
    nlohmann::json j{{"checked", what}, {"races", races}, {"parts", nlohmann::json::array()}};
    for (const auto& p : parts)
      j["parts"].push_back({{"part", p.name}, {"entries", p.entries}, {"races", p.hazards}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("check-races: %s\n", what.c_str());
    for (const auto& p : parts) {
      std::printf("  %-28s %6zu ops, records and waits: %s\n", p.name.c_str(), p.entries,
                  p.hazards.empty() ? "no race" : (std::to_string(p.hazards.size()) + " races").c_str());
      for (const auto& h : p.hazards) std::printf("    %s\n", h.c_str());
    }
    std::printf(races ? "%zu races\n" : "no race: every cross-stream access is ordered\n", races);
  }
  return races ? 1 : 0;
}

}  // namespace

void add_check_races_command(CLI::App& app) {
  auto o = std::make_shared<CheckRacesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check-races",
      "Check the stream schedule of a prefill and decode steps for races (cross-stream accesses to one buffer "
      "that no event orders); exits 1 on any, naming both ops, their layers and streams and the buffer, and 2 when "
      "--plant has no site under the policy (nothing was planted)");
  add_model_options(cmd, o->model);
  add_speculative_options(cmd, o->spec);
  cmd->add_option("--steps", o->steps, "decode steps to check")->capture_default_str();
  cmd->add_option("--plant", o->plant,
                  "plant a fault on purpose: missing-join (c4a phase B not joined), rerecord (the join's event "
                  "re-recorded by the waiting stream), mtp-missing-join (MTP layers only), mtp-early-fork (MTP "
                  "layers' aux streams start without waiting for the main stream: their indexer rewrites the top-k "
                  "buffer the target's sparse attention reads)")
      ->check(CLI::IsMember(DeepSeekV4::fault_names()));
  cmd->add_flag("--json", o->json, "print as JSON");
  cmd->callback([o] {
    const int rc = check_races(*o);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sl::cli
