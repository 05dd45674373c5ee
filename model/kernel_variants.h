// The CUDA backend's kernel variants: the choices among kernels that compute the same op, kept
// because a measurement compared them (docs/measurement.md), now explicit arguments of the
// backend instead of environment variables read once, so that every variant can be named on the
// command line, recorded with a result and run by the GPU tests against the CPU reference.
//
//   streamlab run --backend cuda --kernel-variants gemv-bf16-max-mb=0,attn-splits=8
//   bench_decode --kernel-variants=attn-splits=8
//
// A variant stays while a measurement justifies it: the kernel workbench (bench_kernels) runs
// each against the CPU reference and times it; results/2026-12-04-h200-kernel-workbench says
// why each of these stays and why the MoE decode variants went; removed() in kernel_variants.cpp
// names every retired key and the measurement that retired it.
//
// Plain C++ (no CUDA) so that parsing and printing are checked on any machine.
#pragma once
#include <cstddef>
#include <string>

namespace sl {

enum class Fp8Decode { Auto, Warp, Wide };
enum class Mxfp4Decode { Table, Shift, ShiftQuad };
enum class Mxfp4Swap { Off, On, Auto };
enum class Mxfp4Prefill { Mma, Gemm, Auto };
enum class Mxfp4Load { Plain, NoAlloc };

struct KernelVariants {
  // Sparse attention at decode (at most 2 tokens, head dims 64..512): the CUDA-core decode kernel
  // (true) or the tensor-core kernel of prefill (false).
  bool attention_decode_kernel = true;
  // KV splits of the tensor-core sparse attention (prefill, decode past 2 tokens, and all decode
  // under attn-decode=off): 0 = chosen from the shape (about two blocks per SM); N in 1..16 forces
  // N, as far as the split partials fit the scratch buffer (the merge of the splits takes at most
  // 16). The decode kernel (1-2 tokens) takes attn-decode-splits instead.
  int attention_splits = 0;
  // KV splits of the CUDA-core decode kernel (1-2 tokens): 0 = chosen from the shape (the
  // default: about two blocks per SM, at least 16 candidates a split, at most 16 splits; a
  // batch-1 flash layer of 640 candidates takes 16 splits and then the merge's launch), or N in
  // 1..16 (1: no merge launch, each block walks all candidates), as far as the partials fit the
  // scratch. Not yet timed on a GPU.
  int attention_decode_splits = 0;
  // mHC's hc_pre / hc_head at decode sizes (up to 16 tokens): the mix GEMV (1-2 tokens) or the
  // split tensor-core GEMM (3-16) and the finish as separate launches (false), or one launch
  // (true, the default: a batch-8 step 1.4 % faster on an H100, batch 1 the same; results/2026-12-05-h100-decode-candidates):
  // hc-splits blocks per token each dot a range of the token's 4D values with fn, and the last of
  // them to finish runs the finish.
  bool hc_decode_fused = true;
  // Blocks per token of hc-decode=fused's launch: each dots 4D / splits values with fn's rows,
  // and the last of them sums the splits' partials and finishes. 0 = auto (the default): about
  // 128 blocks in all, at most 32 per token (32 up to 4 tokens, 16 up to 8, 8 above); or 8, 16,
  // 32, 64 or 128 per token. Each token's blocks read all of fn (1.5 MiB at flash's width), so
  // more tokens want fewer, longer blocks. bench_kernels on an H100 (bf9c48b,
  // results/2026-12-07-h100-swap-ks-hc-splits): hc_pre at 1 token 13.6 / 12.8 / 13.8 / 15.4 us at
  // 16 / 32 / 64 / 128 splits, at 8 tokens 13.8 / 15.8 / 22.4 / 35.6 us (32 was the fixed count
  // before); again at cc6767e, auto against 32: 13.3 against 16.1 us at 8 tokens, 14.8 against
  // 24.2 at 16, and native batch-8 steps 1.78 % faster (3.762 against 3.829 ms, the defaults
  // repeating within 0.90 %), batch 1 the same. Shapes whose 4D does not split into 8-value
  // vectors, or whose slice exceeds the block's shared memory, take the two-launch path.
  int hc_fused_splits = 0;
  // The splits hc-decode=fused takes for T tokens under this setting.
  int hc_splits_for(long long T) const {
    if (hc_fused_splits) return hc_fused_splits;
    return T <= 4 ? 32 : T <= 8 ? 16 : 8;
  }
  // hc_post_pre_norm (a sub-layer's hc_post, f = f1 + f2 first for the FFN's, and the next
  // sub-layer's hc_pre + RMSNorm) at decode sizes: folded into hc-decode=fused's launch (true:
  // each block first computes its range of X_out from f and the old residual, writes it and dots
  // it; vLLM fuses the same three), or hc_post's kernel and then hc_pre_norm's (false). Saves a
  // launch per sub-layer (14 in a flash-6l decode step with one MTP layer). Measured with
  // kv-norm-rope=fused on an H100: native steps -0.69 % at batch 1, +0.11 % at batch 8
  // (results/2026-12-07-h100-fewer-launches), and again -1.47 % and -0.37 % against a baseline
  // that moved 0.93 % and 0.43 % when repeated (results/2026-12-07-h100-ring-and-wgmma): inside
  // the noise, so off until an H200 round says otherwise.
  bool hc_post_fused = false;
  // rmsnorm_pair with the key's RoPE (q_norm + kv_norm + rope_k): the rotation in the norm's
  // launch, as rmsnorm_rope rotates the query (true), or rope's kernel after it (false). Saves a
  // launch per layer. Measured only together with hc-post=fused (see there), so off.
  bool kv_norm_rope_fused = false;
  // bf16 GEMMs at decode (M <= 2) with a weight of at most this many MB run on our GEMV instead
  // of cuBLAS (0 = cuBLAS for all).
  int gemv_bf16_max_mb = 20;
  // Programmatic dependent launch between our kernels (a process-wide setting of the CUDA
  // backend: the last backend constructed decides).
  bool pdl = true;
  // cuBLAS workspace per handle: 0 disables cuBLAS's split-K kernels.
  size_t cublas_workspace_bytes = size_t(32) << 20;
  // The MXFP4 routed experts: on the tensor cores, e2m1 decoded to bf16 in registers (true), or
  // the CUDA-core expert GEMV decoding through fp16 (false).
  bool mxfp4_mma = true;
  // FP8 GEMMs at decode (<= 8 rows): warp = a warp per 8 columns walking K (the first kernel);
  // wide = a block's 8 warps share K and a warp feeds up to 4 column tiles per quantized
  // activation chunk; auto = wide from 4096 columns, else warp (the measured best per shape).
  Fp8Decode fp8_decode = Fp8Decode::Auto;
  // Blocks per SM the wide FP8 decode kernel's registers are budgeted for: 1 (its 4-tile form
  // takes 134 registers: one block, 8 warps per SM) or 2 (capped at 128: 16 warps to hide the
  // serial quantize-and-multiply chain; the default: wq_b 27.4 -> 22.2 us, steps 1.5-2.6 %
  // faster on an H100, results/2026-12-05-h100-decode-candidates).
  int fp8_wide_blocks = 2;
  // gemm_fp8_pair at decode (wq_a with wkv, the shared expert's w1 with w3): one launch over both
  // matrices' columns (true, the default: steps 1.4-2.5 % faster on an H100, results/2026-12-05-h100-decode-candidates), or
  // the two gemm_fp8 launches (false).
  bool fp8_pair = true;
  // The MXFP4 experts on the tensor cores: a block's 8 warps share K and a warp feeds 1-4 column
  // tiles per activation chunk (true), or a warp per 8 columns walking K alone (false, the
  // default: the wide kernel measured 3 % faster at 1 token and 9 % slower at 8).
  bool mxfp4_wide = false;
  // How the MXFP4 tensor-core kernels turn e2m1 codes into scaled bf16 operands: table = byte
  // permutes through a per-group table of the scaled magnitudes' bytes; shift = each pair by a
  // byte permute, shifts and masks as its value times 2^-126, then one bf16x2 multiply by the
  // scale (about half the integer instructions; against table: the experts at 8 tokens 318.8 ->
  // 263.6 us, a batch-8 step 6.4 % faster on an H100, results/2026-12-05-h100-decode-candidates);
  // shift-quad (the default) = the shift decode with each MMA taking the loaded activation vector
  // as its A operand as it is (rows 8-15 used for the vector's other half, two accumulators),
  // which drops the register copies that build {x, y, y, 0}, its pairs decoded with one multiply
  // in place of two shifts (in the SASS of the 8-row kernels: 21.0 -> 16.2 instructions per MMA
  // for w1 + w3, 22.6 -> 17.4 for w2, at 94 and 73-74 registers: the same two blocks per SM).
  // Measured: a native batch-8 step 6.1 % faster than shift on an H100 and 7.9 % on an H200, batch 1 the
  // same (results/2026-12-05-h100-shift-quad, results/2026-12-05-h200-shift-quad). The swapped
  // kernel (mxfp4-swap) takes only the multiply: its activations are its B operand as loaded
  // already. table applies to the 8-row and wide kernels only (the swapped kernel decodes by
  // shifts under it). (A staged kernel, e2m1 turned into e4m3 operands and then f16 by the
  // hardware, activations staged in shared memory, issued a third fewer instructions per weight
  // compiled and was 35 % slower at 8 tokens on an H100: removed, results/2026-12-06-h100-staged-w4a8.)
  Mxfp4Decode mxfp4_decode = Mxfp4Decode::ShiftQuad;
  // The MXFP4 experts with the weights as the MMA's A operand: a warp's MMA is 16 output features
  // x 8 tokens, every row of it used, the activations fed as they are loaded, the shift decode
  // (on), instead of 8 token rows x 8 features (off). auto (the default): on up to 16
  // token-expert pairs, off above. Measured on an H100 at 3e362f4 (results/2026-12-05-h100-
  // decode-candidates): the experts at 1 token 63.3 us on, 65.4 us off with the shift decode; at
  // 8 tokens 307.2 us on, 263.6 us off; whole steps the same way round. Takes precedence over
  // mxfp4-wide; of mxfp4-decode it takes only shift-quad's multiply (its decode is shift's).
  Mxfp4Swap mxfp4_swap = Mxfp4Swap::Auto;
  // K slices of the swapped MXFP4 kernel (each warp of a block takes 1/KS of K, and the block
  // 8/KS feature tiles): 0 = auto (the default: the most slices, up to 8, until the grid reaches
  // 4 blocks per SM; at 1 token that is 8 slices, about 2 waves of blocks for w1 + w3 and 3 for
  // w2 at their register counts), or 1, 2, 4 or 8 (fewer slices: fewer blocks, each warp a longer
  // stretch of K, so fewer waves each paying the kernel's start). A forced count that K does not
  // split into whole 128-value chunks is halved until it does. Measured on an H100 (bf9c48b,
  // results/2026-12-07-h100-swap-ks-hc-splits): the experts at 1 token 83.9 / 68.8 / 63.7 us at
  // 1 / 2 / 4 slices against auto's 63.9, and native steps at 4 slices the same (+0.6 % at batch
  // 1), at 2 3.4 % slower: the waves are not what holds the kernel back. auto stays.
  int mxfp4_swap_ks = 0;
  // Blocks per SM the 8-row MXFP4 kernel's registers are budgeted for (shift-quad only): 2 (the
  // default: unbudgeted, w1 + w3 at 94 registers, which is 2 blocks of 8 warps) or 3 (at most 80
  // registers). Nsight Compute on an H100 at 8 tokens: 23 % occupancy for w1 + w3, a third of
  // its cycles stalled on loads, issue slots 54 % busy (results/2026-12-05-h100-ncu-experts).
  // Measured on an H100: the experts at 8 tokens 232.8 against 231.8 us, native steps 0.6-1.5 %
  // slower (results/2026-12-06-h100-staged-w4a8), so 2.
  int mxfp4_mma_blocks = 2;
  // How the MXFP4 decode kernels (the 8-row shift-quad kernel and the swapped one) load their
  // packed weights: plain (the default) = ordinary 16-byte loads, which also fill L1; noalloc =
  // read-only loads that leave L1 alone (each weight is read once per tile, while the tile's
  // activations are read again by every warp of its K slice, so L1 is better spent on those).
  // The same products either way. Measured on an H100 at 43fdf02
  // (results/2026-12-07-h100-mxfp4-load): the experts 64.0 -> 60.0 us at 1 token and 230.6 ->
  // 233.8 us at 8, native steps -0.42 % at batch 1 and -0.85 % at batch 8 against a baseline that
  // moved 0.55 % and 0.24 % when repeated: inside the 1 % bar; again -0.75 % and -0.62 % at
  // bf9c48b (results/2026-12-07-h100-swap-ks-hc-splits). On an H200 the experts alone
  // 56.8 -> 53.8 us at 1 token and the same at 8 (results/2026-12-07-h200-mxfp4-loop); its steps
  // there are not timed yet, so plain. The 8-row kernel under mxfp4-mma-blocks=3 and the table
  // and shift decodes load plainly either way. (A third form, each L2 miss fetching 256 bytes,
  // was slower and went.)
  Mxfp4Load mxfp4_load = Mxfp4Load::Plain;
  // The MXFP4 experts past decode sizes (more than 64 token-expert pairs): the grouped GEMM of the
  // bf16 experts with each 64-column weight tile decoded in shared memory once per 16- or 64-row
  // tile (gemm), or the 8-row tensor-core kernels as at decode (mma), which decode every weight
  // once per 8 rows. auto (the default): gemm from kMxfp4GemmAutoRowsPerExpert token-expert pairs
  // per expert on average, mma below. Measured on flash-6l prefills (256 experts, 6 per token):
  // with gemm 4096 tokens 27 % faster on an H200 and the same on an H100, 2048 tokens 22 % and
  // 1536 tokens 12 % faster on an H100, 1024 tokens 2 % slower on both, 256 tokens 2.2x slower
  // (results/2026-12-05-h200-defaults-packed-kv, results/2026-12-05-h100-tests-prefill-kv16k).
  // gemm takes precedence over mxfp4-mma, mxfp4-swap and mxfp4-wide where it runs.
  Mxfp4Prefill mxfp4_prefill = Mxfp4Prefill::Auto;
  // Where mxfp4-prefill=auto switches to the GEMM: the token-expert pairs of the call per expert
  // (flash: 256 experts, 6 per token, so 32 per expert is a prompt chunk of 1366 tokens; the
  // measured crossover lies between 24 and 36).
  static constexpr int kMxfp4GemmAutoRowsPerExpert = 32;
  // Whether the MXFP4 experts of a call with P token-expert pairs over E experts take the GEMM.
  bool mxfp4_prefill_takes_gemm(long long P, long long E) const {
    if (mxfp4_prefill == Mxfp4Prefill::Auto) return P >= kMxfp4GemmAutoRowsPerExpert * E;
    return mxfp4_prefill == Mxfp4Prefill::Gemm;
  }
  // --kv-cache fp8 on the GPU: caches packed as vLLM stores them (true: U8 entries, 584 bytes
  // per flash KV entry, model/kv_fp8_entry.h; the readers decode while loading) or emulated
  // (false: bf16 entries rounded to the same FP8 values, 1024 bytes). The same values either way.
  // Emulated is the default: packed measured correct and no faster on an H200 at context 2048
  // (flash-6l native graph steps +0.6-1.0 % at batch 1, +2.3 % at batch 8: the decoding costs more
  // than the KV bytes it saves there; results/2026-12-05-h200-defaults-packed-kv).
  bool fp8_kv_packed = false;

  // "key=value,key=value": attn-decode=on|off, attn-splits=N, attn-decode-splits=N,
  // gemv-bf16-max-mb=N, pdl=on|off,
  // cublas-workspace-kb=N, mxfp4-mma=on|off, fp8-decode=auto|warp|wide, mxfp4-wide=on|off,
  // mxfp4-decode=table|shift|shift-quad, mxfp4-swap=on|off|auto, mxfp4-swap-ks=auto|1|2|4|8,
  // mxfp4-mma-blocks=2|3, mxfp4-load=plain|noalloc, mxfp4-prefill=mma|gemm|auto, fp8-pair=on|off,
  // fp8-wide-blocks=1|2, hc-decode=split|fused, hc-splits=auto|8|16|32|64|128, hc-post=split|fused,
  // kv-norm-rope=split|fused, fp8-kv=packed|emulated.
  // Unknown keys and bad values are errors naming the key and the accepted values (a retired key
  // says why it went). An empty spec is the defaults.
  static KernelVariants parse(const std::string& spec);
  // Every setting, in parse()'s syntax (parse(str()) gives the same variants).
  std::string str() const;
  // Only the settings that differ from the defaults ("" for the defaults).
  std::string changes() const;
  bool operator==(const KernelVariants&) const = default;
};

// What --kernel-variants accepts, for --help.
extern const char* const kKernelVariantsHelp;

}  // namespace sl
