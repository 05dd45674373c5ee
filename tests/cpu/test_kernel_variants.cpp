// --kernel-variants: parsing, printing and the errors a user sees (model/kernel_variants.h).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/kernel_variants.h"

using sl::KernelVariants;
using sl::Fp8Decode;
using sl::Mxfp4Decode;
using sl::Mxfp4Swap;
using sl::Mxfp4Prefill;
using sl::Mxfp4Load;

namespace {
std::string error_of(const std::string& spec) {
  try {
    KernelVariants::parse(spec);
  } catch (const sl::Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(KernelVariants, EmptyIsTheDefaults) {
  EXPECT_EQ(KernelVariants::parse(""), KernelVariants{});
  EXPECT_EQ(KernelVariants{}.changes(), "");
  const KernelVariants d;
  EXPECT_TRUE(d.attention_decode_kernel);
  EXPECT_EQ(d.attention_splits, 0);
  EXPECT_EQ(d.attention_decode_splits, 0);
  EXPECT_TRUE(d.pdl);
  EXPECT_EQ(d.cublas_workspace_bytes, size_t(32) << 20);
  EXPECT_EQ(d.gemv_bf16_max_mb, 20);
  EXPECT_TRUE(d.mxfp4_mma);
  EXPECT_EQ(d.fp8_decode, Fp8Decode::Auto);
  EXPECT_FALSE(d.mxfp4_wide);
  EXPECT_EQ(d.mxfp4_decode, Mxfp4Decode::ShiftQuad);
  EXPECT_EQ(d.mxfp4_swap, Mxfp4Swap::Auto);
  EXPECT_EQ(d.mxfp4_swap_ks, 0);
  EXPECT_EQ(d.hc_fused_splits, 0);  // auto
  EXPECT_EQ(d.hc_splits_for(1), 32);
  EXPECT_EQ(d.hc_splits_for(4), 32);
  EXPECT_EQ(d.hc_splits_for(5), 16);
  EXPECT_EQ(d.hc_splits_for(8), 16);
  EXPECT_EQ(d.hc_splits_for(9), 8);
  EXPECT_EQ(d.hc_splits_for(16), 8);
  EXPECT_EQ(d.mxfp4_mma_blocks, 2);
  EXPECT_EQ(d.mxfp4_load, Mxfp4Load::Plain);
  EXPECT_EQ(d.mxfp4_prefill, Mxfp4Prefill::Auto);
  EXPECT_TRUE(d.fp8_pair);
  EXPECT_EQ(d.fp8_wide_blocks, 2);
  EXPECT_TRUE(d.hc_decode_fused);
  EXPECT_FALSE(d.hc_post_fused);
  EXPECT_FALSE(d.kv_norm_rope_fused);
}

TEST(KernelVariants, EveryKeyParsesAndPrintsBack) {
  const KernelVariants k = KernelVariants::parse(
      "attn-decode=off,attn-splits=8,attn-decode-splits=2,gemv-bf16-max-mb=0,pdl=off,cublas-workspace-kb=0,mxfp4-mma=off,fp8-decode=wide,mxfp4-wide=on,"
      "mxfp4-decode=table,mxfp4-swap=on,mxfp4-swap-ks=2,hc-splits=128,mxfp4-mma-blocks=3,mxfp4-load=noalloc,mxfp4-prefill=gemm,fp8-pair=off,fp8-wide-blocks=1,"
      "hc-decode=split,hc-post=fused,kv-norm-rope=fused,fp8-kv=packed");
  EXPECT_FALSE(k.attention_decode_kernel);
  EXPECT_EQ(k.mxfp4_mma_blocks, 3);
  EXPECT_EQ(k.mxfp4_swap_ks, 2);
  EXPECT_EQ(k.hc_fused_splits, 128);
  EXPECT_EQ(k.mxfp4_load, Mxfp4Load::NoAlloc);
  EXPECT_TRUE(k.fp8_kv_packed);
  EXPECT_EQ(k.fp8_decode, Fp8Decode::Wide);
  EXPECT_TRUE(k.mxfp4_wide);
  EXPECT_EQ(k.mxfp4_decode, Mxfp4Decode::Table);
  EXPECT_EQ(k.mxfp4_swap, Mxfp4Swap::On);
  EXPECT_EQ(k.mxfp4_prefill, Mxfp4Prefill::Gemm);
  EXPECT_FALSE(k.fp8_pair);
  EXPECT_EQ(k.fp8_wide_blocks, 1);
  EXPECT_FALSE(k.hc_decode_fused);
  EXPECT_TRUE(k.hc_post_fused);
  EXPECT_TRUE(k.kv_norm_rope_fused);
  EXPECT_EQ(KernelVariants::parse("hc-decode=fused"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("hc-post=split"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("kv-norm-rope=split"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("hc-post=fused,kv-norm-rope=fused").changes(), "hc-post=fused,kv-norm-rope=fused");
  EXPECT_EQ(KernelVariants::parse("fp8-kv=emulated"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("fp8-wide-blocks=2"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-prefill=auto"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-prefill=mma").mxfp4_prefill, Mxfp4Prefill::Mma);
  EXPECT_EQ(KernelVariants::parse("mxfp4-prefill=mma").changes(), "mxfp4-prefill=mma");
  EXPECT_EQ(KernelVariants::parse("mxfp4-swap=auto"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-swap=off").mxfp4_swap, Mxfp4Swap::Off);
  EXPECT_EQ(KernelVariants::parse("mxfp4-mma-blocks=2"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-swap-ks=auto"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-swap-ks=8").mxfp4_swap_ks, 8);
  EXPECT_EQ(KernelVariants::parse("mxfp4-swap-ks=1").changes(), "mxfp4-swap-ks=1");
  EXPECT_EQ(KernelVariants::parse("hc-splits=auto"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("hc-splits=32").changes(), "hc-splits=32");
  EXPECT_EQ(KernelVariants::parse("hc-splits=16").hc_fused_splits, 16);
  EXPECT_EQ(KernelVariants::parse("hc-splits=8").hc_splits_for(1), 8);  // a forced count holds at every T
  EXPECT_EQ(KernelVariants::parse("hc-splits=64").changes(), "hc-splits=64");
  EXPECT_EQ(KernelVariants::parse("mxfp4-mma-blocks=3").mxfp4_mma_blocks, 3);
  EXPECT_EQ(KernelVariants::parse("mxfp4-mma-blocks=3").changes(), "mxfp4-mma-blocks=3");
  EXPECT_EQ(KernelVariants::parse("mxfp4-load=plain"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-load=noalloc").mxfp4_load, Mxfp4Load::NoAlloc);
  EXPECT_EQ(KernelVariants::parse("mxfp4-load=noalloc").changes(), "mxfp4-load=noalloc");
  EXPECT_EQ(KernelVariants::parse("mxfp4-decode=shift-quad"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("mxfp4-decode=table").changes(), "mxfp4-decode=table");
  EXPECT_EQ(KernelVariants::parse("mxfp4-decode=shift").mxfp4_decode, Mxfp4Decode::Shift);
  EXPECT_EQ(KernelVariants::parse("mxfp4-decode=shift").changes(), "mxfp4-decode=shift");
  EXPECT_EQ(KernelVariants::parse("fp8-decode=warp").fp8_decode, Fp8Decode::Warp);
  EXPECT_EQ(KernelVariants::parse("fp8-decode=wide").fp8_decode, Fp8Decode::Wide);
  EXPECT_EQ(KernelVariants::parse("fp8-decode=wide").changes(), "fp8-decode=wide");
  EXPECT_FALSE(k.mxfp4_mma);
  EXPECT_EQ(k.attention_splits, 8);
  EXPECT_EQ(k.attention_decode_splits, 2);
  EXPECT_EQ(KernelVariants::parse("attn-decode-splits=0"), KernelVariants{});
  EXPECT_EQ(KernelVariants::parse("attn-decode-splits=1").changes(), "attn-decode-splits=1");
  EXPECT_EQ(k.gemv_bf16_max_mb, 0);
  EXPECT_FALSE(k.pdl);
  EXPECT_EQ(k.cublas_workspace_bytes, 0u);
  EXPECT_EQ(KernelVariants::parse(k.str()), k);  // str() is parse()'s syntax
  EXPECT_EQ(KernelVariants::parse(k.changes()), k);
  // The changes list names only what differs; a later setting of a key wins.
  EXPECT_EQ(KernelVariants::parse("attn-splits=4,attn-splits=16").attention_splits, 16);
  EXPECT_EQ(KernelVariants::parse("pdl=off").changes(), "pdl=off");
  EXPECT_EQ(KernelVariants::parse("cublas-workspace-kb=64").cublas_workspace_bytes, 65536u);
}

// mxfp4-prefill=auto takes the GEMM from 32 token-expert pairs per expert on average: flash's 256
// experts at 6 per token switch at 8192 pairs (a chunk of 1366 tokens); mma and gemm never switch.
TEST(KernelVariants, Mxfp4PrefillAutoSwitchesAtItsPairsPerExpert) {
  const KernelVariants dflt, mma = KernelVariants::parse("mxfp4-prefill=mma"),
                             gemm = KernelVariants::parse("mxfp4-prefill=gemm");
  EXPECT_FALSE(dflt.mxfp4_prefill_takes_gemm(6 * 1365, 256));  // 8190 pairs
  EXPECT_TRUE(dflt.mxfp4_prefill_takes_gemm(6 * 1366, 256));   // 8196 pairs
  EXPECT_FALSE(dflt.mxfp4_prefill_takes_gemm(8191, 256));
  EXPECT_TRUE(dflt.mxfp4_prefill_takes_gemm(8192, 256));
  EXPECT_TRUE(dflt.mxfp4_prefill_takes_gemm(256, 8));  // 8 experts: from 256 pairs
  EXPECT_FALSE(dflt.mxfp4_prefill_takes_gemm(255, 8));
  for (long long P : {65LL, 8192LL, 1LL << 20}) {
    EXPECT_FALSE(mma.mxfp4_prefill_takes_gemm(P, 64)) << P;
    EXPECT_TRUE(gemm.mxfp4_prefill_takes_gemm(P, 64)) << P;
  }
}

TEST(KernelVariants, BadInputNamesTheKeyAndWhatItTakes) {
  struct Case {
    const char* spec;
    const char* says;
  };
  for (const Case& c : {Case{"pdl=0", "expected on or off"}, Case{"attn-decode=yes", "expected on or off"},
                        Case{"fp8-decode=fast", "expected auto, warp or wide"},
                        Case{"fp8-wide=on", "became fp8-decode"},
                        Case{"attn-splits=-1", "0..16"}, Case{"attn-splits=8x", "0..16"},
                        Case{"attn-splits=17", "0..16"}, Case{"attn-decode-splits=17", "0..16"},
                        Case{"attn-decode-splits=-2", "0..16"},
                        Case{"attn-splits=99999999999999999999", "0..16"}, Case{"gemv-bf16-max-mb=1e3", "0..1000000"},
                        // Variants that measurements retired say so, and where.
                        Case{"moe-decode=splitk", "'moe-decode' is no longer a variant: the split-K MoE decode path"},
                        Case{"moe-split-k=8", "no longer a variant"}, Case{"moe-pair=off", "no longer a variant"},
                        Case{"moe-w2-cols=4", "2 columns per warp"},
                        Case{"fp8-decode=stream", "streaming FP8 kernel was removed"},
                        Case{"mxfp4-stream=on", "streaming MXFP4 expert kernel was removed"},
                        Case{"l2-prefetch=on", "2026-12-05-h200-stream-kernels"},
                        Case{"mxfp4-lut=on", "2026-12-05-h200-mxfp4-lut"},
                        // Either value of a retired key is refused, the default's too.
                        Case{"attn-combine=fused", "'attn-combine' is no longer a variant: the fused split-KV merge"},
                        Case{"attn-combine=kernel", "2026-12-05-h100-decode-candidates"},
                        Case{"fp8-early=on", "'fp8-early' is no longer a variant: loading the FP8 decode kernels'"},
                        Case{"fp8-early=off", "2026-12-05-h100-decode-candidates"},
                        Case{"route=warp", "'route' is no longer a variant: the warp-per-token routing top-k"},
                        Case{"route=block", "2026-12-05-h100-decode-candidates"},
                        Case{"weight-prefetch=on", "'weight-prefetch' is no longer a variant: the model's L2 prefetch"},
                        Case{"weight-prefetch=off", "2026-12-05-h100-weight-prefetch"},
                        Case{"fp8-act=codes", "'fp8-act' is no longer a variant: quantizing the FP8 GEMMs'"},
                        Case{"fp8-act=inline", "2026-12-05-h100-fp8-act-codes"},
                        Case{"mxfp4-swap-pipeline=on", "2026-12-05-h100-swap-pipeline"},
                        Case{"mxfp4-decode=lut", "expected table, shift or shift-quad"},
                        Case{"mxfp4-prefill=on", "expected mma, gemm or auto"},
                        Case{"mxfp4-w4a8=wgmma", "'mxfp4-w4a8' is no longer a variant: the W4A8 experts on the FP8 wgmma"},
                        Case{"mxfp4-w4a8=mma", "2026-12-07-h100-ring-and-wgmma"},
                        Case{"mxfp4-ring=on", "'mxfp4-ring' is no longer a variant: streaming the MXFP4 kernels' chunks"},
                        Case{"mxfp4-swap=yes", "expected on, off or auto"},
                        Case{"mxfp4-mma-blocks=4", "expected 2 or 3"},
                        Case{"mxfp4-swap-ks=3", "expected auto, 1, 2, 4 or 8"},
                        Case{"mxfp4-swap-ks=0", "expected auto, 1, 2, 4 or 8"},
                        Case{"mxfp4-swap-ks=08", "expected auto, 1, 2, 4 or 8"},
                        Case{"hc-splits=31", "expected auto, 8, 16, 32, 64 or 128"},
                        Case{"hc-splits=+32", "expected auto, 8, 16, 32, 64 or 128"},
                        Case{"hc-splits=", "expected auto, 8, 16, 32, 64 or 128"},
                        Case{"mxfp4-load=l2", "expected plain or noalloc"},
                        Case{"mxfp4-load=stream", "2026-12-07-h100-mxfp4-load"},
                        Case{"fp8-wide-blocks=3", "expected 1 or 2"},
                        Case{"hc-decode=on", "expected split or fused"},
                        Case{"hc-post=on", "expected split or fused"},
                        Case{"kv-norm-rope=yes", "expected split or fused"},
                        Case{"cublas-workspace-kb=-5", "cublas-workspace-kb"}, Case{"speed=max", "unknown key 'speed'"},
                        Case{"pdl", "expected key=value"}}) {
    SCOPED_TRACE(c.spec);
    const std::string e = error_of(c.spec);
    EXPECT_NE(e.find("--kernel-variants"), std::string::npos) << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
  }
  // Retired keys are offered neither by the unknown-key list nor by --help, nor printed by str().
  const std::string unknown = error_of("speed=max"), help = sl::kKernelVariantsHelp, all = KernelVariants{}.str();
  for (const char* gone :
       {"attn-combine", "fp8-early", "route", "moe-decode", "l2-prefetch", "weight-prefetch", "fp8-act",
        "mxfp4-swap-pipeline"}) {
    SCOPED_TRACE(gone);
    EXPECT_EQ(unknown.find(gone), std::string::npos) << unknown;
    EXPECT_EQ(help.find(gone), std::string::npos) << help;
    EXPECT_EQ(all.find(gone), std::string::npos) << all;
  }
}
