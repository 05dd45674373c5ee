// Placements (--placement): where phase-B aux work of a c4a layer goes. vllm-fix: the whole
// indexer on aux0, the main compressor on the current stream. vllm-head (current vLLM): the
// indexer's query path on aux0, its compressor on aux2 (forked from aux0), the main compressor
// on aux1, the indexer's scoring and top-k on the current stream after the join. Checked on the
// recorded schedule (the stream of every op, no unordered cross-stream access) and on the CPU
// reference (a placement moves work, never changes what it computes).
#include <gtest/gtest.h>

#include <map>

#include "core/schedule.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"

namespace sl {
namespace {

StreamPolicy shared(Placement pl) {
  StreamPolicy p = StreamPolicy::parse("shared");
  p.placement = pl;
  return p;
}

ModelConfig tiny() {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = 1;
  set_mtp_compress_ratio(c, 4);  // the MTP layer is c4a too
  c.context_length = 8;
  c.draft_steps = 1;
  return c;
}

// op name -> stream name, for the phase-B ops of layer L2 (c4a) in one decode step.
std::map<std::string, std::string> phase_b_streams(Placement pl, Schedule& sched, size_t* events) {
  auto be = make_null_backend();
  DeepSeekV4 m(*be, tiny(), shared(pl), RunShape{1, 32, 8, false});
  std::vector<int32_t> prompt(8, 2);
  m.prefill(prompt, 8);
  m.describe_streams(sched);
  m.ops().attach_schedule(&sched);
  m.decode_step();
  m.ops().attach_schedule(nullptr);
  *events = m.events_created();
  std::map<std::string, std::string> out;
  for (const auto& e : sched.entries())
    if (e.kind == ScheduleEntry::Op && e.scope.find("target/L2.") != std::string::npos &&
        (e.scope.find("phase_b") != std::string::npos || e.name == "indexer_topk"))
      out[e.name] = sched.stream_name(e.stream);
  return out;
}

TEST(Placement, ParsesAndNames) {
  EXPECT_EQ(parse_placement("vllm-head"), Placement::VllmHead);
  EXPECT_STREQ(placement_name(Placement::VllmFix), "vllm-fix");
  EXPECT_THROW(parse_placement("head"), Error);
}

TEST(Placement, VllmFixRunsTheWholeIndexerOnAux0) {
  Schedule sched;
  size_t events = 0;
  auto s = phase_b_streams(Placement::VllmFix, sched, &events);
  EXPECT_EQ(s["indexer.wq_b"], "target.aux0");
  EXPECT_EQ(s["indexer.compressor.pool"], "target.aux0");
  EXPECT_EQ(s["indexer_topk"], "target.aux0");
  EXPECT_EQ(s["compressor.pool"], "main");
  EXPECT_EQ(s["wq_b"], "main");
  EXPECT_TRUE(sched.hazards().empty());
  EXPECT_EQ(events, size_t(6 * 7));  // 6 target + 1 MTP layer, 6 events each
}

TEST(Placement, VllmHeadSplitsTheIndexerThreeWays) {
  Schedule sched;
  size_t events = 0;
  auto s = phase_b_streams(Placement::VllmHead, sched, &events);
  EXPECT_EQ(s["indexer.wq_b"], "target.aux0");
  EXPECT_EQ(s["indexer.rope_q"], "target.aux0");
  EXPECT_EQ(s["indexer.compressor.save"], "target.aux2");
  EXPECT_EQ(s["indexer.compressor.pool"], "target.aux2");
  EXPECT_EQ(s["compressor.save"], "target.aux1");
  EXPECT_EQ(s["compressor.pool"], "target.aux1");
  EXPECT_EQ(s["indexer_topk"], "main");
  EXPECT_EQ(s["wq_b"], "main");
  EXPECT_EQ(s["swa_insert"], "main");
  EXPECT_TRUE(sched.hazards().empty());
  // c4a layers (target 2 and 4, the MTP layer) add the indexer's two events.
  EXPECT_EQ(events, size_t(6 * 7 + 2 * 3));
}

TEST(Placement, SameLogitsOnTheCpuReference) {
  auto run = [](Placement pl) {
    auto be = make_cpu_backend();
    DeepSeekV4 m(*be, tiny(), shared(pl), RunShape{1, 32, 8, false});
    m.init_random(3);
    std::vector<int32_t> prompt{5, 9, 2, 7, 1, 8, 3, 6};
    m.prefill(prompt, 8);
    return m.decode_step();
  };
  const StepOutput a = run(Placement::VllmFix), b = run(Placement::VllmHead);
  EXPECT_EQ(a.last_logits, b.last_logits);
  EXPECT_EQ(a.drafts, b.drafts);
}

}  // namespace
}  // namespace sl
