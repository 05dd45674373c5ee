// Loaders: PyTorch profiler (Kineto) JSON, format detection, and malformed input -> sl::Error that
// names the file, the byte offset or event index and what was expected; never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/analysis.h"
#include "profiler/kineto_json.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;
using json = nlohmann::json;

namespace {

// A trace in the shape PyTorch's profiler writes (Kineto), trimmed: CPU ops, python functions,
// a profiler step, runtime calls, kernels, a memcpy, a sync, flows, [memory] events, metadata.
const char* kPyTorchTrace = R"JSON({
  "schemaVersion": 1,
  "deviceProperties": [
    {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, "computeMinor": 0,
     "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
     "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
     "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}
  ],
  "cupti_version": 26, "cuda_runtime_version": 13000, "with_flops": 0,
  "record_shapes": 0, "cuda_driver_version": 13000, "profile_memory": 1,
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "baseTimeNanoseconds": 1760000000000000000,
  "displayTimeUnit": "ms",
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 4242, "tid": 4242,
    "ts": 100.000, "dur": 900.500, "args": {"External id": 1, "Record function id": 0}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,
    "ts": 110.250, "dur": 40.000, "args": {"External id": 2, "Sequence number": 5, "Fwd thread id": 0}},
  {"ph": "X", "cat": "python_function", "name": "model.py(10): forward", "pid": 4242, "tid": 4242,
    "ts": 105.000, "dur": 800.000, "args": {"Python parent id": null, "Python id": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": 120.000, "dur": 8.125, "args": {"External id": 2, "cbid": 211, "correlation": 77}},
  {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 7,
    "ts": 130.000, "dur": 50.000,
    "args": {"External id": 2, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 77,
             "registers per thread": 168, "shared memory": 114688, "blocks per SM": 2.0, "warps per SM": 8.0,
             "grid": [264, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 12}},
  {"ph": "s", "id": 77, "pid": 4242, "tid": 4242, "ts": 120.000, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 130.000, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 4242, "tid": 4242,
    "ts": 200.000, "dur": 20.000, "args": {"External id": 3, "cbid": 41, "correlation": 80}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7,
    "ts": 210.000, "dur": 5.500,
    "args": {"External id": 3, "device": 0, "context": 1, "stream": 7, "correlation": 80, "bytes": 4096,
             "memory bandwidth (GB/s)": 0.744}},
  {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 221.000, "dur": 3.000,
    "args": {"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 81, "device": 0, "context": 1}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#2", "pid": 0, "tid": 7, "ts": 129.999, "dur": 86.002,
    "args": {"External id": 1}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 4242, "tid": 4242, "ts": 115.000,
    "args": {"Total Reserved": 2097152, "Total Allocated": 1048576, "Bytes": 1048576, "Addr": 139800000000000,
             "Device Id": 0, "Device Type": 1}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 4242, "tid": 4242, "ts": 400.000,
    "args": {"Total Reserved": 2097152, "Total Allocated": 0, "Bytes": -1048576, "Addr": 139800000000000,
             "Device Id": 0, "Device Type": 1}},
  {"name": "process_name", "ph": "M", "ts": 100.000, "pid": 4242, "tid": 0, "args": {"name": "python"}},
  {"name": "thread_name", "ph": "M", "ts": 100.000, "pid": 4242, "tid": 4242, "args": {"name": "thread 4242 (python)"}},
  {"name": "process_name", "ph": "M", "ts": 100.000, "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
  {"name": "thread_name", "ph": "M", "ts": 100.000, "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
  {"ph": "X", "cat": "Trace", "ts": 100.000, "dur": 1000.000, "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
  {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 100.000},
  {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1100.000}
  ],
  "traceName": "trace.json"
})JSON";

std::string write_temp(const std::string& name, const std::string& content) {
  std::string path = testing::TempDir() + "/" + name;
  std::ofstream f(path, std::ios::binary);
  f << content;
  return path;
}

std::string error_of(const std::string& text, const std::string& origin = "t.json") {
  try {
    load_kineto_json(text, origin);
  } catch (const sl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Loader, PyTorchProfilerTrace) {
  Trace t = load_kineto_json(kPyTorchTrace, "pytorch.json");
  ASSERT_EQ(t.kernels.size(), 1u);
  const Kernel& k = t.kernels[0];
  EXPECT_EQ(k.start, 1760000000000000000 + 130'000);
  EXPECT_EQ(k.end - k.start, 50'000);
  EXPECT_EQ(k.stream, 7u);
  EXPECT_EQ(k.correlation, 77u);
  EXPECT_EQ(k.grid[0], 264u);
  EXPECT_EQ(k.registers, 168);
  EXPECT_EQ(k.static_smem + k.dynamic_smem, 114688u);
  EXPECT_EQ(k.pid, 4242u) << "GPU ops take the only process";
  ASSERT_EQ(t.memcpys.size(), 1u);
  EXPECT_EQ(t.memcpys[0].kind, MemcpyKind::DtoH);
  EXPECT_EQ(t.memcpys[0].src_kind, MemoryKind::Device);
  EXPECT_EQ(t.memcpys[0].dst_kind, MemoryKind::Pinned);
  EXPECT_EQ(t.memcpys[0].end - t.memcpys[0].start, 5'500);
  ASSERT_EQ(t.api_calls.size(), 2u);
  EXPECT_EQ(t.str(t.api_calls[0].name), "cudaLaunchKernel");
  ASSERT_EQ(t.syncs.size(), 1u);
  EXPECT_EQ(t.syncs[0].type, SyncType::StreamSynchronize);
  ASSERT_EQ(t.nvtx.size(), 1u);
  EXPECT_EQ(t.str(t.nvtx[0].name), "ProfilerStep#2");
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].bytes, 1048576u);
  EXPECT_EQ(t.allocations[0].free - t.allocations[0].alloc, 285'000);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].sm_count, 132);
  ASSERT_EQ(t.processes.size(), 1u);
  EXPECT_EQ(t.processes[0].name, "python");
  EXPECT_EQ(t.metadata["source"], "kineto");
  // Analysis works on it: launch delay 130 - 128.125 us.
  AnalysisOptions o;
  o.range = "ProfilerStep#2";
  AnalysisResult r = analyze(t, o);
  EXPECT_EQ(r.launch_delay.count, 1u);
  EXPECT_EQ(r.launch_delay.min, 1'875);
  EXPECT_EQ(r.range->total.kernels, 1u);
  // And it exports to a valid streamlab JSON.
  std::string path = write_temp("pytorch.json", kPyTorchTrace);
  EXPECT_EQ(detect_trace_format(path), TraceFormat::KinetoJson);
  EXPECT_EQ(load_trace(path).kernels.size(), 1u);
}

TEST(Loader, ErrorsNameTheFileOffsetEventAndExpectation) {
  // Syntax: byte offset.
  std::string e = error_of("{\"traceEvents\": [ {\"ph\": \"X\",, } ]}");
  EXPECT_NE(e.find("t.json"), std::string::npos) << e;
  EXPECT_NE(e.find("at byte"), std::string::npos) << e;
  // Not a trace.
  e = error_of("[1, 2, 3]");
  EXPECT_NE(e.find("\"traceEvents\""), std::string::npos) << e;
  e = error_of("{\"foo\": 1}");
  EXPECT_NE(e.find("traceEvents"), std::string::npos) << e;
  // Wrong types: the event index, the field and what was found.
  e = error_of(R"({"traceEvents": [{"ph": "M", "name": "x", "pid": 1, "tid": 1, "args": {}},
      {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1.0, "args": {"stream": 7}}]})");
  EXPECT_NE(e.find("traceEvents[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("\"ts\" to be a number, found a string"), std::string::npos) << e;
  e = error_of(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0}]})");
  EXPECT_NE(e.find("args.\"stream\""), std::string::npos) << e;
  e = error_of(R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0,
      "args": {"stream": 7, "grid": [1, 2]}}]})");
  EXPECT_NE(e.find("array of 3 integers"), std::string::npos) << e;
  e = error_of(R"({"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "f", "pid": [1], "tid": 7, "ts": 1.0, "dur": 1.0}]})");
  EXPECT_NE(e.find("\"pid\" to be an integer, found an array"), std::string::npos) << e;
  e = error_of(R"({"traceEvents": [{"cat": "kernel"}]})");
  EXPECT_NE(e.find("expected field \"ph\""), std::string::npos) << e;
  e = error_of(R"({"baseTimeNanoseconds": "x", "traceEvents": []})");
  EXPECT_NE(e.find("baseTimeNanoseconds"), std::string::npos) << e;
  e = error_of(R"({"traceEvents": [{"ph": "Q", "name": "x"}]})");
  EXPECT_NE(e.find("unexpected ph \"Q\""), std::string::npos) << e;
  // A base time that leaves the trace model's range (2^62 ns) is an error of the document, not a
  // signed overflow later (tests/fuzz/regressions/kineto_json); out-of-range ts / dur of single
  // records are dropped and counted (test_load_checks.cpp).
  e = error_of(R"({"baseTimeNanoseconds": 9223372036854775807, "traceEvents": [{"ph": "X", "cat": "kernel",
      "name": "k", "pid": 0, "tid": 0, "ts": 1, "dur": 1, "args": {"stream": 1}}]})");
  EXPECT_NE(e.find("baseTimeNanoseconds"), std::string::npos) << e;
}

TEST(Loader, UnknownAndMissingFiles) {
  EXPECT_THROW(load_trace("/nonexistent/trace.json"), sl::Error);
  std::string p = write_temp("garbage.bin", "\x01\x02garbage");
  try {
    load_trace(p);
    FAIL();
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.bin"), std::string::npos);
  }
  EXPECT_EQ(detect_trace_format(p), TraceFormat::Unknown);
  std::string empty = write_temp("empty.json", "");
  EXPECT_THROW(load_trace(empty), sl::Error);
}

// Fuzz a little: truncations at many offsets and random byte flips of our own JSON must end in
// a loaded trace or an sl::Error, never in a crash or another exception type.
TEST(Loader, FuzzTruncatedAndCorruptedJson) {
  Trace t = make_sample_trace();
  std::string s = kineto_json_string(t);
  size_t errors = 0, loaded = 0;
  for (size_t cut = 0; cut < s.size(); cut += std::max<size_t>(1, s.size() / 300)) {
    try {
      load_kineto_json(std::string_view(s).substr(0, cut), "cut.json");
      ++loaded;
    } catch (const sl::Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("cut.json"), std::string::npos);
    }
  }
  EXPECT_GT(errors, 250u);
  std::mt19937 rng(7);
  const char junk[] = {'"', '{', '}', '[', ']', ',', ':', '0', 'x', '-', ' ', 'e', '.', 'n'};
  for (int i = 0; i < 300; ++i) {
    std::string c = s;
    for (int k = 0; k < 3; ++k) c[rng() % c.size()] = junk[rng() % sizeof junk];
    try {
      load_kineto_json(c, "flip.json");
      ++loaded;
    } catch (const sl::Error&) {
      ++errors;
    }
  }
  // Type swaps in well-formed JSON: every field of one kernel event replaced by a wrong type.
  json doc = json::parse(s);
  size_t kernel_index = 0;
  for (size_t i = 0; i < doc["traceEvents"].size(); ++i)
    if (doc["traceEvents"][i].value("cat", "") == "kernel") {
      kernel_index = i;
      break;
    }
  for (auto& [key, val] : doc["traceEvents"][kernel_index].items()) {
    for (const json& wrong : {json("str"), json::array({1}), json::object(), json(nullptr), json(-1.5)}) {
      json d = doc;
      d["traceEvents"][kernel_index][key] = wrong;
      try {
        load_kineto_json(d.dump(), "swap.json");
      } catch (const sl::Error& e) {
        EXPECT_NE(std::string(e.what()).find("swap.json"), std::string::npos);
      }
    }
  }
  for (auto& [key, val] : doc["traceEvents"][kernel_index]["args"].items()) {
    for (const json& wrong : {json("str"), json::array({1}), json(nullptr), json(true)}) {
      json d = doc;
      d["traceEvents"][kernel_index]["args"][key] = wrong;
      try {
        load_kineto_json(d.dump(), "swap.json");
      } catch (const sl::Error&) {
      }
    }
  }
  // The streamlab block with wrong shapes.
  for (const char* key : {"streams", "contexts", "allocations", "cuda_events", "counts", "devices"}) {
    json d = doc;
    d["streamlab"][key] = json::array({json::array({"x"})});
    try {
      load_kineto_json(d.dump(), "block.json");
    } catch (const sl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("block.json"), std::string::npos);
    }
  }
}

// A record count is a whole number >= 0: 1.5 dropped records is a damaged file (it read as 1).
TEST(Loader, RecordCountsAreWholeNumbers) {
  json doc = json::parse(kineto_json_string(make_sample_trace()));
  for (const json& bad : {json(1.5), json(-1), json("3"), json(1e30)}) {
    json d = doc;
    d["streamlab"]["counts"]["dropped"] = bad;
    try {
      load_kineto_json(d.dump(), "counts.json");
      ADD_FAILURE() << "counts.dropped = " << bad.dump() << " was accepted";
    } catch (const sl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("\"dropped\""), std::string::npos) << e.what();
    }
  }
  json d = doc;
  d["streamlab"]["counts"]["dropped"] = 7;
  EXPECT_EQ(load_kineto_json(d.dump(), "counts.json").counts.dropped, 7u);
}

// The parser (simdjson) rejects exactly the documents nlohmann::json rejects, and reports them
// with nlohmann's byte offset and expectation.
TEST(Loader, RejectsWhatNlohmannRejects) {
  std::string s = kineto_json_string(make_sample_trace());
  std::mt19937 rng(3);
  const char junk[] = {'"', '{', '}', '[', ']', ',', ':', '0', 'x', '-', ' ', 'e', '.', 'n', '\\', 'u', '\x01', '\xff', 't'};
  size_t checked = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string c = s;
    for (int k = 0; k < 2; ++k) c[rng() % c.size()] = junk[rng() % sizeof junk];
    if (json::accept(c)) continue;
    std::string e = error_of(c, "flip.json");
    EXPECT_NE(e.find("flip.json: not valid JSON"), std::string::npos) << e;
    ++checked;
  }
  EXPECT_GT(checked, 1000u);
  for (const char* bad : {"", " ", "{\"traceEvents\": []} x", "{\"traceEvents\": [01]}", "{\"traceEvents\": [1.]}",
                          "{\"traceEvents\": [\"\\ud800\"]}", "{\"traceEvents\": [\"\\udc00\"]}", "{\"traceEvents\": [\"\t\"]}",
                          "{\"traceEvents\": [\"\xff\"]}", "{\"traceEvents\": [tru]}", "{\"traceEvents\": [1e99999]}"}) {
    std::string e = error_of(bad);
    EXPECT_NE(e.find("t.json: not valid JSON"), std::string::npos) << bad << " -> " << e;
  }
  std::string e = error_of("{\"traceEvents\": [1, 2,, 3]}");
  EXPECT_NE(e.find("at byte 23"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected ','"), std::string::npos) << e;
}

TEST(Loader, EdgeCasesOfTheParser) {
  // Deep nesting in a field the loader does not read is fine; so is a huge integer there.
  std::string deep = "{\"x\": " + std::string(3000, '[') + std::string(3000, ']') + ", \"traceEvents\": []}";
  EXPECT_NO_THROW(load_kineto_json(deep, "deep.json"));
  EXPECT_NO_THROW(load_kineto_json("{\"big\": 123456789012345678901234567890, \"traceEvents\": []}", "big.json"));
  // A repeated key keeps its last value (as nlohmann::json did); numeric strings are ids.
  Trace t = load_kineto_json(R"({"traceEvents": [
      {"ph": "X", "cat": "kernel", "name": "a", "name": "k", "pid": "0", "tid": 7, "ts": 1.0, "dur": 2.0,
       "args": {"stream": 3, "stream": "9", "grid": [2, 3, 4]}},
      {"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": {"b": 1, "a": 2, "b": 3}}]})",
                             "dup.json");
  ASSERT_EQ(t.kernels.size(), 1u);
  EXPECT_EQ(t.str(t.kernels[0].name), "k");
  EXPECT_EQ(t.kernels[0].stream, 9u);
  EXPECT_EQ(t.kernels[0].grid[2], 4u);
  ASSERT_EQ(t.counters.size(), 2u);
  // Errors inside the streamlab block name the table and the row.
  json doc = json::parse(kineto_json_string(make_sample_trace()));
  doc["streamlab"]["streams"][1][7] = 5;
  std::string e = error_of(doc.dump(), "blk.json");
  EXPECT_NE(e.find("blk.json: streamlab.streams[1]: malformed (expected a string, found an integer)"), std::string::npos) << e;
  doc = json::parse(kineto_json_string(make_sample_trace()));
  doc["streamlab"]["devices"][0].erase("id");
  e = error_of(doc.dump(), "blk.json");
  EXPECT_NE(e.find("streamlab.devices[0]: malformed (expected field \"id\")"), std::string::npos) << e;
  // Wrong type in deviceProperties.
  e = error_of(R"({"deviceProperties": [{"id": 0, "numSms": "many"}], "traceEvents": []})");
  EXPECT_NE(e.find("deviceProperties[0]: \"numSms\": expected a number, found a string"), std::string::npos) << e;
}

// The file loader reads straight into the parser's padded buffer; same trace as from memory.
TEST(Loader, FileAndMemoryLoadAgree) {
  Trace t = make_sample_trace();
  std::string s = kineto_json_string(t);
  std::string path = write_temp("sample.json", s);
  Trace a = load_trace(path), b = load_kineto_json(s, "sample.json");
  EXPECT_EQ(first_difference(a, b), "");
  EXPECT_EQ(first_difference(t, a, true), "") << "our JSON round-trips";
}
