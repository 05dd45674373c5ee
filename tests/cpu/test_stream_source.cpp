// Stream sources (model/stream_policy.h): the torch source's pool semantics (32 streams per
// priority created at the first draw, round-robin draws, aliasing past 32, workspaces only for
// streams that ran a GEMM), checked on the plan, on a recording fake device, and on the null
// backend's resource counts, against counts worked out by hand from the tiny config (layers 0-1
// sliding, 2 and 4 compress by 4, 3 and 5 by 16).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/schedule.h"
#include "model/cpu/cpu_backend_impl.h"
#include "model/deepseek_v4.h"
#include "model/null_backend.h"

namespace sl {
namespace {

ModelConfig tiny(int mtp_layers, int mtp_compress) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = mtp_layers;
  set_mtp_compress_ratio(c, mtp_compress);
  c.context_length = 8;
  c.draft_steps = std::max(2, mtp_layers);  // draft step s runs MTP layer s mod N: every layer runs
  return c;
}

StreamPolicy policy(const std::string& name, StreamSource src, bool shared_expert = true) {
  StreamPolicy p = StreamPolicy::parse(name);
  p.source = src;
  if (!shared_expert) p.shared_expert_stream = false;
  return p;
}

TEST(StreamSource, ParsesAndNames) {
  EXPECT_EQ(parse_stream_source("cuda"), StreamSource::Cuda);
  EXPECT_EQ(parse_stream_source("torch"), StreamSource::Torch);
  EXPECT_THROW(parse_stream_source("Torch"), Error);
  EXPECT_STREQ(stream_source_name(StreamSource::Torch), "torch");
}

TEST(StreamSource, CudaCreatesOneStreamPerRequest) {
  const StreamPlan p = StreamPlan::make(policy("per-layer", StreamSource::Cuda), tiny(12, 0));
  EXPECT_EQ(p.streams.size(), size_t(3 + 1 + 36));
  EXPECT_EQ(p.physical.size(), p.streams.size());
  EXPECT_TRUE(p.aliased().empty());
  for (size_t i = 0; i < p.streams.size(); ++i) EXPECT_EQ(p.streams[i].physical, int(i));
}

TEST(StreamSource, TorchDrawsRoundRobinFromAPoolOf32) {
  // 40 draws (as the PyTorch measurement: 32 distinct streams, draw 33 is draw 1's).
  const StreamPlan p = StreamPlan::make(policy("per-layer", StreamSource::Torch), tiny(12, 0));
  ASSERT_EQ(p.streams.size(), 40u);
  EXPECT_EQ(p.physical.size(), 32u);  // the whole pool, created at the first draw
  std::set<int> distinct;
  for (const auto& s : p.streams) distinct.insert(s.physical);
  EXPECT_EQ(distinct.size(), 32u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(p.streams[i].physical, int(i % 32)) << p.streams[i].name;
  // Draw order (vLLM): the target's 3, the process-global shared-expert stream (built with the
  // first MoE layer), then each MTP layer's 3. Draw 33 (index 32) is mtp9.aux1 -> draw 1's stream.
  EXPECT_EQ(p.streams[3].name, "shared_expert");
  EXPECT_EQ(p.streams[32].name, "mtp9.aux1");
  EXPECT_EQ(p.served(0), "target.aux0 + mtp9.aux1");
  EXPECT_EQ(p.served(3), "shared_expert + mtp10.aux1");
  EXPECT_EQ(p.aliased().size(), 8u);  // 40 - 32
  // Roles of one layer never share a stream (3 consecutive draws of a 32-pool).
  for (const auto& r : p.roles)
    if (r[0] >= 0) {
      EXPECT_NE(p.streams[size_t(r[0])].physical, p.streams[size_t(r[1])].physical);
      EXPECT_NE(p.streams[size_t(r[1])].physical, p.streams[size_t(r[2])].physical);
    }
}

TEST(StreamSource, FirstAliasingMtpLayerCount) {
  // per-layer draws 3 + 1 + 3N: more than 32 from N = 10 (34 draws); without the shared-expert
  // stream 3 + 3N > 32 also from N = 10 (33 draws).
  EXPECT_EQ(first_aliasing_mtp_layers(policy("per-layer", StreamSource::Torch), tiny(1, 0)), 10);
  EXPECT_EQ(first_aliasing_mtp_layers(policy("per-layer", StreamSource::Torch, false), tiny(1, 0)), 10);
  // per-layer-all on tiny: 3 * 6 + 1 + 3N > 32 from N = 5.
  EXPECT_EQ(first_aliasing_mtp_layers(policy("per-layer-all", StreamSource::Torch), tiny(1, 0)), 5);
  // shared and global draw a fixed 7 and 4: never.
  EXPECT_EQ(first_aliasing_mtp_layers(policy("shared", StreamSource::Torch), tiny(1, 0)), -1);
  EXPECT_EQ(first_aliasing_mtp_layers(policy("global", StreamSource::Torch), tiny(1, 0)), -1);
  // The cuda source never aliases.
  EXPECT_EQ(first_aliasing_mtp_layers(policy("per-layer", StreamSource::Cuda), tiny(1, 0)), -1);
}

TEST(StreamSource, TrtllmPerLayerGivesStreamsToCompress4LayersOnly) {
  // tiny's c4a target layers are 2 and 4; MTP layers compressed by 4 are c4a too.
  for (int mtp_compress : {0, 4}) {
    const StreamPlan p = StreamPlan::make(policy("trtllm-per-layer", StreamSource::Cuda, false), tiny(2, mtp_compress));
    const size_t c4a_layers = 2 + (mtp_compress == 4 ? 2 : 0);
    EXPECT_EQ(p.streams.size(), 3 * c4a_layers);
    for (int l = 0; l < 8; ++l) {
      const bool c4a = l == 2 || l == 4 || (l >= 6 && mtp_compress == 4);
      EXPECT_EQ(p.roles[size_t(l)][0] >= 0, c4a) << "layer " << l;
    }
    EXPECT_EQ(p.streams[size_t(p.roles[2][0])].name, "L2.aux0");
  }
}

// A fake device: the CPU backend, recording which kind of stream each creation asked for, the
// claims, and the streams every GEMM op ran on.
class RecordingBackend : public CpuBackend {
 public:
  Stream create_stream(const std::string& n, int p) override {
    ++engine_streams;
    return CpuBackend::create_stream(n, p);
  }
  Stream create_pool_stream(const std::string& n, int p) override {
    ++pool_streams;
    return CpuBackend::create_stream(n, p);
  }
  void claim_stream(Stream s, const std::string& roles) override { claims[s.id] = roles; }
  void gemm(Stream s, const Tensor& o, const Tensor& a, const Tensor& w) override {
    gemm_streams.insert(s.id);
    CpuBackend::gemm(s, o, a, w);
  }
  void gemm_pair(Stream s, const Tensor& o1, const Tensor& o2, const Tensor& a, const Tensor& w1,
                 const Tensor& w2) override {
    gemm_streams.insert(s.id);
    CpuBackend::gemm_pair(s, o1, o2, a, w1, w2);
  }
  void gemm_swiglu(Stream s, const Tensor& act, const Tensor& g, const Tensor& u, const Tensor& x, const Tensor& w1,
                   const Tensor& w3, float limit) override {
    gemm_streams.insert(s.id);
    CpuBackend::gemm_swiglu(s, act, g, u, x, w1, w3, limit);
  }
  int engine_streams = 0, pool_streams = 0;
  std::map<int, std::string> claims;
  std::set<int> gemm_streams;
};

struct ModelRun {
  RecordingBackend be;
  std::unique_ptr<DeepSeekV4> model;
  StepOutput out;
  ModelRun(const StreamPolicy& p, const ModelConfig& c) {
    model = std::make_unique<DeepSeekV4>(be, c, p, RunShape{1, 32, 8, false});
    model->init_random(7);
    std::vector<int32_t> prompt(8);
    for (int i = 0; i < 8; ++i) prompt[size_t(i)] = 5 + 3 * i;
    model->prefill(prompt, 8);
    out = model->decode_step();
  }
};

TEST(StreamSource, TorchModelCreatesThePoolAndClaimsDrawnStreams) {
  ModelRun r(policy("per-layer", StreamSource::Torch), tiny(12, 4));
  EXPECT_EQ(r.be.engine_streams, 0);
  EXPECT_EQ(r.be.pool_streams, 32);
  EXPECT_EQ(r.be.claims.size(), 32u);  // 40 draws cover the whole pool
  const Stream first = r.model->created_streams()[0];
  EXPECT_NE(r.be.claims[first.id].find("target.aux0 + mtp9.aux1"), std::string::npos);
  // Aliasing changes where work runs, not what it computes: the CPU runs in program order, so
  // the logits equal the cuda source's bit for bit.
  ModelRun c(policy("per-layer", StreamSource::Cuda), tiny(12, 4));
  EXPECT_EQ(c.be.engine_streams, 40);
  EXPECT_EQ(c.be.pool_streams, 0);
  EXPECT_EQ(r.out.last_logits, c.out.last_logits);
  EXPECT_EQ(r.out.drafts, c.out.drafts);
}

TEST(StreamSource, SharedPoolStreamsRunBothRolesWork) {
  // mtp9.aux1 is target.aux0's stream: MTP layer 9 (compress 4) runs its phase-A indexer GEMM on
  // the stream the target's compressor GEMMs use.
  ModelRun r(policy("per-layer", StreamSource::Torch), tiny(12, 4));
  const Stream first = r.model->created_streams()[0];
  EXPECT_TRUE(r.be.gemm_streams.count(first.id));
  Schedule sched;
  r.model->describe_streams(sched);
  r.model->ops().attach_schedule(&sched);
  r.model->decode_step();
  r.model->ops().attach_schedule(nullptr);
  std::set<std::string> scopes_on_first;
  for (const auto& e : sched.entries())
    if (e.kind == ScheduleEntry::Op && e.stream == first.id) scopes_on_first.insert(e.scope.substr(0, e.scope.find("/phase")));
  bool target = false, mtp9 = false;
  for (const auto& s : scopes_on_first) {
    target |= s.find("/target/L") != std::string::npos;
    mtp9 |= s.find("mtp9") != std::string::npos;
  }
  EXPECT_TRUE(target);
  EXPECT_TRUE(mtp9);
  EXPECT_TRUE(sched.hazards().empty());
}

// The null backend counts what the CUDA backend would hold (what `schedule` predicts): the main
// stream's handle and workspace; per engine stream a handle and a workspace; per pool stream a
// workspace once it runs a GEMM op.
MemoryStats null_resources(const StreamPolicy& p, const ModelConfig& c) {
  auto be = make_null_backend();
  DeepSeekV4 m(*be, c, p, RunShape{1, 32, 8, false});
  std::vector<int32_t> prompt(8, 1);
  m.prefill(prompt, 8);
  m.decode_step();
  return be->memory();
}

TEST(StreamSource, PredictedHandlesAndWorkspaces) {
  // cuda, per-layer, N = 4: 3 + 1 + 12 = 16 streams, each with a handle and workspace, + main's.
  MemoryStats m = null_resources(policy("per-layer", StreamSource::Cuda), tiny(4, 0));
  EXPECT_EQ(m.streams_created, 16u);
  EXPECT_EQ(m.blas_handles, 17u);
  EXPECT_EQ(m.blas_workspaces, 17u);
  EXPECT_EQ(m.library_bytes, size_t(17) << 25);
  // torch, same: the pool (32), one handle, workspaces for main + the streams that ran GEMMs.
  // MTP compress 0 (the real checkpoint): only the target's 3 and the shared expert's run GEMMs.
  m = null_resources(policy("per-layer", StreamSource::Torch), tiny(4, 0));
  EXPECT_EQ(m.streams_created, 32u);
  EXPECT_EQ(m.blas_handles, 1u);
  EXPECT_EQ(m.blas_workspaces, 1u + 3 + 1);
  // MTP compress 4: every MTP layer's 3 run phase-A GEMMs too.
  m = null_resources(policy("per-layer", StreamSource::Torch), tiny(4, 4));
  EXPECT_EQ(m.blas_workspaces, 1u + 3 + 1 + 12);
  // N = 12: 40 draws on 32 streams, all of which run GEMMs.
  m = null_resources(policy("per-layer", StreamSource::Torch), tiny(12, 4));
  EXPECT_EQ(m.blas_workspaces, 1u + 32);
  // serial draws nothing: no pool is created.
  m = null_resources(policy("serial", StreamSource::Torch), tiny(4, 4));
  EXPECT_EQ(m.streams_created, 0u);
  EXPECT_EQ(m.blas_workspaces, 1u);
}

}  // namespace
}  // namespace sl
