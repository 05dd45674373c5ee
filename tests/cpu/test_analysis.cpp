// Analysis against hand-computed traces: overlaps, touching intervals, nesting, empty streams,
// equal timestamps, queue waits and false dependencies, HTA breakdowns.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "profiler/analysis.h"
#include "profiler/summary.h"
#include "profiler/synthetic.h"

using namespace sl::prof;

namespace {
const StreamMetrics* stream_of(const AnalysisResult& r, uint32_t id) {
  for (const auto& s : r.streams)
    if (s.stream == id) return &s;
  return nullptr;
}
Ns hist(const ScopeMetrics& m, size_t k) { return k < m.concurrency.size() ? m.concurrency[k] : 0; }
}  // namespace

TEST(Analysis, EmptyTrace) {
  Trace t;
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.whole.kernels, 0u);
  EXPECT_EQ(r.whole.busy, 0);
  EXPECT_EQ(r.whole.overlap_fraction, 0.0);
  EXPECT_EQ(r.temporal.span, 0);
  EXPECT_TRUE(r.kernel_stats.empty());
  EXPECT_EQ(r.main_stream, kNoStream);  // no kernel: no main stream (not stream 0)
}

TEST(Analysis, OverlapTouchingAndAuxHidden) {
  // main (1): [0,100) [100,200) touching; aux (2): [50,150).
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 100, "m1");
  b.kernel(1, 100, 200, "m2");
  b.kernel(2, 50, 150, "a1");
  t.finalize();
  AnalysisOptions o;
  o.main_stream = 1;
  AnalysisResult r = analyze(t, o);
  EXPECT_EQ(r.whole.kernels, 3u);
  EXPECT_EQ(r.whole.span, 200);
  EXPECT_EQ(r.whole.busy, 200);
  EXPECT_EQ(r.whole.overlap, 100);
  EXPECT_DOUBLE_EQ(r.whole.overlap_fraction, 0.5);
  EXPECT_EQ(hist(r.whole, 0), 0);
  EXPECT_EQ(hist(r.whole, 1), 100);
  EXPECT_EQ(hist(r.whole, 2), 100);
  EXPECT_EQ(hist(r.whole, 3), 0) << "ends are processed before starts at equal timestamps";
  EXPECT_EQ(r.whole.aux_time, 100);
  EXPECT_EQ(r.whole.aux_hidden, 100);
  EXPECT_DOUBLE_EQ(r.whole.aux_hidden_fraction, 1.0);
  const StreamMetrics* s1 = stream_of(r, 1);
  const StreamMetrics* s2 = stream_of(r, 2);
  ASSERT_TRUE(s1 && s2);
  EXPECT_TRUE(s1->is_main);
  EXPECT_EQ(s1->busy, 200);
  EXPECT_EQ(s1->overlapped, 100);
  EXPECT_DOUBLE_EQ(s1->overlap_fraction, 0.5);
  EXPECT_EQ(s2->busy, 100);
  EXPECT_EQ(s2->overlapped, 100);
  EXPECT_DOUBLE_EQ(s2->overlap_fraction, 1.0);
}

TEST(Analysis, TouchingOnDifferentStreamsDoNotOverlap) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10);
  b.kernel(2, 10, 20);
  b.kernel(3, 20, 30);
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.whole.busy, 30);
  EXPECT_EQ(r.whole.overlap, 0);
  EXPECT_EQ(hist(r.whole, 1), 30);
  EXPECT_EQ(hist(r.whole, 2), 0);
  EXPECT_EQ(r.whole.aux_hidden, 0);
}

TEST(Analysis, EqualTimestampsAndThreeWayConcurrency) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10);
  b.kernel(2, 0, 10);
  b.kernel(3, 0, 30);
  b.kernel(2, 10, 20);  // starts exactly when the first two end
  t.finalize();
  AnalysisOptions o;
  o.main_stream = 3;
  AnalysisResult r = analyze(t, o);
  EXPECT_EQ(r.whole.span, 30);
  EXPECT_EQ(hist(r.whole, 3), 10);
  EXPECT_EQ(hist(r.whole, 2), 10);
  EXPECT_EQ(hist(r.whole, 1), 10);
  EXPECT_EQ(r.whole.overlap, 20);
  EXPECT_NEAR(r.whole.overlap_fraction, 20.0 / 30.0, 1e-12);
  // aux kernels (streams 1, 2) are entirely under the main-stream kernel [0,30).
  EXPECT_EQ(r.whole.aux_time, 30);
  EXPECT_EQ(r.whole.aux_hidden, 30);
}

// Under programmatic dependent launch a kernel starts while the one before it on its stream
// drains. Stream 1: [0,10) and [9,20) (1 ns of same-stream overlap); stream 2: [15,25).
// Overlap (>= 2 kernels): [9,10) + [15,20) = 6; across streams (>= 2 streams): [15,20) = 5.
TEST(Analysis, SameStreamOverlapIsNotStreamOverlap) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10);
  b.kernel(1, 9, 20);
  b.kernel(2, 15, 25);
  t.finalize();
  AnalysisOptions o;
  o.main_stream = 1;
  AnalysisResult r = analyze(t, o);
  EXPECT_EQ(r.whole.busy, 25);
  EXPECT_EQ(r.whole.overlap, 6);
  EXPECT_EQ(r.whole.stream_overlap, 5);
  EXPECT_DOUBLE_EQ(r.whole.stream_overlap_fraction, 5.0 / 25.0);
  // Without same-stream overlap the two agree.
  Trace u;
  TraceBuilder c(u);
  c.kernel(1, 0, 10);
  c.kernel(1, 10, 20);
  c.kernel(2, 15, 25);
  u.finalize();
  AnalysisResult q = analyze(u, o);
  EXPECT_EQ(q.whole.overlap, 5);
  EXPECT_EQ(q.whole.stream_overlap, 5);
}

TEST(Analysis, GapsZeroDurationAndInvalidKernels) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10);
  b.kernel(1, 30, 40);
  b.kernel(2, 35, 35);   // zero duration
  b.kernel(2, 50, 45);   // end < start: counted as zero duration
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.whole.span, 50);
  EXPECT_EQ(r.whole.busy, 20);
  EXPECT_EQ(hist(r.whole, 0), 30);
  EXPECT_EQ(r.whole.overlap, 0);
}

TEST(Analysis, EmptyStreamIsReported) {
  Trace t;
  TraceBuilder b(t);
  b.stream(9, -1, 5, kNoTime, "aux.idle");
  b.kernel(1, 0, 10);
  t.finalize();
  AnalysisResult r = analyze(t);
  const StreamMetrics* s9 = stream_of(r, 9);
  ASSERT_NE(s9, nullptr);
  EXPECT_EQ(s9->kernels, 0u);
  EXPECT_EQ(s9->busy, 0);
  EXPECT_EQ(s9->label, "aux.idle");
  EXPECT_EQ(s9->priority, -1);
  EXPECT_EQ(r.main_stream, 1u);
}

TEST(Analysis, PerRangeInstancesWithNesting) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("step", 0, 1000);
  b.nvtx("L3", 0, 100);
  b.nvtx("L3", 200, 300);
  b.nvtx("L4", 100, 200);
  // Instance 0 of L3: main [10,50), aux [20,40) -> overlap 20, busy 40.
  b.kernel(1, 10, 50);
  b.kernel(2, 20, 40);
  // L4: one kernel.
  b.kernel(1, 120, 180);
  // Instance 1 of L3: main [210,260), aux [250,290) -> overlap 10, busy 80.
  b.kernel(1, 210, 260);
  b.kernel(2, 250, 290);
  t.finalize();
  AnalysisOptions o;
  o.range = "L3";
  o.main_stream = 1;
  AnalysisResult r = analyze(t, o);
  ASSERT_TRUE(r.range.has_value());
  const RangeSummary& rs = *r.range;
  ASSERT_EQ(rs.instances, 2u);
  EXPECT_EQ(rs.per_instance[0].depth, 1);
  EXPECT_EQ(rs.per_instance[0].metrics.kernels, 2u);
  EXPECT_EQ(rs.per_instance[0].metrics.busy, 40);
  EXPECT_EQ(rs.per_instance[0].metrics.overlap, 20);
  EXPECT_EQ(rs.per_instance[0].metrics.aux_hidden, 20);
  EXPECT_EQ(rs.per_instance[1].metrics.busy, 80);
  EXPECT_EQ(rs.per_instance[1].metrics.overlap, 10);
  EXPECT_EQ(rs.per_instance[1].metrics.aux_hidden, 10);
  EXPECT_EQ(rs.total.kernels, 4u);
  EXPECT_EQ(rs.total.busy, 120);
  EXPECT_EQ(rs.total.overlap, 30);
  EXPECT_DOUBLE_EQ(rs.total.overlap_fraction, 30.0 / 120.0);
  EXPECT_DOUBLE_EQ(rs.total.aux_hidden_fraction, 30.0 / 60.0);
  // A prefix matches both L3 instances and L4.
  o.range = "L*";
  const AnalysisResult rp = analyze(t, o);
  ASSERT_EQ(rp.range->instances, 3u);
  // Each instance carries its own name, in time order (the pattern alone would not say which).
  EXPECT_EQ(rp.range->per_instance[0].name, "L3");
  EXPECT_EQ(rp.range->per_instance[1].name, "L4");
  EXPECT_EQ(rp.range->per_instance[2].name, "L3");
  // The outer range contains everything.
  o.range = "step";
  AnalysisResult r2 = analyze(t, o);
  EXPECT_EQ(r2.range->total.kernels, 5u);
  EXPECT_EQ(r2.range->total.busy, r2.whole.busy);
}

TEST(Analysis, RangeByLaunchCall) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("L0", 0, 100);
  b.nvtx("L1", 100, 200);
  // Launched inside L0, runs after L0 closes.
  b.kernel(1, 150, 170, "late", 10, 20);
  b.kernel(1, 180, 190, "l1", 110, 120);
  t.finalize();
  AnalysisOptions o;
  o.range = "L0";
  EXPECT_EQ(analyze(t, o).range->total.kernels, 0u);
  o.range_by_launch = true;
  AnalysisResult r = analyze(t, o);
  EXPECT_EQ(r.range->total.kernels, 1u);
  EXPECT_EQ(r.range->total.busy, 20);
}

// Kernel time by operation: the innermost push/pop range around each launch call, on the
// launching thread; a kernel running after its range closed still belongs to it; a sibling that
// ended before the launch does not contain it; another thread's ranges never count.
TEST(Analysis, KernelTimeByOperation) {
  Trace t;
  TraceBuilder b(t);  // thread 1
  b.nvtx("step", 0, 1000);
  b.nvtx("L0", 10, 400);
  b.nvtx("wq_a", 20, 30);
  b.nvtx("attention", 40, 60);
  b.nvtx("wq_a", 410, 420);  // second instance, directly under "step"
  b.kernel(1, 100, 150, "gemm1", 21, 25);     // launched in wq_a (L0): 50
  b.kernel(1, 150, 170, "attn", 41, 45);      // in attention: 20
  b.kernel(2, 160, 200, "attn2", 50, 55);     // attention: 40
  b.kernel(1, 200, 230, "other", 70, 75);     // after wq_a and attention closed: L0: 30
  b.kernel(1, 430, 440, "gemm2", 412, 415);   // wq_a again: 10
  b.kernel(1, 500, 505, "tail", 600, 601);    // only "step": 5
  b.kernel(1, 510, 520, "orphan");            // no launch call: 10
  // A library kernel launched through the driver API (no runtime record): placed by its queued
  // latency timestamp, inside the second wq_a: 7.
  t.kernels[b.kernel(1, 530, 537, "cublas_like")].queued = 415;
  TraceBuilder b2(t, 1, 2);                   // thread 2: a range that must not capture thread 1's launches
  for (int i = 0; i < 100; ++i) b2.next_correlation();  // correlation ids apart from thread 1's
  b2.nvtx("other_thread", 0, 1000);
  b2.kernel(1, 600, 601, "t2", 1100, 1101);   // thread 2 launch outside its range: (no range)
  t.finalize();
  AnalysisOptions o;
  o.by_op = true;
  const AnalysisResult r = analyze(t, o);
  std::map<std::string, std::pair<uint64_t, Ns>> got;
  std::map<std::string, uint64_t> ranges;
  for (const auto& x : r.op_stats) {
    got[x.name] = {x.kernels, x.total};
    ranges[x.name] = x.ranges;
  }
  const std::map<std::string, std::pair<uint64_t, Ns>> want{{"wq_a", {3, 67}},      {"attention", {2, 60}},
                                                            {"L0", {1, 30}},        {"step", {1, 5}},
                                                            {"(no launch call)", {1, 10}}, {"(no range)", {1, 1}}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(ranges["wq_a"], 2u);
  EXPECT_EQ(ranges["attention"], 1u);
  // Host time: the launching range instances' own durations (wq_a: [20, 30] and [410, 420];
  // L0 includes its nested ranges; the unattributed rows have none).
  std::map<std::string, Ns> host;
  for (const auto& x : r.op_stats) host[x.name] = x.host;
  const std::map<std::string, Ns> want_host{{"wq_a", 20}, {"attention", 20}, {"L0", 390},
                                            {"step", 1000}, {"(no launch call)", 0}, {"(no range)", 0}};
  EXPECT_EQ(host, want_host);
  // Sorted by total time, ties by name.
  ASSERT_EQ(r.op_stats.size(), 6u);
  EXPECT_EQ(r.op_stats[0].name, "wq_a");
  EXPECT_EQ(r.op_stats[1].name, "attention");
  // Off by default.
  EXPECT_TRUE(analyze(t).op_stats.empty());
}

TEST(Analysis, UnknownRangeAndMainStreamAreClearErrors) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("step", 0, 10);
  b.kernel(1, 0, 10);
  t.finalize();
  AnalysisOptions o;
  o.range = "L3";
  try {
    analyze(t, o);
    FAIL() << "expected sl::Error";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"step\""), std::string::npos) << e.what();
  }
  AnalysisOptions m;
  m.main_stream = 42;
  try {
    analyze(t, m);
    FAIL() << "expected sl::Error";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("streams with kernels: 1"), std::string::npos) << e.what();
  }
}

TEST(Analysis, LaunchDelayAndQueueWait) {
  Trace t;
  TraceBuilder b(t);
  // k0: launch ends at 10, starts at 25 -> delay 15, wait 15 (no previous kernel).
  b.kernel(1, 25, 100, "k0", 0, 10);
  // k1: launch ends at 20, previous ends at 100, starts at 105 -> delay 85, wait 5.
  b.kernel(1, 105, 150, "k1", 15, 20);
  // k2: launch ends at 400 (after the previous ended), starts at 401 -> wait 1.
  b.kernel(1, 401, 450, "k2", 390, 400);
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.launch_delay.count, 3u);
  EXPECT_EQ(r.launch_delay.min, 1);
  EXPECT_EQ(r.launch_delay.max, 85);
  EXPECT_DOUBLE_EQ(r.launch_delay.median, 15);
  EXPECT_EQ(r.queue_wait.count, 3u);
  EXPECT_EQ(r.queue_wait.total, 15 + 5 + 1);
  EXPECT_EQ(r.queue_wait.max, 15);
  EXPECT_EQ(r.kernels_without_launch, 0u);
}

TEST(Analysis, SubmittedTimestampPreferredForQueueWait) {
  Trace t;
  TraceBuilder b(t);
  size_t k = b.kernel(1, 100, 200, "k", 0, 10);
  t.kernels[k].submitted = 60;
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.queue_wait.total, 40);
  EXPECT_EQ(r.launch_delay.total, 90);
}

TEST(Analysis, SuspectedFalseDependency) {
  Trace t;
  TraceBuilder b(t);
  // Stream 1 runs a long kernel; stream 2's kernel is ready at 10 but starts exactly when the
  // stream-1 kernel ends: the signature of two streams sharing one hardware queue.
  b.kernel(1, 0, 10'000, "spin", 0, 5);
  b.kernel(2, 10'000, 10'100, "tiny", 6, 10);
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.suspected_false_deps, 1u);
  ASSERT_EQ(r.false_deps.size(), 1u);
  EXPECT_EQ(r.false_deps[0].stream, 2u);
  EXPECT_EQ(r.false_deps[0].blocker_stream, 1u);
  EXPECT_EQ(r.false_deps[0].wait, 10'000 - 10);
  EXPECT_EQ(r.false_deps[0].gap, 0);
  EXPECT_EQ(stream_of(r, 2)->suspected_false_deps, 1u);
}

TEST(Analysis, RealDependencyIsNotSuspected) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10'000, "producer", 0, 5);
  b.record_and_wait(/*event=*/7, /*on=*/1, /*waiting=*/2, 6);  // stream 2 waits on stream 1
  b.kernel(2, 10'000, 10'100, "consumer", 8, 10);
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.suspected_false_deps, 0u);
  EXPECT_EQ(r.resources.stream_waits, 1u);
  EXPECT_EQ(r.resources.cuda_event_records, 1u);
}

TEST(Analysis, WaitBeyondEpsilonIsNotSuspected) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10'000, "spin", 0, 5);
  b.kernel(2, 15'000, 15'100, "late", 6, 10);  // starts 5 us after the other ended
  t.finalize();
  EXPECT_EQ(analyze(t).suspected_false_deps, 0u);
}

TEST(Analysis, GraphLaunchOneCorrelationManyKernels) {
  Trace t;
  TraceBuilder b(t);
  size_t a = b.api("cudaGraphLaunch_v10000", 0, 10);
  uint32_t corr = t.api_calls[a].correlation;
  for (int i = 0; i < 3; ++i) {
    Kernel k;
    k.start = 20 + i * 100;
    k.end = k.start + 50;
    k.stream = 1 + (i % 2);
    k.correlation = corr;
    k.graph_id = 5;
    k.graph_node_id = 100 + i;
    k.pid = 1;
    k.context = 1;
    k.name = t.intern("graph_node");
    t.kernels.push_back(k);
  }
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.graph_kernels, 3u);
  EXPECT_EQ(r.launch_delay.count, 3u);
  EXPECT_EQ(r.launch_delay.min, 10);
  EXPECT_EQ(r.kernels_without_launch, 0u);
  EXPECT_EQ(r.suspected_false_deps, 0u);
}

TEST(Analysis, HtaTemporalBreakdown) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10, "gemm");
  b.kernel(2, 5, 20, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
  b.memcpy(1, 30, 40);
  t.finalize();
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.temporal.span, 40);
  EXPECT_EQ(r.temporal.idle, 10);
  EXPECT_EQ(r.temporal.compute, 10);
  EXPECT_EQ(r.temporal.non_compute, 20);
  EXPECT_DOUBLE_EQ(r.temporal.idle_pct, 25.0);
}

TEST(Analysis, HtaKernelClassification) {
  EXPECT_TRUE(hta_is_compute_kernel("gemm_bf16"));
  EXPECT_FALSE(hta_is_compute_kernel("ncclDevKernel_AllReduce"));
  EXPECT_FALSE(hta_is_compute_kernel("Memcpy HtoD (Pageable -> Device)"));
  EXPECT_FALSE(hta_is_compute_kernel("Memset (Device)"));
  EXPECT_FALSE(hta_is_compute_kernel("void at::native::elementwise_Memcpy"));
  EXPECT_FALSE(hta_is_compute_kernel("cudaDeviceSynchronize"));
  EXPECT_TRUE(hta_is_compute_kernel("my_Memset_kernel"));  // Memset only counts at the start
}

// HTA's get_comm_comp_overlap by hand: NCCL kernels [10, 30) and [25, 40) are one union of 30 ns;
// computation kernels [0, 15), [20, 22) and [35, 50) cover 5 + 2 + 5 = 12 ns of it. A copy kernel,
// a *Sync kernel and a dma* kernel over the rest cover nothing: HTA counts none as computation.
TEST(Analysis, HtaCommCompOverlapByHand) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(3, 10, 30, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
  b.kernel(4, 25, 40, "ncclKernel_AllGather_RING_LL_Sum_int8_t");
  b.kernel(1, 0, 15, "gemm");
  b.kernel(1, 20, 22, "rmsnorm");
  b.kernel(2, 15, 20, "void at::native::elementwise_Memcpy");
  b.kernel(2, 22, 35, "cudaDeviceSynchronize_kernel_Sync");
  b.kernel(5, 22, 35, "dma_copy_engine_kernel");  // HTA: a memory kernel (^dma), not computation
  b.kernel(1, 35, 50, "moe_experts");
  t.finalize();
  const AnalysisResult r = analyze(t);
  EXPECT_EQ(r.comm.comm_kernels, 2u);
  EXPECT_EQ(r.comm.comm, 30);
  EXPECT_EQ(r.comm.overlapped, 12);
  EXPECT_DOUBLE_EQ(r.comm.fraction, 0.4);
  EXPECT_TRUE(hta_is_comm_kernel("ncclDevKernel_AllReduce"));
  EXPECT_FALSE(hta_is_comm_kernel("my_ncclKernel"));          // anchored at the start
  EXPECT_FALSE(hta_is_comm_kernel("nccl_allreduce_wrapper"));  // no "Kernel" after "nccl"

  // Without NCCL kernels there is nothing to overlap: zero, not a division by zero.
  Trace u;
  TraceBuilder c(u);
  c.kernel(1, 0, 10, "gemm");
  u.finalize();
  const AnalysisResult q = analyze(u);
  EXPECT_EQ(q.comm.comm_kernels, 0u);
  EXPECT_EQ(q.comm.comm, 0);
  EXPECT_EQ(q.comm.fraction, 0.0);
}

TEST(Analysis, HtaIdleBreakdownPerStream) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10, "k1", 0, 1);
  b.kernel(1, 12, 20, "k2", 5, 6);                // launched before k1 ended, gap 2 < 30us: kernel wait
  b.kernel(1, 100'000, 100'010, "k3", 50, 60);    // launched after k2 ended: host wait 99'980
  b.kernel(1, 200'000, 200'010, "k4", 150, 160);  // launched before k3 ended, gap 99'990: other
  t.finalize();
  AnalysisResult r = analyze(t);
  const StreamMetrics* s = stream_of(r, 1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->idle_kernel_wait, 2);
  EXPECT_EQ(s->idle_host_wait, 99'980);
  EXPECT_EQ(s->idle_other, 99'990);
}

// Kernels of one stream that overlap (programmatic dependent launch): no idle figure below 0, and
// the gap counted from the latest end so far. HTA's own rule would give -5, -10 and +15 (sum 0).
TEST(Analysis, IdleBreakdownWithOverlappingKernelsOfOneStream) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 100, "k1", 0, 1);
  b.kernel(1, 95, 150, "k2", 2, 3);   // starts 5 before k1 ends: no idle
  b.kernel(1, 140, 145, "k3", 4, 5);  // inside k2: no idle
  b.kernel(1, 160, 170, "k4", 6, 7);  // 10 after k2's end (the latest), not 15 after k3's
  t.finalize();
  AnalysisResult r = analyze(t);
  const StreamMetrics* s = stream_of(r, 1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->idle_kernel_wait, 10);
  EXPECT_EQ(s->idle_host_wait, 0);
  EXPECT_EQ(s->idle_other, 0);
}

TEST(Analysis, KernelStatsByName) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10, "a");
  b.kernel(1, 10, 30, "a");
  b.kernel(1, 30, 60, "a");
  b.kernel(1, 60, 100, "a");
  b.kernel(2, 0, 1000, "b");
  t.finalize();
  AnalysisResult r = analyze(t);
  ASSERT_EQ(r.kernel_stats.size(), 2u);
  EXPECT_EQ(r.kernel_stats[0].name, "b");
  const KernelNameStats& a = r.kernel_stats[1];
  EXPECT_EQ(a.count, 4u);
  EXPECT_EQ(a.total, 100);
  EXPECT_EQ(a.min, 10);
  EXPECT_EQ(a.max, 40);
  EXPECT_DOUBLE_EQ(a.mean, 25);
  EXPECT_DOUBLE_EQ(a.median, 25);
}

TEST(Analysis, ResourceSummary) {
  Trace t;
  TraceBuilder b(t);
  b.stream(1);
  b.stream(2, 0, 10, 50);
  b.stream(3, 0, 20, kNoTime);
  b.kernel(1, 0, 100);
  Allocation a1;
  a1.bytes = 100;
  a1.alloc = 5;
  a1.free = 30;
  Allocation a2;
  a2.bytes = 50;
  a2.alloc = 30;  // allocated when a1 is freed: the free counts first
  Allocation a3;
  a3.bytes = 10;
  a3.alloc = 40;
  t.allocations = {a1, a2, a3};
  Overhead ov;
  ov.start = 1;
  ov.end = 4;
  t.overheads.push_back(ov);
  t.finalize();
  AnalysisResult r = analyze(t);
  const ResourceSummary& rs = r.resources;
  EXPECT_EQ(rs.streams, 3u);
  EXPECT_EQ(rs.streams_created, 2u);
  EXPECT_EQ(rs.streams_destroyed, 1u);
  EXPECT_EQ(rs.max_streams_alive, 3u);
  EXPECT_EQ(rs.streams_alive.back().second, 2u);
  EXPECT_EQ(rs.peak_allocated_bytes, 100u);
  EXPECT_EQ(rs.peak_allocated_at, 5);
  EXPECT_EQ(rs.allocated_at_end, 60u);
  EXPECT_EQ(rs.cupti_overhead, 3);
}

TEST(Analysis, SyntheticTraceIsConsistent) {
  SyntheticOptions o;
  o.target_events = 50'000;
  Trace t = make_synthetic_trace(o);
  AnalysisOptions ao;
  ao.range = "L3";
  AnalysisResult r = analyze(t, ao);
  EXPECT_EQ(r.main_stream, 7u);
  EXPECT_EQ(r.kernels_without_launch, 0u);
  EXPECT_GT(r.whole.overlap, 0);
  Ns sum = 0;
  for (Ns v : r.whole.concurrency) sum += v;
  EXPECT_EQ(sum, r.whole.span);
  EXPECT_EQ(r.whole.busy, r.whole.span - r.whole.concurrency[0]);
  Ns per_stream_busy_max = 0;
  for (const auto& s : r.streams) per_stream_busy_max = std::max(per_stream_busy_max, s.busy);
  EXPECT_LE(per_stream_busy_max, r.whole.busy);
  EXPECT_GT(r.range->instances, 0u);
  EXPECT_LE(r.range->total.busy, r.whole.busy);
  EXPECT_EQ(r.suspected_false_deps, 0u) << "fork/join waits link the streams";
  EXPECT_EQ(r.temporal.idle + r.temporal.compute + r.temporal.non_compute, r.temporal.span);
}

// What a trace shows only as API calls (a default PyTorch trace has no CUPTI event or sync
// records): counted by name, versions and per-thread-stream suffixes ignored, a driver call made
// by a runtime call (same correlation id) not counted twice.
TEST(Analysis, ResourcesCountApiCalls) {
  EXPECT_EQ(api_role("cudaEventRecordWithFlags"), ApiRole::EventRecord);
  EXPECT_EQ(api_role("cudaEventRecord_v3020"), ApiRole::EventRecord);
  EXPECT_EQ(api_role("cudaStreamWaitEvent_ptsz_v7000"), ApiRole::StreamWaitEvent);
  EXPECT_EQ(api_role("cuStreamDestroy_v2"), ApiRole::StreamDestroy);
  EXPECT_EQ(api_role("cudaLaunchKernel"), ApiRole::KernelLaunch);
  EXPECT_EQ(api_role("cudaLaunchHostFunc"), ApiRole::Other);
  EXPECT_EQ(api_role("cudaGraphLaunch_v10000"), ApiRole::GraphLaunch);
  EXPECT_EQ(api_role("cudaMemcpyAsync"), ApiRole::MemoryOp);
  EXPECT_EQ(api_role("cudaStreamQuery"), ApiRole::Other);
  Trace t;
  TraceBuilder b(t);
  b.api("cudaStreamCreateWithPriority", 0, 1);
  b.api("cudaStreamCreateWithFlags", 2, 3);
  b.api("cudaEventCreateWithFlags", 4, 5);
  b.api("cudaEventRecord", 6, 7);
  b.api("cudaEventRecordWithFlags", 8, 9);
  b.api("cudaStreamWaitEvent", 10, 11);
  const size_t rt = b.api("cudaStreamWaitEvent", 12, 15);
  b.api("cuStreamWaitEvent", 13, 14, t.api_calls[rt].correlation);  // made by the runtime call
  t.api_calls.back().kind = ApiKind::Driver;
  b.api("cuStreamWaitEvent", 16, 17);                                // on its own
  t.api_calls.back().kind = ApiKind::Driver;
  b.api("cudaStreamSynchronize", 20, 21);
  b.api("cudaEventSynchronize", 22, 23);
  b.api("cudaDeviceSynchronize", 24, 25);
  b.api("cudaStreamDestroy", 26, 27);
  b.kernel(7, 30, 40, "k", 28, 29);
  t.finalize();
  const ApiCallCounts c = analyze(t).resources.api;
  EXPECT_EQ(c.stream_creates, 2u);
  EXPECT_EQ(c.stream_destroys, 1u);
  EXPECT_EQ(c.event_creates, 1u);
  EXPECT_EQ(c.event_records, 2u);
  EXPECT_EQ(c.stream_wait_events, 3u);
  EXPECT_EQ(c.stream_syncs, 1u);
  EXPECT_EQ(c.event_syncs, 1u);
  EXPECT_EQ(c.device_syncs, 1u);
  EXPECT_EQ(c.kernel_launches, 1u);
  // In the reports.
  const std::string text = analysis_to_text(analyze(t));
  EXPECT_NE(text.find("event creates 1, records 2, stream waits 3"), std::string::npos) << text;
  EXPECT_EQ(analysis_to_json(analyze(t))["resources"]["api_calls"]["event_records"], 2);
}

TEST(Analysis, KernelOwnTimeLeavesOutWaitsUnderPdl) {
  // Stream 1 of process 1: a [0,10); b starts early under PDL [5,20) and so owns only [10,20);
  // c lies inside b [12,18) and owns nothing; a again [25,30). Stream 2: a [0,8), all its own.
  // Process 2's stream 1 is another stream: b [3,9) owns all of it although process 1's a runs.
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 0, 10, "a");
  b.kernel(1, 5, 20, "b");
  b.kernel(1, 12, 18, "c");
  b.kernel(1, 25, 30, "a");
  b.kernel(2, 0, 8, "a");
  TraceBuilder other(t, 2);
  other.kernel(1, 3, 9, "b");
  t.finalize();
  const AnalysisResult r = analyze(t);
  std::map<std::string, const KernelNameStats*> by;
  for (const auto& k : r.kernel_stats) by[k.name] = &k;
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by["a"]->total, 10 + 5 + 8);
  EXPECT_EQ(by["a"]->own, 10 + 5 + 8);
  EXPECT_EQ(by["b"]->total, 15 + 6);
  EXPECT_EQ(by["b"]->own, 10 + 6);
  EXPECT_EQ(by["c"]->total, 6);
  EXPECT_EQ(by["c"]->own, 0);
  // A stream's own times add up to its busy time (process 1's stream 1: [0,20) and [25,30)).
  EXPECT_EQ(by["a"]->own + by["b"]->own + by["c"]->own, 25 + 8 + 6);
}
