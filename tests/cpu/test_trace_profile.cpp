// The trace profile against hand-computed expectations: streams busy, the stream-pair overlap
// matrix, aux hidden per group, per-role statistics over the whole trace and in a time window,
// the group of a role path; the report renders it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "profiler/profile_report.h"
#include "profiler/synthetic.h"
#include "profiler/trace_profile.h"

using namespace sl::prof;

namespace {

// One step "decode" [0, 1000). Streams: 1 "main", 2 "L0.aux0", 3 "L1.aux0", 4 "target.aux1".
//   M1 main    [100,200)  decode/target/L0.c4a/attn
//   A1 L0.aux0 [150,250)  decode/target/L0.c4a/attn     hidden under main: [150,200) = 50
//   M2 main    [300,400)  decode/target/L1.c4a/attn
//   A2 L1.aux0 [320,380)  decode/target/L1.c4a/attn     hidden: 60
//   A3 target.aux1 [350,450) decode/draft0/mtp0.c4a     hidden: [350,400) = 50
Trace three_aux_streams() {
  Trace t;
  TraceBuilder b(t);
  b.stream(1, 0, kNoTime, kNoTime, "main");
  b.stream(2, 0, kNoTime, kNoTime, "L0.aux0");
  b.stream(3, 0, kNoTime, kNoTime, "L1.aux0");
  b.stream(4, 0, kNoTime, kNoTime, "target.aux1");
  b.nvtx("decode", 0, 1000);
  b.nvtx("target", 1, 90);
  b.nvtx("L0.c4a", 2, 40);
  b.nvtx("attn", 3, 30);
  b.kernel(1, 100, 200, "M1", 4, 5);
  b.kernel(2, 150, 250, "A1", 6, 7);
  b.nvtx("L1.c4a", 41, 80);
  b.nvtx("attn", 42, 70);
  b.kernel(1, 300, 400, "M2", 43, 44);
  b.kernel(3, 320, 380, "A2", 45, 46);
  b.nvtx("draft0", 91, 200);
  b.nvtx("mtp0.c4a", 92, 150);
  b.kernel(4, 350, 450, "A3", 93, 94);
  t.finalize();
  return t;
}

ProfileOptions decode_steps() {
  ProfileOptions o;
  o.roles.step_range = "decode";
  return o;
}

}  // namespace

TEST(TraceProfile, RoleGroups) {
  const GroupOptions automatic;
  EXPECT_EQ(role_group("decode/target/L3.c4a/attn/phase_a/rmsnorm", "decode", automatic), "L.c4a");
  EXPECT_EQ(role_group("decode/draft0/mtp0.c4a/attn", "decode", automatic), "mtp.c4a");  // '.' before digits
  EXPECT_EQ(role_group("decode/target/layer3/attn", "decode", automatic), "layer");
  EXPECT_EQ(role_group("decode/target/attn", "decode", automatic), "(none)");
  EXPECT_EQ(role_group("ProfilerStep/model.layers.3.mlp", "", automatic), "model.layers..mlp");
  EXPECT_EQ(role_group("(no range)", "", automatic), "(none)");
  EXPECT_EQ(role_group("s/x1.c4a2b.y22", "s", automatic), "x.c4a2b.y");  // only digits ending a part go
  EXPECT_EQ(role_group("decode/target/L3.c4a", "decode", GroupOptions{0}), "target");
  EXPECT_EQ(role_group("decode/target/L3.c4a", "decode", GroupOptions{1}), "L.c4a");
  EXPECT_EQ(role_group("decode/target/L3.c4a", "decode", GroupOptions{5}), "(none)");
}

TEST(TraceProfile, StreamsBusyOverlapAndAuxHidden) {
  const Trace t = three_aux_streams();
  const TraceProfile p = profile_trace(t, decode_steps());
  EXPECT_EQ(p.analysis.main_stream, 1u);  // most kernel time
  // [100,150) 1, [150,200) 2, [200,250) 1, [250,300) 0, [300,320) 1, [320,350) 2, [350,380) 3,
  // [380,400) 2, [400,450) 1.
  EXPECT_EQ(p.streams_busy, (std::vector<Ns>{50, 170, 100, 30}));
  const StreamOverlap& o = p.overlap;
  ASSERT_EQ(o.labels, (std::vector<std::string>{"L0.aux0", "L1.aux0", "main", "target.aux1"}));
  const std::vector<Ns> want = {
      // L0.aux0 L1.aux0 main target.aux1
      100, 0, 50, 0,    // L0.aux0
      0, 60, 60, 30,    // L1.aux0
      50, 60, 200, 50,  // main
      0, 30, 50, 100,   // target.aux1
  };
  EXPECT_EQ(o.time, want);
  ASSERT_EQ(p.aux_hidden.size(), 2u);
  const GroupHidden& l = p.aux_hidden[0];
  EXPECT_EQ(l.group, "L.c4a");
  EXPECT_EQ(l.kernels, 4u);
  EXPECT_EQ(l.aux_kernels, 2u);
  EXPECT_EQ(l.aux_time, 160);
  EXPECT_EQ(l.hidden, 110);
  EXPECT_DOUBLE_EQ(l.fraction, 110.0 / 160.0);
  const GroupHidden& m = p.aux_hidden[1];
  EXPECT_EQ(m.group, "mtp.c4a");
  EXPECT_EQ(m.aux_time, 100);
  EXPECT_EQ(m.hidden, 50);
  // The whole trace's aux hidden (analyze) is the sum over groups.
  EXPECT_EQ(p.analysis.whole.aux_hidden, l.hidden + m.hidden);
}

// "gemm" in three steps with durations 10, 30, 20; "relu" 5 each. A window over the last two
// steps holds two of each.
TEST(TraceProfile, RoleStatisticsAndTimeWindow) {
  Trace t;
  TraceBuilder b(t);
  b.stream(7, 0, kNoTime, kNoTime, "main");
  const Ns dur[3] = {10, 30, 20};
  for (int s = 0; s < 3; ++s) {
    const Ns t0 = 1000 * s;
    b.nvtx("step", t0, t0 + 500);
    b.nvtx("mlp", t0 + 1, t0 + 100);
    b.kernel(7, t0 + 200, t0 + 200 + dur[s], "gemm", t0 + 2, t0 + 3);
    b.kernel(8, t0 + 300, t0 + 305, "relu", t0 + 4, t0 + 5);
  }
  t.finalize();
  ProfileOptions o;
  o.roles.step_range = "step";
  const TraceProfile p = profile_trace(t, o);
  ASSERT_EQ(p.role_stats.size(), 2u);
  const RoleStats& g = p.role_stats[0];  // by total: gemm 60, relu 15
  EXPECT_EQ(g.key, "step/mlp :: gemm #0");
  EXPECT_EQ(g.count, 3u);
  EXPECT_EQ(g.median, 20.0);
  EXPECT_EQ(g.total, 60);
  EXPECT_EQ(g.streams, (std::vector<std::string>{"main"}));
  EXPECT_EQ(p.role_stats[1].streams, (std::vector<std::string>{"stream 8"}));
  EXPECT_EQ(p.role_stats[1].total, 15);

  const std::vector<RoleStats> w = role_stats_in_window(t, p, 1000, 3000);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].key, "step/mlp :: gemm #0");
  EXPECT_EQ(w[0].count, 2u);
  EXPECT_EQ(w[0].median, 25.0);  // (30 + 20) / 2
  EXPECT_EQ(w[0].total, 50);
  EXPECT_EQ(w[1].count, 2u);
  // [from, to): a kernel starting at `to` is out.
  EXPECT_EQ(role_stats_in_window(t, p, 0, 200).size(), 0u);
  EXPECT_EQ(role_stats_in_window(t, p, 0, 201).size(), 1u);
  // Another trace's profile is refused.
  Trace other = three_aux_streams();
  EXPECT_THROW(role_stats_in_window(other, p, 0, 10), sl::Error);
}

TEST(TraceProfile, ReportsHoldTheParts) {
  const Trace t = three_aux_streams();
  const TraceProfile p = profile_trace(t, decode_steps());
  const nlohmann::json j = profile_to_json(p);
  for (const char* k : {"options", "analysis", "placement", "role_stats", "waits", "critical_path", "streams",
                        "streams_busy_ns", "stream_overlap", "aux_hidden"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["streams_busy_ns"], nlohmann::json({50, 170, 100, 30}));
  EXPECT_EQ(j["critical_path"]["steps"], 1);
  EXPECT_EQ(j["aux_hidden"][0]["group"], "L.c4a");
  EXPECT_EQ(j["aux_hidden"][0]["hidden_ns"], 110);
  EXPECT_EQ(j["role_stats"].size(), 5u);
  // The critical path of the one step: the last op A3 ends at 450.
  EXPECT_EQ(j["critical_path"]["per_step"][0]["latency_ns"], 450);
  EXPECT_EQ(j["critical_path"]["typical_step"]["segments"].back()["role"], "decode/draft0/mtp0.c4a :: A3 #0");
  const std::string text = profile_to_text(p);
  for (const char* s : {"waits", "critical path", "roles by total time", "streams busy", "main + target.aux1",
                        "aux hidden", "L.c4a", "API calls"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
}
