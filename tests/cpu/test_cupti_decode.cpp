// The CUPTI record decoder on synthetic record buffers built here: every record kind the session
// enables, out-of-order arrival, a graph launch (one correlation id, many kernels), invalid
// records, warm-up discarding. No GPU and no CUPTI calls needed.
#include <gtest/gtest.h>

#if STREAMLAB_HAVE_CUDA

#include <cstring>
#include <vector>

#include "profiler/analysis.h"
#include "profiler/cupti/cupti_decode.h"
#include "profiler/kineto_json.h"
#include "profiler/kineto_validate.h"

using namespace sl::prof;

namespace {

constexpr uint64_t T0 = 1'800'000'000'000'000'000ull;
constexpr uint32_t kPid = 777, kTid = 778;

const char* fake_api_name(ApiKind kind, uint32_t cbid) {
  if (kind == ApiKind::Driver) return cbid == 307 ? "cuLaunchKernel" : nullptr;
  switch (cbid) {
    case 211: return "cudaLaunchKernel_v7000";
    case 311: return "cudaGraphLaunch_v10000";
    case 41: return "cudaMemcpyAsync_v3020";
    case 51: return "cudaMemsetAsync_v3020";
    case 131: return "cudaStreamSynchronize_v3020";
    case 3: return "cudaGetDevice_v3020";  // noisy: filtered
    default: return nullptr;
  }
}

// A record buffer: records laid out back to back, 8-byte aligned, as CUPTI lays them out; the
// iterator below walks it by kind (the test knows the sizes it wrote).
class RecordBuffer {
 public:
  template <class R>
  void add(const R& r) {
    size_t off = data_.size();
    data_.resize(off + ((sizeof(R) + 7) & ~size_t(7)), 0);
    std::memcpy(data_.data() + off, &r, sizeof(R));
    offsets_.push_back(off);
  }
  std::vector<const CUpti_Activity*> records() const {
    std::vector<const CUpti_Activity*> v;
    for (size_t o : offsets_) v.push_back(reinterpret_cast<const CUpti_Activity*>(data_.data() + o));
    return v;
  }

 private:
  std::vector<uint8_t> data_;
  std::vector<size_t> offsets_;
};

CUpti_ActivityKernel10 kernel(uint32_t stream, uint64_t s, uint64_t e, const char* name, uint32_t corr) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = T0 + s;
  k.end = T0 + e;
  k.deviceId = 0;
  k.contextId = 1;
  k.streamId = stream;
  k.gridX = 132;
  k.gridY = k.gridZ = 1;
  k.blockX = 256;
  k.blockY = k.blockZ = 1;
  k.registersPerThread = 64;
  k.staticSharedMemory = 1024;
  k.dynamicSharedMemory = 2048;
  k.correlationId = corr;
  k.name = name;
  k.queued = T0 + s - 500;
  k.submitted = T0 + s - 200;
  return k;
}

CUpti_ActivityAPI api(uint32_t cbid, uint64_t s, uint64_t e, uint32_t corr, bool driver = false) {
  CUpti_ActivityAPI a{};
  a.kind = driver ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = cbid;
  a.start = T0 + s;
  a.end = T0 + e;
  a.processId = kPid;
  a.threadId = kTid;
  a.correlationId = corr;
  return a;
}

CUpti_ActivityMarker2 marker(uint32_t id, CUpti_ActivityFlag flag, uint64_t ts, const char* name, uint32_t tid = kTid) {
  CUpti_ActivityMarker2 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m.flags = flag;
  m.timestamp = T0 + ts;
  m.id = id;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.processId = kPid;
  m.objectId.pt.threadId = tid;
  m.name = name;
  m.domain = nullptr;
  return m;
}

// Every record kind the session enables.
RecordBuffer full_buffer() {
  RecordBuffer b;
  CUpti_ActivityDevice5 d{};
  d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  d.id = 0;
  d.name = "NVIDIA H200";
  d.numMultiprocessors = 132;
  d.computeCapabilityMajor = 9;
  d.numThreadsPerWarp = 32;
  d.maxWarpsPerMultiprocessor = 64;
  d.globalMemorySize = 150ull << 30;
  b.add(d);
  CUpti_ActivityContext3 c{};
  c.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  c.contextId = 1;
  c.deviceId = 0;
  c.nullStreamId = 7;
  b.add(c);
  CUpti_ActivityStream st{};
  st.kind = CUPTI_ACTIVITY_KIND_STREAM;
  st.contextId = 1;
  st.streamId = 13;
  st.priority = uint32_t(-1);
  st.flag = CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING;
  b.add(st);
  CUpti_ActivityName nm{};
  nm.kind = CUPTI_ACTIVITY_KIND_NAME;
  nm.objectKind = CUPTI_ACTIVITY_OBJECT_STREAM;
  nm.objectId.dcs.contextId = 1;
  nm.objectId.dcs.streamId = 13;
  nm.name = "aux0";
  b.add(nm);
  b.add(api(211, 1'000, 3'000, 10));
  b.add(kernel(7, 5'000, 20'000, "_Z4gemmPfi", 10));
  b.add(api(211, 3'500, 4'500, 11));
  b.add(kernel(13, 6'000, 12'000, "_Z6rmsnormv", 11));
  b.add(api(307, 4'600, 4'900, 12, /*driver=*/true));
  b.add(kernel(13, 12'000, 13'000, "plain_c_name", 12));
  b.add(api(3, 4'950, 4'960, 13));  // cudaGetDevice: filtered
  CUpti_ActivityMemcpy6 mc{};
  mc.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  mc.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  mc.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  mc.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  mc.bytes = 1 << 20;
  mc.start = T0 + 21'000;
  mc.end = T0 + 23'000;
  mc.deviceId = 0;
  mc.contextId = 1;
  mc.streamId = 7;
  mc.correlationId = 14;
  b.add(api(41, 20'000, 20'500, 14));
  b.add(mc);
  CUpti_ActivityMemset4 ms{};
  ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  ms.value = 0;
  ms.bytes = 4096;
  ms.start = T0 + 23'000;
  ms.end = T0 + 23'500;
  ms.contextId = 1;
  ms.streamId = 7;
  ms.correlationId = 15;
  ms.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  b.add(api(51, 20'600, 20'900, 15));
  b.add(ms);
  CUpti_ActivitySynchronization2 sy{};
  sy.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sy.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sy.start = T0 + 21'000;
  sy.end = T0 + 23'600;
  sy.correlationId = 16;
  sy.contextId = 1;
  sy.streamId = 7;
  sy.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  b.add(api(131, 21'000, 23'700, 16));
  b.add(sy);
  CUpti_ActivityCudaEvent2 ev{};
  ev.kind = CUPTI_ACTIVITY_KIND_CUDA_EVENT;
  ev.correlationId = 17;
  ev.contextId = 1;
  ev.streamId = 7;
  ev.eventId = 3;
  ev.deviceTimestamp = T0 + 20'000;
  b.add(ev);
  CUpti_ActivityMemory4 m1{};
  m1.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m1.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  m1.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m1.address = 0x7000;
  m1.bytes = 1 << 24;
  m1.timestamp = T0 + 2'000;
  m1.processId = kPid;
  m1.contextId = 1;
  m1.streamId = 7;
  b.add(m1);
  CUpti_ActivityMemory4 m2 = m1;
  m2.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  m2.timestamp = T0 + 22'000;
  b.add(m2);
  b.add(marker(1, CUPTI_ACTIVITY_FLAG_MARKER_START, 500, "step"));
  b.add(marker(2, CUPTI_ACTIVITY_FLAG_MARKER_START, 900, "L0"));
  b.add(marker(2, CUPTI_ACTIVITY_FLAG_MARKER_END, 19'000, nullptr));
  b.add(marker(1, CUPTI_ACTIVITY_FLAG_MARKER_END, 24'000, nullptr));
  b.add(marker(3, CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 950, "fork"));
  CUpti_ActivityMarkerData2 md{};
  md.kind = CUPTI_ACTIVITY_KIND_MARKER_DATA;
  md.id = 2;
  md.color = 0xFF00FF00u;
  md.category = 4;
  b.add(md);
  CUpti_ActivityOverhead3 ov{};
  ov.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  ov.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  ov.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  ov.objectId.pt.processId = kPid;
  ov.objectId.pt.threadId = kTid;
  ov.start = T0 + 24'000;
  ov.end = T0 + 24'800;
  b.add(ov);
  return b;
}

DecodeOptions opts() {
  DecodeOptions o;
  o.pid = kPid;
  o.api_name = &fake_api_name;
  return o;
}

}  // namespace

TEST(CuptiDecode, EveryRecordKind) {
  Trace t;
  CuptiDecoder d(t, opts());
  RecordBuffer buf = full_buffer();  // records point into it
  for (auto* r : buf.records()) d.decode(r);
  d.on_stream_created(1, 13, Ns(T0 + 100));
  d.on_stream_destroyed(1, 13, Ns(T0 + 30'000));
  d.finish();

  ASSERT_EQ(t.kernels.size(), 3u);
  EXPECT_EQ(t.str(t.kernels[0].name), "gemm(float*, int)") << "demangled";
  EXPECT_EQ(t.str(t.kernels[2].name), "plain_c_name");
  EXPECT_EQ(t.kernels[0].start, Ns(T0 + 5'000));
  EXPECT_EQ(t.kernels[0].queued, Ns(T0 + 4'500));
  EXPECT_EQ(t.kernels[0].submitted, Ns(T0 + 4'800));
  EXPECT_EQ(t.kernels[0].grid[0], 132u);
  EXPECT_EQ(t.kernels[0].static_smem, 1024u);
  EXPECT_EQ(t.kernels[0].pid, kPid);
  ASSERT_EQ(t.api_calls.size(), 6u) << "cudaGetDevice is filtered";
  EXPECT_EQ(t.str(t.api_calls[0].name), "cudaLaunchKernel_v7000");
  EXPECT_EQ(t.api_calls[2].kind, ApiKind::Driver);
  ASSERT_EQ(t.memcpys.size(), 1u);
  EXPECT_EQ(t.memcpys[0].kind, MemcpyKind::HtoD);
  EXPECT_EQ(t.memcpys[0].src_kind, MemoryKind::Pinned);
  ASSERT_EQ(t.memsets.size(), 1u);
  ASSERT_EQ(t.syncs.size(), 1u);
  EXPECT_EQ(t.syncs[0].type, SyncType::StreamSynchronize);
  EXPECT_EQ(t.syncs[0].event, kNoId);
  ASSERT_EQ(t.cuda_events.size(), 1u);
  EXPECT_EQ(t.cuda_events[0].event, 3u);
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].alloc, Ns(T0 + 2'000));
  EXPECT_EQ(t.allocations[0].free, Ns(T0 + 22'000));
  ASSERT_EQ(t.nvtx.size(), 3u);
  EXPECT_EQ(t.str(t.nvtx[0].name), "step");
  EXPECT_EQ(t.nvtx[0].depth, 0);
  EXPECT_EQ(t.str(t.nvtx[1].name), "L0");
  EXPECT_EQ(t.nvtx[1].depth, 1);
  EXPECT_EQ(t.nvtx[1].color, 0xFF00FF00u) << "marker data arriving after the range closed";
  EXPECT_EQ(t.nvtx[2].kind, NvtxKind::Mark);
  ASSERT_EQ(t.overheads.size(), 1u);
  EXPECT_EQ(t.counts.overhead_records, 1u);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].name, "NVIDIA H200");
  EXPECT_EQ(t.devices[0].sm_count, 132);
  const Stream* aux = t.find_stream(13);
  ASSERT_NE(aux, nullptr);
  EXPECT_EQ(t.str(aux->name), "aux0");
  EXPECT_EQ(aux->priority, -1);
  EXPECT_EQ(aux->flags, 2);
  EXPECT_EQ(aux->created, Ns(T0 + 100));
  EXPECT_EQ(aux->destroyed, Ns(T0 + 30'000));
  const Stream* null_stream = t.find_stream(7);
  ASSERT_NE(null_stream, nullptr);
  EXPECT_EQ(null_stream->is_null, 1);
  EXPECT_TRUE(t.counts.clean()) << t.counts.invalid_records;

  // The decoded trace analyses and exports to a valid Kineto JSON.
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.kernels_without_launch, 0u);
  EXPECT_EQ(r.launch_delay.count, 3u);
  KinetoValidation v = validate_kineto_json(kineto_json_string(t));
  EXPECT_TRUE(v.ok()) << v.report();
}

TEST(CuptiDecode, OutOfOrderArrivalGivesTheSameTrace) {
  RecordBuffer buf = full_buffer();
  auto recs = buf.records();
  Trace a;
  {
    CuptiDecoder d(a, opts());
    for (auto* r : recs) d.decode(r);
    d.finish();
  }
  // Reverse order: ends before starts, releases before allocations, marker data first.
  Trace b;
  {
    CuptiDecoder d(b, opts());
    for (auto it = recs.rbegin(); it != recs.rend(); ++it) d.decode(*it);
    d.finish();
  }
  EXPECT_EQ(first_difference(a, b), "");
  // Interleaved as two buffers delivered in the wrong order.
  Trace c;
  {
    CuptiDecoder d(c, opts());
    size_t half = recs.size() / 2;
    for (size_t i = half; i < recs.size(); ++i) d.decode(recs[i]);
    for (size_t i = 0; i < half; ++i) d.decode(recs[i]);
    d.finish();
  }
  EXPECT_EQ(first_difference(a, c), "");
}

TEST(CuptiDecode, GraphLaunchOneCorrelationManyKernels) {
  RecordBuffer b;
  b.add(api(311, 1'000, 2'000, 50));
  for (int i = 0; i < 4; ++i) {
    CUpti_ActivityKernel10 k = kernel(i % 2 ? 13 : 7, 3'000 + i * 1'000, 3'800 + i * 1'000, "_Z9graphnodev", 50);
    k.graphId = 9;
    k.graphNodeId = 100 + i;
    b.add(k);
  }
  Trace t;
  CuptiDecoder d(t, opts());
  for (auto* r : b.records()) d.decode(r);
  d.finish();
  ASSERT_EQ(t.kernels.size(), 4u);
  for (const auto& k : t.kernels) {
    EXPECT_EQ(k.correlation, 50u);
    EXPECT_EQ(k.graph_id, 9u);
  }
  AnalysisResult r = analyze(t);
  EXPECT_EQ(r.graph_kernels, 4u);
  EXPECT_EQ(r.launch_delay.count, 4u);
  // Four flows with distinct ids from the one launch call.
  std::string js = kineto_json_string(t);
  KinetoValidation v = validate_kineto_json(js);
  EXPECT_TRUE(v.ok()) << v.report();
  EXPECT_EQ(v.flows, 8u);
}

TEST(CuptiDecode, InvalidRecordsAreCountedNotCrashing) {
  RecordBuffer b;
  b.add(kernel(7, 0, 0, "zero", 1));  // both zero after T0 is added? make them truly zero below
  CUpti_ActivityKernel10 z = kernel(7, 0, 0, "zero", 1);
  z.start = 0;
  z.end = 0;
  b.add(z);
  b.add(kernel(7, 5'000, 4'000, "_Z8backwardv", 2));  // end < start
  CUpti_ActivityKernel10 unnamed = kernel(7, 6'000, 7'000, nullptr, 3);
  b.add(unnamed);
  CUpti_ActivityKernel10 serial = kernel(7, 8'000, 9'000, "serial", 4);
  serial.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  b.add(serial);
  CUpti_ActivityAPI bad_api = api(211, 0, 10, 5);
  bad_api.start = 0;
  b.add(bad_api);
  CUpti_Activity unknown{};
  unknown.kind = CUPTI_ACTIVITY_KIND_PC_SAMPLING;
  b.add(unknown);
  b.add(marker(42, CUPTI_ACTIVITY_FLAG_MARKER_END, 100, nullptr));  // end without a start
  CUpti_ActivityMemory4 mem{};
  mem.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  mem.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID;
  mem.timestamp = T0 + 1;
  b.add(mem);
  Trace t;
  CuptiDecoder d(t, opts());
  for (auto* r : b.records()) d.decode(r);
  d.decode(nullptr);
  d.finish();
  EXPECT_EQ(t.counts.zero_timestamps, 2u);
  EXPECT_EQ(t.counts.end_before_start, 1u);
  EXPECT_EQ(t.counts.unknown_kinds, 1u);
  // null name, KIND_KERNEL, invalid memory op, marker end without start, null record
  EXPECT_EQ(t.counts.invalid_records, 5u);
  EXPECT_FALSE(t.counts.clean());
  ASSERT_EQ(t.kernels.size(), 3u);  // "zero" at T0 (+0 offsets are not zero timestamps), backward, unnamed
  EXPECT_EQ(t.str(t.kernels[2].name), "(unnamed kernel)");
  AnalysisResult r = analyze(t);  // end < start is treated as zero length
  EXPECT_GE(r.whole.busy, 0);
}

TEST(CuptiDecode, WarmupWindowIsDiscarded) {
  DecodeOptions o = opts();
  o.window_start = Ns(T0 + 10'000);
  Trace t;
  CuptiDecoder d(t, o);
  RecordBuffer buf = full_buffer();
  for (auto* r : buf.records()) d.decode(r);
  d.finish(Ns(T0 + 50'000));
  // Kernels starting before T0 + 10 us are warm-up.
  for (const auto& k : t.kernels) EXPECT_GE(k.start, Ns(T0 + 10'000));
  EXPECT_EQ(t.kernels.size(), 1u);
  EXPECT_GT(t.counts.warmup_discarded, 5u);
  for (const auto& a : t.api_calls) EXPECT_GE(a.start, Ns(T0 + 10'000));
  // The allocation made in the warm-up and freed in the window is kept with an unknown start.
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].alloc, kNoTime);
  EXPECT_EQ(t.allocations[0].free, Ns(T0 + 22'000));
  EXPECT_EQ(t.base_time, Ns(T0 + 10'000));
}

TEST(CuptiDecode, DecodeBufferWithAnIterator) {
  RecordBuffer b = full_buffer();
  static std::vector<const CUpti_Activity*> recs;
  static size_t pos;
  recs = b.records();
  pos = 0;
  auto next = [](uint8_t*, size_t, CUpti_Activity** out) -> CUptiResult {
    if (pos >= recs.size()) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *out = const_cast<CUpti_Activity*>(recs[pos++]);
    return CUPTI_SUCCESS;
  };
  Trace t;
  CuptiDecoder d(t, opts());
  uint8_t dummy[8];
  size_t n = d.decode_buffer(dummy, sizeof dummy, next);
  d.finish();
  EXPECT_EQ(n, recs.size());
  EXPECT_EQ(t.counts.buffers, 1u);
  EXPECT_EQ(t.kernels.size(), 3u);
  // A corrupt buffer: the iterator reports an error -> counted, decoding stops.
  auto bad = [](uint8_t*, size_t, CUpti_Activity**) -> CUptiResult { return CUPTI_ERROR_INVALID_PARAMETER; };
  Trace t2;
  CuptiDecoder d2(t2, opts());
  d2.decode_buffer(dummy, sizeof dummy, bad);
  EXPECT_EQ(t2.counts.invalid_records, 1u);
}

#else

TEST(CuptiDecode, Skipped) { GTEST_SKIP() << "CUDA headers not built (configure with -DSTREAMLAB_CUDA=ON)"; }

#endif
