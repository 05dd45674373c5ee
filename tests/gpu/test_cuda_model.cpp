// The whole tiny model on the CUDA backend (bf16) against the fp32 CPU reference, and the
// CUDA results' independence from the stream policy and from CUDA-graph replay.
// Skips, saying why, when no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/deepseek_v4.h"

namespace sl {
namespace {

#define REQUIRE_GPU()                                              \
  do {                                                             \
    std::string why;                                               \
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

std::vector<int32_t> prompt(int n, int vocab, int batch = 1) {
  std::vector<int32_t> t;
  for (int i = 0; i < n * batch; ++i) t.push_back(int32_t(splitmix64(99 + uint64_t(i)) % uint64_t(vocab)));
  return t;
}

ModelConfig tiny(int mtp_layers, int mtp_compress, int draft_steps) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = mtp_layers;
  c.mtp_compress_ratio = mtp_compress;
  c.compress_ratios.back() = mtp_compress;
  c.draft_steps = draft_steps;
  validate(c);
  return c;
}

RunShape shape(const ModelConfig& c, int steps) {
  RunShape s;
  s.batch = c.batch;
  s.max_positions = c.context_length + steps + c.draft_steps + 2;
  s.max_seq_tokens = c.context_length;
  s.draft_logits = true;
  return s;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A greedy token from bf16 logits may differ from the fp32 one only on a near tie: the fp32
// logit of the bf16 choice must then be within `tol` of the fp32 maximum.
void expect_same_choice(const std::vector<float>& ref_logits, size_t row, int vocab, int32_t got, int32_t want,
                        const char* what) {
  if (got == want) return;
  const float* r = ref_logits.data() + row * size_t(vocab);
  const float mx = *std::max_element(r, r + vocab), mn = *std::min_element(r, r + vocab);
  EXPECT_LT(mx - r[got], 0.02f * (mx - mn)) << what << ": token " << got << " vs reference " << want
                                             << " is not a near tie";
}

void compare_with_cpu(int mtp_layers, int mtp_compress, int draft_steps, int batch) {
  ModelConfig c = tiny(mtp_layers, mtp_compress, draft_steps);
  c.batch = batch;
  const int steps = 3;
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend({});
  DeepSeekV4 ref(*cpu, c, StreamPolicy::parse("serial"), shape(c, steps));
  DeepSeekV4 got(*gpu, c, StreamPolicy::parse("shared"), shape(c, steps));
  ref.init_random(c.seed);
  got.init_random(c.seed);
  const auto p = prompt(c.context_length, c.vocab_size, batch);
  StepOutput r = ref.prefill(p, c.context_length), g = got.prefill(p, c.context_length);
  for (int s = 0; s <= steps; ++s) {
    if (s > 0) {
      // Feed both the same input: the reference's token (a near tie may flip the bf16 one).
      r = ref.decode_step();
      g = got.decode_step();
    }
    EXPECT_LT(rel_err(g.last_logits, r.last_logits), 3e-2) << "step " << s;
    for (int b = 0; b < batch; ++b)
      expect_same_choice(r.last_logits, size_t(b), c.vocab_size, g.sampled[size_t(b)], r.sampled[size_t(b)], "target");
    ASSERT_EQ(g.drafts.size(), r.drafts.size());
    // Draft logits of step 0 have identical inputs on both sides when the target tokens agree.
    if (g.sampled == r.sampled && !r.drafts.empty()) {
      std::vector<float> r0(r.draft_logits.begin(), r.draft_logits.begin() + long(batch) * c.vocab_size);
      std::vector<float> g0(g.draft_logits.begin(), g.draft_logits.begin() + long(batch) * c.vocab_size);
      EXPECT_LT(rel_err(g0, r0), 3e-2) << "draft step 0 at step " << s;
      for (int b = 0; b < batch; ++b)
        expect_same_choice(r.draft_logits, size_t(b), c.vocab_size, g.drafts[0][size_t(b)], r.drafts[0][size_t(b)],
                           "draft 0");
    }
    if (g.sampled != r.sampled) break;  // the paths diverged on a near tie: later steps see other inputs
  }
}

TEST(CudaModel, TinyMatchesCpuReference) {
  REQUIRE_GPU();
  compare_with_cpu(2, 0, 2, 1);
}
TEST(CudaModel, TinyCompressedMtpMatchesCpuReference) {
  REQUIRE_GPU();
  compare_with_cpu(1, 4, 3, 2);
}
TEST(CudaModel, TinyMtp128MatchesCpuReference) {
  REQUIRE_GPU();
  compare_with_cpu(2, 128, 2, 1);
}

// Logits and drafts are bit-identical across every stream policy, eager and graph replay.
TEST(CudaModel, BitIdenticalAcrossPoliciesAndGraphs) {
  REQUIRE_GPU();
  ModelConfig c = tiny(2, 4, 2);
  c.batch = 2;
  const auto p = prompt(c.context_length, c.vocab_size, 2);
  std::vector<std::vector<float>> ref_logits;
  std::vector<std::vector<std::vector<int32_t>>> ref_drafts;
  bool first = true;
  for (const char* pol : {"serial", "per-layer", "shared", "global", "per-layer-all", "pool:2"})
    for (bool graph : {false, true}) {
      auto gpu = make_cuda_backend({});
      DeepSeekV4 m(*gpu, c, StreamPolicy::parse(pol), shape(c, 3));
      m.init_random(c.seed);
      std::vector<std::vector<float>> logits;
      std::vector<std::vector<std::vector<int32_t>>> drafts;
      StepOutput o = m.prefill(p, c.context_length);
      logits.push_back(o.last_logits);
      drafts.push_back(o.drafts);
      for (int s = 0; s < 3; ++s) {
        o = graph ? m.decode_step_graph() : m.decode_step();
        logits.push_back(o.last_logits);
        drafts.push_back(o.drafts);
      }
      if (graph) {
        EXPECT_GT(m.graph_stats().nodes, 0u) << pol;
      }
      if (first) {
        ref_logits = logits;
        ref_drafts = drafts;
        first = false;
        continue;
      }
      for (size_t s = 0; s < logits.size(); ++s) {
        EXPECT_TRUE(logits[s] == ref_logits[s]) << pol << (graph ? " graph" : " eager") << " step " << s;
        EXPECT_EQ(drafts[s], ref_drafts[s]) << pol << (graph ? " graph" : " eager") << " step " << s;
      }
    }
}

}  // namespace
}  // namespace sl
