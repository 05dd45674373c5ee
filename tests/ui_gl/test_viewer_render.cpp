// The viewer drawn for real (OpenGL under Xvfb in CI, see CMakeLists.txt): two kernels on two
// named streams, and the pixels where the time axis says they are must carry their colors.
// Positions come from the trace's times and the window the test sets, not from the viewer's
// own layout of boxes.
#include <gtest/gtest.h>

#include <cstdlib>

#include "profiler/synthetic.h"
#include "ui/gl_window.h"
#include "ui/time_window.h"
#include "ui/viewer.h"

namespace sl::ui {
namespace {

struct Rgb {
  int r, g, b;
};
Rgb rgb_of(uint32_t abgr) { return {int(abgr & 0xFF), int((abgr >> 8) & 0xFF), int((abgr >> 16) & 0xFF)}; }

class ViewerRender : public ::testing::Test {
 protected:
  // One window for the suite: X servers may reset when their last client leaves, and a test
  // opening a second display connection right then would fail for a reason of no interest.
  static void SetUpTestSuite() {
    if (std::getenv("DISPLAY")) window_ = new GlWindow(1200, 800, "test", /*visible=*/false);
  }
  static void TearDownTestSuite() {
    delete window_;
    window_ = nullptr;
  }
  void SetUp() override {
    if (!window_) GTEST_SKIP() << "no X display (DISPLAY unset): CTest runs this test under xvfb-run";
  }
  // Draws `frames` frames of `v` and returns the last one's pixels.
  static std::vector<uint8_t> render(Viewer& v, int frames, int& width, int& height) {
    std::vector<uint8_t> px;
    for (int f = 0; f < frames; ++f) {
      window_->begin_frame();
      v.draw();
      window_->end_frame();
      if (f + 1 == frames) px = window_->read_pixels(width, height);
      window_->present();
    }
    return px;
  }
  static inline GlWindow* window_ = nullptr;
  static Rgb pixel(const std::vector<uint8_t>& px, int w, float x, float y) {
    const size_t o = (size_t(int(y)) * size_t(w) + size_t(int(x))) * 4;
    return {px[o], px[o + 1], px[o + 2]};
  }
};

bool near(Rgb a, Rgb b) { return std::abs(a.r - b.r) <= 2 && std::abs(a.g - b.g) <= 2 && std::abs(a.b - b.b) <= 2; }

TEST_F(ViewerRender, KernelsLandWhereTheirTimesSay) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(7, 0, prof::kNoTime, prof::kNoTime, "main");
  b.stream(8, 0, prof::kNoTime, prof::kNoTime, "aux0");
  b.kernel(7, 1'000'000, 1'400'000, "alpha_kernel", 990'000, 995'000);
  b.kernel(8, 1'200'000, 1'300'000, "beta_kernel", 996'000, 999'000);
  t.finalize();

  Viewer v(std::move(t), "two kernels");
  const TimeWindow w{900'000, 1'500'000};
  v.set_window(w);
  int width = 0, height = 0;
  std::vector<uint8_t> px = render(v, 3, width, height);
  ASSERT_EQ(width, 1200);
  ASSERT_EQ(height, 800);
  const Rect r = v.timeline_rect();
  ASSERT_GT(r.x1 - r.x0, 500.f);
  auto x_at = [&](double ns) { return r.x0 + float((ns - w.t0) / (w.t1 - w.t0)) * (r.x1 - r.x0); };
  // Sample near the bottom of a row and near the end of a box: clear of the labels' glyphs.
  auto y_in = [&](size_t track) { return r.y0 + v.row_top(track, 0) + TimelineLayout::kRowHeight - 3; };
  const Rgb alpha = rgb_of(name_color("alpha_kernel")), beta = rgb_of(name_color("beta_kernel"));
  EXPECT_TRUE(near(pixel(px, width, x_at(1'380'000), y_in(0)), alpha));
  EXPECT_TRUE(near(pixel(px, width, x_at(1'290'000), y_in(1)), beta));
  // Outside the kernels' times, the rows show no kernel color.
  EXPECT_FALSE(near(pixel(px, width, x_at(1'450'000), y_in(0)), alpha));
  EXPECT_FALSE(near(pixel(px, width, x_at(1'350'000), y_in(1)), beta));
  EXPECT_FALSE(near(pixel(px, width, x_at(950'000), y_in(0)), alpha));

  // Zoomed to [1.25 ms, 1.45 ms): alpha now ends at 3/4 of the axis.
  v.set_window({1'250'000, 1'450'000});
  px = render(v, 2, width, height);
  const float x_end = v.timeline_rect().x0 + 0.75f * (v.timeline_rect().x1 - v.timeline_rect().x0);
  EXPECT_TRUE(near(pixel(px, width, x_end - 3, y_in(0)), alpha));
  EXPECT_FALSE(near(pixel(px, width, x_end + 3, y_in(0)), alpha));
}

TEST_F(ViewerRender, RulerTicksSitOnTheTimeAxis) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.kernel(1, 1'000'000, 2'000'000, "k");
  t.finalize();
  Viewer v(std::move(t), "ruler");
  ASSERT_EQ(v.time_zero(), 1'000'000);
  const TimeWindow w{-100'000, 1'100'000, 1'000'000};  // 1.2 ms, from 0.1 ms before time zero
  v.set_window(w);
  int width = 0, height = 0;
  const std::vector<uint8_t> px = render(v, 2, width, height);
  const Rect axis = v.timeline_rect(), ruler = v.ruler_rect();
  EXPECT_FLOAT_EQ(ruler.x0, axis.x0);  // the ruler and the tracks share one time axis
  EXPECT_FLOAT_EQ(ruler.x1, axis.x1);
  const float aw = axis.x1 - axis.x0;
  const double step = tick_step(w.span(), aw, 90.0);
  const float y = ruler.y1 - 3;  // the tick marks' lower end, below the labels
  // Marks are light gray (200) on a dark ruler (30); an anti-aliased 1 px line at a fractional
  // x splits its coverage over two pixels, so "bright" is anything well above the background.
  auto bright = [](Rgb c) { return c.r > 90 && c.g > 90 && c.b > 90; };
  int ticks = 0;
  for (double rel = 0; rel < w.t1; rel += step, ++ticks) {
    const float x = axis.x0 + float((rel - w.t0) / w.span()) * aw;
    bool found = false;
    for (float dx = -1; dx <= 1; dx += 1) found = found || bright(pixel(px, width, x + dx, y));
    EXPECT_TRUE(found) << "no tick mark at " << rel << " ns (x " << x << ")";
    EXPECT_FALSE(bright(pixel(px, width, x - 6, y))) << "a mark between ticks, left of " << rel << " ns";
  }
  EXPECT_GE(ticks, 3);
}

TEST_F(ViewerRender, RangeSelectionComputesStatistics) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.kernel(1, 0, 100, "a");
  b.kernel(2, 50, 200, "b");
  t.finalize();
  Viewer v(std::move(t), "selection");
  v.select_range(25, 75);
  int width = 0, height = 0;
  render(v, 1, width, height);
  ASSERT_TRUE(v.range().has_value());
  EXPECT_EQ(v.range()->gpu_busy, 50);
  EXPECT_EQ(v.range()->stream_overlap, 25);  // [50, 75)
}

// One decode step with a kernel 100 .. 400 us into it, on clock `clock`.
prof::Trace decode_step(prof::Ns clock, prof::Ns decode_at, const char* kernel) {
  prof::Trace t;
  prof::TraceBuilder b(t);
  b.stream(7, 0, prof::kNoTime, prof::kNoTime, "main");
  b.nvtx("decode", clock + decode_at, clock + decode_at + 1'000'000);
  b.kernel(7, clock + decode_at + 100'000, clock + decode_at + 400'000, kernel, clock + decode_at + 10'000,
           clock + decode_at + 15'000);
  t.finalize();
  return t;
}

TEST_F(ViewerRender, AbBlocksShareOneAlignedTimeAxis) {
  // A's decode starts 1 ms into its clock, B's 5 ms into CUPTI's (1.8e18 ns): aligned, both
  // kernels cover 100 .. 400 us of the one time axis, each in its own block.
  const prof::Ns big = 1'800'000'000'000'000'000;
  Viewer v(decode_step(0, 1'000'000, "alpha_kernel"), "a.json", decode_step(big, 5'000'000, "beta_kernel"), "b.json",
           CompareOptions{}, TimelineOptions{true, false});
  ASSERT_EQ(v.alignment(), "decode:0");
  const TimeWindow w{-50'000, 500'000, v.time_zero()};
  v.set_window(w);
  int width = 0, height = 0;
  const std::vector<uint8_t> px = render(v, 3, width, height);
  const Rect r = v.timeline_rect();
  auto x_at = [&](double ns) { return r.x0 + float((ns - w.t0) / w.span()) * (r.x1 - r.x0); };
  const size_t a_main = 0, b_main = v.block(0).model.tracks.size();  // B's tracks follow A's
  ASSERT_EQ(v.block(1).model.tracks[0].label, "main");
  auto y_in = [&](size_t track) { return r.y0 + v.row_top(track, 0) + TimelineLayout::kRowHeight - 3; };
  ASSERT_LT(y_in(b_main), r.y1) << "B's main track is off screen";
  const Rgb alpha = rgb_of(name_color("alpha_kernel")), beta = rgb_of(name_color("beta_kernel"));
  for (double t : {120'000.0, 380'000.0}) {
    EXPECT_TRUE(near(pixel(px, width, x_at(t), y_in(a_main)), alpha)) << t;
    EXPECT_TRUE(near(pixel(px, width, x_at(t), y_in(b_main)), beta)) << t;
  }
  for (double t : {80'000.0, 450'000.0}) {
    EXPECT_FALSE(near(pixel(px, width, x_at(t), y_in(a_main)), alpha)) << t;
    EXPECT_FALSE(near(pixel(px, width, x_at(t), y_in(b_main)), beta)) << t;
  }
  // Each block starts with its header bar, marked A blue, B orange at its left end.
  auto header = [&](size_t b) { return pixel(px, width, r.x0 - TimelineLayout::kHeaderWidth + 2, r.y0 + v.block(b).top + 5); };
  EXPECT_TRUE(near(header(0), Rgb{60, 110, 190}));
  EXPECT_TRUE(near(header(1), Rgb{200, 120, 40}));
  // A range selected on the shared axis covers both kernels' 100 .. 200 us.
  v.select_range(v.time_zero() + 100'000, v.time_zero() + 200'000);
  EXPECT_EQ(v.block(0).range->gpu_busy, 100'000);
  EXPECT_EQ(v.block(1).range->gpu_busy, 100'000);
  ASSERT_TRUE(v.range_diff().has_value());
  ASSERT_EQ(v.range_diff()->rows.size(), 2u);  // alpha in A, beta in B: different names, two roles
}

}  // namespace
}  // namespace sl::ui
