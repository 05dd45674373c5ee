// The viewer's logic without a window: rows, the time window's arithmetic, what a row draws at a
// given zoom, range statistics and kernel names, each against hand-computed values (and the
// range statistics against profiler/analysis, an independent implementation).
#include <gtest/gtest.h>

#include "profiler/analysis.h"
#include "profiler/synthetic.h"
#include "ui/kernel_names.h"
#include "ui/range_stats.h"
#include "ui/row_layout.h"
#include "ui/step_series.h"
#include "ui/time_window.h"
#include "ui/timeline_model.h"

namespace sl::ui {
namespace {

Item item(Ns s, Ns e, uint32_t index) { return Item{s, e, 0, index, ItemKind::Kernel}; }

std::vector<uint32_t> indices(const Row& r) {
  std::vector<uint32_t> v;
  for (const Item& i : r.items) v.push_back(i.index);
  return v;
}

TEST(TimelineRows, NestedAndOverlappingItemsGoToLowerRows) {
  // A [0,100) encloses B [10,20) and C [20,30); D [100,150) touches A; E [120,200) overlaps D.
  const auto rows = assign_rows({item(120, 200, 4), item(20, 30, 2), item(0, 100, 0), item(100, 150, 3), item(10, 20, 1)});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(indices(rows[0]), (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(indices(rows[1]), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(first_ending_after(rows[1], 20), 1u);  // B ends at 20: not after it
  EXPECT_EQ(first_ending_after(rows[1], 200), 3u);
  ASSERT_NE(item_at(rows[0], 100), nullptr);
  EXPECT_EQ(item_at(rows[0], 100)->index, 3u);  // [start, end): 100 is D's, not A's
  EXPECT_EQ(item_at(rows[1], 60), nullptr);
}

TEST(TimelineModel, TracksFromATrace) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(7, 0, prof::kNoTime, prof::kNoTime, "main");
  b.stream(9, -2, prof::kNoTime, prof::kNoTime, "L0.aux0");
  b.kernel(7, 1000, 2000, "gemm", 900, 950);
  b.kernel(7, 1990, 2500, "norm", 960, 980);  // starts before gemm ends (PDL): a second row
  b.kernel(9, 1500, 1800, "aux", 985, 990);
  b.memcpy(9, 2600, 2700);
  b.nvtx("step", 800, 3000);
  b.nvtx("L0", 850, 1000);
  t.finalize();
  const TimelineModel m = build_timeline(t);
  ASSERT_EQ(m.tracks.size(), 4u);  // stream 7, stream 9, the thread's NVTX, its API calls
  EXPECT_EQ(m.tracks[0].label, "main (stream 7)");
  EXPECT_EQ(m.tracks[0].rows.size(), 2u);
  EXPECT_EQ(m.tracks[0].busy, 1500);  // [1000, 2500)
  EXPECT_EQ(m.tracks[1].label, "L0.aux0 (stream 9)");
  EXPECT_EQ(m.tracks[1].rows.size(), 1u);
  EXPECT_EQ(m.tracks[1].items, 2u);
  EXPECT_EQ(m.tracks[1].rows[0].items[1].kind, ItemKind::Memcpy);
  EXPECT_EQ(m.tracks[2].kind, TrackKind::HostNvtx);
  EXPECT_EQ(m.tracks[2].rows.size(), 2u);  // L0 inside step
  EXPECT_EQ(m.tracks[3].kind, TrackKind::HostApi);
  EXPECT_EQ(m.tracks[3].items, 3u);  // the three kernels' launch calls (the memcpy has none)
  EXPECT_EQ(m.begin, 800);
  EXPECT_EQ(m.end, 3000);
  EXPECT_EQ(m.items, 3u + 1u + 2u + 3u);  // kernels, memcpy, NVTX ranges, API calls
}

TEST(TimelineModel, StreamsGroupedByRole) {
  // Per-layer streams: L0.aux0, L1.aux0, L0.aux1 and main; an unnamed stream stays alone.
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(3, 0, prof::kNoTime, prof::kNoTime, "main");
  b.stream(4, 0, prof::kNoTime, prof::kNoTime, "L0.aux0");
  b.stream(5, 0, prof::kNoTime, prof::kNoTime, "L0.aux1");
  b.stream(6, 0, prof::kNoTime, prof::kNoTime, "L1.aux0");
  b.kernel(3, 0, 100, "m");
  b.kernel(4, 10, 30, "a");
  b.kernel(5, 10, 20, "b");
  b.kernel(6, 20, 40, "c");  // overlaps stream 4's kernel: a second row in the aux0 track
  b.kernel(9, 50, 60, "x");
  t.finalize();
  EXPECT_EQ(build_timeline(t).tracks.size(), 5u);
  TimelineOptions o;
  o.group_streams_by_role = true;
  const TimelineModel m = build_timeline(t, o);
  ASSERT_EQ(m.tracks.size(), 4u);  // no launch calls given: no host tracks
  EXPECT_EQ(m.tracks[0].label, "main");
  EXPECT_EQ(m.tracks[1].label, "aux0 (2 streams)");
  EXPECT_EQ(m.tracks[1].streams, (std::vector<uint32_t>{4, 6}));
  EXPECT_EQ(m.tracks[1].rows.size(), 2u);
  EXPECT_EQ(m.tracks[1].busy, 30);  // [10, 40)
  EXPECT_EQ(m.tracks[2].label, "L0.aux1");  // a role of one stream keeps the stream's name
  EXPECT_EQ(m.tracks[3].label, "stream 9");
  EXPECT_EQ(sl::prof::stream_role("mtp1.aux2"), "aux2");  // profiler/trace.h
  EXPECT_EQ(sl::prof::stream_role("shared_expert"), "shared_expert");
}

TEST(TimelineModel, InvalidRecordsDoNotStretchTheTimeline) {
  // A kernel with a zero start (a PyTorch JSON event with ts 0) and one ending before it
  // starts: the first is left off, the second drawn with zero length.
  prof::Trace t;
  prof::TraceBuilder b(t);
  const Ns base = 1'764'000'000'000'000'000;
  b.kernel(1, base + 100, base + 200, "good");
  b.kernel(1, 0, 50, "zero");
  b.kernel(2, base + 300, base + 250, "backwards");
  t.finalize();
  const TimelineModel m = build_timeline(t);
  EXPECT_EQ(m.invalid_items, 1u);
  EXPECT_EQ(m.begin, base + 100);
  EXPECT_EQ(m.end, base + 300);
  ASSERT_EQ(m.tracks.size(), 2u);
  EXPECT_EQ(m.tracks[1].rows[0].items[0].end, base + 300);
  EXPECT_EQ(m.tracks[1].busy, 0);
}

TEST(RangeStats, GroupingByRoleKeepsTheOverlap) {
  // L0.aux0 and L1.aux0 overlap in time: one track when grouped, still two streams.
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(4, 0, prof::kNoTime, prof::kNoTime, "L0.aux0");
  b.stream(6, 0, prof::kNoTime, prof::kNoTime, "L1.aux0");
  b.kernel(4, 10, 30, "a");
  b.kernel(6, 20, 40, "c");
  t.finalize();
  TimelineOptions o;
  o.group_streams_by_role = true;
  const TimelineModel grouped = build_timeline(t, o);
  ASSERT_EQ(grouped.tracks.size(), 1u);
  const RangeStats r = range_stats(grouped, t, 0, 100);
  EXPECT_EQ(r.stream_overlap, 10);  // [20, 30)
  EXPECT_EQ(r.gpu_busy, 30);
  EXPECT_EQ(r.stream_overlap, range_stats(build_timeline(t), t, 0, 100).stream_overlap);
}

TEST(TimeWindow, ZoomKeepsTheAnchorPanMovesByPixels) {
  TimeWindow w{0, 1000};
  w.zoom(2.0, 250, 1e9);
  EXPECT_DOUBLE_EQ(w.t0, 125);
  EXPECT_DOUBLE_EQ(w.t1, 625);
  EXPECT_DOUBLE_EQ(w.x_of(250, 800), 200);  // the anchor stays at 1/4 of the width
  w = {0, 1000};
  w.pan_pixels(100, 1000);  // dragging right shows earlier times
  EXPECT_DOUBLE_EQ(w.t0, -100);
  EXPECT_DOUBLE_EQ(w.t1, 900);
  w = {0, 1000};
  w.zoom(1e6, 500, 1e9);
  EXPECT_DOUBLE_EQ(w.span(), TimeWindow::kMinSpan);
  w.zoom(1e-9, 500, 2000);
  EXPECT_DOUBLE_EQ(w.span(), 2000);
  w = {5000, 6000};
  w.keep_near(0, 1000);  // left the trace entirely: a tenth of it comes back
  EXPECT_DOUBLE_EQ(w.t0, 900);
  EXPECT_DOUBLE_EQ(w.t1, 1900);
  const TimeWindow f = fit_window(100, 200, 0.1);
  EXPECT_EQ(f.origin, 100);
  EXPECT_DOUBLE_EQ(f.t0, -10);
  EXPECT_DOUBLE_EQ(f.t1, 110);
  // CUPTI-sized timestamps keep nanosecond resolution: the window is relative to its origin.
  const Ns big = 1'764'000'000'000'000'000;
  TimeWindow z = fit_window(big, big + 1000);
  z.zoom(1e6, 500, 2000);  // down to the 10 ns minimum about t = big + 500
  EXPECT_DOUBLE_EQ(z.t0, 495);
  EXPECT_EQ(z.ns_at(0, 100), big + 495);
  EXPECT_EQ(z.ns_at(50, 100), big + 500);
  EXPECT_DOUBLE_EQ(z.x_of_ns(big + 501, 100), 60);
}

TEST(TimeWindow, TicksAndDurations) {
  EXPECT_DOUBLE_EQ(tick_step(1e6, 1000, 90), 1e5);   // >= 90 us apart: 100 us
  EXPECT_DOUBLE_EQ(tick_step(1e6, 1000, 150), 2e5);  // >= 150 us: 200 us
  EXPECT_DOUBLE_EQ(tick_step(1e6, 1000, 300), 5e5);
  EXPECT_DOUBLE_EQ(tick_step(37, 1000, 90), 5);      // 3.33 ns -> 5 ns
  EXPECT_EQ(format_duration(1.5e6), "1.50 ms");
  EXPECT_EQ(format_duration(250e3), "250 us");
  EXPECT_EQ(format_duration(40), "40.0 ns");
  EXPECT_EQ(format_duration(12.5e9), "12.5 s");
  EXPECT_EQ(format_duration(0), "0");
  EXPECT_EQ(format_duration(999999.9), "1.00 ms");
  EXPECT_EQ(format_duration(99.99e3), "100 us");
  EXPECT_EQ(format_duration(-2500), "-2.50 us");
}

TEST(RowLayout, NarrowItemsMergeWideOnesStandAlone) {
  Row r;
  r.items = {item(0, 100, 0), item(100, 101, 1), item(102, 103, 2), item(104, 105, 3), item(500, 900, 4)};
  const auto boxes = layout_row(r, TimeWindow{0, 1000}, 1000.f, 3.f);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_FLOAT_EQ(boxes[0].x0, 0);
  EXPECT_FLOAT_EQ(boxes[0].x1, 100);
  EXPECT_EQ(boxes[0].count, 1u);
  EXPECT_FLOAT_EQ(boxes[1].x0, 100);
  EXPECT_FLOAT_EQ(boxes[1].x1, 105);
  EXPECT_EQ(boxes[1].first, 1u);
  EXPECT_EQ(boxes[1].count, 3u);
  EXPECT_FLOAT_EQ(boxes[2].x0, 500);
  EXPECT_FLOAT_EQ(boxes[2].x1, 900);
  // Zoomed to [150, 650) on 500 px: only item 4, clipped at the right edge.
  const auto zoomed = layout_row(r, TimeWindow{150, 650}, 500.f, 3.f);
  ASSERT_EQ(zoomed.size(), 1u);
  EXPECT_EQ(zoomed[0].first, 4u);
  EXPECT_FLOAT_EQ(zoomed[0].x0, 350);
  EXPECT_FLOAT_EQ(zoomed[0].x1, 500);
  // Zoomed in enough, the narrow items stand alone (1 ns = 10 px).
  EXPECT_EQ(layout_row(r, TimeWindow{99, 109}, 100.f, 3.f).size(), 4u);
  // The same picture with the window relative to an origin.
  const auto shifted = layout_row(r, TimeWindow{-50, 450, 200}, 500.f, 3.f);
  ASSERT_EQ(shifted.size(), 1u);
  EXPECT_FLOAT_EQ(shifted[0].x0, 350);
}

TEST(RowLayout, ManyTinyItemsCostFewBoxes) {
  Row r;
  for (uint32_t i = 0; i < 100000; ++i) r.items.push_back(item(Ns(i) * 10, Ns(i) * 10 + 5, i));
  const auto boxes = layout_row(r, TimeWindow{0, 1e6}, 1000.f, 3.f);
  EXPECT_LE(boxes.size(), 1000u);  // at most one per 3 px, not one per item
  uint64_t covered = 0;
  for (const Box& b : boxes) covered += b.count;
  EXPECT_EQ(covered, 100000u);  // and every item is in one
}

TEST(RowLayout, RandomRowsPartitionTheVisibleItems) {
  // Random disjoint items of widths from 0.01 px to 100 px, random windows: the boxes take the
  // visible items once each, in order, and a box of one item sits where its times say.
  uint64_t seed = 12345;
  auto next = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int trial = 0; trial < 200; ++trial) {
    Row r;
    Ns t = Ns(next() % 1000);
    for (uint32_t i = 0; i < 2000; ++i) {
      const Ns len = next() % 4 == 0 ? Ns(next() % 20000) : Ns(1 + next() % 50);
      r.items.push_back(item(t, t + len, i));
      t += len + Ns(next() % 300);
    }
    const double a = double(next() % uint64_t(t)), span = 100.0 + double(next() % uint64_t(t));
    const TimeWindow w{a, a + span};
    const float width = 800.f;
    const auto boxes = layout_row(r, w, width, 3.f);
    size_t first_visible = r.items.size(), last_visible = 0;
    for (size_t i = 0; i < r.items.size(); ++i)
      if (double(r.items[i].end) > w.t0 && double(r.items[i].start) < w.t1) {
        first_visible = std::min(first_visible, i);
        last_visible = i;
      }
    if (first_visible == r.items.size()) {
      EXPECT_TRUE(boxes.empty());
      continue;
    }
    ASSERT_FALSE(boxes.empty());
    EXPECT_EQ(boxes.front().first, first_visible);
    size_t expect_first = first_visible;
    for (const Box& b : boxes) {
      ASSERT_EQ(b.first, expect_first) << "trial " << trial;
      expect_first += b.count;
      EXPECT_GE(b.x1, b.x0 + 1.f - 1e-3f);
      EXPECT_LE(b.x1, width + 1e-3f);
      if (b.count == 1) {
        const Item& it = r.items[b.first];
        EXPECT_NEAR(b.x0, std::max(0.0, w.x_of(double(it.start), width)), 1.0);  // 1 px: the minimum width
      }
    }
    EXPECT_EQ(expect_first, last_visible + 1) << "trial " << trial;
  }
}

TEST(RangeStats, HandComputedOverlap) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.kernel(1, 0, 100, "a");
  b.kernel(1, 150, 250, "a");
  b.kernel(2, 50, 200, "b");
  t.finalize();
  const TimelineModel m = build_timeline(t);
  RangeStats r = range_stats(m, t, 0, 300);
  EXPECT_EQ(r.gpu_busy, 250);
  EXPECT_EQ(r.stream_overlap, 100);  // [50, 100) and [150, 200)
  ASSERT_EQ(r.kernels.size(), 2u);
  EXPECT_EQ(r.kernels[0].name, "a");
  EXPECT_EQ(r.kernels[0].time, 200);
  EXPECT_EQ(r.kernels[1].time, 150);
  r = range_stats(m, t, 160, 60);  // either order
  EXPECT_EQ(r.a, 60);
  EXPECT_EQ(r.gpu_busy, 100);
  EXPECT_EQ(r.stream_overlap, 50);  // [60, 100) and [150, 160)
  ASSERT_EQ(r.tracks.size(), 2u);
  EXPECT_EQ(r.tracks[0].busy, 50);
  EXPECT_EQ(r.tracks[1].busy, 100);
}

TEST(RangeStats, WholeTraceAgreesWithTheAnalysis) {
  prof::SyntheticOptions o;
  o.target_events = 20000;
  const prof::Trace t = prof::make_synthetic_trace(o);
  const TimelineModel m = build_timeline(t);
  const RangeStats r = range_stats(m, t, m.begin, m.end);
  const prof::AnalysisResult a = prof::analyze(t);
  EXPECT_GT(a.whole.stream_overlap, 0);
  EXPECT_EQ(r.stream_overlap, a.whole.stream_overlap);
  EXPECT_EQ(r.gpu_busy, a.whole.busy);
  uint64_t kernels = 0;
  for (const NameTime& n : r.kernels) kernels += n.count;
  EXPECT_EQ(kernels, a.whole.kernels);
}

TEST(StepSeries, HandComputedSteps) {
  // Two streams: +1 at 10 and 20; at 30 one ends as another starts (no change); ends at 40, 50.
  const StepSeries s = step_series({{30, -1}, {10, +1}, {20, +1}, {30, +1}, {40, -1}, {50, -1}});
  EXPECT_EQ(s.t, (std::vector<Ns>{10, 20, 40, 50}));
  EXPECT_EQ(s.v, (std::vector<int64_t>{1, 2, 1, 0}));
  EXPECT_EQ(s.peak, 2);
  EXPECT_EQ(s.peak_at, 20);
  EXPECT_EQ(s.at(5), 0);
  EXPECT_EQ(s.at(10), 1);
  EXPECT_EQ(s.at(25), 2);
  EXPECT_EQ(s.at(45), 1);
  EXPECT_EQ(s.at(60), 0);
  EXPECT_EQ(s.max_over(0, 15), 1);
  EXPECT_EQ(s.max_over(0, 10), 0);  // [0, 10): before the first change
  EXPECT_EQ(s.max_over(25, 35), 2);
  EXPECT_EQ(s.max_over(41, 100), 1);
  EXPECT_EQ(s.max_over(50, 60), 0);
}

TEST(StepSeries, BlockMaximaMatchBruteForce) {
  uint64_t seed = 7;
  auto next = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  std::vector<std::pair<Ns, int64_t>> ch;
  for (int i = 0; i < 5000; ++i) ch.emplace_back(Ns(next() % 100000), int64_t(next() % 7) - 3);
  const StepSeries s = step_series(ch);
  ASSERT_GT(s.t.size(), 10 * StepSeries::kBlock);
  for (int q = 0; q < 2000; ++q) {
    const Ns a = Ns(next() % 100000), b = a + 1 + Ns(next() % (q % 2 ? 50000 : 200));
    int64_t want = s.at(a);
    for (size_t i = 0; i < s.t.size(); ++i)
      if (s.t[i] > a && s.t[i] < b) want = std::max(want, s.v[i]);
    ASSERT_EQ(s.max_over(a, b), want) << "[" << a << ", " << b << ")";
  }
}

// Time a series spends at or above `level`.
Ns time_at_least(const StepSeries& s, int64_t level) {
  Ns total = 0;
  for (size_t i = 0; i + 1 < s.t.size(); ++i)
    if (s.v[i] >= level) total += s.t[i + 1] - s.t[i];
  return total;
}

TEST(StepSeries, StreamsBusyAndMemoryAgreeWithTheAnalysis) {
  prof::SyntheticOptions o;
  o.target_events = 20000;
  const prof::Trace t = prof::make_synthetic_trace(o);
  const prof::AnalysisResult a = prof::analyze(t);
  const StepSeries busy = streams_busy(t);
  EXPECT_EQ(time_at_least(busy, 1), a.whole.busy);
  EXPECT_EQ(time_at_least(busy, 2), a.whole.stream_overlap);
  const prof::Trace sample = prof::make_sample_trace();
  const StepSeries mem = memory_allocated(sample);
  ASSERT_FALSE(mem.empty());
  EXPECT_EQ(uint64_t(mem.peak), prof::analyze(sample).resources.peak_allocated_bytes);
}

TEST(KernelNames, ShortNames) {
  EXPECT_EQ(short_kernel_name("void sl::(anonymous namespace)::gemv_kernel<4, __nv_bfloat16, float>(sl::(anonymous "
                              "namespace)::GemmArgs)"),
            "gemv_kernel");
  EXPECT_EQ(short_kernel_name("sl::(anonymous namespace)::route_kernel(sl::(anonymous namespace)::RouteArgs)"),
            "route_kernel");
  EXPECT_EQ(short_kernel_name("void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::Params)"),
            "splitKreduce_kernel");
  EXPECT_EQ(short_kernel_name("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT"), "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT");
  EXPECT_EQ(short_kernel_name("Memcpy HtoD (Pageable -> Device)"), "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(short_kernel_name("void add(float*, int)"), "add");
}

}  // namespace
}  // namespace sl::ui
