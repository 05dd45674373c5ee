// Kineto-style JSON: the layout of docs/traces.md 3, the strict validator, and the lossless round trip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/kineto_validate.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;
using json = nlohmann::json;

namespace {
std::vector<json> events_of(const json& doc, const std::string& cat) {
  std::vector<json> r;
  for (const auto& e : doc["traceEvents"])
    if (e.value("cat", "") == cat) r.push_back(e);
  return r;
}
}  // namespace

TEST(KinetoJson, TopLevelLayout) {
  Trace t = make_sample_trace();
  std::string s = kineto_json_string(t);
  json doc = json::parse(s);
  EXPECT_EQ(doc["schemaVersion"], 1);
  ASSERT_TRUE(doc["deviceProperties"].is_array());
  EXPECT_EQ(doc["deviceProperties"][0]["name"], "NVIDIA H200");
  EXPECT_EQ(doc["deviceProperties"][0]["numSms"], 132);
  EXPECT_EQ(doc["distributedInfo"]["rank"], 0);
  EXPECT_NE(s.find("\"rank\": 0"), std::string::npos) << "HTA's rank regex needs a space after the colon";
  EXPECT_EQ(doc["baseTimeNanoseconds"].get<int64_t>(), t.base_time);
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_TRUE(doc["traceEvents"].is_array());
  EXPECT_TRUE(doc["streamlab"].is_object());
}

TEST(KinetoJson, KernelEventAsKinetoWritesIt) {
  Trace t = make_sample_trace();
  json doc = json::parse(kineto_json_string(t));
  auto kernels = events_of(doc, "kernel");
  ASSERT_EQ(kernels.size(), t.kernels.size());
  const json& k = kernels[0];  // the fp8 GEMM at T + 16 us
  EXPECT_EQ(k["ph"], "X");
  EXPECT_EQ(k["pid"], 0);
  EXPECT_EQ(k["tid"], 7);
  EXPECT_DOUBLE_EQ(k["ts"].get<double>(), 16.0);
  EXPECT_DOUBLE_EQ(k["dur"].get<double>(), 44.0);
  EXPECT_EQ(k["name"], "void deepgemm::fp8_gemm<128, 128>(float const*, __nv_bfloat16*, int)");
  const json& a = k["args"];
  for (const char* key : {"queued", "device", "context", "stream", "correlation", "registers per thread",
                          "shared memory", "blocks per SM", "warps per SM", "grid", "block"})
    EXPECT_TRUE(a.contains(key)) << key;
  EXPECT_EQ(a["stream"], 7);
  EXPECT_EQ(a["registers per thread"], 168);
  EXPECT_EQ(a["shared memory"], 16384 + 98304);
  EXPECT_EQ(a["grid"], json::array({264, 2, 1}));
  EXPECT_EQ(a["block"], json::array({128, 2, 1}));
  EXPECT_DOUBLE_EQ(a["blocks per SM"].get<double>(), 528.0 / 132.0);
}

TEST(KinetoJson, TimesAreRelativeMicrosecondsWithThreeDecimals) {
  Trace t;
  TraceBuilder b(t);
  b.kernel(1, 1'000'000'000'123'456'789, 1'000'000'000'123'458'790, "k");
  t.base_time = 1'000'000'000'000'000'000;
  t.finalize();
  std::string s = kineto_json_string(t);
  EXPECT_NE(s.find("\"ts\": 123456.789"), std::string::npos) << s.substr(0, 2000);
  EXPECT_NE(s.find("\"dur\": 2.001"), std::string::npos);
  EXPECT_NE(s.find("\"ts\": 0.000"), std::string::npos) << "metadata at zero";
}

TEST(KinetoJson, RuntimeNamesWithoutVersionSuffixAndFlows) {
  Trace t = make_sample_trace();
  json doc = json::parse(kineto_json_string(t));
  auto rt = events_of(doc, "cuda_runtime");
  ASSERT_FALSE(rt.empty());
  bool saw_launch = false;
  for (const auto& e : rt) {
    std::string n = e["name"];
    EXPECT_EQ(n.find("_v"), std::string::npos) << n;
    saw_launch |= n == "cudaLaunchKernel";
    EXPECT_TRUE(e["args"].contains("cbid"));
    EXPECT_TRUE(e["args"].contains("correlation"));
  }
  EXPECT_TRUE(saw_launch);
  EXPECT_EQ(events_of(doc, "cuda_driver").size(), 1u);
  // Flows: one per GPU op with a launch call; graph kernels sharing a correlation get distinct ids.
  std::map<int64_t, int> s_ids, f_ids;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "s") s_ids[e["id"].get<int64_t>()]++;
    if (e["ph"] == "f") {
      f_ids[e["id"].get<int64_t>()]++;
      EXPECT_EQ(e["bp"], "e");
      EXPECT_EQ(e["cat"], "ac2g");
    }
  }
  size_t gpu_ops = t.kernels.size() + t.memcpys.size() + t.memsets.size();
  EXPECT_EQ(s_ids.size(), gpu_ops);
  EXPECT_EQ(f_ids.size(), gpu_ops);
  for (auto& [id, n] : s_ids) EXPECT_EQ(n, 1) << id;
}

TEST(KinetoJson, SyncSlicesOnTheirOwnTrackAndMetadata) {
  Trace t = make_sample_trace();
  json doc = json::parse(kineto_json_string(t));
  std::set<std::pair<int, int64_t>> kernel_tracks;
  for (const auto& e : events_of(doc, "kernel")) kernel_tracks.insert({e["pid"].get<int>(), e["tid"].get<int64_t>()});
  auto syncs = events_of(doc, "cuda_sync");
  ASSERT_EQ(syncs.size(), t.syncs.size());
  for (const auto& e : syncs) {
    EXPECT_FALSE(kernel_tracks.count({e["pid"].get<int>(), e["tid"].get<int64_t>()}));
    EXPECT_TRUE(e["args"].contains("cuda_sync_kind"));
  }
  std::map<int64_t, std::string> stream_names;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0) stream_names[e["tid"]] = e["args"]["name"];
  EXPECT_EQ(stream_names[7], "stream 7 (main)");
  EXPECT_EQ(stream_names[14], "stream 14");
  // Counters: allocated memory per device.
  int counters = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "C") ++counters;
  EXPECT_GE(counters, 3);
  // GPU projections of NVTX ranges.
  auto ann = events_of(doc, "gpu_user_annotation");
  EXPECT_FALSE(ann.empty());
  bool step_on_main = false;
  for (const auto& e : ann) step_on_main |= e["name"] == "step" && (e["tid"].get<int64_t>() & kTidStreamMask) == 7;
  EXPECT_TRUE(step_on_main);
}

TEST(KinetoJson, ValidatorAcceptsOurOutput) {
  Trace t = make_sample_trace();
  std::string s = kineto_json_string(t);
  KinetoValidation v = validate_kineto_json(s);
  EXPECT_TRUE(v.ok()) << v.report();
  EXPECT_GT(v.slices, 20u);
  EXPECT_GT(v.flows, 10u);

  SyntheticOptions o;
  o.target_events = 20'000;
  Trace big = make_synthetic_trace(o);
  KinetoValidation v2 = validate_kineto_json(kineto_json_string(big));
  EXPECT_TRUE(v2.ok()) << v2.report();
}

TEST(KinetoJson, OverlappingSlicesOfOneStreamGoToLanes) {
  // Clock skew: two kernels of one stream overlap by a few ns; they cannot nest on one track.
  Trace t;
  TraceBuilder b(t);
  b.kernel(5, 1000, 2000, "a", 0, 10);
  b.kernel(5, 1995, 3000, "b", 20, 30);
  t.finalize();
  std::string s = kineto_json_string(t);
  KinetoValidation v = validate_kineto_json(s);
  EXPECT_TRUE(v.ok()) << v.report();
  json doc = json::parse(s);
  auto k = events_of(doc, "kernel");
  ASSERT_EQ(k.size(), 2u);
  EXPECT_NE(k[0]["tid"], k[1]["tid"]);
  EXPECT_EQ(k[1]["args"]["stream"], 5);
}

TEST(KinetoJson, ValidatorCatchesViolations) {
  auto base = [](const std::string& events) {
    return std::string("{\"schemaVersion\": 1, \"deviceProperties\": [], \"distributedInfo\": {\"rank\": 0}, "
                       "\"baseTimeNanoseconds\": 0, \"displayTimeUnit\": \"ms\", \"traceEvents\": [") +
           events + "]}";
  };
  const std::string meta =
      "{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"GPU 0\"}},"
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 0, \"tid\": 7, \"args\": {\"name\": \"stream 7\"}}";
  const std::string kargs =
      "\"args\": {\"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": 1, \"grid\": [1,1,1], \"block\": [1,1,1], "
      "\"registers per thread\": 8, \"shared memory\": 0}";
  auto kernel = [&](const std::string& ts, const std::string& dur) {
    return "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": " + ts +
           ", \"dur\": " + dur + ", " + kargs + "}";
  };
  // Valid baseline.
  EXPECT_TRUE(validate_kineto_json(base(meta + "," + kernel("1.000", "2.000"))).ok());
  // Crossing slices on one track.
  {
    auto v = validate_kineto_json(base(meta + "," + kernel("1.000", "2.000") + "," + kernel("2.500", "2.000")));
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.report().find("must nest"), std::string::npos) << v.report();
  }
  // Not three decimals.
  {
    auto v = validate_kineto_json(base(meta + "," + kernel("1.5", "2.000")));
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.report().find("three decimals"), std::string::npos) << v.report();
  }
  // Absolute microseconds.
  EXPECT_FALSE(validate_kineto_json(base(meta + "," + kernel("1700000000000000.000", "2.000"))).ok());
  // Missing thread_name.
  {
    auto v = validate_kineto_json(base(meta.substr(0, meta.find("},{") + 1) + "," + kernel("1.000", "2.000")));
    EXPECT_NE(v.report().find("thread_name"), std::string::npos) << v.report();
  }
  // Versioned runtime name.
  {
    std::string rt = "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel_v7000\", \"pid\": 5, "
                     "\"tid\": 5, \"ts\": 0.000, \"dur\": 1.000, \"args\": {\"cbid\": 211, \"correlation\": 1}},"
                     "{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 5, \"tid\": 0, \"args\": {\"name\": \"p\"}}";
    auto v = validate_kineto_json(base(meta + "," + kernel("1.000", "2.000") + "," + rt));
    EXPECT_NE(v.report().find("version suffix"), std::string::npos) << v.report();
  }
  // Unpaired flow and a forked flow.
  {
    std::string s = "{\"ph\": \"s\", \"id\": 1, \"pid\": 0, \"tid\": 7, \"ts\": 1.000, \"cat\": \"ac2g\", \"name\": \"ac2g\"}";
    auto v = validate_kineto_json(base(meta + "," + kernel("1.000", "2.000") + "," + s));
    EXPECT_NE(v.report().find("without a finish"), std::string::npos) << v.report();
    std::string f = "{\"ph\": \"f\", \"id\": 1, \"pid\": 0, \"tid\": 7, \"ts\": 1.000, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}";
    auto v2 = validate_kineto_json(base(meta + "," + kernel("1.000", "2.000") + "," + s + "," + f + "," + f));
    EXPECT_NE(v2.report().find("cannot fork"), std::string::npos) << v2.report();
  }
  // Missing kernel args / wrong stream track.
  {
    std::string k = "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 1.000, "
                    "\"dur\": 1.000, \"args\": {\"device\": 0, \"stream\": 8}}";
    auto v = validate_kineto_json(base(meta + "," + k));
    EXPECT_NE(v.report().find("args.\"correlation\" missing"), std::string::npos) << v.report();
    EXPECT_NE(v.report().find("not the track of args.stream"), std::string::npos) << v.report();
  }
  // Rank without the space HTA's regex needs.
  {
    std::string s = base(meta + "," + kernel("1.000", "2.000"));
    s.replace(s.find("\"rank\": 0"), 9, "\"rank\":0");
    EXPECT_FALSE(validate_kineto_json(s).ok());
  }
  // Not JSON.
  EXPECT_NE(validate_kineto_json("{\"traceEvents\": [").report().find("byte"), std::string::npos);
}

TEST(KinetoJson, RoundTripIsLossless) {
  Trace t = make_sample_trace();
  std::string s = kineto_json_string(t);
  Trace back = load_kineto_json(s, "round-trip");
  EXPECT_EQ(first_difference(t, back, /*api_names_modulo_version=*/true), "");
  // Written again, the file is byte-identical.
  EXPECT_EQ(kineto_json_string(back), s);
}

// Where an awaited event was recorded (Sync::event_stream / event_record_correlation): written
// under Kineto's names, the sync's own values as they are; values the writer derived from the
// CUDA event records are marked and stay derived when loaded back.
TEST(KinetoJson, StreamWaitRecordStreamAndCorrelation) {
  Trace t;
  TraceBuilder b(t);
  b.record_and_wait(/*event=*/5, /*on_stream=*/3, /*waiting_stream=*/4, 100);  // corr 1 record, 2 wait
  Sync own;
  own.start = own.end = 200;
  own.correlation = 9;
  own.stream = 4;
  own.event = 6;
  own.pid = 1;
  own.type = SyncType::StreamWaitEvent;
  own.event_stream = 8;               // a stream no event record names: only the sync knows it
  own.event_record_correlation = 7;
  t.syncs.push_back(own);
  t.finalize();
  json doc = json::parse(kineto_json_string(t));
  auto syncs = events_of(doc, "cuda_sync");
  ASSERT_EQ(syncs.size(), 2u);
  const json& derived = syncs[0]["args"];
  EXPECT_EQ(derived["wait_on_stream"], 3);
  EXPECT_EQ(derived["wait_on_cuda_event_record_corr_id"], 1);
  EXPECT_EQ(derived["wait_on_cuda_event_id"], 5);
  EXPECT_EQ(derived["wait_on derived"], 1);
  const json& given = syncs[1]["args"];
  EXPECT_EQ(given["wait_on_stream"], 8);
  EXPECT_EQ(given["wait_on_cuda_event_record_corr_id"], 7);
  EXPECT_FALSE(given.contains("wait_on derived"));

  Trace back = load_kineto_json(kineto_json_string(t), "wait fields");
  EXPECT_EQ(first_difference(t, back), "");
  ASSERT_EQ(back.syncs.size(), 2u);
  EXPECT_EQ(back.syncs[0].event_stream, kNoStream);
  EXPECT_EQ(back.syncs[0].event_record_correlation, 0u);
  EXPECT_EQ(back.syncs[1].event_stream, 8u);
  EXPECT_EQ(back.syncs[1].event_record_correlation, 7u);

  // A PyTorch trace's sync as Kineto writes it (no streamlab block, no marker).
  const char* pt = R"({"traceEvents": [
    {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 13, "ts": 10.0, "dur": 0.5,
     "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 41,
              "wait_on_cuda_event_id": 3, "stream": 13, "correlation": 44, "device": 0, "context": 1}},
    {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 13, "ts": 11.0, "dur": 0.5,
     "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": -1, "wait_on_cuda_event_record_corr_id": -1,
              "wait_on_cuda_event_id": 4, "stream": 13, "correlation": 45, "device": 0, "context": 1}}]})";
  Trace p = load_kineto_json(pt, "pytorch sync");
  ASSERT_EQ(p.syncs.size(), 2u);
  EXPECT_EQ(p.syncs[0].type, SyncType::StreamWaitEvent);
  EXPECT_EQ(p.syncs[0].stream, 13u);
  EXPECT_EQ(p.syncs[0].event_stream, 7u);
  EXPECT_EQ(p.syncs[0].event_record_correlation, 41u);
  EXPECT_EQ(p.syncs[0].event, 3u);
  EXPECT_EQ(p.syncs[1].event_stream, kNoStream);
  EXPECT_EQ(p.syncs[1].event_record_correlation, 0u);
}

TEST(KinetoJson, RoundTripOfSyntheticTrace) {
  SyntheticOptions o;
  o.target_events = 30'000;
  Trace t = make_synthetic_trace(o);
  Trace back = load_kineto_json(kineto_json_string(t), "synthetic");
  EXPECT_EQ(first_difference(t, back, true), "");
}

TEST(KinetoJson, WritesAFile) {
  Trace t = make_sample_trace();
  std::string path = testing::TempDir() + "/sl_kineto_test.json";
  size_t n = write_kineto_json_file(t, path);
  EXPECT_GT(n, 50u);
  EXPECT_EQ(detect_trace_format(path), TraceFormat::StreamlabJson);
  KinetoValidation v = validate_kineto_file(path);
  EXPECT_TRUE(v.ok()) << v.report();
  Trace back = load_trace(path);
  EXPECT_EQ(first_difference(t, back, true), "");
  EXPECT_THROW(write_kineto_json_file(t, "/nonexistent-dir/x.json"), sl::Error);
}
