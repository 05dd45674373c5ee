// Every op of the CUDA backend against the fp32 CPU reference on identical inputs, at the tiny
// model's real shapes and data (model/check_backend.h): prefill + 3 decode steps with MTP
// drafts. Where test_cuda_model.cpp says that the logits diverge, this names the first op.
// Skips, saying why, when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "core/rng.h"
#include "model/check_backend.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/deepseek_v4.h"

namespace sl {
namespace {

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    std::string why;                                                      \
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

constexpr double kTolerance = 2e-2;

void check_tiny(int mtp_layers, int mtp_compress, int draft_steps, int batch,
                WeightFormat weights = WeightFormat::Bf16) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = mtp_layers;
  c.mtp_compress_ratio = mtp_compress;
  c.compress_ratios.back() = mtp_compress;
  c.draft_steps = draft_steps;
  c.batch = batch;
  validate(c);
  const int steps = 3;
  RunShape shape;
  shape.batch = batch;
  shape.max_positions = c.context_length + steps + c.draft_steps + 2;
  shape.max_seq_tokens = c.context_length;
  shape.weights = weights;

  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend({});
  CheckOptions opt;
  opt.tolerance = kTolerance;
  auto check = make_check_backend(*cpu, *gpu, opt);
  {
    DeepSeekV4 m(*check, c, StreamPolicy::parse("shared"), shape);
    m.init_random(c.seed);
    std::vector<int32_t> p;
    for (int i = 0; i < batch * c.context_length; ++i)
      p.push_back(int32_t(splitmix64(99 + uint64_t(i)) % uint64_t(c.vocab_size)));
    m.prefill(p, c.context_length);
    for (int s = 0; s < steps; ++s) m.decode_step();
  }
  const auto& recs = check_records(*check);
  std::printf("---- mtp layers %d, mtp compress %d, draft steps %d, batch %d, %s weights\n", mtp_layers, mtp_compress,
              draft_steps, batch, weight_format_name(weights));
  print_check_report(stdout, recs, kTolerance, 20);
  const CheckSummary s = summarize_checks(recs);
  EXPECT_GT(s.op_calls, 0);
  EXPECT_EQ(s.float_failures, 0) << "first failure: "
                                 << (s.first_failure ? s.first_failure->describe() : std::string("-"));
  // Exact outputs (argmax, tags, tokens) and writes outside an op's output are bugs as well.
  EXPECT_EQ(s.int_failures, 0);
  EXPECT_EQ(s.outside_view, 0);
}

TEST(CudaCheck, CompressedMtp4Batch2) {
  REQUIRE_GPU();
  check_tiny(1, 4, 3, 2);
}
TEST(CudaCheck, TwoMtpLayersBatch1) {
  REQUIRE_GPU();
  check_tiny(2, 0, 2, 1);
}
// Native weights: the quantizers at initialisation (their codes compared exactly), every FP8 GEMM
// (the grouped wo_a included) and the MXFP4 experts, each on the inputs the GPU gave it.
TEST(CudaCheck, NativeWeightsBatch2) {
  REQUIRE_GPU();
  check_tiny(1, 4, 3, 2, WeightFormat::Native);
}
// The W4A8 experts (--weights native-w4a8), op by op on the GPU's inputs.
TEST(CudaCheck, NativeW4A8Batch2) {
  REQUIRE_GPU();
  check_tiny(1, 4, 3, 2, WeightFormat::NativeW4A8);
}
TEST(CudaCheck, Mtp128Batch3) {
  REQUIRE_GPU();
  check_tiny(2, 128, 2, 3);
}

}  // namespace
}  // namespace sl
