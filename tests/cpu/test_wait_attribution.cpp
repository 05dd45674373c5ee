// Wait attribution on a hand-computed trace: own stream, cross-stream event (sources a, b and
// c), unrelated (false dependency), pure launch gap, inside a graph, a kernel starting before
// its launch call ended, one without a launch call. Every attributed kernel's parts sum to its
// launch-to-start time.
#include <gtest/gtest.h>

#include "profiler/gpu_ops.h"
#include "profiler/synthetic.h"
#include "profiler/wait_attribution.h"

using namespace sl::prof;

namespace {

// Streams 1, 2, 3; epsilon 20 ns. Launch calls [launch, launch end) -> GPU [start, end):
//   K_a  s1  [0,10)   -> [30,100)   nothing before it: launch gap 20 (= epsilon: not more)
//   K_b  s1  [20,30)  -> [150,200)  own stream to 100 (K_a): 70; rest 50 > epsilon and K_x
//                                   (s3, no event link) ended at 140: unrelated 50
//   K_x  s3  [40,45)  -> [60,140)   launch gap 15
//   K_p  s2  [50,55)  -> [70,300)   launch gap 15 (<= epsilon)
//   event 9 recorded on s2 after K_p, s1 waits on it
//   K_c  s1  [60,65)  -> [310,350)  own stream to 200 (K_b): 135; event to 300 (K_p): 100; gap 10
//   graph launch [70,80): G1 s2 -> [320,330): own stream to 300 (K_p): 220, in graph 20
//                         G2 s3 -> [340,360): own stream to 140 (K_x): 60, in graph 200 (bound by G1)
//   K_e  s3  [400,420) -> [410,430)  starts before its launch call ends: zeros
//   K_n  s2  no launch -> [500,510)
//   memcpy s3 [480,490) -> [500,600); K_y s3 [490,495) -> [610,620): own stream to 600: 105, gap 10
enum Source { kEventRecords, kSyncFields, kSyncFieldsOverRecords, kApiCallsOnly };

struct Built {
  Trace t;
  size_t K_a, K_b, K_x, K_p, K_c, G1, G2, K_e, K_n, K_y;
};

size_t at_start(const Trace& t, Ns start) {
  for (size_t i = 0; i < t.kernels.size(); ++i)
    if (t.kernels[i].start == start) return i;
  ADD_FAILURE() << "no kernel starts at " << start;
  return 0;
}

Built build(Source src) {
  Built r;
  Trace& t = r.t;
  TraceBuilder b(t);
  b.kernel(1, 30, 100, "k_a", 0, 10);
  b.kernel(1, 150, 200, "k_b", 20, 30);
  b.kernel(3, 60, 140, "k_x", 40, 45);
  b.kernel(2, 70, 300, "k_p", 50, 55);
  if (src == kApiCallsOnly) {
    b.api("cudaEventRecordWithFlags", 56, 57);
    b.api("cudaStreamWaitEvent", 58, 59);
  } else {
    b.record_and_wait(/*event=*/9, /*on_stream=*/2, /*waiting_stream=*/1, 57);
    Sync& w = t.syncs.back();
    const uint32_t record_corr = t.cuda_events.back().correlation;
    if (src == kSyncFields || src == kSyncFieldsOverRecords) {
      w.event_stream = 2;
      w.event_record_correlation = record_corr;
    }
    if (src == kSyncFields) t.cuda_events.clear();
    if (src == kSyncFieldsOverRecords) t.cuda_events.back().stream = 3;  // the records disagree: (a) wins
  }
  b.kernel(1, 310, 350, "k_c", 60, 65);
  const uint32_t g = t.api_calls[b.api("cudaGraphLaunch", 70, 80)].correlation;
  for (auto [stream, start] : {std::pair{2u, Ns(320)}, std::pair{3u, Ns(340)}}) {
    const size_t k = b.kernel(stream, start, start + (stream == 2 ? 10 : 20), "node");
    t.kernels[k].correlation = g;
    t.kernels[k].graph_id = 4;
  }
  b.kernel(3, 410, 430, "k_e", 400, 420);
  b.kernel(2, 500, 510, "k_n");
  b.memcpy(3, 500, 600, 1024, MemcpyKind::DtoD, 480, 490);
  b.kernel(3, 610, 620, "k_y", 490, 495);
  t.finalize();
  r.K_a = at_start(t, 30), r.K_b = at_start(t, 150), r.K_x = at_start(t, 60), r.K_p = at_start(t, 70);
  r.K_c = at_start(t, 310), r.G1 = at_start(t, 320), r.G2 = at_start(t, 340), r.K_e = at_start(t, 410);
  r.K_n = at_start(t, 500), r.K_y = at_start(t, 610);
  return r;
}

struct Want {
  Ns own, event, rest;
  RestKind rest_kind;
  WaitCause cause;
};

void expect_wait(const OpWait& w, const Want& e, const char* what) {
  EXPECT_EQ(w.own_stream, e.own) << what;
  EXPECT_EQ(w.event, e.event) << what;
  EXPECT_EQ(w.rest, e.rest) << what;
  EXPECT_EQ(w.rest_kind, e.rest_kind) << what;
  EXPECT_EQ(w.cause, e.cause) << what;
}

void check_common(const Built& r, const WaitAttribution& w) {
  const Trace& t = r.t;
  expect_wait(w.ops[r.K_a], {0, 0, 20, RestKind::LaunchGap, WaitCause::Host}, "K_a: launch gap");
  expect_wait(w.ops[r.K_b], {70, 0, 50, RestKind::Unrelated, WaitCause::Unrelated}, "K_b: own stream, unrelated");
  EXPECT_EQ(w.ops[r.K_b].bound_by, r.K_x);
  expect_wait(w.ops[r.K_x], {0, 0, 15, RestKind::LaunchGap, WaitCause::Host}, "K_x");
  expect_wait(w.ops[r.K_p], {0, 0, 15, RestKind::LaunchGap, WaitCause::Host}, "K_p");
  expect_wait(w.ops[r.K_c], {135, 100, 10, RestKind::LaunchGap, WaitCause::Event}, "K_c: own stream, event");
  EXPECT_EQ(w.ops[r.K_c].bound_by, r.K_p);
  expect_wait(w.ops[r.G1], {220, 0, 20, RestKind::InGraph, WaitCause::OwnStream}, "G1");
  expect_wait(w.ops[r.G2], {60, 0, 200, RestKind::InGraph, WaitCause::GraphEdge}, "G2");
  EXPECT_EQ(w.ops[r.G2].bound_by, r.G1);
  EXPECT_EQ(w.ops[r.K_e].flags, kWaitStartedEarly);
  EXPECT_EQ(w.ops[r.K_e].launch_to_start(), 0);
  EXPECT_EQ(w.ops[r.K_n].flags, kWaitNoLaunch);
  expect_wait(w.ops[r.K_y], {105, 0, 10, RestKind::LaunchGap, WaitCause::OwnStream}, "K_y: behind a memcpy");
  EXPECT_EQ(w.ops[r.K_y].bound_by, GpuOps(t).memcpy_op(0));
  // Parts sum to launch-to-start for every attributed op.
  const GpuOps ops(t);
  for (OpId op = 0; op < ops.size(); ++op) {
    if (!(w.ops[op].flags & kWaitAttributed)) continue;
    EXPECT_EQ(w.ops[op].launch_to_start(), ops.start(op) - t.api_calls[ops.launch(op)].end) << "op " << op;
  }
  // Totals over kernels, by hand: gaps 20+15+15+10+10, own 70+135+220+60+105, event 100,
  // unrelated 50, in graph 20+200.
  const WaitTotals& s = w.total;
  EXPECT_EQ(s.kernels, 8u);
  EXPECT_EQ(s.started_before_launch_end, 1u);
  EXPECT_EQ(s.without_launch, 1u);
  EXPECT_EQ(s.graph_kernels, 2u);
  EXPECT_EQ(s.launch_gap, 70);
  EXPECT_EQ(s.own_stream, 590);
  EXPECT_EQ(s.event, 100);
  EXPECT_EQ(s.unrelated, 50);
  EXPECT_EQ(s.in_graph, 220);
  EXPECT_EQ(s.launch_to_start, 1030);
  EXPECT_EQ(s.launch_to_start, s.launch_gap + s.own_stream + s.event + s.unrelated + s.in_graph);
  // Per stream: s1 holds K_a, K_b, K_c.
  ASSERT_EQ(w.streams.size(), 3u);
  EXPECT_EQ(w.streams[0].stream, 1u);
  EXPECT_EQ(w.streams[0].totals.kernels, 3u);
  EXPECT_EQ(w.streams[0].totals.launch_to_start, 20 + 120 + 245);
  EXPECT_EQ(w.streams[0].totals.unrelated, 50);
  EXPECT_EQ(w.streams[0].totals.event, 100);
}

WaitAttribution attribute(const Trace& t) {
  WaitOptions o;
  o.epsilon = 20;
  return attribute_waits(GpuOps(t), o);
}

}  // namespace

TEST(WaitAttribution, EventFromCudaEventRecords) {  // source (b): our CUPTI traces
  const Built r = build(kEventRecords);
  const WaitAttribution w = attribute(r.t);
  check_common(r, w);
  EXPECT_EQ(w.sources.waits, 1u);
  EXPECT_EQ(w.sources.from_event_records, 1u);
  EXPECT_EQ(w.sources.from_sync_fields, 0u);
  EXPECT_FALSE(w.sources.inferred_from_api);
  EXPECT_EQ(w.total.inferred_event_waits, 0u);
}

TEST(WaitAttribution, EventFromSyncFields) {  // source (a): PyTorch traces with sync events
  const Built r = build(kSyncFields);
  ASSERT_TRUE(r.t.cuda_events.empty());
  const WaitAttribution w = attribute(r.t);
  check_common(r, w);
  EXPECT_EQ(w.sources.from_sync_fields, 1u);
  EXPECT_EQ(w.sources.from_event_records, 0u);
}

TEST(WaitAttribution, SyncFieldsWinOverEventRecords) {
  const Built r = build(kSyncFieldsOverRecords);
  const WaitAttribution w = attribute(r.t);
  check_common(r, w);  // producer K_p on stream 2, not the records' stream 3
  EXPECT_EQ(w.sources.from_sync_fields, 1u);
}

TEST(WaitAttribution, EventInferredFromApiCalls) {  // source (c): a default PyTorch trace
  const Built r = build(kApiCallsOnly);
  ASSERT_TRUE(r.t.syncs.empty());
  const WaitAttribution w = attribute(r.t);
  check_common(r, w);  // K_b stays unrelated: no wait call between K_a's and K_b's launches
  EXPECT_TRUE(w.sources.inferred_from_api);
  EXPECT_EQ(w.sources.api_wait_calls, 1u);
  EXPECT_EQ(w.ops[r.K_c].flags, kWaitAttributed | kWaitInferredEvent);
  EXPECT_EQ(w.total.inferred_event_waits, 1u);
}

// Without any event information, K_c's wait on K_p reads as a false dependency.
TEST(WaitAttribution, UnexplainedCrossStreamWaitIsUnrelated) {
  Built r = build(kEventRecords);
  r.t.syncs.clear();
  const WaitAttribution w = attribute(r.t);
  expect_wait(w.ops[r.K_c], {135, 0, 110, RestKind::Unrelated, WaitCause::Unrelated}, "K_c");
  EXPECT_EQ(w.ops[r.K_c].bound_by, r.K_p);
  EXPECT_EQ(w.total.unrelated, 50 + 110);
}
