#include "model/kernel_variants.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace sl {

const char* const kKernelVariantsHelp =
    "CUDA kernel variants, key=value[,key=value...]: attn-decode=on|off, attn-splits=N (0 = auto), "
    "moe-decode=gemv|splitk, moe-split-k=N[:M] (splitk: w1/w3 and w2 splits, 0 = 4), moe-pair=on|off, "
    "moe-w2-cols=1|2|4, gemv-bf16-max-mb=N, pdl=on|off, cublas-workspace-kb=N (default: the measured best of each)";

namespace {

bool on_off(const std::string& key, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  fail("--kernel-variants: ", key, "=", v, ": expected on or off");
}

int64_t integer(const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi)
    fail("--kernel-variants: ", key, "=", v, ": expected an integer in ", lo, "..", hi);
  return n;
}

int split(const std::string& key, const std::string& v) {
  const int n = int(integer(key, v, 0, 16));
  SL_CHECK(n == 0 || (n & (n - 1)) == 0, "--kernel-variants: ", key, "=", v, ": expected 0 or a power of two up to 16");
  return n;
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
      k.attention_splits = int(integer(key, v, 0, 64));
    } else if (key == "moe-decode") {
      SL_CHECK(v == "gemv" || v == "splitk", "--kernel-variants: moe-decode=", v, ": expected gemv or splitk");
      k.moe_decode = v == "gemv" ? MoeDecode::Gemv : MoeDecode::SplitK;
    } else if (key == "moe-split-k") {
      const size_t colon = v.find(':');
      k.moe_split_k13 = split(key, v.substr(0, colon));
      k.moe_split_k2 = colon == std::string::npos ? k.moe_split_k13 : split(key, v.substr(colon + 1));
    } else if (key == "moe-pair") {
      k.moe_pair_launch = on_off(key, v);
    } else if (key == "moe-w2-cols") {
      const int n = int(integer(key, v, 1, 4));
      SL_CHECK(n != 3, "--kernel-variants: moe-w2-cols=3: expected 1, 2 or 4");
      k.moe_w2_cols = n;
    } else if (key == "gemv-bf16-max-mb") {
      k.gemv_bf16_max_mb = int(integer(key, v, 0, 1000000));
    } else if (key == "pdl") {
      k.pdl = on_off(key, v);
    } else if (key == "cublas-workspace-kb") {
      k.cublas_workspace_bytes = size_t(integer(key, v, 0, int64_t(1) << 30)) << 10;  // up to 1 TiB
    } else {
      fail("--kernel-variants: unknown key '", key,
           "' (attn-decode, attn-splits, moe-decode, moe-split-k, moe-pair, moe-w2-cols, gemv-bf16-max-mb, pdl, "
           "cublas-workspace-kb)");
    }
  }
  return k;
}

std::string KernelVariants::str() const {
  auto oo = [](bool b) { return b ? "on" : "off"; };
  std::ostringstream s;
  s << "attn-decode=" << oo(attention_decode_kernel) << ",attn-splits=" << attention_splits
    << ",moe-decode=" << (moe_decode == MoeDecode::Gemv ? "gemv" : "splitk") << ",moe-split-k=" << moe_split_k13 << ":"
    << moe_split_k2 << ",moe-pair=" << oo(moe_pair_launch) << ",moe-w2-cols=" << moe_w2_cols << ",gemv-bf16-max-mb=" << gemv_bf16_max_mb << ",pdl=" << oo(pdl)
    << ",cublas-workspace-kb=" << (cublas_workspace_bytes >> 10);
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
