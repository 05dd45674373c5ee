// The A/B view's logic without a window, against hand-computed values: where two traces align
// (range instances, their clocks apart), the role order that lines up a per-layer trace's
// tracks with a shared-pool trace's, the role-matched table of a selected range with each
// trace's busy time; and the ruler on an absolute clock (a PyTorch-layout trace whose
// baseTimeNanoseconds lies 63 days before its events showed "5480000 s" on every tick).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"
#include "ui/alignment.h"
#include "ui/range_diff.h"
#include "ui/ruler.h"
#include "ui/timeline_model.h"
#include "ui/viewer.h"

namespace sl::ui {
namespace {

using prof::kNoTime;

// The message of the sl::Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- alignment ----

TEST(Alignment, ParsesNameAndIndex) {
  EXPECT_EQ(parse_align("decode").name, "decode");
  EXPECT_EQ(parse_align("decode").index, 0u);
  EXPECT_EQ(parse_align("decode:7").index, 7u);
  EXPECT_EQ(parse_align("ProfilerStep#4").name, "ProfilerStep#4");
  EXPECT_EQ(parse_align("ns::step").name, "ns::step");  // a scope, not an index
  EXPECT_EQ(parse_align("ns::step:2").name, "ns::step");
  EXPECT_EQ(parse_align("ns::step:2").index, 2u);
  EXPECT_NE(error_of([] { parse_align("decode:x"); }).find("INDEX must be a non-negative integer"), std::string::npos);
  EXPECT_NE(error_of([] { parse_align("decode:-1"); }).find("INDEX must be"), std::string::npos);
  EXPECT_NE(error_of([] { parse_align(":3"); }).find("expected NAME"), std::string::npos);
}

TEST(Alignment, RangeInstancesInTimeOrder) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.nvtx("decode", 500, 600);
  b.nvtx("decode", 100, 200);
  b.nvtx("decode", 300, 400);
  b.nvtx("decoder", 50, 60);  // another name
  b.nvtx("ProfilerStep#5", 900, 950);
  b.nvtx("ProfilerStep#4", 700, 750);
  t.finalize();
  EXPECT_EQ(range_starts(t, "decode"), (std::vector<prof::Ns>{100, 300, 500}));
  EXPECT_EQ(range_starts(t, "ProfilerStep"), (std::vector<prof::Ns>{700, 900}));  // PyTorch's numbered steps
  EXPECT_EQ(range_starts(t, "ProfilerStep#5"), (std::vector<prof::Ns>{900}));
  EXPECT_EQ(alignment_point(t, "a.json", {"decode", 2}), 500);
  const std::string e = error_of([&] { alignment_point(t, "b.json", parse_align("decode:7")); });
  EXPECT_EQ(e, "--align decode:7: b.json has 3 'decode' ranges (INDEX 0..2)");
  EXPECT_EQ(error_of([&] { alignment_point(t, "b.json", {"prefill", 0}); }),
            "--align prefill:0: b.json has no NVTX range 'prefill'");
}

TEST(Alignment, DefaultIsDecodeThenProfilerStepThenStarts) {
  prof::Trace both_decode, only_steps, steps_and_decode, none;
  prof::TraceBuilder(both_decode).nvtx("decode", 10, 20);
  prof::TraceBuilder(only_steps).nvtx("ProfilerStep#1", 10, 20);
  prof::TraceBuilder b(steps_and_decode);
  b.nvtx("ProfilerStep#1", 10, 20);
  b.nvtx("decode", 12, 18);
  prof::TraceBuilder(none).nvtx("prefill", 10, 20);
  for (auto* t : {&both_decode, &only_steps, &steps_and_decode, &none}) t->finalize();
  EXPECT_EQ(default_alignment(both_decode, steps_and_decode)->name, "decode");
  EXPECT_EQ(default_alignment(only_steps, steps_and_decode)->name, "ProfilerStep");  // decode in one only
  EXPECT_FALSE(default_alignment(both_decode, none).has_value());
}

// Two decode steps on the builder's thread; kernel times relative to `clock`.
prof::Trace two_steps(prof::Ns clock, prof::Ns second_step) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(1, 0, kNoTime, kNoTime, "main");
  for (prof::Ns s : {prof::Ns(0), second_step}) {
    b.nvtx("decode", clock + s, clock + s + 1000);
    b.kernel(1, clock + s + 100, clock + s + 400, "gemm", clock + s + 10, clock + s + 20);
  }
  t.finalize();
  return t;
}

TEST(Alignment, ViewerShiftsEachTraceToItsRangeInstance) {
  // A on a small clock, B on CUPTI's (1.8e18 ns): decode:1 starts at 5000 in A and at
  // 1.8e18 + 9000 in B; both become time 0, exactly (integer nanoseconds).
  const prof::Ns big = 1'800'000'000'000'000'000;
  Viewer v(two_steps(0, 5000), "a.json", two_steps(big, 9000), "b.json", CompareOptions{AlignSpec{"decode", 1}}, {});
  ASSERT_TRUE(v.ab());
  EXPECT_EQ(v.alignment(), "decode:1");
  EXPECT_EQ(v.time_zero(), 5000);
  EXPECT_EQ(v.block(0).zero, 5000);
  EXPECT_EQ(v.block(1).zero, big + 9000);
  EXPECT_EQ(v.block(1).offset, big + 4000);
  EXPECT_EQ(v.block(1).start, big);  // its base time (its first record, here)
  // The second steps' kernels start 100 ns after time 0 in both: the same instant of A's clock.
  EXPECT_EQ(v.block(0).trace.kernels[1].start - v.block(0).zero, 100);
  EXPECT_EQ(v.block(1).trace.kernels[1].start - v.block(1).offset, 5100);
  // The default aligns at the first decode; a missing instance names the file and the count.
  Viewer d(two_steps(0, 5000), "a.json", two_steps(big, 9000), "b.json", CompareOptions{}, {});
  EXPECT_EQ(d.alignment(), "decode:0");
  EXPECT_EQ(d.block(1).offset, big);
  EXPECT_EQ(error_of([&] {
              Viewer(two_steps(0, 5000), "a.json", two_steps(big, 9000), "b.json", CompareOptions{AlignSpec{"decode", 7}}, {});
            }),
            "--align decode:7: a.json has 2 'decode' ranges (INDEX 0..1)");
}

// ---- role order ----

// Streams named as streamlab names them; `ids` in creation order, one kernel each.
prof::Trace named_streams(const std::vector<std::pair<uint32_t, std::string>>& ids) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  prof::Ns at = 0;
  for (const auto& [id, name] : ids) {
    if (!name.empty()) b.stream(id, 0, kNoTime, kNoTime, name);
    b.kernel(id, at, at + 10, "k");
    at += 20;
  }
  t.finalize();
  return t;
}

std::vector<std::string> gpu_roles(const TimelineModel& m) {
  std::vector<std::string> roles;
  for (const Track& t : m.tracks)
    if (t.kind == TrackKind::GpuStream) roles.push_back(prof::stream_role(t.label.substr(0, t.label.find(" ("))));
  return roles;
}

TEST(RoleOrder, PerLayerAndSharedStreamsLineUp) {
  // Per-layer (the H200 trace's ids): main 13, target.aux0..2 14..16, mtp0..3.aux0..2 17..28,
  // shared_expert 29, the unnamed stream 7. Shared: the shared expert's stream made first, a
  // named copy stream, mtp.aux* before target.aux*: by stream id the roles would not line up.
  std::vector<std::pair<uint32_t, std::string>> per_layer = {{7, ""}, {13, "main"}};
  for (int i = 0; i < 3; ++i) per_layer.push_back({uint32_t(14 + i), "target.aux" + std::to_string(i)});
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 3; ++i) per_layer.push_back({uint32_t(17 + 3 * l + i), "mtp" + std::to_string(l) + ".aux" + std::to_string(i)});
  per_layer.push_back({29, "shared_expert"});
  per_layer.push_back({30, "copy"});
  const std::vector<std::pair<uint32_t, std::string>> shared = {
      {7, ""}, {10, "shared_expert"}, {11, "copy"}, {12, "mtp.aux2"}, {13, "mtp.aux0"}, {14, "mtp.aux1"},
      {15, "main"}, {16, "target.aux0"}, {17, "target.aux1"}, {18, "target.aux2"}};
  TimelineOptions o;
  o.group_streams_by_role = true;
  const auto first_id_order = gpu_roles(build_timeline(named_streams(shared), o));
  EXPECT_EQ(first_id_order[1], "shared_expert");  // without the standard order
  o.standard_role_order = true;
  const TimelineModel a = build_timeline(named_streams(per_layer), o), b = build_timeline(named_streams(shared), o);
  const std::vector<std::string> want = {"main", "aux0", "aux1", "aux2", "shared_expert", "copy", "stream 7"};
  EXPECT_EQ(gpu_roles(a), want);
  EXPECT_EQ(gpu_roles(b), want);
  EXPECT_EQ(a.tracks[1].label, "aux0 (5 streams)");
  EXPECT_EQ(a.tracks[1].streams, (std::vector<uint32_t>{14, 17, 20, 23, 26}));
  EXPECT_EQ(b.tracks[1].label, "aux0 (2 streams)");
  EXPECT_EQ(standard_role_rank("main"), 0);
  EXPECT_EQ(standard_role_rank("aux2"), 3);
  EXPECT_EQ(standard_role_rank("stream 7"), 6);
  EXPECT_EQ(standard_role_rank("stream x"), 5);  // a name, not an unnamed stream
  // The A/B viewer orders both blocks so, grouped by role or not asked.
  TimelineOptions by_role;
  by_role.group_streams_by_role = true;
  Viewer v(named_streams(per_layer), "per-layer", named_streams(shared), "shared", {}, by_role);
  EXPECT_EQ(v.alignment(), "");  // no ranges: the starts
  EXPECT_EQ(gpu_roles(v.block(0).model), want);
  EXPECT_EQ(gpu_roles(v.block(1).model), want);
}

// ---- the range's role table ----

// One decode step: layer0 runs gemm (twice) on main and softmax on an aux stream, layer1 a gemm
// and in B an extra kernel. Durations in ns as given; `clock` shifts everything.
struct StepTimes {
  prof::Ns gemm0 = 100, gemm1 = 60, softmax = 30, layer1_gemm = 100, extra = 0;
};

void add_step(prof::TraceBuilder& b, prof::Ns at, const StepTimes& d, uint32_t aux) {
  b.nvtx("decode", at, at + 1000);
  b.nvtx("layer0", at + 10, at + 500);
  b.nvtx("layer1", at + 500, at + 990);
  b.kernel(1, at + 100, at + 100 + d.gemm0, "gemm", at + 20, at + 25);
  b.kernel(1, at + 100 + d.gemm0, at + 100 + d.gemm0 + d.gemm1, "gemm", at + 30, at + 35);
  b.kernel(aux, at + 150, at + 150 + d.softmax, "softmax", at + 40, at + 45);
  b.kernel(1, at + 600, at + 600 + d.layer1_gemm, "gemm", at + 510, at + 515);
  if (d.extra) b.kernel(1, at + 650, at + 650 + d.extra, "extra", at + 520, at + 525);
}

prof::Trace diff_trace(prof::Ns clock, const std::string& aux_name, StepTimes first, StepTimes second) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(1, 0, kNoTime, kNoTime, "main");
  b.stream(2, 0, kNoTime, kNoTime, aux_name);
  add_step(b, clock, first, 2);
  add_step(b, clock + 1000, second, 2);
  t.finalize();
  return t;
}

TEST(RangeDiff, HandComputedRolesAndBusyTime) {
  // A per-layer (aux "L0.aux0"), B shared ("target.aux0") on a clock 1e9 ns later.
  const StepTimes a1{100, 60, 30, 100, 0}, a2{120, 60, 30, 100, 0};
  const StepTimes b1{150, 50, 40, 40, 10}, b2{130, 50, 40, 40, 10};
  Viewer v(diff_trace(0, "L0.aux0", a1, a2), "a", diff_trace(1'000'000'000, "target.aux0", b1, b2), "b", {}, {});
  ASSERT_EQ(v.alignment(), "decode:0");
  // [0, 700) of the first step: A gemm 100 + 60, softmax 30, layer1 gemm 100 (starts at 600);
  // B gemm 150 + 50, softmax 40, layer1 gemm 40, extra 10 (starts at 650).
  v.select_range(v.time_zero(), v.time_zero() + 700);
  ASSERT_TRUE(v.range_diff().has_value());
  const RangeDiff& d = *v.range_diff();
  struct Want {
    std::string key;
    uint64_t count_a, count_b;
    prof::Ns total_a, total_b;
  };
  // By |delta|: 60, 50, then the 10s by key.
  const std::vector<Want> want = {{"decode/layer1 :: gemm #0", 1, 1, 100, 40},
                                  {"decode/layer0 :: gemm #0", 1, 1, 100, 150},
                                  {"decode/layer0 :: gemm #1", 1, 1, 60, 50},
                                  {"decode/layer0 :: softmax #0", 1, 1, 30, 40},
                                  {"decode/layer1 :: extra #0", 0, 1, 0, 10}};
  ASSERT_EQ(d.rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].key);
    EXPECT_EQ(d.rows[i].key, want[i].key);
    EXPECT_EQ(d.rows[i].count_a, want[i].count_a);
    EXPECT_EQ(d.rows[i].count_b, want[i].count_b);
    EXPECT_EQ(d.rows[i].total_a, want[i].total_a);
    EXPECT_EQ(d.rows[i].total_b, want[i].total_b);
    EXPECT_DOUBLE_EQ(d.rows[i].median_a, double(want[i].total_a));  // one op each: its duration
    EXPECT_EQ(d.rows[i].delta(), want[i].total_b - want[i].total_a);
  }
  EXPECT_EQ(d.rows[3].streams_a, std::vector<std::string>{"L0.aux0"});  // the stream labels, per side
  EXPECT_EQ(d.rows[3].streams_b, std::vector<std::string>{"target.aux0"});
  EXPECT_EQ(d.rows[0].streams_a, std::vector<std::string>{"main"});
  EXPECT_TRUE(d.rows[4].streams_a.empty());
  EXPECT_EQ(d.roles_only_a, 0u);
  EXPECT_EQ(d.roles_only_b, 1u);
  // Busy: A [100, 260) + [600, 700) = 260; B [100, 300) + [600, 640) + [650, 660) = 250.
  EXPECT_EQ(v.block(0).range->gpu_busy, 260);
  EXPECT_EQ(v.block(1).range->gpu_busy, 250);
  EXPECT_EQ(role_label(d.rows[1]), "decode/layer0 :: gemm #0");
  // Both steps: medians over two ops (A 100 and 120, B 150 and 130).
  v.select_range(v.time_zero(), v.time_zero() + 2000);
  const auto& gemm0 = *std::find_if(v.range_diff()->rows.begin(), v.range_diff()->rows.end(),
                                    [](const RangeRoleRow& r) { return r.key == "decode/layer0 :: gemm #0"; });
  EXPECT_EQ(gemm0.count_a, 2u);
  EXPECT_DOUBLE_EQ(gemm0.median_a, 110);
  EXPECT_EQ(gemm0.total_a, 220);
  EXPECT_DOUBLE_EQ(gemm0.median_b, 140);
  EXPECT_EQ(gemm0.total_b, 280);
  // A range before both traces: no rows, no busy time.
  v.select_range(v.time_zero() - 500, v.time_zero() - 100);
  EXPECT_TRUE(v.range_diff()->rows.empty());
  EXPECT_EQ(v.block(1).range->gpu_busy, 0);
}

TEST(RangeDiff, LabelsStartAtTheLayer) {
  RangeRoleRow r;
  r.path = "decode/target/L4.c4a/ffn/moe/routed_experts";
  r.name = "void sl::moe_gemv_kernel<4>(float const*)";
  r.ordinal = 1;
  EXPECT_EQ(role_label(r), ".../L4.c4a/ffn/moe/routed_experts :: moe_gemv_kernel #1");
  r.path = "decode/draft1/head/head/x/y";
  EXPECT_EQ(role_label(r), ".../draft1/head/head/x/y :: moe_gemv_kernel #1");
  r.path = "ProfilerStep/a/b/c/d";
  EXPECT_EQ(role_label(r), ".../b/c/d :: moe_gemv_kernel #1");  // no instance named: the last 3
}

// ---- the ruler on an absolute clock ----

// A PyTorch profiler trace (Kineto JSON in torch.profiler's layout): baseTimeNanoseconds a Unix
// time, the events' "ts" in microseconds on CUPTI's clock, 5.48e12 us (63 days) after it. Three
// ProfilerSteps 1 ms apart, each with a launch and a 50 us kernel.
std::string pytorch_absolute_trace(double first_us) {
  std::ostringstream o;
  o.precision(3);
  o << std::fixed << R"({"schemaVersion": 1, "traceEvents": [
  {"name": "process_name", "ph": "M", "ts": 0, "pid": 4242, "tid": 0, "args": {"name": "python3"}})";
  for (int s = 0; s < 3; ++s) {
    const double t = first_us + 1000.0 * s;
    o << R"(,
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" << s << R"(", "pid": 4242, "tid": 4242, "ts": )" << t
      << R"(, "dur": 500},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": )" << t + 10
      << R"(, "dur": 5, "args": {"correlation": )" << 100 + s << R"(, "cbid": 211}},
  {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": )" << t + 20
      << R"(, "dur": 50, "args": {"stream": 7, "correlation": )" << 100 + s
      << R"(, "device": 0, "context": 1, "grid": [1, 1, 1], "block": [1, 1, 1]}})";
  }
  o << R"(
], "baseTimeNanoseconds": 1700000000000000000})";
  return o.str();
}

TEST(Ruler, AbsoluteClockCountsFromTheTraceStart) {
  const prof::Trace t = prof::load_kineto_json(pytorch_absolute_trace(5'480'000'000'000.0), "pytorch.json");
  ASSERT_EQ(t.base_time, 1'700'000'000'000'000'000);
  const TimelineModel m = build_timeline(t);
  ASSERT_EQ(m.begin, 1'700'000'000'000'000'000 + 5'480'000'000'000'000);
  EXPECT_EQ(m.end - m.begin, 2'500'000);  // the last step ends 2.5 ms after the first starts
  // The base is 63 days before the first event: not the trace's start.
  EXPECT_EQ(time_zero(t, m), m.begin);
  // The whole trace, 1000 px: ticks every 0.5 ms, labelled from the start, each its own.
  const TimeWindow w = fit_window(m.begin, m.end);
  const std::vector<Tick> ticks = ruler_ticks(w, time_zero(t, m), 1000, 90, 7);
  std::vector<std::string> labels;
  for (const Tick& k : ticks) labels.push_back(k.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"0.0 ms", "0.5 ms", "1.0 ms", "1.5 ms", "2.0 ms", "2.5 ms"}));
  EXPECT_NEAR(ticks[2].x, (1e6 + 50e3) / 2.6e6 * 1000, 1e-6);  // 1 ms, with the 2 % margin before it
  // What the ruler showed before: durations from the base time, 3 significant digits.
  EXPECT_EQ(format_duration(double(m.begin - t.base_time) + 5e5), format_duration(double(m.begin - t.base_time) + 1e6));
}

TEST(Ruler, ConsecutiveTicksDifferFarFromZero) {
  // Zoomed to 40 ns, 2.4 ms into a trace on the Unix clock (1.7e18 ns, where a double resolves
  // 256 ns): ticks 5 ns apart, each label the tick's own time.
  const prof::Ns zero = 1'700'000'000'000'000'000;
  const TimeWindow w{2'400'000.1, 2'400'040.1, zero};
  const std::vector<Tick> ticks = ruler_ticks(w, zero, 1000, 90, 7);
  ASSERT_GE(ticks.size(), 4u);
  for (size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_EQ(ticks[i].label, std::to_string(int64_t(std::llround(ticks[i].rel))) + " ns");
    if (i == 0) continue;
    EXPECT_NE(ticks[i].label, ticks[i - 1].label);
    EXPECT_GE(ticks[i].x - ticks[i - 1].x, 7.0 * double(ticks[i].label.size()));  // labels fit between ticks
  }
  EXPECT_EQ(ticks.front().label, "2400005 ns");
  // Microseconds: 3 us of a 1.2 ms-into-the-trace window, ticks 0.5 us apart.
  const std::vector<Tick> us = ruler_ticks(TimeWindow{1'200'500, 1'203'500, zero}, zero, 1000, 90, 7);
  ASSERT_GE(us.size(), 2u);
  EXPECT_EQ(us[0].label, "1200.5 us");
  EXPECT_EQ(us[1].label, "1201.0 us");
}

TEST(Ruler, LabelFormat) {
  EXPECT_EQ(format_tick(1300.05e3, 50, 400e3), "1300.05 us");
  EXPECT_EQ(format_tick(0, 1e5, 2.6e6), "0.0 ms");
  EXPECT_EQ(format_tick(-5e5, 5e5, 2.6e6), "-0.5 ms");
  EXPECT_EQ(format_tick(-1e-3, 0.1, 50), "0.0 ns");  // no "-0.0"
  EXPECT_EQ(format_tick(2e9, 1e9, 5e9), "2 s");
  EXPECT_EQ(format_tick(1.5e9, 1e8, 5e9), "1.5 s");
  EXPECT_EQ(format_instant(1'234'567), "1.234567 ms");
  EXPECT_EQ(format_instant(-250), "-250 ns");
}

TEST(Ruler, TimeZeroIsTheBaseWhenItIsTheSessionStart) {
  // Our traces: the base time is the tracing session's start, shortly before the first record
  // (here 100 us before a trace 100 us long: still its start).
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.kernel(1, 1'000'000, 1'100'000, "k");
  t.base_time = 900'000;
  t.finalize();
  EXPECT_EQ(time_zero(t, build_timeline(t)), 900'000);
  t.base_time = 899'999;  // further than the trace's span before it: another clock's reference
  EXPECT_EQ(time_zero(t, build_timeline(t)), 1'000'000);
  t.base_time = 0;  // unknown
  EXPECT_EQ(time_zero(t, build_timeline(t)), 1'000'000);
  t.base_time = 1'050'000;  // after the first item: not a start
  EXPECT_EQ(time_zero(t, build_timeline(t)), 1'000'000);
}

}  // namespace
}  // namespace sl::ui
