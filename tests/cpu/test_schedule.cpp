// Stream schedules: the happens-before checker on hand-built schedules, and the schedules the
// model records for each stream policy (stream counts and owners, fork/join placement, no
// cross-stream hazards).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/schedule.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"

namespace sl {
namespace {

// ---------------------------------------------------------------- the checker itself

TEST(ScheduleChecker, ForkJoinOrdersAccesses) {
  Schedule s;
  s.op(0, "produce", "x", {}, {1});  // 0
  s.record(10, 0, "x");              // 1 fork
  s.wait(1, 10, "x");                // 2
  s.op(1, "aux", "x", {1}, {2});     // 3 reads 1, writes 2
  s.record(11, 1, "x");              // 4 done
  s.wait(0, 11, "x");                // 5 join
  s.op(0, "consume", "x", {2}, {});  // 6
  EXPECT_TRUE(s.happens_before(0, 3));
  EXPECT_TRUE(s.happens_before(3, 6));
  EXPECT_FALSE(s.happens_before(6, 3));
  EXPECT_TRUE(s.hazards().empty());
}

TEST(ScheduleChecker, MissingJoinIsAReadAfterWriteHazard) {
  Schedule s;
  s.record(10, 0, "x");
  s.wait(1, 10, "x");
  s.op(1, "aux", "x", {}, {2});
  s.op(0, "consume", "x", {2}, {});  // no join: races with aux
  auto h = s.hazards();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_NE(h[0].find("read-after-write"), std::string::npos);
}

TEST(ScheduleChecker, MissingForkIsAHazard) {
  Schedule s;
  s.op(0, "produce", "x", {}, {1});
  s.op(1, "aux", "x", {1}, {2});  // no wait on a fork
  s.record(11, 1, "x");
  s.wait(0, 11, "x");
  EXPECT_EQ(s.hazards().size(), 1u);
}

TEST(ScheduleChecker, WriteAfterReadAcrossStreams) {
  Schedule s;
  s.record(10, 0, "x");
  s.wait(1, 10, "x");
  s.op(1, "aux_reads", "x", {5}, {});
  s.op(0, "main_overwrites", "x", {}, {5});  // may overwrite while aux still reads
  auto h = s.hazards();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_NE(h[0].find("write-after-read"), std::string::npos);
}

TEST(ScheduleChecker, EventReRecordUsesLatestRecord) {
  Schedule s;
  s.record(10, 0, "x");               // early record
  s.op(0, "produce", "x", {}, {1});
  s.record(10, 0, "x");               // re-recorded after produce
  s.wait(1, 10, "x");
  s.op(1, "aux", "x", {1}, {});
  EXPECT_TRUE(s.hazards().empty());
  Schedule t;
  t.record(10, 0, "x");
  t.wait(1, 10, "x");                 // waits on the early record only
  t.op(0, "produce", "x", {}, {1});
  t.op(1, "aux", "x", {1}, {});
  EXPECT_EQ(t.hazards().size(), 1u);
}

TEST(ScheduleChecker, TransitiveThroughThirdStream) {
  Schedule s;
  s.op(1, "a", "x", {}, {1});
  s.record(20, 1, "x");
  s.wait(2, 20, "x");
  s.record(21, 2, "x");
  s.wait(0, 21, "x");
  s.op(0, "b", "x", {1}, {});
  EXPECT_TRUE(s.hazards().empty());
}

// ---------------------------------------------------------------- the model's schedules

struct Recorded {
  std::unique_ptr<Backend> be = make_null_backend();
  std::unique_ptr<DeepSeekV4> model;
  Schedule sched;
  Recorded(const std::string& policy, int mtp_layers, int mtp_compress, int draft_steps = 3, int batch = 1) {
    ModelConfig c = load_config("tiny");
    c.num_nextn_predict_layers = mtp_layers;
    c.mtp_compress_ratio = mtp_compress;
    c.compress_ratios.back() = mtp_compress;
    c.draft_steps = draft_steps;
    c.batch = batch;
    c.context_length = 8;
    RunShape shape{batch, 32, 8, false};
    model = std::make_unique<DeepSeekV4>(*be, c, StreamPolicy::parse(policy), shape);
    std::vector<int32_t> p(size_t(batch) * 8, 3);
    model->prefill(p, 8);
    model->describe_streams(sched);
    model->ops().attach_schedule(&sched);
    model->decode_step();
  }
  size_t aux_streams() const {
    size_t n = 0;
    for (const auto& s : model->stream_plan().streams) n += s.owner != "process";
    return n;
  }
};

TEST(ModelSchedule, StreamCountsPerPolicy) {
  const int L = 6;  // tiny
  for (int N : {1, 2, 4}) {
    EXPECT_EQ(Recorded("serial", N, 0).model->stream_plan().streams.size(), 0u);
    EXPECT_EQ(Recorded("per-layer", N, 0).aux_streams(), size_t(3 + 3 * N));
    EXPECT_EQ(Recorded("shared", N, 0).aux_streams(), 6u);
    EXPECT_EQ(Recorded("global", N, 0).aux_streams(), 3u);
    EXPECT_EQ(Recorded("per-layer-all", N, 0).aux_streams(), size_t(3 * (L + N)));
    EXPECT_EQ(Recorded("pool:5", N, 0).aux_streams(), 5u);
  }
}

TEST(ModelSchedule, PerLayerOwnersAreTheMtpLayers) {
  Recorded r("per-layer", 4, 4);
  std::map<std::string, int> per_owner;
  for (const auto& s : r.model->stream_plan().streams) per_owner[s.owner]++;
  EXPECT_EQ(per_owner["target"], 3);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(per_owner["mtp.layer" + std::to_string(i)], 3) << i;
  EXPECT_EQ(per_owner["process"], 1);  // the MoE shared-expert stream
  Recorded s("shared", 4, 4);
  std::map<std::string, int> shared_owner;
  for (const auto& st : s.model->stream_plan().streams) shared_owner[st.owner]++;
  EXPECT_EQ(shared_owner["mtp"], 3);
  EXPECT_EQ(shared_owner["target"], 3);
}

// For every op on an aux stream: the stream waited (earlier, same layer) on an event recorded
// on the main stream, and it records (later) an event that the main stream waits on before
// the layer ends.
void expect_aux_ops_inside_fork_join(const Schedule& sched, const std::string& policy) {
  const auto& E = sched.entries();
  std::map<int, int> recorded_on;  // event -> stream of its latest record
  int checked = 0;
  for (size_t i = 0; i < E.size(); ++i) {
    const auto& e = E[i];
    if (e.kind == ScheduleEntry::Record) recorded_on[e.event] = e.stream;
    if (e.kind != ScheduleEntry::Op || e.stream == 0) continue;
    const std::string layer_scope = e.scope.substr(0, e.scope.find("/", e.scope.find('.')));
    bool forked = false;
    for (size_t j = i; j-- > 0;) {
      if (E[j].stream == e.stream && E[j].kind == ScheduleEntry::Wait && recorded_on.count(E[j].event) &&
          recorded_on[E[j].event] == 0 && E[j].scope.rfind(layer_scope, 0) == 0) {
        forked = true;
        break;
      }
    }
    bool joined = false;
    for (size_t j = i + 1; j < E.size() && !joined; ++j) {
      if (E[j].stream != e.stream || E[j].kind != ScheduleEntry::Record) continue;
      for (size_t m = j + 1; m < E.size(); ++m)
        if (E[m].stream == 0 && E[m].kind == ScheduleEntry::Wait && E[m].event == E[j].event &&
            E[m].scope.rfind(layer_scope, 0) == 0) {
          joined = true;
          break;
        }
      break;  // only the first record after the op closes its branch
    }
    EXPECT_TRUE(forked) << policy << ": aux op " << e.name << " in " << e.scope << " has no fork";
    EXPECT_TRUE(joined) << policy << ": aux op " << e.name << " in " << e.scope << " has no join";
    ++checked;
  }
  if (policy != "serial") {
    EXPECT_GT(checked, 0) << policy;
  }
}

TEST(ModelSchedule, EveryAuxOpIsBetweenForkAndJoinAndNothingRaces) {
  for (const char* pol : {"serial", "per-layer", "shared", "global", "per-layer-all", "pool:1", "pool:2", "pool:7"})
    for (int compress : {0, 4, 128}) {
      Recorded r(pol, 2, compress);
      expect_aux_ops_inside_fork_join(r.sched, pol);
      const auto h = r.sched.hazards();
      EXPECT_TRUE(h.empty()) << pol << " mtp compress " << compress << ": " << (h.empty() ? "" : h[0]);
    }
}

// Sub-layer boundaries (docs/model.md 4): one decode step of tiny (6 target layers) with 3 draft
// steps on 2 MTP layers. Each sub-layer's hc_post and the next one's hc_pre + norm are one op;
// only the target's first layer and each draft step's MTP layer start with hc_pre_norm, and only
// the last layer of each ends with add_hc_post. The key's RoPE is part of rmsnorm_pair.
TEST(ModelSchedule, SubLayerBoundariesAreOneOp) {
  Recorded r("shared", 2, 0, 3);
  std::map<std::string, int> n;
  std::vector<std::string> main_ops;
  for (const auto& e : r.sched.entries())
    if (e.kind == ScheduleEntry::Op) {
      ++n[e.name];
      if (e.stream == 0) main_ops.push_back(e.name);
    }
  const int L = 6, drafts = 3, forwards = 1 + drafts;  // the target, then one MTP layer per draft
  EXPECT_EQ(n["hc_pre.attn"], forwards);
  EXPECT_EQ(n["hc_post.attn+hc_pre.ffn"], L + drafts);
  EXPECT_EQ(n["moe_combine+hc_post.ffn+hc_pre.attn"], L - 1);
  EXPECT_EQ(n["moe_combine+hc_post.ffn"], forwards);
  EXPECT_EQ(n["q_norm+kv_norm+rope_k"], L + drafts);
  EXPECT_EQ(n.count("hc_pre.ffn") + n.count("hc_post.attn") + n.count("rope_k") + n.count("q_norm+kv_norm"), 0u);
  // In the main stream's order an FFN's start (hc_post.attn+hc_pre.ffn) and its end alternate.
  ASSERT_FALSE(main_ops.empty());
  int open = 0;
  for (const std::string& op : main_ops) {
    if (op == "hc_post.attn+hc_pre.ffn") {
      EXPECT_EQ(open, 0) << "two FFN starts without an end between";
      open = 1;
    } else if (op == "moe_combine+hc_post.ffn+hc_pre.attn" || op == "moe_combine+hc_post.ffn") {
      EXPECT_EQ(open, 1) << op << " without an FFN start before it";
      open = 0;
    }
  }
  EXPECT_EQ(open, 0);
}

TEST(ModelSchedule, PlacementFollowsVllm) {
  Recorded r("shared", 2, 0);
  std::map<std::string, std::set<std::string>> ops_on;  // stream name -> op names
  for (const auto& e : r.sched.entries())
    if (e.kind == ScheduleEntry::Op) ops_on[r.sched.stream_name(e.stream)].insert(e.name);
  // Phase A on the target's aux streams.
  EXPECT_TRUE(ops_on["target.aux0"].count("compressor.wkv+wgate"));
  EXPECT_TRUE(ops_on["target.aux1"].count("indexer.weights_proj"));
  EXPECT_TRUE(ops_on["target.aux2"].count("indexer.compressor.wkv+wgate"));
  // Phase B: the whole indexer on aux0 for c4a.
  EXPECT_TRUE(ops_on["target.aux0"].count("indexer_topk"));
  EXPECT_TRUE(ops_on["target.aux0"].count("indexer.wq_b"));
  // The query path and attention stay on main.
  for (const char* op : {"wq_a+wkv", "wq_b", "sparse_attention", "wo_a", "wo_b", "swa_insert"})
    EXPECT_TRUE(ops_on["main"].count(op)) << op;
  // The shared expert on its stream (T = 1 <= 256).
  EXPECT_TRUE(ops_on["shared_expert"].count("shared_experts.w1+w3+swiglu"));
  EXPECT_TRUE(ops_on["shared_expert"].count("shared_experts.w2"));
  // The MTP layers are sliding-window only here: their aux streams get no kernel at all.
  EXPECT_TRUE(ops_on["mtp.aux0"].empty() && ops_on["mtp.aux1"].empty() && ops_on["mtp.aux2"].empty());
  // With compressed MTP layers the MTP's own streams do receive work.
  Recorded c("per-layer", 2, 4);
  std::map<std::string, int> n_on;
  for (const auto& e : c.sched.entries())
    if (e.kind == ScheduleEntry::Op) n_on[c.sched.stream_name(e.stream)]++;
  EXPECT_GT(n_on["mtp0.aux0"], 0);
  EXPECT_GT(n_on["mtp1.aux0"], 0);  // draft step 1 uses MTP layer 1
}

TEST(ModelSchedule, SerialHasNoEventsOrAuxWork) {
  Recorded r("serial", 2, 4);
  for (const auto& e : r.sched.entries()) {
    EXPECT_EQ(e.stream, 0);
    EXPECT_EQ(e.kind, ScheduleEntry::Op);
  }
}

TEST(ModelSchedule, LargeBatchTurnsPhaseAAndSharedExpertStreamOff) {
  // 300 tokens in one step: above the shared-expert threshold (256), below phase A's (1024).
  Recorded r("shared", 1, 0, 1, 300);
  std::set<std::string> used;
  for (const auto& e : r.sched.entries())
    if (e.kind == ScheduleEntry::Op) used.insert(r.sched.stream_name(e.stream));
  // A decode step has T = batch = 300 tokens.
  EXPECT_FALSE(used.count("shared_expert"));
  EXPECT_TRUE(used.count("target.aux1"));
}

}  // namespace
}  // namespace sl
