#include "model/kernel_variants.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace sl {

const char* const kKernelVariantsHelp =
    "CUDA kernel variants, key=value[,key=value...]: attn-decode=on|off, attn-splits=N (0 = auto, at most 16), "
    "attn-decode-splits=N (0 = auto, at most 16), "
    "gemv-bf16-max-mb=N, pdl=on|off, cublas-workspace-kb=N, mxfp4-mma=on|off, fp8-decode=auto|warp|wide, "
    "mxfp4-wide=on|off, mxfp4-decode=table|shift|shift-quad, mxfp4-swap=on|off|auto, mxfp4-swap-ks=auto|1|2|4|8, "
    "mxfp4-mma-blocks=2|3, mxfp4-load=plain|noalloc, mxfp4-prefill=mma|gemm|auto, fp8-pair=on|off, "
    "fp8-wide-blocks=1|2, hc-decode=split|fused, hc-splits=auto|8|16|32|64|128, hc-post=split|fused, "
    "kv-norm-rope=split|fused, fp8-kv=packed|emulated (default: the "
    "measured best of each; variants not yet timed on a GPU are off)";

namespace {

// Which of a key's two values v is: false for `first`, true for `second`.
bool either(const std::string& key, const std::string& v, const char* first, const char* second) {
  if (v == first) return false;
  if (v == second) return true;
  fail("--kernel-variants: ", key, "=", v, ": expected ", first, " or ", second);
}

bool on_off(const std::string& key, const std::string& v) { return !either(key, v, "on", "off"); }

int64_t integer(const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi)
    fail("--kernel-variants: ", key, "=", v, ": expected an integer in ", lo, "..", hi);
  return n;
}

// Keys of variants that measurements retired, with why (a command line from before says so
// instead of "unknown key").
const char* removed(const std::string& key) {
  if (key == "moe-decode" || key == "moe-split-k" || key == "moe-pair")
    return "the split-K MoE decode path was removed: the GEMV measured faster at every batch and split "
           "(results/2026-12-04-h200-kernel-workbench)";
  if (key == "moe-w2-cols")
    return "the MoE w2 GEMV runs 2 columns per warp: 1 measured slower, 4 no faster "
           "(results/2026-12-04-h200-kernel-workbench)";
  if (key == "fp8-wide") return "it became fp8-decode (fp8-wide=on is fp8-decode=wide, off is fp8-decode=warp)";
  if (key == "mxfp4-stream")
    return "the streaming MXFP4 expert kernel was removed: correct, but 1.3-1.6x slower on the H200 "
           "(results/2026-12-05-h200-stream-kernels)";
  if (key == "mxfp4-lut")
    return "the shared-memory table decode of MXFP4 was removed: correct, but decode steps 18-19 % slower "
           "on the H200 (results/2026-12-05-h200-mxfp4-lut)";
  if (key == "l2-prefetch")
    return "the L2 prefetch of each block's weights was removed: decode steps 5-11 % slower on the H200 "
           "(results/2026-12-05-h200-stream-kernels)";
  if (key == "attn-combine")
    return "the fused split-KV merge was removed: the last block's serial merge made a batch-1 layer's attention "
           "21 -> 31 us and steps 2.6-6.8 % slower on an H100 (results/2026-12-05-h100-decode-candidates)";
  if (key == "fp8-early")
    return "loading the FP8 decode kernels' first weights before the PDL wait was removed: steps no faster on an "
           "H100 (results/2026-12-05-h100-decode-candidates)";
  if (key == "weight-prefetch")
    return "the model's L2 prefetch hints ahead of each layer's projections were removed: decode steps 3-5 % "
           "slower on an H100 (results/2026-12-05-h100-weight-prefetch)";
  if (key == "fp8-act")
    return "quantizing the FP8 GEMMs' activations once per call (fp8-act=codes) was removed: bit-identical, and the "
           "quantize kernel cost what the decode kernels saved (steps the same, each GEMM 0.2-1.5 us slower on an "
           "H100; results/2026-12-05-h100-fp8-act-codes)";
  if (key == "mxfp4-swap-pipeline")
    return "loading the swapped MXFP4 kernel's next chunk before decoding the current one was removed: "
           "bit-identical, and the experts at 1 token no faster (64.2 -> 66.1 us) on an H100 "
           "(results/2026-12-05-h100-swap-pipeline)";
  if (key == "mxfp4-ring")
    return "streaming the MXFP4 kernels' chunks through a cp.async ring was removed: bit-identical, and slower on an "
           "H100 (the experts at 8 tokens 231.0 -> 299.0 us, steps 12.2 % slower at batch 8 and 3.8 % at batch 1; "
           "results/2026-12-07-h100-ring-and-wgmma)";
  if (key == "mxfp4-w4a8")
    return "the W4A8 experts on the FP8 wgmma were removed: slower than the mma.sync kernels on FP8-rounded "
           "activations in both forms measured on an H100 (82.0 against 66.6 us at 1 token and 336.0 against 235.8 "
           "at 8; streamed through a cp.async ring 75.8 against 67.3 and 273.0 against 235.5; "
           "results/2026-12-06-h100-w4a8-wgmma, results/2026-12-07-h100-ring-and-wgmma)";
  if (key == "route")
    return "the warp-per-token routing top-k was removed: steps no faster on an H100 "
           "(results/2026-12-05-h100-decode-candidates)";
  return nullptr;
}

}  // namespace

KernelVariants KernelVariants::parse(const std::string& spec) {
  KernelVariants k;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    SL_CHECK(eq != std::string::npos, "--kernel-variants: '", item, "': expected key=value");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (key == "attn-decode") {
      k.attention_decode_kernel = on_off(key, v);
    } else if (key == "attn-splits") {
      k.attention_splits = int(integer(key, v, 0, 16));  // the merge takes at most 16
    } else if (key == "attn-decode-splits") {
      k.attention_decode_splits = int(integer(key, v, 0, 16));  // the same merge
    } else if (key == "gemv-bf16-max-mb") {
      k.gemv_bf16_max_mb = int(integer(key, v, 0, 1000000));
    } else if (key == "pdl") {
      k.pdl = on_off(key, v);
    } else if (key == "cublas-workspace-kb") {
      k.cublas_workspace_bytes = size_t(integer(key, v, 0, int64_t(1) << 30)) << 10;  // up to 1 TiB
    } else if (key == "mxfp4-mma") {
      k.mxfp4_mma = on_off(key, v);
    } else if (key == "fp8-decode") {
      if (v == "auto") k.fp8_decode = Fp8Decode::Auto;
      else if (v == "warp") k.fp8_decode = Fp8Decode::Warp;
      else if (v == "wide") k.fp8_decode = Fp8Decode::Wide;
      else if (v == "stream")
        fail("--kernel-variants: fp8-decode=stream is no longer a variant: the streaming FP8 kernel was removed, "
             "no faster than wide on the H200 (results/2026-12-05-h200-stream-kernels)");
      else fail("--kernel-variants: ", key, "=", v, ": expected auto, warp or wide");
    } else if (key == "hc-decode") {
      k.hc_decode_fused = either(key, v, "split", "fused");
    } else if (key == "hc-post") {
      k.hc_post_fused = either(key, v, "split", "fused");
    } else if (key == "kv-norm-rope") {
      k.kv_norm_rope_fused = either(key, v, "split", "fused");
    } else if (key == "fp8-wide-blocks") {
      k.fp8_wide_blocks = either(key, v, "1", "2") ? 2 : 1;
    } else if (key == "mxfp4-wide") {
      k.mxfp4_wide = on_off(key, v);
    } else if (key == "mxfp4-decode") {
      if (v == "table") k.mxfp4_decode = Mxfp4Decode::Table;
      else if (v == "shift") k.mxfp4_decode = Mxfp4Decode::Shift;
      else if (v == "shift-quad") k.mxfp4_decode = Mxfp4Decode::ShiftQuad;
      else fail("--kernel-variants: ", key, "=", v, ": expected table, shift or shift-quad");
    } else if (key == "mxfp4-swap") {
      if (v == "on") k.mxfp4_swap = Mxfp4Swap::On;
      else if (v == "off") k.mxfp4_swap = Mxfp4Swap::Off;
      else if (v == "auto") k.mxfp4_swap = Mxfp4Swap::Auto;
      else fail("--kernel-variants: ", key, "=", v, ": expected on, off or auto");
    } else if (key == "mxfp4-swap-ks") {
      if (v == "auto") k.mxfp4_swap_ks = 0;
      else if (v == "1" || v == "2" || v == "4" || v == "8") k.mxfp4_swap_ks = v[0] - '0';
      else fail("--kernel-variants: ", key, "=", v, ": expected auto, 1, 2, 4 or 8");
    } else if (key == "hc-splits") {
      if (v == "auto") k.hc_fused_splits = 0;
      else if (v == "8" || v == "16" || v == "32" || v == "64" || v == "128") k.hc_fused_splits = std::stoi(v);
      else fail("--kernel-variants: ", key, "=", v, ": expected auto, 8, 16, 32, 64 or 128");
    } else if (key == "mxfp4-mma-blocks") {
      k.mxfp4_mma_blocks = either(key, v, "2", "3") ? 3 : 2;
    } else if (key == "mxfp4-load") {
      if (v == "plain") k.mxfp4_load = Mxfp4Load::Plain;
      else if (v == "noalloc") k.mxfp4_load = Mxfp4Load::NoAlloc;
      else if (v == "stream")
        fail("--kernel-variants: mxfp4-load=stream is no longer a variant: the 256-byte L2 fetch per weight load was "
             "removed, slower on an H100 (the experts at 1 token 64.0 -> 73.2 us, batch-1 steps 4.8 % slower; "
             "results/2026-12-07-h100-mxfp4-load)");
      else fail("--kernel-variants: ", key, "=", v, ": expected plain or noalloc");
    } else if (key == "fp8-pair") {
      k.fp8_pair = on_off(key, v);
    } else if (key == "mxfp4-prefill") {
      if (v == "mma") k.mxfp4_prefill = Mxfp4Prefill::Mma;
      else if (v == "gemm") k.mxfp4_prefill = Mxfp4Prefill::Gemm;
      else if (v == "auto") k.mxfp4_prefill = Mxfp4Prefill::Auto;
      else fail("--kernel-variants: ", key, "=", v, ": expected mma, gemm or auto");
    } else if (key == "fp8-kv") {
      k.fp8_kv_packed = !either(key, v, "packed", "emulated");
    } else if (const char* why = removed(key)) {
      fail("--kernel-variants: '", key, "' is no longer a variant: ", why);
    } else {
      fail("--kernel-variants: unknown key '", key,
           "' (attn-decode, attn-splits, attn-decode-splits, gemv-bf16-max-mb, pdl, cublas-workspace-kb, mxfp4-mma, "
           "fp8-decode, mxfp4-wide, mxfp4-decode, mxfp4-swap, mxfp4-swap-ks, mxfp4-mma-blocks, mxfp4-load, "
           "mxfp4-prefill, fp8-pair, fp8-wide-blocks, hc-decode, hc-splits, hc-post, kv-norm-rope, fp8-kv)");
    }
  }
  return k;
}

std::string KernelVariants::str() const {
  static const char* const fp8_decode_names[] = {"auto", "warp", "wide"};
  static const char* const mxfp4_decode_names[] = {"table", "shift", "shift-quad"};
  static const char* const mxfp4_swap_names[] = {"off", "on", "auto"};
  static const char* const mxfp4_prefill_names[] = {"mma", "gemm", "auto"};
  static const char* const mxfp4_load_names[] = {"plain", "noalloc"};
  auto oo = [](bool b) { return b ? "on" : "off"; };
  std::ostringstream s;
  s << "attn-decode=" << oo(attention_decode_kernel) << ",attn-splits=" << attention_splits
    << ",attn-decode-splits=" << attention_decode_splits
    << ",gemv-bf16-max-mb=" << gemv_bf16_max_mb << ",pdl=" << oo(pdl)
    << ",cublas-workspace-kb=" << (cublas_workspace_bytes >> 10) << ",mxfp4-mma=" << oo(mxfp4_mma)
    << ",fp8-decode=" << fp8_decode_names[int(fp8_decode)] << ",mxfp4-wide=" << oo(mxfp4_wide)
    << ",mxfp4-decode=" << mxfp4_decode_names[int(mxfp4_decode)] << ",mxfp4-swap=" << mxfp4_swap_names[int(mxfp4_swap)]
    << ",mxfp4-swap-ks=" << (mxfp4_swap_ks ? std::to_string(mxfp4_swap_ks) : std::string("auto"))
    << ",mxfp4-mma-blocks=" << mxfp4_mma_blocks << ",mxfp4-load=" << mxfp4_load_names[int(mxfp4_load)]
    << ",mxfp4-prefill=" << mxfp4_prefill_names[int(mxfp4_prefill)]
    << ",fp8-pair=" << oo(fp8_pair)
    << ",fp8-wide-blocks=" << fp8_wide_blocks << ",hc-decode=" << (hc_decode_fused ? "fused" : "split")
    << ",hc-splits=" << (hc_fused_splits ? std::to_string(hc_fused_splits) : std::string("auto"))
    << ",hc-post=" << (hc_post_fused ? "fused" : "split")
    << ",kv-norm-rope=" << (kv_norm_rope_fused ? "fused" : "split")
    << ",fp8-kv=" << (fp8_kv_packed ? "packed" : "emulated");
  return s.str();
}

std::string KernelVariants::changes() const {
  const std::string mine = str(), base = KernelVariants{}.str();
  std::stringstream a(mine), b(base);
  std::string x, y, out;
  while (std::getline(a, x, ',') && std::getline(b, y, ','))
    if (x != y) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace sl
