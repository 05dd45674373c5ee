// PyTorch profiler traces (Kineto JSON, written here by hand in torch.profiler's layout) loaded
// through load_kineto_json, profiled and diffed: roles matched across stream ids, waits resolved
// from the cuda_sync events (or inferred from the runtime calls when a trace has none), event
// counts from the runtime calls, critical path changes, the reports.
#include <gtest/gtest.h>

#include <sstream>

#include "profiler/profile_report.h"
#include "profiler/trace_diff.h"
#include "profiler/trace_io.h"
#include "profiler/trace_profile.h"

using namespace sl::prof;

namespace {

constexpr Ns kUs = 1000;

struct Variant {
  int main = 7, aux = 13;        // CUDA stream ids
  double mlp_gemm_us = 80;       // the layer1.mlp GEMM
  bool extra = false;            // an extra kernel after it
  bool add_on_aux_step2 = false; // the add runs on the aux stream in the second step
  bool sync_events = true;       // cuda_sync events (torch's enable_cuda_sync_events)
};

// Trace events as torch.profiler writes them: host events on pid 4242 / tid 4242, GPU events on
// pid = device, tid = stream.
class PytorchJson {
 public:
  void annotation(const std::string& name, double ts, double dur) {
    add(R"("ph": "X", "cat": "user_annotation", "name": ")" + name + R"(", "pid": 4242, "tid": 4242, "ts": )" +
        num(ts) + ", \"dur\": " + num(dur) + R"(, "args": {"External id": )" + std::to_string(++ext_) +
        R"(, "Record function id": 0, "Ev Idx": 0})");
  }
  void cpu_op(const std::string& name, double ts, double dur) {
    add(R"("ph": "X", "cat": "cpu_op", "name": ")" + name + R"(", "pid": 4242, "tid": 4242, "ts": )" + num(ts) +
        ", \"dur\": " + num(dur) + R"(, "args": {"External id": )" + std::to_string(++ext_) + "}");
  }
  void runtime(const std::string& name, double ts, double dur, int corr, int cbid) {
    add(R"("ph": "X", "cat": "cuda_runtime", "name": ")" + name + R"(", "pid": 4242, "tid": 4242, "ts": )" + num(ts) +
        ", \"dur\": " + num(dur) + R"(, "args": {"External id": )" + std::to_string(ext_) + ", \"cbid\": " +
        std::to_string(cbid) + ", \"correlation\": " + std::to_string(corr) + "}");
  }
  void kernel(const std::string& name, int stream, double ts, double dur, int corr) {
    const std::string s = std::to_string(stream), c = std::to_string(corr);
    add(R"("ph": "X", "cat": "kernel", "name": ")" + name + R"(", "pid": 0, "tid": )" + s + ", \"ts\": " + num(ts) +
        ", \"dur\": " + num(dur) + R"(, "args": {"External id": )" + std::to_string(ext_) +
        R"(, "queued": 0, "device": 0, "context": 1, "stream": )" + s + ", \"correlation\": " + c +
        R"(, "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0, )"
        R"("grid": [132, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 6})");
    add(R"("ph": "f", "id": )" + c + R"(, "pid": 0, "tid": )" + s + ", \"ts\": " + num(ts) +
        R"(, "cat": "ac2g", "name": "ac2g", "bp": "e")");
  }
  void stream_wait(int stream, double ts, int corr, int wait_on_stream, int record_corr, int event) {
    const std::string s = std::to_string(stream);
    add(R"("ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": )" + s + ", \"ts\": " +
        num(ts) + R"(, "dur": 0.0, "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": )" +
        std::to_string(wait_on_stream) + R"(, "wait_on_cuda_event_record_corr_id": )" + std::to_string(record_corr) +
        R"(, "wait_on_cuda_event_id": )" + std::to_string(event) + R"(, "stream": )" + s + R"(, "correlation": )" +
        std::to_string(corr) + R"(, "device": 0, "context": 1})");
  }
  std::string text() const {
    return R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, "warpSize": 32, "numSms": 132}],
"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
"traceEvents": [
  {"name": "process_name", "ph": "M", "ts": 0, "pid": 4242, "tid": 0, "args": {"name": "python3"}},
  {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
)" + events_ + R"(
],
"traceName": "trace.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000})";
  }

 private:
  static std::string num(double v) {
    std::ostringstream o;
    o.precision(3);
    o << std::fixed << v;
    return o.str();
  }
  void add(const std::string& body) { events_ += (events_.empty() ? "  {" : ",\n  {") + body + "}"; }
  std::string events_;
  int ext_ = 0;
};

// Two steps (ProfilerStep#4, #5) of: layer0.attn: gemm on main; record; aux waits; softmax on aux
// (1 us after the gemm); gemm on main; record on aux; main waits; add. layer1.mlp: gemm (+ extra).
std::string pytorch_trace(const Variant& v) {
  PytorchJson j;
  for (int s = 0; s < 2; ++s) {
    const double T = 1000 + 1000 * s;
    const int c = 100 + 100 * s;
    j.annotation("ProfilerStep#" + std::to_string(4 + s), T, 500);
    j.annotation("layer0.attn", T + 5, 195);
    j.cpu_op("aten::mm", T + 9, 7);
    j.runtime("cudaLaunchKernel", T + 10, 5, c, 211);
    j.kernel("gemm_kernel", v.main, T + 20, 50, c);
    j.runtime("cudaEventRecordWithFlags", T + 16, 2, c + 1, 417);
    j.runtime("cudaStreamWaitEvent", T + 19, 2, c + 2, 147);
    if (v.sync_events) j.stream_wait(v.aux, T + 21, c + 2, v.main, c + 1, 1);
    j.runtime("cudaLaunchKernel", T + 22, 5, c + 3, 211);
    j.kernel("softmax_kernel", v.aux, T + 71, 25, c + 3);
    j.runtime("cudaLaunchKernel", T + 30, 5, c + 4, 211);
    j.kernel("gemm_kernel", v.main, T + 70, 50, c + 4);
    j.runtime("cudaEventRecord", T + 36, 1, c + 5, 135);
    j.runtime("cudaStreamWaitEvent", T + 38, 1, c + 6, 147);
    if (v.sync_events) j.stream_wait(v.main, T + 39, c + 6, v.aux, c + 5, 2);
    j.runtime("cudaLaunchKernel", T + 40, 5, c + 7, 211);
    j.kernel("add_kernel", s == 1 && v.add_on_aux_step2 ? v.aux : v.main, T + 125, 5, c + 7);
    j.annotation("layer1.mlp", T + 200, 200);
    j.runtime("cudaLaunchKernel", T + 210, 5, c + 8, 211);
    j.kernel("gemm_kernel", v.main, T + 220, v.mlp_gemm_us, c + 8);
    if (v.extra) {
      j.runtime("cudaLaunchKernel", T + 310, 5, c + 9, 211);
      j.kernel("extra_kernel", v.main, T + 220 + v.mlp_gemm_us, 10, c + 9);
    }
  }
  return j.text();
}

ProfileOptions profiler_steps() {
  ProfileOptions o;
  o.roles.step_range = "ProfilerStep";
  return o;
}

TraceProfile profile_of(const Variant& v) {
  const Trace t = load_kineto_json(pytorch_trace(v), "pytorch trace");
  return profile_trace(t, profiler_steps());
}

// Per step, by hand (us): gemm gap 5; softmax event 43 (to the gemm's end at 70) + gap 1; gemm
// own stream 35; add own stream 75 (its producer, softmax, ended before the gemm did) + gap 5;
// mlp gemm gap 5.
void expect_trace_a_waits(const WaitTotals& w) {
  EXPECT_EQ(w.kernels, 10u);
  EXPECT_EQ(w.launch_to_start, 2 * 169 * kUs);
  EXPECT_EQ(w.own_stream, 2 * 110 * kUs);
  EXPECT_EQ(w.event, 2 * 43 * kUs);
  EXPECT_EQ(w.launch_gap, 2 * 16 * kUs);
  EXPECT_EQ(w.unrelated, 0);
}

}  // namespace

TEST(PytorchTrace, LoadsAndProfiles) {
  const Trace t = load_kineto_json(pytorch_trace({}), "pytorch trace");
  ASSERT_EQ(t.kernels.size(), 10u);
  ASSERT_EQ(t.syncs.size(), 4u);
  EXPECT_EQ(t.syncs[0].event_stream, 7u);
  const TraceProfile p = profile_trace(t, profiler_steps());
  EXPECT_EQ(p.roles.steps.size(), 2u);
  EXPECT_EQ(p.roles.roles.size(), 5u);
  EXPECT_EQ(p.role_stats[0].key, "ProfilerStep/layer1.mlp :: gemm_kernel #0");  // 2 x 80 us
  EXPECT_EQ(p.role_stats[0].count, 2u);
  // Waits resolved from the cuda_sync events' recording stream and record call.
  EXPECT_EQ(p.waits.sources.waits, 4u);
  EXPECT_EQ(p.waits.sources.from_sync_fields, 4u);
  EXPECT_FALSE(p.waits.sources.inferred_from_api);
  expect_trace_a_waits(p.waits.total);
  // Event counts: the trace has no CUPTI event records, only the runtime calls.
  const ResourceSummary& r = p.analysis.resources;
  EXPECT_EQ(r.cuda_event_records, 0u);
  EXPECT_EQ(r.api.event_records, 4u);       // cudaEventRecordWithFlags + cudaEventRecord per step
  EXPECT_EQ(r.api.stream_wait_events, 4u);
  EXPECT_EQ(r.api.kernel_launches, 10u);
  EXPECT_EQ(r.stream_waits, 4u);
  // Critical path per step: host to the mlp gemm's launch (215 us), its launch gap, the gemm.
  ASSERT_EQ(p.paths.size(), 2u);
  EXPECT_EQ(p.paths[0].latency(), 300 * kUs);
  EXPECT_EQ(p.paths[0].by_kind[size_t(SegmentKind::Host)], 215 * kUs);
  EXPECT_EQ(p.paths[0].by_kind[size_t(SegmentKind::LaunchGap)], 5 * kUs);
  EXPECT_EQ(p.paths[0].by_kind[size_t(SegmentKind::Kernel)], 80 * kUs);
  // Groups: layer0.attn -> layer.attn, layer1.mlp -> layer.mlp; only softmax is off the main stream.
  ASSERT_EQ(p.aux_hidden.size(), 2u);
  EXPECT_EQ(p.aux_hidden[0].group, "layer.attn");
  EXPECT_EQ(p.aux_hidden[0].aux_time, 2 * 25 * kUs);
  EXPECT_EQ(p.aux_hidden[0].hidden, 2 * 25 * kUs);  // under the second gemm [70, 120)
}

// A default PyTorch trace has no cuda_sync events: the cross-stream wait is inferred from the
// cudaStreamWaitEvent calls and comes out the same.
TEST(PytorchTrace, WithoutSyncEventsWaitsAreInferred) {
  Variant v;
  v.sync_events = false;
  const TraceProfile p = profile_of(v);
  EXPECT_EQ(p.waits.sources.waits, 0u);
  EXPECT_TRUE(p.waits.sources.inferred_from_api);
  EXPECT_EQ(p.waits.sources.api_wait_calls, 4u);
  EXPECT_EQ(p.waits.total.inferred_event_waits, 2u);  // the softmax of each step
  expect_trace_a_waits(p.waits.total);
  EXPECT_EQ(p.analysis.resources.api.event_records, 4u);
  EXPECT_EQ(p.analysis.resources.stream_waits, 0u);
}

// B: other stream ids (20, 24), a slower mlp gemm (100 us), an extra kernel after it, and the
// second step's add on the aux stream.
TEST(PytorchTrace, DiffAgainstAnotherRun) {
  const TraceProfile a = profile_of({});
  Variant vb;
  vb.main = 20, vb.aux = 24, vb.mlp_gemm_us = 100, vb.extra = true, vb.add_on_aux_step2 = true;
  const TraceProfile b = profile_of(vb);
  DiffOptions o;
  o.label_a = "eager", o.label_b = "other";
  const TraceDiff d = diff_profiles(a, b, o);
  EXPECT_EQ(d.ops_paired, 10u);
  EXPECT_EQ(d.ops_only_a, 0u);
  EXPECT_EQ(d.ops_only_b, 2u);
  ASSERT_EQ(d.roles.size(), 5u);
  EXPECT_TRUE(d.only_a.empty());
  ASSERT_EQ(d.only_b.size(), 1u);
  EXPECT_EQ(d.only_b[0].key, "ProfilerStep/layer1.mlp :: extra_kernel #0");
  // The slower gemm changed most: +2 x 20 us; every other role by 0.
  ASSERT_FALSE(d.most_changed.empty());
  const RoleDiff& g = d.roles[d.most_changed[0]];
  EXPECT_EQ(g.key, "ProfilerStep/layer1.mlp :: gemm_kernel #0");
  EXPECT_EQ(g.delta(), 40 * kUs);
  EXPECT_EQ(g.median_a, 80.0 * kUs);
  EXPECT_EQ(g.median_b, 100.0 * kUs);
  EXPECT_EQ(g.streams_a, (std::vector<std::string>{"stream 7"}));
  EXPECT_EQ(g.streams_b, (std::vector<std::string>{"stream 20"}));
  EXPECT_FALSE(g.changed_stream);  // stream 7 of A is stream 20 of B
  for (size_t i = 1; i < d.most_changed.size(); ++i) EXPECT_EQ(d.roles[d.most_changed[i]].delta(), 0);
  // The add moved to the aux stream in one of its two steps.
  ASSERT_EQ(d.changed_stream.size(), 1u);
  const RoleDiff& add = d.roles[d.changed_stream[0]];
  EXPECT_EQ(add.key, "ProfilerStep/layer0.attn :: add_kernel #0");
  EXPECT_EQ(add.ops_moved, 1u);
  EXPECT_EQ(add.streams_b, (std::vector<std::string>{"stream 20", "stream 24"}));
  // Waits resolved on both sides.
  EXPECT_EQ(d.wait_sources_a.from_sync_fields, 4u);
  EXPECT_EQ(d.wait_sources_b.from_sync_fields, 4u);
  EXPECT_GT(d.waits_b.event, 0);
  // Critical path: B's steps end with the extra kernel right behind the gemm (own stream).
  EXPECT_EQ(d.path.mean_latency_a, 300 * kUs);
  EXPECT_EQ(d.path.mean_latency_b, 330 * kUs);
  EXPECT_EQ(d.path.by_kind_b[size_t(SegmentKind::Kernel)], 2 * 110 * kUs);
  ASSERT_EQ(d.path.joined.size(), 1u);
  EXPECT_EQ(d.path.joined[0].key, "ProfilerStep/layer1.mlp :: extra_kernel #0");
  EXPECT_EQ(d.path.joined[0].time_b, 2 * 10 * kUs);
  EXPECT_TRUE(d.path.left.empty());
  ASSERT_EQ(d.path.changed.size(), 1u);
  EXPECT_EQ(d.path.changed[0].key, "ProfilerStep/layer1.mlp :: gemm_kernel #0");
  EXPECT_EQ(d.path.changed[0].delta(), 2 * 20 * kUs);
  // Resources side by side.
  EXPECT_EQ(d.resources_a.api.kernel_launches, 10u);
  EXPECT_EQ(d.resources_b.api.kernel_launches, 12u);

  const nlohmann::json j = diff_to_json(d);
  EXPECT_EQ(j["labels"], nlohmann::json({"eager", "other"}));
  EXPECT_EQ(j["most_changed"][0], "ProfilerStep/layer1.mlp :: gemm_kernel #0");
  EXPECT_EQ(j["changed_stream"], nlohmann::json({"ProfilerStep/layer0.attn :: add_kernel #0"}));
  EXPECT_EQ(j["critical_path"]["mean_latency_b_ns"], 330 * kUs);
  EXPECT_EQ(j["resources"]["b"]["api_calls"]["event_records"], 4);
  const std::string text = diff_to_text(d);
  for (const char* s : {"eager vs other", "extra_kernel", "(moved)", "roles joining the path", "+40.000"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
}

// Named streams ("<owner>.<role>") compare by role: a per-layer stream and a shared one doing the
// same job are not a change of stream.
TEST(TraceDiff, NamedStreamsCompareByRole) {
  auto trace = [](const char* aux_name, uint32_t aux_id, uint32_t main_id, bool moved) {
    Trace t;
    Stream m;
    m.id = main_id;
    m.name = t.intern("main");
    Stream x = m;
    x.id = aux_id;
    x.name = t.intern(aux_name);
    t.streams = {m, x};
    NvtxRange r;
    r.start = 0, r.end = 100, r.name = t.intern("step"), r.pid = r.tid = 1;
    t.nvtx.push_back(r);
    uint32_t corr = 0;
    for (auto [name, on_aux] : {std::pair{"k", true}, std::pair{"q", !moved}}) {
      ApiCall a;
      a.start = 10 + 10 * corr, a.end = a.start + 2, a.name = t.intern("cudaLaunchKernel"), a.correlation = ++corr;
      a.pid = a.tid = 1;
      t.api_calls.push_back(a);
      Kernel k;
      k.start = 50 + 10 * corr, k.end = k.start + 5, k.name = t.intern(name), k.correlation = corr, k.pid = 1;
      k.stream = on_aux ? aux_id : main_id;
      t.kernels.push_back(k);
    }
    t.finalize();
    return t;
  };
  const Trace a = trace("L3.aux0", 14, 7, false), b = trace("shared.aux0", 22, 21, true);
  const TraceDiff d = diff_profiles(profile_trace(a), profile_trace(b));
  ASSERT_EQ(d.roles.size(), 2u);
  EXPECT_EQ(d.roles[0].key, "step :: k #0");
  EXPECT_FALSE(d.roles[0].changed_stream);  // L3.aux0 -> shared.aux0: aux0 both
  EXPECT_EQ(d.roles[1].key, "step :: q #0");
  EXPECT_TRUE(d.roles[1].changed_stream);   // aux0 -> main
  // The stream-role overlap folds labels to roles.
  EXPECT_TRUE(d.stream_role_overlap.empty());  // k and q never overlap
}
