// DeepSeek V4 (Flash-shaped) target model + MTP drafter, written once against the backend
// interface (model/backend.h) through the op facade (model/ops.h).
//
// Lifecycle: construct (creates the policy's streams and the per-layer events, allocates
// weights, caches and every activation buffer: nothing is allocated afterwards), fill the
// weights (init_random or load), prefill a prompt batch, then decode steps. A decode step is
// the target forward on the batch (one token per sequence) followed by `draft_steps` MTP
// draft steps (MTP layer index = draft step mod N), all greedy. With RunShape::verify, a
// decode step instead verifies the previous step's k drafts (docs/speculative.md): the target
// runs 1 + k tokens per sequence, accepts a prefix of the drafts, rolls every cache back to
// the committed length, and drafts again from there.
//
// Nothing in a step reads device memory on the host: tokens flow on the device (argmax ->
// next step's input), and positions are uploaded before the step, so a decode step can be
// captured as one CUDA graph. A verifying step computes its acceptance, rollback lengths and
// draft positions on the device too; the host learns the accepted counts in decode_collect.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/ops.h"
#include "model/parallel.h"
#include "model/speculative.h"
#include "model/stream_policy.h"
#include "model/weights.h"

namespace sl {

// The shapes a model instance is built for (buffers are sized from these up front).
struct RunShape {
  int batch = 1;
  int max_positions = 64;    // positions [0, max_positions) may be used
  int max_seq_tokens = 64;   // most tokens of one sequence in one step (prefill chunk)
  bool all_logits = false;   // keep prefill logits for every token (--dump-logits)
  bool draft_logits = false; // keep every draft step's logits (for comparisons; costs a download)
  bool record_routing = false;  // keep every MoE execution's expert ids (for the bytes floor)
  // Decode steps verify the previous step's drafts (docs/speculative.md). Needs MTP layers,
  // draft_steps k >= 1 and max_seq_tokens >= 1 + k.
  bool verify = false;
  // How the weights are held (--weights): the backend's weight dtype, or the checkpoint's native
  // FP8 / MXFP4 formats (model/weights.h).
  WeightFormat weights = WeightFormat::Bf16;
  // Expert parallelism (model/expert_parallel.h): this process is rank expert_rank of
  // expert_world ranks, holds their share of every MoE layer's routed experts, and sums the
  // ranks' routed outputs with the backend's all_reduce_sum (Backend::set_communicator); every
  // rank holds every token and every other weight (the all-gather scheme). 1: all experts here.
  int expert_world = 1;
  int expert_rank = 0;
  // The scheme of the split (model/expert_parallel.h): false, the all-gather scheme above; true,
  // all-to-all: each rank holds its own sequences (RunShape::batch of them) and every other
  // weight, and each MoE layer sends each (token, slot) pair to its expert's owner and back
  // (moe_experts_all_to_all). bf16-format weights only.
  bool expert_all_to_all = false;
  // Tensor parallelism of the attention over the same ranks (the all-gather scheme): each rank
  // holds num_attention_heads / expert_world heads (their wq_b rows and sinks) and o_groups /
  // expert_world output groups (their wo_a rows and wo_b columns), computes its heads' attention
  // and its share of wo_b's sum, and the ranks' shares are summed (all_reduce_sum on the main
  // stream, as serving stacks sum after the output projection). The KV projection, compressors and
  // indexer stay whole on every rank (one latent KV head). Native weights where each share falls
  // on FP8's 128-wide blocks (allocate_weights checks); a checkpoint loads into the shares.
  bool attention_tp = false;
  // The heads (and output groups) one rank holds.
  int64_t heads_per_rank(const ModelConfig& c) const {
    return attention_tp ? c.num_attention_heads / expert_world : c.num_attention_heads;
  }
  int64_t groups_per_rank(const ModelConfig& c) const { return attention_tp ? c.o_groups / expert_world : c.o_groups; }
  // FP8 KV caches (--kv-cache fp8; docs/model.md 5.7): the window and compressed caches' nope dims
  // as an FP8 cache stores them (e4m3, a power-of-two scale per 64; the rope dims bf16), the
  // indexer keys likewise with one scale per key. Packed in vLLM's bytes where the backend takes
  // them (Backend::packed_kv_caches, DeepSeekV4::kv_packed), else emulated: the same values held in
  // the activation dtype.
  bool kv_fp8 = false;
};

// The part of the weights rank shape.expert_rank holds (expert parallelism: its routed experts;
// with attention_tp: its heads and output groups): a ModelWeights with only those ranges set (no
// tensors). All of it when the model is not split.
ModelWeights rank_share(const ModelConfig& c, const RunShape& shape);

// The experts one MoE execution routed to (RunShape::record_routing): target layer l, or the
// MTP layer of draft step s.
struct RoutingRecord {
  int layer = 0;       // model layer index (L + i for MTP layer i)
  int draft_step = -1; // -1: the target forward
  int tokens = 0;
  std::vector<int32_t> ids;  // [tokens, experts_per_tok]
};

// What one step produced (host copies).
struct StepOutput {
  // [B] greedy token of the target at each sequence's last position (a verifying step: at its
  // last committed position, i.e. the bonus token, the next step's first input)
  std::vector<int32_t> sampled;
  std::vector<std::vector<int32_t>> drafts;  // [draft_steps][B]
  double logits_checksum = 0;               // sum of the target logits at the last positions
  std::vector<float> last_logits;            // [B, vocab] target logits at the last positions
  // [tokens, vocab] when RunShape::all_logits: the prefill's tokens; a verifying step's B * (1 + k)
  // rows (sequence-major, row b * (1 + k) + i at position p_b + i)
  std::vector<float> all_logits;
  std::vector<float> draft_logits;           // [draft_steps, B, vocab] when RunShape::draft_logits
  std::vector<int32_t> accepted;             // [B] drafts accepted per sequence (verifying steps only)
};

// How a graph-mode decode step is captured (--graph-scope):
// - Step: one CUDA graph for the whole step (target forward and every draft step).
// - Split: as vLLM's model runner does it, the target forward, draft step 0 and draft steps
//   1..k-1 are separate graphs, replayed one after the other by the host.
// - Piecewise: as vLLM's piecewise capture with its V1 runner: the step is captured in pieces,
//   and phase B and the sparse attention of every c4a layer (vLLM's `_prepare_and_attn`) run
//   eagerly between the replayed pieces, their aux streams forked by the host each step.
enum class GraphScope { Step, Split, Piecewise };
const char* graph_scope_name(GraphScope g);  // "step", "split", "piecewise"
GraphScope parse_graph_scope(const std::string& text);

class DeepSeekV4 {
 public:
  DeepSeekV4(Backend& be, const ModelConfig& cfg, const StreamPolicy& policy, const RunShape& shape);
  ~DeepSeekV4();
  DeepSeekV4(const DeepSeekV4&) = delete;
  DeepSeekV4& operator=(const DeepSeekV4&) = delete;

  void init_random(uint64_t seed);
  void load(const std::string& checkpoint_dir);

  // Prefill: tokens holds B sequences of T0 tokens each (row-major [B, T0]). Runs in chunks
  // of RunShape::max_seq_tokens, then the first draft steps.
  StepOutput prefill(const std::vector<int32_t>& tokens, int T0);
  // Called after each prefill chunk is enqueued with the tokens per sequence done so far and the
  // total (progress output on long prompts; host side, no synchronisation added).
  void set_prefill_progress(std::function<void(int done, int total)> f) { prefill_progress_ = std::move(f); }
  // One decode step at the current positions; inputs are the previous step's greedy tokens
  // (with RunShape::verify: the previous step's bonus token and drafts).
  StepOutput decode_step();
  // How a verifying step accepts drafts (default: greedy). Takes effect from the next
  // decode_prepare (forced counts are an upload, so a captured graph keeps working).
  void set_accept_rule(const AcceptRule& r) { accept_rule_ = r; }
  const AcceptRule& accept_rule() const { return accept_rule_; }
  // The two halves of decode_step, for callers that capture or time the device part alone:
  // upload this step's positions, then enqueue the device work (no host reads), then collect.
  void decode_prepare();
  void decode_enqueue();
  StepOutput decode_collect();
  // decode_step through a CUDA graph: the first call captures decode_enqueue() once, every call
  // replays it (positions are uploaded before each replay).
  StepOutput decode_step_graph();
  // The device half of decode_step_graph (between decode_prepare and decode_collect): capture
  // on the first call, then replay.
  void decode_replay();
  bool graph_captured() const { return graph_captured_; }
  // A fault planted on purpose, for the race checker's tests and to run one for real:
  // "missing-join" (the c4a layers' phase-B join is left out), "rerecord" (the current stream
  // re-records the phase-B done event right before waiting on it), "mtp-missing-join" (the
  // missing join in MTP layers only), "mtp-early-fork" (the MTP layers' aux streams start
  // without waiting on the current stream). "" = none. Throws on an unknown name.
  void plant_fault(const std::string& name);
  static const std::vector<std::string>& fault_names();  // the names plant_fault takes
  // How many joins and forks the planted fault has changed so far: 0 after a step means the
  // policy has no site for it (nothing was planted).
  int planted_sites() const { return planted_sites_; }
  // Before the first decode_replay: one graph per step (default) or split as vLLM does.
  void set_graph_scope(GraphScope g);
  GraphScope graph_scope() const { return graph_scope_; }
  // Each captured graph of the step ("step", or "target", "draft0", "drafts1+"), in replay order.
  struct GraphPiece {
    std::string name;
    Backend::GraphStats stats;
  };
  const std::vector<GraphPiece>& graphs() const { return graphs_; }
  // Timing of a decode step's parts without a tracer: timing marks (model/backend.h) on the
  // main stream at the step's start, after the target (its logits and greedy token) and at its
  // end. Enable before the first decode step (before a graph is captured); read after
  // decode_collect / synchronize. target + draft = step.
  void enable_step_marks();
  struct StepTimes {
    double target_ms = 0, draft_ms = 0, step_ms = 0;
  };
  StepTimes last_step_times();
  // The routing of the last step's MoE executions (needs RunShape::record_routing).
  std::vector<RoutingRecord> routing();
  // The step's graphs together (sums over graphs()).
  const Backend::GraphStats& graph_stats() const { return graph_stats_; }

  const ModelConfig& config() const { return cfg_; }
  const StreamPlan& stream_plan() const { return plan_; }
  const std::vector<Stream>& created_streams() const { return streams_; }
  // Host milliseconds the constructor spent creating them (the backend's create_stream calls).
  double stream_setup_ms() const { return stream_setup_ms_; }
  // Fork/join events the model created (every layer owns its own, under every policy: 6, and 2
  // more for the indexer of a c4a layer under the vllm-head placement).
  size_t events_created() const;
  Ops& ops() { return ops_; }
  ModelWeights& weights() { return w_; }
  Backend& backend() { return be_; }
  // Positions filled (cached) in sequence `seq`: the position of its next input token. Equal for
  // every sequence unless decode steps verify (each sequence advances by its accepted count + 1).
  int position(int seq = 0) const;
  // The per-layer caches (L target layers, then N MTP layers), for tests and tools that inspect
  // what a step left behind.
  const std::vector<LayerCache>& caches() const { return caches_; }
  // --kv-cache fp8 with the caches packed as vLLM stores them (U8 entries, model/kv_fp8_entry.h:
  // the backend takes them), rather than emulated in the activation dtype. The same values.
  bool kv_packed() const { return kv_packed_; }
  // Fills sched with the streams and events this model created (called by the constructor's
  // owner before recording a step).
  void describe_streams(Schedule& sched) const;

 private:
  struct Step;  // the tensors of one forward (views of the buffers below), see deepseek_v4.cpp
  struct Buffers;
  struct LayerEvents {
    std::array<Event, 4> attn;  // [0] fork, [1..3] joins; [0]/[1] reused in phase B (vLLM)
    Event moe_fork, moe_join;
    Event comm_fork, comm_join;  // expert parallelism: the all-reduce's stream (id -1 otherwise)
    std::array<Event, 2> indexer{};  // vllm-head c4a layers: the indexer's own fork / done (id -1 otherwise)
  };

  // Forward pieces (decoder_layer.cpp, attention.cpp, moe.cpp, mtp.cpp).
  void target_forward(const Step& st);
  // A layer's first op, hc_pre_norm, ran already when `entered` (the previous layer's last op
  // took it); with `next`, this layer's last op also runs the next layer's first.
  void decoder_layer(int layer, const BlockWeights& bw, LayerCache& cache, const Tensor& X, const Tensor& Xtmp,
                     const Step& st, bool entered = false, const BlockWeights* next = nullptr);
  void attention(int layer, const AttentionWeights& aw, LayerCache& cache, const Tensor& a, const Tensor& out,
                 const Step& st);
  // Routed experts into `routed`, the shared expert into `shared` (joined to the main stream);
  // the caller sums them.
  void moe(int layer, const MoeWeights& mw, const Tensor& x, const Tensor& routed, const Tensor& shared,
           const Step& st);
  void mtp_step(int draft_step, const Tensor& Hprev, const Tensor& tokens, const Step& st);
  void lm_head(Stream s, const Tensor& X, int rows, const Tensor& hc_fn, const Tensor& hc_scale,
               const Tensor& hc_base, const Tensor& norm_w, const Tensor& logits);
  void run_drafts();  // draft steps 1..k-1 (step 0 ran with the target's tokens)
  void verify_enqueue();  // decode_enqueue of a verifying step
  // Every cache of layers [first, last) rolled back to buf_->new_len (one scope).
  void rollback_caches(int first, int last);
  Step make_step(int T) const;
  void upload_draft_positions(int first_pos);
  StepOutput collect(bool prefill, int T);

  Backend& be_;
  ModelConfig cfg_;
  StreamPolicy policy_;
  RunShape shape_;
  Ops ops_;
  StreamPlan plan_;
  std::vector<Stream> streams_;             // created, in plan order
  double stream_setup_ms_ = 0;
  std::vector<LayerStreams> layer_streams_; // L + N
  Stream shared_expert_stream_{};           // == main when off
  // Expert parallelism: the stream the routed output's all-reduce runs on (forked from main after
  // the routed experts, joined before the caller sums routed and shared, so that it overlaps the
  // shared expert as serving stacks overlap it); == main without a split.
  Stream comm_stream_{};
  std::vector<LayerEvents> events_;         // L + N
  ModelWeights w_;
  std::vector<LayerCache> caches_;          // L + N
  bool kv_packed_ = false;                  // kv_packed()
  std::vector<Tensor> rope_tables_;         // per layer (shared tensors for equal tables)
  std::unique_ptr<Buffers> buf_;
  std::vector<int> seq_len_;                // positions filled per sequence (position())
  AcceptRule accept_rule_;
  uint64_t verify_steps_ = 0;               // verifying steps prepared so far (numbers the Rate draws)
  int prompt_len_ = 0;
  std::vector<RoutingRecord> routing_meta_;  // layer / draft step / tokens per log slot, last step
  bool graph_captured_ = false;
  Backend::GraphStats graph_stats_;
  GraphScope graph_scope_ = GraphScope::Step;
  std::vector<GraphPiece> graphs_;
  // The parts of decode_enqueue, which the split graph scope captures separately.
  void enqueue_target();
  void enqueue_draft0();
  void enqueue_later_drafts();
  // Piecewise graphs: the attention of a c4a layer calls these around its eager region; they end
  // the current piece (capture pass: capture and replay it; replay pass: it was replayed at its
  // start) and start the next one. No-ops outside a piecewise decode_replay.
  void eager_region_begin();
  void eager_region_end();
  void decode_replay_piecewise();
  void add_graph(const std::string& name, const Backend::GraphStats& g);  // graphs_ and the sums
  struct PiecewiseState {
    bool active = false, capturing = false;
    int slot = 0;
  };
  PiecewiseState pw_;
  std::string planted_;
  mutable int planted_sites_ = 0;  // counted by the JoinFaults phase_a_fault / phase_b_fault hand out
  std::function<void(int, int)> prefill_progress_;
  JoinFault phase_a_fault(int layer) const;
  JoinFault phase_b_fault(int layer) const;
  struct StepMarks {
    Event begin, target_done, end;
  };
  std::unique_ptr<StepMarks> step_marks_;  // null: not timing step parts
};

}  // namespace sl
