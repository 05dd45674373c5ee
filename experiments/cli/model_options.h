// Options shared by the subcommands that build a model (`run`, `schedule`): the config and
// its command-line overrides, and the stream policy.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/communicator.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/stream_policy.h"

namespace sl::cli {

struct ModelOptions {
  std::string config = "tiny";
  std::string policy = "shared";
  std::string aux_priority = "default";
  std::string stream_source = "cuda";
  std::string placement = "vllm-fix";
  std::string graph_scope = "step";  // how graph mode captures a decode step (DeepSeekV4::set_graph_scope)
  std::string weights = "bf16";      // --weights: bf16 | native | native-w4a8 (model/weights.h WeightFormat)
  std::string kv_cache = "bf16";     // --kv-cache: bf16 | fp8 (RunShape::kv_fp8; packed where the backend takes it)
  bool no_shared_expert_stream = false;
  std::optional<int> mtp_layers, mtp_compress, batch, context, draft_steps, prefill_chunk;
  std::optional<unsigned long long> seed;
  std::optional<std::string> rope;  // "yarn" | "plain": the RoPE of sliding-window layers
  // Expert parallelism (docs/model.md 6.1): the routed experts split over this many ranks, the
  // scheme of the split, and whether the attention's heads are split over them too.
  int expert_ranks = 1;
  std::string expert_scheme = "all-gather";
  bool attention_tp = false;
};

void add_model_options(CLI::App* cmd, ModelOptions& o);
// Refuses split options that do not go together (--attention-tp without ranks or with the
// all-to-all scheme), naming them.
void check_split_options(const ModelOptions& o);
// Rank 0's place in a split model whose collectives the backend never runs (the null backend of
// `schedule` and `check-races`): an in-process group, set on `be`; empty when not split.
std::vector<std::unique_ptr<Communicator>> schedule_only_group(Backend& be, const ModelOptions& o);
// The config after overrides, validated (throws naming the key on a bad value).
ModelConfig resolve_config(const ModelOptions& o, const std::string& config_override_path = "");
StreamPolicy resolve_policy(const ModelOptions& o);
// The prompt when none is given: batch x context deterministic pseudo-random token ids from the seed
// (the same for run, measure and every backend).
std::vector<int32_t> seeded_prompt(const ModelConfig& cfg);

// Refuses, before anything is allocated, a model whose weights and caches exceed what the backend
// can still allocate, naming both figures (no-op when the backend cannot tell).
void check_memory_fits(const Backend& be, const ModelConfig& cfg, const RunShape& shape, const char* who);

// Shapes for a run of `decode_steps` steps after a prompt of cfg.context_length tokens
// (verifying steps: each advances up to 1 + k positions and runs 1 + k tokens per sequence), with
// the weight format of o.weights.
RunShape run_shape(const ModelConfig& cfg, const ModelOptions& o, int decode_steps, bool all_logits,
                   bool verify = false);

// Speculative decoding (docs/speculative.md), for the subcommands that run decode steps
// (`run`, `schedule`): whether decode steps verify the drafts, and how many they accept.
struct SpeculativeOptions {
  std::string verify = "off";     // "on" | "off"
  std::string accept = "greedy";  // model/speculative.h: greedy | N | rate:R[:SEED]
  bool on() const { return verify == "on"; }
};
void add_speculative_options(CLI::App* cmd, SpeculativeOptions& o);
// The acceptance rule; refuses --accept other than greedy without --verify on.
AcceptRule resolve_accept_rule(const SpeculativeOptions& o);

}  // namespace sl::cli
