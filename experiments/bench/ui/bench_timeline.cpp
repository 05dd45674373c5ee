// What the timeline viewer costs on a large trace: building the tracks and rows once at load,
// then the per-frame work of laying out every visible row (Tracy's rule: per frame, only what
// is visible). Prints, per window, the boxes a frame draws against the items the trace holds.
//
// Environment: STREAMLAB_BENCH_EVENTS (default 1000000) sets the synthetic trace's size.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "profiler/synthetic.h"
#include "ui/row_layout.h"
#include "ui/timeline_model.h"

using namespace sl;

namespace {

const prof::Trace& bench_trace() {
  static const prof::Trace t = [] {
    prof::SyntheticOptions o;
    const char* e = std::getenv("STREAMLAB_BENCH_EVENTS");
    o.target_events = e ? size_t(std::strtoull(e, nullptr, 10)) : 1'000'000;
    std::fprintf(stderr, "synthetic trace of about %zu events...\n", o.target_events);
    return prof::make_synthetic_trace(o);
  }();
  return t;
}

const ui::TimelineModel& bench_model() {
  static const ui::TimelineModel m = ui::build_timeline(bench_trace());
  return m;
}

void BM_BuildTimeline(benchmark::State& st) {
  const prof::Trace& t = bench_trace();
  for (auto _ : st) benchmark::DoNotOptimize(ui::build_timeline(t));
  st.counters["items/s"] = benchmark::Counter(double(bench_model().items) * double(st.iterations()),
                                              benchmark::Counter::kIsRate);
}

// One frame's layout of every row at 1600 px: the whole trace (fraction 1) or a window of
// 1 / fraction of it in the middle.
void BM_LayoutFrame(benchmark::State& st) {
  const ui::TimelineModel& m = bench_model();
  const double fraction = double(st.range(0));
  const double span = double(m.end - m.begin) / fraction, mid = double(m.end - m.begin) / 2;
  const ui::TimeWindow w{mid - span / 2, mid + span / 2, m.begin};
  size_t boxes = 0;
  for (auto _ : st) {
    boxes = 0;
    for (const ui::Track& t : m.tracks)
      for (const ui::Row& r : t.rows) boxes += ui::layout_row(r, w, 1600.f).size();
    benchmark::DoNotOptimize(boxes);
  }
  st.counters["boxes"] = double(boxes);
  st.counters["items"] = double(m.items);
  st.counters["items_per_box"] = double(m.items) / double(std::max<size_t>(1, boxes));
}

}  // namespace

BENCHMARK(BM_BuildTimeline)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_LayoutFrame)->Arg(1)->Arg(100)->Arg(10000)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
