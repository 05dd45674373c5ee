#include "experiments/cli/model_options.h"

#include "experiments/cli/number_checks.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace sl::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--config", o.config, "built-in config name (" + [] {
    std::string s;
    for (const auto& n : builtin_config_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + ") or a path to a config.json")->capture_default_str();
  cmd->add_option("--policy", o.policy,
                  "stream policy: serial, per-layer, shared, global, per-layer-all, trtllm-per-layer, pool:K")
      ->capture_default_str();
  cmd->add_option("--stream-source", o.stream_source,
                  "where the policy's streams come from: cuda (each created with cudaStreamCreateWithPriority and "
                  "its own cuBLAS handle and workspace, as a C++ engine) or torch (drawn round-robin from "
                  "PyTorch's pool of 32 per priority, created at the first draw; one cuBLAS handle, a workspace "
                  "per stream at its first GEMM), as vLLM's torch.cuda.Stream()")
      ->check(CLI::IsMember({"cuda", "torch"}))
      ->capture_default_str();
  cmd->add_option("--placement", o.placement,
                  "where phase-B aux work goes: vllm-fix (vLLM at the MTP fix: the whole c4a indexer on aux0) or "
                  "vllm-head (current vLLM: indexer query on aux0 with its compressor on aux2, main compressor on "
                  "aux1, scoring and top-k on the current stream after the join)")
      ->check(CLI::IsMember({"vllm-fix", "vllm-head"}))
      ->capture_default_str();
  cmd->add_option("--graph-scope", o.graph_scope,
                  "graph mode: step (one CUDA graph per decode step), split (as vLLM's runner: the target "
                  "forward, draft step 0 and draft steps 1..k-1 as separate graphs replayed in turn) or piecewise "
                  "(as vLLM's piecewise capture: phase B and the sparse attention of c4a layers run eagerly "
                  "between graph pieces)")
      ->check(CLI::IsMember({"step", "split", "piecewise"}))
      ->capture_default_str();
  cmd->add_option("--weights", o.weights,
                  "weight format: bf16 (every matrix in bf16, fp32 on the CPU reference), native (as the real "
                  "checkpoint holds them: FP8 e4m3 with 128x128 block scales for the main-stream projections and the "
                  "shared expert, MXFP4 routed experts fed bf16 activations as vLLM and SGLang run them on Hopper; "
                  "compressor, indexer and router GEMMs stay bf16) or native-w4a8 (the same weights, the routed "
                  "experts' inputs rounded to FP8 per 128 values first, as DeepSeek's reference inference does)")
      ->check(CLI::IsMember({"bf16", "native", "native-w4a8"}))
      ->capture_default_str();
  cmd->add_option("--kv-cache", o.kv_cache,
                  "KV cache format: bf16, or fp8 as vLLM's caches hold it (e4m3 nope dims with a power-of-two "
                  "scale per 64 and bf16 rope dims, indexer keys with one scale per key, and the indexer query "
                  "with one per head, as vLLM quantizes it): packed in vLLM's bytes (584 per flash entry) on the CPU "
                  "backend and on the CUDA backend under --kernel-variants fp8-kv=packed; otherwise the CUDA "
                  "backend holds the same values in bf16 (emulated)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--aux-priority", o.aux_priority, "priority of the aux streams: default or highest")
      ->check(CLI::IsMember({"default", "highest"}))
      ->capture_default_str();
  cmd->add_flag("--no-shared-expert-stream", o.no_shared_expert_stream,
                "run the MoE shared expert on the main stream even when the batch has <= 256 tokens");
  cmd->add_option("--mtp-layers", o.mtp_layers, "number of MTP layers N (config: num_nextn_predict_layers)");
  cmd->add_option("--mtp-compress", o.mtp_compress, "compress ratio of the MTP layers: 0 (as the real checkpoint), 4 or 128");
  cmd->add_option("--batch", o.batch, "sequences per step");
  cmd->add_option("--context", o.context, "prompt tokens per sequence");
  cmd->add_option("--draft-steps", o.draft_steps, "MTP draft steps k per decode step");
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "most prompt tokens per step, over the whole batch");
  cmd->add_option("--seed", o.seed, "seed of the random weights (a whole number >= 0)")->check(whole_uint64());
  cmd->add_option("--rope", o.rope,
                  "RoPE of sliding-window and MTP layers: yarn (vLLM) or plain (DeepSeek reference / HF)")
      ->check(CLI::IsMember({"yarn", "plain"}));
  cmd->add_option("--expert-ranks", o.expert_ranks,
                  "expert parallelism: split every MoE layer's routed experts over this many ranks (they must divide "
                  "evenly), which sum their routed outputs with an all-reduce on a comm stream; the logits equal one "
                  "rank's up to the order of fp32 sums. CPU backend: ranks as threads or processes; CUDA backend: one "
                  "process per GPU over NCCL")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--expert-scheme", o.expert_scheme,
                  "how --expert-ranks splits the MoE: all-gather (every rank holds every sequence, the ranks sum "
                  "their routed outputs on a comm stream) or all-to-all (each rank holds batch / N sequences and "
                  "sends each token's expert rows to the experts' owners and back; CPU backend, bf16 weights; rank "
                  "0 reports its own sequences)")
      ->check(CLI::IsMember({"all-gather", "all-to-all"}))
      ->capture_default_str();
  cmd->add_flag("--attention-tp", o.attention_tp,
                "with --expert-ranks N: also split the attention's heads and output groups over the N ranks "
                "(tensor parallelism; wo_b's shares summed by an all-reduce on the main stream); native weights "
                "where each share falls on FP8's 128-wide blocks (flash's do)");
}

void check_split_options(const ModelOptions& o) {
  SL_CHECK(!o.attention_tp || (o.expert_ranks > 1 && o.expert_scheme == "all-gather"), "--attention-tp splits the "
           "attention's heads over the ranks of --expert-ranks N (N >= 2) in the all-gather scheme");
}

std::vector<std::unique_ptr<Communicator>> schedule_only_group(Backend& be, const ModelOptions& o) {
  check_split_options(o);
  if (o.expert_ranks <= 1) return {};
  auto group = make_fake_group(o.expert_ranks);
  be.set_communicator(group[0].get());
  return group;
}

ModelConfig resolve_config(const ModelOptions& o, const std::string& config_override_path) {
  ModelConfig c = load_config(config_override_path.empty() ? o.config : config_override_path);
  if (o.mtp_layers) c.num_nextn_predict_layers = *o.mtp_layers;
  if (o.batch) c.batch = *o.batch;
  if (o.context) c.context_length = *o.context;
  if (o.draft_steps) c.draft_steps = *o.draft_steps;
  if (o.prefill_chunk) c.prefill_chunk = *o.prefill_chunk;
  if (o.seed) c.seed = *o.seed;
  if (o.rope) c.swa_layers_use_yarn = *o.rope == "yarn";
  // The MTP slot of compress_ratios follows the knob, overridden or as loaded.
  set_mtp_compress_ratio(c, o.mtp_compress ? *o.mtp_compress : c.mtp_compress_ratio);
  validate(c);
  return c;
}

StreamPolicy resolve_policy(const ModelOptions& o) {
  StreamPolicy p = StreamPolicy::parse(o.policy);
  // CUDA: lower numbers are higher priority; -5 is the highest on current GPUs (the CUDA
  // backend clamps to the device's range).
  p.aux_priority = o.aux_priority == "highest" ? -5 : 0;
  if (o.no_shared_expert_stream) p.shared_expert_stream = false;
  p.source = parse_stream_source(o.stream_source);
  p.placement = parse_placement(o.placement);
  return p;
}

std::vector<int32_t> seeded_prompt(const ModelConfig& cfg) {
  std::vector<int32_t> out;
  const uint64_t key = hash_name("prompt");
  for (int64_t i = 0; i < int64_t(cfg.batch) * cfg.context_length; ++i)
    out.push_back(int32_t(splitmix64(cfg.seed ^ splitmix64(key ^ uint64_t(i))) % uint64_t(cfg.vocab_size)));
  return out;
}

void check_memory_fits(const Backend& be, const ModelConfig& cfg, const RunShape& shape, const char* who) {
  const size_t avail = be.available_bytes();
  if (avail == 0) return;
  // What this rank holds (all of it unless the model is split over ranks).
  const double w = double(weight_bytes(cfg, be.weight_dtype(), shape.weights, rank_share(cfg, shape)));
  double caches = 0;
  for (int l = 0; l < cfg.n_layers_total(); ++l)
    caches += double(layer_cache_bytes(cfg, l, shape.batch, shape.max_positions, shape.max_seq_tokens, be.act_dtype(),
                                       shape.kv_fp8 && be.packed_kv_caches()));
  const double gib = double(size_t(1) << 30);
  SL_CHECK(w + caches <= double(avail), who, ": config ", cfg.name, " needs ", w / gib, " GiB of weights and ",
           caches / gib, " GiB of caches on the ", be.name(), " backend, but only ", double(avail) / gib,
           " GiB are available there; choose a smaller config (fewer layers or experts, a shorter context)");
}

RunShape run_shape(const ModelConfig& cfg, const ModelOptions& o, int decode_steps, bool all_logits, bool verify) {
  RunShape s;
  s.weights = parse_weight_format(o.weights);
  s.kv_fp8 = o.kv_cache == "fp8";
  s.expert_world = o.expert_ranks;  // each rank sets its own expert_rank
  s.expert_all_to_all = o.expert_ranks > 1 && o.expert_scheme == "all-to-all";
  s.attention_tp = o.attention_tp;
  s.batch = cfg.batch;
  s.max_positions = cfg.context_length + decode_steps + cfg.draft_steps + 1;
  const int per_seq_chunk = std::max(1, cfg.prefill_chunk / cfg.batch);
  s.max_seq_tokens = all_logits ? cfg.context_length : std::min(cfg.context_length, per_seq_chunk);
  s.all_logits = all_logits;
  if (verify) {
    // A verifying step starts at most (1 + k) positions after the previous one and reaches 2k - 1
    // past its start (DeepSeekV4::decode_prepare); it runs 1 + k tokens per sequence.
    const int k = cfg.draft_steps;
    s.verify = true;
    s.max_positions = cfg.context_length + decode_steps * (1 + k) + k + 1;
    s.max_seq_tokens = std::max(s.max_seq_tokens, 1 + k);
  }
  return s;
}

void add_speculative_options(CLI::App* cmd, SpeculativeOptions& o) {
  cmd->add_option("--verify", o.verify,
                  "speculative decoding: on = each decode step verifies the previous step's drafts (the target runs "
                  "1 + k tokens per sequence, accepts a prefix, rolls the caches back; docs/speculative.md), and run "
                  "reports the drafts accepted per step and committed tokens per second; off (the default, as in "
                  "earlier results) = the drafts are made but never verified")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--accept", o.accept,
                  "drafts accepted per verifying step (needs --verify on): greedy (the default: the longest prefix "
                  "the target's greedy tokens confirm; random weights almost never agree), N (min(N, k) every step) "
                  "or rate:R[:SEED] (each draft with probability R, up to the first rejection; seeded draws)")
      ->capture_default_str();
}

AcceptRule resolve_accept_rule(const SpeculativeOptions& o) {
  const AcceptRule r = parse_accept_rule(o.accept);
  SL_CHECK(o.on() || r.kind == AcceptRule::Kind::Greedy, "--accept ", o.accept,
           " sets how verifying steps accept drafts: add --verify on");
  return r;
}

}  // namespace sl::cli
