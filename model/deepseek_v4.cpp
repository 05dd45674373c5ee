// Construction (streams, events, weights, caches, buffers) and the prefill / decode loops.
// The forward itself is in decoder_layer.cpp, attention.cpp, moe.cpp and mtp.cpp.
#include "model/deepseek_v4.h"
#include "core/communicator.h"
#include "model/expert_parallel.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/error.h"
#include "model/model_internal.h"
#include "model/rope_table.h"

namespace sl {

ModelWeights rank_share(const ModelConfig& c, const RunShape& shape) {
  ModelWeights w;
  if (shape.expert_world > 1) {
    const ExpertPartition p = partition_experts(c.n_routed_experts, shape.expert_world, shape.expert_rank);
    w.experts_first = p.first();
    w.experts_count = p.per_rank();
  }
  if (shape.attention_tp) {
    w.heads_count = shape.heads_per_rank(c);
    w.heads_first = shape.expert_rank * w.heads_count;
    w.groups_count = shape.groups_per_rank(c);
    w.groups_first = shape.expert_rank * w.groups_count;
  }
  return w;
}

DeepSeekV4::DeepSeekV4(Backend& be, const ModelConfig& cfg, const StreamPolicy& policy, const RunShape& shape)
    : be_(be), cfg_(cfg), policy_(policy), shape_(shape), ops_(be) {
  validate(cfg_);
  SL_CHECK(shape_.batch >= 1 && shape_.max_seq_tokens >= 1 && shape_.max_positions >= 1,
           "DeepSeekV4: batch, max_seq_tokens and max_positions must be >= 1");
  SL_CHECK(shape_.max_positions <= cfg_.max_position_embeddings, "DeepSeekV4: ", shape_.max_positions,
           " positions exceed max_position_embeddings (", cfg_.max_position_embeddings, ")");
  if (shape_.verify) {
    SL_CHECK(cfg_.num_nextn_predict_layers >= 1 && cfg_.draft_steps >= 1,
             "DeepSeekV4: verifying decode steps need drafts to verify: the config has ",
             cfg_.num_nextn_predict_layers, " MTP layers and ", cfg_.draft_steps, " draft steps (both must be >= 1)");
    SL_CHECK(shape_.max_seq_tokens >= 1 + cfg_.draft_steps, "DeepSeekV4: a verifying step runs 1 + k = ",
             1 + cfg_.draft_steps, " tokens per sequence, but the buffers and cache rings are sized for ",
             shape_.max_seq_tokens, " (RunShape::max_seq_tokens)");
  }
  if (shape_.kv_fp8) {
    const int64_t nope = cfg_.head_dim - cfg_.qk_rope_head_dim;
    SL_CHECK(nope % 64 == 0 && cfg_.index_head_dim <= 1024, "config ", cfg_.name, ": --kv-cache fp8 needs the nope dims "
             "of a cache entry (head_dim - qk_rope_head_dim = ", nope, ") in whole blocks of 64 and index_head_dim <= "
             "1024 (", cfg_.index_head_dim, ")");
  }
  if (shape_.expert_world > 1) {
    const Communicator* comm = be_.communicator();
    SL_CHECK(comm && comm->world() == shape_.expert_world && comm->rank() == shape_.expert_rank,
             "expert parallelism: rank ", shape_.expert_rank, " of ", shape_.expert_world,
             " needs the backend's communicator of that group (Backend::set_communicator); it has ",
             comm ? "rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->world()) : std::string("none"));
    partition_experts(cfg_.n_routed_experts, shape_.expert_world, shape_.expert_rank);  // an uneven split
    SL_CHECK(!shape_.expert_all_to_all || shape_.weights == WeightFormat::Bf16,
             "expert parallelism: the all-to-all scheme runs the routed experts in the bf16 format only "
             "(--weights native: use the all-gather scheme)");
  }
  if (shape_.attention_tp) {
    const int W = shape_.expert_world;
    SL_CHECK(W > 1 && !shape_.expert_all_to_all, "tensor parallelism of the attention splits its heads over the ranks "
             "of the all-gather scheme: it needs more than one rank and every rank holding every sequence");
    SL_CHECK(cfg_.num_attention_heads % W == 0 && cfg_.o_groups % W == 0, "config ", cfg_.name,
             ": tensor parallelism over ", W, " ranks needs the ", cfg_.num_attention_heads, " attention heads and ",
             cfg_.o_groups, " output groups (o_groups) to split evenly");
  }
  const int L = cfg_.num_hidden_layers, N = cfg_.num_nextn_predict_layers;
  const Stream main{};

  // Streams, created by their owners in the order the policy's plan gives.
  plan_ = StreamPlan::make(policy_, cfg_);
  // Host time of the creation (docs/streams.md, prediction 1: what per-layer's extra streams cost at
  // load). cuda source: a stream, its cuBLAS handle and workspace, and its op scratch each. torch
  // source: the whole pool at the first draw, then each draw's claim (the op scratch of a stream
  // drawn for the first time).
  const auto setup_start = std::chrono::steady_clock::now();
  for (const auto& ph : plan_.physical)
    streams_.push_back(ph.pool ? be_.create_pool_stream(ph.name, policy_.aux_priority)
                               : be_.create_stream(ph.name, policy_.aux_priority));
  for (size_t k = 0; k < plan_.physical.size(); ++k)
    if (plan_.physical[k].pool && !plan_.physical[k].requests.empty())
      be_.claim_stream(streams_[k], plan_.label(int(k)));
  stream_setup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup_start).count();
  auto stream_of = [&](int request) { return request >= 0 ? streams_[size_t(plan_.streams[size_t(request)].physical)] : main; };
  layer_streams_.resize(size_t(L + N));
  for (int l = 0; l < L + N; ++l)
    for (int r = 0; r < 3; ++r) layer_streams_[size_t(l)].aux[size_t(r)] = stream_of(plan_.roles[size_t(l)][size_t(r)]);
  shared_expert_stream_ = stream_of(plan_.shared_expert);
  if (shape_.expert_world > 1 && !shape_.expert_all_to_all) comm_stream_ = be_.create_stream("comm", 0);

  // Events: every layer owns its fork/join events (vLLM: 4 per attention layer) and a pair
  // for the MoE shared-expert stream.
  events_.resize(size_t(L + N));
  for (int l = 0; l < L + N; ++l) {
    const std::string p = layer_label(cfg_, l);
    for (int i = 0; i < 4; ++i) events_[size_t(l)].attn[size_t(i)] = be_.create_event(p + ".ev" + std::to_string(i));
    events_[size_t(l)].moe_fork = be_.create_event(p + ".moe_fork");
    events_[size_t(l)].moe_join = be_.create_event(p + ".moe_join");
    if (comm_stream_.id != 0) {
      events_[size_t(l)].comm_fork = be_.create_event(p + ".comm_fork");
      events_[size_t(l)].comm_join = be_.create_event(p + ".comm_join");
    }
    if (policy_.placement == Placement::VllmHead && cfg_.layer_type(l) == LayerType::C4A)
      for (int i = 0; i < 2; ++i)
        events_[size_t(l)].indexer[size_t(i)] = be_.create_event(p + ".indexer.ev" + std::to_string(i));
  }

  // Expert parallelism: this rank holds its contiguous share of every MoE layer's experts (and,
  // with attention_tp, of every attention's heads and output groups).
  {
    const ModelWeights share = rank_share(cfg_, shape_);
    w_.experts_first = share.experts_first, w_.experts_count = share.experts_count;
    w_.heads_first = share.heads_first, w_.heads_count = share.heads_count;
    w_.groups_first = share.groups_first, w_.groups_count = share.groups_count;
  }
  allocate_weights(be_, cfg_, w_, shape_.weights);

  // Caches and RoPE tables per layer (equal tables are shared).
  kv_packed_ = shape_.kv_fp8 && be_.packed_kv_caches();
  for (int l = 0; l < L + N; ++l)
    caches_.push_back(make_layer_cache(be_, main, cfg_, l, shape_.batch, shape_.max_positions, shape_.max_seq_tokens,
                                       layer_label(cfg_, l), kv_packed_));
  std::vector<std::pair<std::pair<double, bool>, Tensor>> made;
  for (int l = 0; l < L + N; ++l) {
    const double base = rope_base_for_layer(cfg_, l);
    const bool yarn = rope_uses_yarn(cfg_, l);
    Tensor t;
    for (auto& m : made)
      if (m.first == std::make_pair(base, yarn)) t = m.second;
    if (t.empty()) {
      std::vector<float> host = build_rope_table(cfg_.qk_rope_head_dim, base, yarn, cfg_, shape_.max_positions);
      t = be_.alloc(std::string("rope.") + (yarn ? "yarn." : "plain.") + std::to_string(int64_t(base)), DType::F32,
                    {shape_.max_positions, cfg_.qk_rope_head_dim}, AllocKind::Activation);
      be_.upload(main, t, host.data(), host.size() * sizeof(float));
      made.push_back({{base, yarn}, t});
    }
    rope_tables_.push_back(t);
  }

  buf_ = std::make_unique<Buffers>(be_, cfg_, shape_);
  if (shape_.record_routing) routing_meta_.resize(size_t(L + std::max(cfg_.draft_steps, 1)));
  // Constant index tensors: draft_seq[b] = b, draft_rows[b] = b.
  std::vector<int32_t> iota(size_t(shape_.batch));
  std::iota(iota.begin(), iota.end(), 0);
  be_.upload(main, buf_->draft_seq, iota.data(), iota.size() * 4);
  be_.upload(main, buf_->draft_rows, iota.data(), iota.size() * 4);
  be_.synchronize();
}

DeepSeekV4::~DeepSeekV4() {
  try {
    be_.synchronize();
    for (Stream s : streams_) be_.destroy_stream(s);
    if (comm_stream_.id != 0) be_.destroy_stream(comm_stream_);
  } catch (...) {
    // Destructors must not throw; a failing device is reported by the next call.
  }
}

size_t DeepSeekV4::events_created() const {
  size_t n = 0;
  for (const auto& e : events_) n += 6 + (e.indexer[0].id >= 0 ? 2 : 0) + (e.comm_fork.id >= 0 ? 2 : 0);
  return n;
}

void DeepSeekV4::init_random(uint64_t seed) { init_weights(be_, cfg_, w_, seed); }

void DeepSeekV4::load(const std::string& dir) { load_checkpoint(be_, cfg_, w_, dir); }

void DeepSeekV4::describe_streams(Schedule& sched) const {
  sched.add_stream({0, "main", "process", 0});
  if (comm_stream_.id != 0) sched.add_stream({comm_stream_.id, "comm", "expert parallelism (all-reduce)", 0});
  // A physical stream is named for what it serves: its request under the cuda source, its pool
  // slot and every role drawn onto it under the torch source ("torch.pool.p0.01 = target.aux1 +
  // mtp10.aux0"), so that aliasing shows wherever streams are listed.
  for (size_t i = 0; i < streams_.size(); ++i)
    sched.add_stream({streams_[i].id, plan_.label(int(i)), plan_.physical[i].owner, policy_.aux_priority});
  for (size_t l = 0; l < events_.size(); ++l) {
    const std::string p = layer_label(cfg_, int(l));
    for (int i = 0; i < 4; ++i) sched.add_event({events_[l].attn[size_t(i)].id, p + ".ev" + std::to_string(i), p});
    sched.add_event({events_[l].moe_fork.id, p + ".moe_fork", p});
    sched.add_event({events_[l].moe_join.id, p + ".moe_join", p});
    if (events_[l].comm_fork.id >= 0) {
      sched.add_event({events_[l].comm_fork.id, p + ".comm_fork", p});
      sched.add_event({events_[l].comm_join.id, p + ".comm_join", p});
    }
    for (int i = 0; i < 2; ++i)
      if (events_[l].indexer[size_t(i)].id >= 0)
        sched.add_event({events_[l].indexer[size_t(i)].id, p + ".indexer.ev" + std::to_string(i), p});
  }
}

DeepSeekV4::Step DeepSeekV4::make_step(int T) const {
  Step st;
  st.T = T;
  st.tokens = buf_->tok.rows(0, T);
  st.pos = buf_->pos.rows(0, T);
  st.seq = buf_->seq.rows(0, T);
  st.last_rows = buf_->last_rows;
  return st;
}

StepOutput DeepSeekV4::prefill(const std::vector<int32_t>& tokens, int T0) {
  const int B = shape_.batch;
  SL_CHECK(T0 >= 1 && tokens.size() == size_t(B) * size_t(T0), "prefill: expected ", B, " x ", T0, " tokens, got ",
           tokens.size());
  SL_CHECK(T0 + cfg_.draft_steps <= shape_.max_positions, "prefill: a prompt of ", T0, " tokens plus ",
           cfg_.draft_steps, " draft steps exceeds the model's ", shape_.max_positions, " positions");
  SL_CHECK(!shape_.all_logits || T0 <= shape_.max_seq_tokens,
           "prefill: keeping all logits needs the prompt in one chunk (", T0, " > ", shape_.max_seq_tokens, ")");
  for (int32_t t : tokens)
    SL_CHECK(t >= 0 && t < cfg_.vocab_size, "prefill: token id ", t, " outside the vocabulary [0, ", cfg_.vocab_size,
             ")");
  const Stream main{};
  StepOutput out;
  for (int start = 0; start < T0; start += shape_.max_seq_tokens) {
    const int n = std::min(shape_.max_seq_tokens, T0 - start);
    const bool last_chunk = start + n == T0;
    const int T = B * n;
    std::vector<int32_t> tok(static_cast<size_t>(T)), pos(static_cast<size_t>(T)), seq(static_cast<size_t>(T));
    std::vector<int32_t> last(static_cast<size_t>(B)), next(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) {
        tok[size_t(b * n + i)] = tokens[size_t(b * T0 + start + i)];
        pos[size_t(b * n + i)] = start + i;
        seq[size_t(b * n + i)] = b;
      }
      last[size_t(b)] = b * n + n - 1;
      if (!last_chunk) next[size_t(b)] = tokens[size_t(b * T0 + start + n)];
    }
    be_.upload(main, buf_->tok, tok.data(), tok.size() * 4);
    be_.upload(main, buf_->pos, pos.data(), pos.size() * 4);
    be_.upload(main, buf_->seq, seq.data(), seq.size() * 4);
    be_.upload(main, buf_->last_rows, last.data(), last.size() * 4);
    if (!last_chunk) be_.upload(main, buf_->next_tok, next.data(), next.size() * 4);
    if (last_chunk) upload_draft_positions(T0);

    Step st = make_step(T);
    Ops::Scope scope(ops_, "prefill");
    target_forward(st);
    if (last_chunk) {
      if (shape_.all_logits) {
        lm_head(main, buf_->x.rows(0, T), T, w_.hc_head_fn, w_.hc_head_scale, w_.hc_head_base, w_.norm, buf_->logits);
        ops_.gather_rows(main, "gather_last_logits", buf_->last_logits, buf_->logits.rows(0, T), buf_->last_rows);
      } else {
        ops_.gather_rows(main, "gather_last", buf_->xlast.rows(0, B), buf_->x.rows(0, T), buf_->last_rows);
        lm_head(main, buf_->xlast.rows(0, B), B, w_.hc_head_fn, w_.hc_head_scale, w_.hc_head_base, w_.norm,
                buf_->last_logits);
      }
      ops_.argmax(main, "argmax", buf_->sampled, buf_->last_logits);
      ops_.copy(main, "next_token", buf_->next_tok, buf_->sampled);
    }
    if (cfg_.num_nextn_predict_layers > 0 && (cfg_.draft_steps > 0 || !last_chunk)) {
      // Draft step 0 runs over every prompt token (it fills the MTP layer's cache); its
      // draft only matters for the last chunk.
      ops_.shift_tokens(main, "shift_tokens", buf_->mtp_tok.rows(0, T), st.tokens, buf_->next_tok);
      mtp_step(0, buf_->x.rows(0, T), buf_->mtp_tok.rows(0, T), st);
      if (last_chunk) run_drafts();
    }
    if (last_chunk) {
      be_.synchronize();
      out = collect(true, T);
    }
    if (prefill_progress_) prefill_progress_(start + n, T0);
  }
  prompt_len_ = T0;
  seq_len_.assign(size_t(B), T0);
  return out;
}

int DeepSeekV4::position(int seq) const {
  if (seq_len_.empty()) return 0;  // nothing prefilled yet
  SL_CHECK(seq >= 0 && size_t(seq) < seq_len_.size(), "position: sequence ", seq, " outside the batch of ",
           seq_len_.size());
  return seq_len_[size_t(seq)];
}

void DeepSeekV4::decode_prepare() {
  const int B = shape_.batch, k = cfg_.draft_steps;
  SL_CHECK(!seq_len_.empty(), "decode_step: prefill a prompt first");
  const int longest = *std::max_element(seq_len_.begin(), seq_len_.end());
  const Stream main{};
  if (shape_.verify) {
    // Rows p..p+k verify; the drafts after acceptance reach p + a + 1 + (k - 2) <= p + 2k - 1.
    SL_CHECK(longest + 2 * k <= shape_.max_positions, "decode_step: a sequence at position ", longest,
             " verifying ", k, " drafts and drafting ", k, " more reaches position ", longest + 2 * k - 1,
             ", beyond the model's ", shape_.max_positions, " positions (raise --steps or context)");
    const int R = 1 + k, T = B * R;
    std::vector<int32_t> pos(static_cast<size_t>(T)), seq(static_cast<size_t>(T));
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < R; ++i) {
        pos[size_t(b * R + i)] = seq_len_[size_t(b)] + i;
        seq[size_t(b * R + i)] = b;
      }
    const std::vector<int32_t> forced = forced_accept_counts(accept_rule_, B, k, verify_steps_++);
    be_.upload(main, buf_->pos, pos.data(), pos.size() * 4);
    be_.upload(main, buf_->seq, seq.data(), seq.size() * 4);
    be_.upload(main, buf_->forced, forced.data(), forced.size() * 4);
    // last_rows and the draft positions depend on the acceptance: the step computes them.
    return;
  }
  SL_CHECK(longest + 1 + k <= shape_.max_positions, "decode_step: position ", longest,
           " plus draft steps exceeds the model's ", shape_.max_positions, " positions (raise --steps or context)");
  std::vector<int32_t> pos(seq_len_.begin(), seq_len_.end()), seq(static_cast<size_t>(B)), last(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) seq[size_t(b)] = last[size_t(b)] = b;
  be_.upload(main, buf_->pos, pos.data(), pos.size() * 4);
  be_.upload(main, buf_->seq, seq.data(), seq.size() * 4);
  be_.upload(main, buf_->last_rows, last.data(), last.size() * 4);
  // Without verification every sequence advances by one token per step: one length for all.
  upload_draft_positions(seq_len_[0] + 1);
}

void DeepSeekV4::decode_enqueue() {
  if (shape_.verify) {
    verify_enqueue();  // its own "decode" scope
    return;
  }
  Ops::Scope scope(ops_, "decode");
  enqueue_target();
  enqueue_draft0();
  enqueue_later_drafts();
}

void DeepSeekV4::enqueue_target() {
  const int B = shape_.batch;
  const Stream main{};
  Step st = make_step(B);
  if (step_marks_ && !ops_.muted()) be_.record_timing_mark(step_marks_->begin, main);
  // The input of this step is the previous step's greedy token, already on the device.
  ops_.copy(main, "input_tokens", st.tokens, buf_->sampled);
  target_forward(st);
  lm_head(main, buf_->x.rows(0, B), B, w_.hc_head_fn, w_.hc_head_scale, w_.hc_head_base, w_.norm, buf_->last_logits);
  ops_.argmax(main, "argmax", buf_->sampled, buf_->last_logits);
  // Every aux stream of the target has joined the main stream by now (each layer joins before
  // the ops that need its aux results), so this mark is the end of the target's work.
  if (step_marks_ && !ops_.muted()) be_.record_timing_mark(step_marks_->target_done, main);
}

void DeepSeekV4::enqueue_draft0() {
  const int B = shape_.batch;
  const Stream main{};
  if (cfg_.num_nextn_predict_layers > 0 && cfg_.draft_steps > 0) {
    Step st = make_step(B);
    ops_.shift_tokens(main, "shift_tokens", buf_->mtp_tok.rows(0, B), st.tokens, buf_->sampled);
    mtp_step(0, buf_->x.rows(0, B), buf_->mtp_tok.rows(0, B), st);
  }
}

void DeepSeekV4::enqueue_later_drafts() {
  if (cfg_.num_nextn_predict_layers > 0 && cfg_.draft_steps > 0) run_drafts();
  if (step_marks_ && !ops_.muted()) be_.record_timing_mark(step_marks_->end, Stream{});
}

const char* graph_scope_name(GraphScope g) {
  return g == GraphScope::Split ? "split" : g == GraphScope::Piecewise ? "piecewise" : "step";
}

GraphScope parse_graph_scope(const std::string& text) {
  if (text == "step") return GraphScope::Step;
  if (text == "split") return GraphScope::Split;
  if (text == "piecewise") return GraphScope::Piecewise;
  fail("unknown graph scope '", text, "' (expected step, split or piecewise)");
}

const std::vector<std::string>& DeepSeekV4::fault_names() {
  static const std::vector<std::string> names = {"missing-join", "rerecord", "mtp-missing-join", "mtp-early-fork"};
  return names;
}

void DeepSeekV4::plant_fault(const std::string& name) {
  const auto& names = fault_names();
  SL_CHECK(name.empty() || std::find(names.begin(), names.end(), name) != names.end(), "unknown planted fault '", name,
           "' (expected missing-join, rerecord, mtp-missing-join or mtp-early-fork)");
  planted_ = name;
}

JoinFault DeepSeekV4::phase_a_fault(int layer) const {
  JoinFault f;
  f.skip_fork = planted_ == "mtp-early-fork" && layer >= cfg_.num_hidden_layers;
  f.applied = &planted_sites_;
  return f;
}

JoinFault DeepSeekV4::phase_b_fault(int layer) const {
  JoinFault f;
  const bool mtp = layer >= cfg_.num_hidden_layers;
  f.skip_join = planted_ == "missing-join" || (planted_ == "mtp-missing-join" && mtp);
  f.rerecord = planted_ == "rerecord";
  f.skip_fork = planted_ == "mtp-early-fork" && mtp;
  f.applied = &planted_sites_;
  return f;
}

void DeepSeekV4::set_graph_scope(GraphScope g) {
  SL_CHECK(!graph_captured_, "set_graph_scope: call it before the decode graph is captured");
  SL_CHECK(g == GraphScope::Step || !shape_.verify, "graph scope ", graph_scope_name(g),
           ": not available for the verifying decode step yet (use --graph-scope step)");
  graph_scope_ = g;
}

void DeepSeekV4::enable_step_marks() {
  SL_CHECK(!graph_captured_, "enable_step_marks: call it before the decode graph is captured");
  if (step_marks_) return;
  step_marks_ = std::make_unique<StepMarks>();
  step_marks_->begin = be_.create_timing_mark("step.begin");
  step_marks_->target_done = be_.create_timing_mark("step.target_done");
  step_marks_->end = be_.create_timing_mark("step.end");
}

DeepSeekV4::StepTimes DeepSeekV4::last_step_times() {
  SL_CHECK(step_marks_, "last_step_times: enable_step_marks() was not called");
  StepTimes t;
  t.target_ms = be_.elapsed_ms(step_marks_->begin, step_marks_->target_done);
  t.draft_ms = be_.elapsed_ms(step_marks_->target_done, step_marks_->end);
  t.step_ms = be_.elapsed_ms(step_marks_->begin, step_marks_->end);
  return t;
}

StepOutput DeepSeekV4::decode_collect() {
  be_.synchronize();
  if (!shape_.verify) {
    for (int& n : seq_len_) n += 1;
    return collect(false, shape_.batch);
  }
  const int k = cfg_.draft_steps;
  StepOutput out = collect(false, shape_.batch * (1 + k));
  // Each sequence committed its accepted drafts and the token before them (the previous bonus).
  for (size_t b = 0; b < seq_len_.size(); ++b) {
    const int32_t a = out.accepted[b];
    SL_CHECK(a >= 0 && a <= k, "decode_collect: sequence ", b, " accepted ", a, " of ", k,
             " drafts: the device's accept_drafts wrote a count outside [0, k]");
    seq_len_[b] += a + 1;
  }
  return out;
}

StepOutput DeepSeekV4::decode_step() {
  decode_prepare();
  decode_enqueue();
  return decode_collect();
}

StepOutput DeepSeekV4::decode_step_graph() {
  decode_prepare();
  decode_replay();
  return decode_collect();
}

void DeepSeekV4::add_graph(const std::string& name, const Backend::GraphStats& g) {
  graphs_.push_back({name, g});
  graph_stats_.capture_ms += g.capture_ms;
  graph_stats_.instantiate_ms += g.instantiate_ms;
  graph_stats_.nodes += g.nodes;
  graph_stats_.edges += g.edges;
}

void DeepSeekV4::eager_region_begin() {
  if (!pw_.active) return;
  if (pw_.capturing) {
    add_graph("piece" + std::to_string(pw_.slot), be_.graph_end_capture(pw_.slot));
    be_.graph_replay(pw_.slot);
  }
  ops_.set_muted(false);  // the region's ops are enqueued by the host, every step
  ++pw_.slot;
}

void DeepSeekV4::eager_region_end() {
  if (!pw_.active) return;
  if (pw_.capturing) {
    be_.graph_begin_capture(pw_.slot);
  } else {
    be_.graph_replay(pw_.slot);  // the next piece, in stream order after the eager region
    ops_.set_muted(true);         // ... whose ops the model code now walks past
  }
}

// The capture pass captures piece 0, replays it, runs the first eager region, captures piece 1,
// and so on (a piece reads what the region before it computed); a replay pass replays piece 0,
// walks the model code with the ops muted until an eager region, runs it, replays the next piece.
void DeepSeekV4::decode_replay_piecewise() {
  pw_ = {true, !graph_captured_, 0};
  if (pw_.capturing) {
    be_.graph_begin_capture(0);
  } else {
    be_.graph_replay(0);
    ops_.set_muted(true);
  }
  try {
    decode_enqueue();
  } catch (...) {
    ops_.set_muted(false);
    pw_ = {};
    throw;
  }
  if (pw_.capturing) eager_region_begin();  // ends, records and replays the last piece
  ops_.set_muted(false);
  pw_ = {};
  graph_captured_ = true;
}

void DeepSeekV4::decode_replay() {
  if (graph_scope_ == GraphScope::Piecewise) {
    decode_replay_piecewise();
    return;
  }
  struct Piece {
    const char* name;
    void (DeepSeekV4::*enqueue)();
  };
  std::vector<Piece> pieces;
  if (graph_scope_ == GraphScope::Step) {
    pieces.push_back({"step", &DeepSeekV4::decode_enqueue});
  } else {
    pieces.push_back({"target", &DeepSeekV4::enqueue_target});
    const bool drafts = cfg_.num_nextn_predict_layers > 0 && cfg_.draft_steps > 0;
    if (drafts) pieces.push_back({"draft0", &DeepSeekV4::enqueue_draft0});
    // Draft steps 1..k-1 in one graph (vLLM captures them together when its attention backends
    // allow); the step's end mark lives in the last graph.
    if (cfg_.draft_steps > 1 || step_marks_) pieces.push_back({"drafts1+", &DeepSeekV4::enqueue_later_drafts});
  }
  // Each piece is captured, then replayed, in turn: a later piece reads what an earlier one
  // computed, so the capture pass must run them in order. One "decode" scope over all of them,
  // as decode_enqueue has.
  std::unique_ptr<Ops::Scope> scope;
  if (!graph_captured_ && graph_scope_ == GraphScope::Split) scope = std::make_unique<Ops::Scope>(ops_, "decode");
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!graph_captured_) {
      be_.graph_begin_capture(int(i));
      (this->*pieces[i].enqueue)();
      add_graph(pieces[i].name, be_.graph_end_capture(int(i)));
    }
    be_.graph_replay(int(i));
  }
  graph_captured_ = true;
}

std::vector<RoutingRecord> DeepSeekV4::routing() {
  SL_CHECK(shape_.record_routing, "routing(): build the model with RunShape::record_routing");
  const int kk = cfg_.num_experts_per_tok;
  std::vector<int32_t> log(size_t(buf_->route_log.numel()));
  be_.download(log.data(), buf_->route_log, log.size() * 4);
  std::vector<RoutingRecord> out;
  for (size_t slot = 0; slot < routing_meta_.size(); ++slot) {
    RoutingRecord r = routing_meta_[slot];
    if (r.tokens == 0) continue;  // not executed
    const size_t base = slot * size_t(buf_->Tmax) * size_t(kk);
    r.ids.assign(log.begin() + long(base), log.begin() + long(base + size_t(r.tokens) * size_t(kk)));
    out.push_back(std::move(r));
  }
  return out;
}

// Positions of draft steps: row s (s >= 1) holds first_pos + s - 1 for every sequence, where
// first_pos is the position after the target's last token (step 0 reuses the target's
// positions; row 0 is unused).
void DeepSeekV4::upload_draft_positions(int first_pos) {
  const int B = shape_.batch, k = std::max(cfg_.draft_steps, 1);
  std::vector<int32_t> pos(size_t(k) * size_t(B));
  for (int s = 0; s < k; ++s)
    for (int b = 0; b < B; ++b) pos[size_t(s * B + b)] = first_pos + s - 1;
  be_.upload(Stream{}, buf_->draft_pos, pos.data(), pos.size() * 4);
}

StepOutput DeepSeekV4::collect(bool prefill, int T) {
  const int B = shape_.batch, V = cfg_.vocab_size;
  StepOutput out;
  out.sampled.resize(size_t(B));
  be_.download(out.sampled.data(), buf_->sampled, size_t(B) * 4);
  const int k = cfg_.num_nextn_predict_layers > 0 ? cfg_.draft_steps : 0;
  if (k > 0) {
    std::vector<int32_t> d(size_t(k) * size_t(B));
    be_.download(d.data(), buf_->draft_tok, d.size() * 4);
    for (int s = 0; s < k; ++s) out.drafts.emplace_back(d.begin() + s * B, d.begin() + (s + 1) * B);
  }
  out.last_logits.resize(size_t(B) * size_t(V));
  be_.download(out.last_logits.data(), buf_->last_logits, out.last_logits.size() * 4);
  out.logits_checksum = std::accumulate(out.last_logits.begin(), out.last_logits.end(), 0.0);
  if (k > 0 && shape_.draft_logits) {
    out.draft_logits.resize(size_t(k) * size_t(B) * size_t(V));
    be_.download(out.draft_logits.data(), buf_->draft_logits, out.draft_logits.size() * 4);
  }
  // A verifying step keeps the logits of every row it verified (the head runs on all of them).
  if ((prefill || shape_.verify) && shape_.all_logits) {
    out.all_logits.resize(size_t(T) * size_t(V));
    be_.download(out.all_logits.data(), buf_->logits, out.all_logits.size() * 4);
  }
  if (!prefill && shape_.verify) {
    out.accepted.resize(size_t(B));
    be_.download(out.accepted.data(), buf_->accepted, size_t(B) * 4);
  }
  return out;
}

}  // namespace sl
