// The trace model: compactness, string interning, finalize().
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "profiler/synthetic.h"
#include "profiler/trace.h"

using namespace sl::prof;

TEST(Trace, EventRecordsStayUnder100Bytes) {
  EXPECT_LE(sizeof(Kernel), 100u);
  EXPECT_LE(sizeof(Memcpy), 100u);
  EXPECT_LE(sizeof(Memset), 100u);
  EXPECT_LE(sizeof(ApiCall), 100u);
  EXPECT_LE(sizeof(Sync), 100u);
  EXPECT_LE(sizeof(CudaEventRecord), 100u);
  EXPECT_LE(sizeof(NvtxRange), 100u);
  EXPECT_LE(sizeof(Allocation), 100u);
  EXPECT_LE(sizeof(CounterSample), 100u);
  EXPECT_LE(sizeof(Overhead), 100u);
}

TEST(Trace, SyntheticTraceHoldsUnder100BytesPerEvent) {
  SyntheticOptions o;
  o.target_events = 200'000;
  Trace t = make_synthetic_trace(o);
  ASSERT_GT(t.event_count(), 100'000u);
  for (auto* v : {&t.kernels}) v->shrink_to_fit();
  t.api_calls.shrink_to_fit();
  t.nvtx.shrink_to_fit();
  t.syncs.shrink_to_fit();
  t.cuda_events.shrink_to_fit();
  t.memcpys.shrink_to_fit();
  t.memsets.shrink_to_fit();
  t.allocations.shrink_to_fit();
  double per_event = double(t.bytes_held()) / double(t.event_count());
  EXPECT_LE(per_event, 100.0) << "bytes held per event";
}

TEST(Trace, StreamRoleIsTheTextAfterTheLastDot) {
  EXPECT_EQ(stream_role("L3.aux0"), "aux0");
  EXPECT_EQ(stream_role("target.aux0"), "aux0");
  EXPECT_EQ(stream_role("a.b.aux2"), "aux2");
  // A pooled stream serving several users (the torch source past 32 draws): the set of their roles.
  EXPECT_EQ(stream_role("torch.pool.p0.03 = shared_expert + mtp10.aux1"), "aux1|shared_expert");
  EXPECT_EQ(stream_role("torch.pool.p0.00 = target.aux0"), "aux0");
  EXPECT_EQ(stream_role("shared_expert"), "shared_expert");
  EXPECT_EQ(stream_role("main"), "main");
  EXPECT_EQ(stream_role("odd."), "odd.");
  EXPECT_EQ(stream_role(""), "");
}

TEST(Trace, StringTableInternsOnce) {
  StringTable s;
  EXPECT_EQ(s.str(0), "");
  StrId a = s.intern("gemm");
  StrId b = s.intern("rope");
  EXPECT_NE(a, b);
  EXPECT_EQ(s.intern("gemm"), a);
  EXPECT_EQ(s.find("rope"), b);
  EXPECT_EQ(s.find("nope"), kNoId);
  // Copies keep working lookups (the index holds views into the copy's own storage).
  StringTable c = s;
  EXPECT_EQ(c.find("gemm"), a);
  for (int i = 0; i < 10000; ++i) c.intern("name" + std::to_string(i));
  EXPECT_EQ(c.find("name42"), c.intern("name42"));
  EXPECT_EQ(c.str(a), "gemm");
}

TEST(Trace, StripApiVersion) {
  EXPECT_EQ(strip_api_version("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(strip_api_version("cudaStreamSynchronize_v3020"), "cudaStreamSynchronize");
  EXPECT_EQ(strip_api_version("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(strip_api_version("my_var"), "my_var");
  EXPECT_EQ(strip_api_version("x_v"), "x_v");
}

TEST(Trace, DisplayNamesFollowKineto) {
  EXPECT_EQ(memcpy_display_name(MemcpyKind::HtoD, MemoryKind::Pageable, MemoryKind::Device),
            "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(memset_display_name(MemoryKind::Device), "Memset (Device)");
}

TEST(Trace, FinalizeSortsAndComputesDepthAndDeclaresStreams) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(3, 50, 60, "b");
  b.kernel(7, 10, 20, "a");
  b.nvtx("inner", 20, 30);
  b.nvtx("outer", 0, 100);
  b.nvtx("inner2", 40, 50);
  t.finalize();
  ASSERT_EQ(t.kernels.size(), 2u);
  EXPECT_EQ(t.kernels[0].start, 10);
  EXPECT_EQ(t.nvtx[0].start, 0);
  EXPECT_EQ(t.nvtx[0].depth, 0);
  EXPECT_EQ(t.nvtx[1].depth, 1);
  EXPECT_EQ(t.nvtx[2].depth, 1);
  ASSERT_EQ(t.streams.size(), 2u);
  EXPECT_EQ(t.streams[0].id, 3u);
  EXPECT_EQ(t.stream_label(3), "stream 3");
  EXPECT_EQ(t.base_time, 0);
  EXPECT_EQ(t.first_time(), 0);
  EXPECT_EQ(t.last_time(), 100);
  EXPECT_EQ(t.event_count(), 5u);
  ASSERT_EQ(t.devices.size(), 1u);
}

TEST(Trace, FinalizeOrdersEqualStartsLongestFirst) {
  Trace t;
  TraceBuilder b(t);
  b.nvtx("child", 0, 10);
  b.nvtx("parent", 0, 100);
  t.finalize();
  EXPECT_EQ(t.str(t.nvtx[0].name), "parent");
  EXPECT_EQ(t.nvtx[1].depth, 1);
}

TEST(Trace, RecordCountsClean) {
  RecordCounts c;
  EXPECT_TRUE(c.clean());
  c.zero_timestamps = 1;
  EXPECT_FALSE(c.clean());
  RecordCounts d;
  d.dropped = 2;
  c += d;
  EXPECT_EQ(c.dropped, 2u);
}

// finalize(threads) sorts on several threads: the same trace as finalize(), ties included (equal
// starts, and records equal in start and end whose order only the input gives).
TEST(Trace, FinalizeOnThreadsGivesTheSameTrace) {
  SyntheticOptions o;
  o.target_events = 200000;
  Trace src = make_synthetic_trace(o);
  std::mt19937 rng(11);
  auto scramble = [&](auto& v) {
    // Blocks shuffled (far moves) and neighbours swapped (near moves); every tenth record gets
    // its predecessor's times, so that ties need the input order.
    for (size_t i = 1; i < v.size(); i += 10) v[i].start = v[i - 1].start, v[i].end = v[i - 1].end;
    for (size_t i = 0; i + 64 <= v.size(); i += 64)
      if (rng() % 3 == 0) std::swap_ranges(v.begin() + i, v.begin() + i + 32, v.begin() + i + 32);
    for (size_t i = 1; i < v.size(); i += 2)
      if (rng() % 2) std::swap(v[i - 1], v[i]);
  };
  scramble(src.kernels), scramble(src.api_calls), scramble(src.syncs), scramble(src.nvtx);
  std::shuffle(src.cuda_events.begin(), src.cuda_events.end(), rng);
  ASSERT_GT(src.kernels.size(), 40000u) << "big enough for the parallel sorts";
  Trace one = src;
  one.finalize();
  for (unsigned threads : {2u, 3u, 8u}) {
    Trace t = src;
    t.finalize(threads);
    // Every field compared: tied records differ in correlation ids, so their order counts too.
    EXPECT_EQ(first_difference(one, t), "") << threads << " threads";
  }
}
