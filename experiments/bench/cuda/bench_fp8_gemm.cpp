// FP8 block-scaled GEMMs through cuBLASLt on this GPU: does it accept DeepSeek's scaling (a
// 128 x 128 fp32 scale per weight block, a 1 x 128 fp32 scale per activation group: the modes
// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F and _VEC128_32F), with which scale layout, at which
// sizes, and how fast against the bf16 GEMM of the same shape.
//
// For each shape (out[M, N] = x[M, K] . w[N, K]^T, x and w quantized on the host by core/fp8.h
// with random power-of-two block scales so that a misplaced scale shows), each role assignment
// (the weight as cuBLASLt's A, or the activation as A) and each candidate layout of the scale
// tensors is tried; the result is compared with the fp64 product of the dequantized operands. A
// layout "matches" when the relative error is under 1e-2 (bf16 output). Then the matching
// configuration is timed against cublasLt's bf16 GEMM on the same shape (L2 flushed).
//
//   bench_fp8_gemm [--shapes=M,N,K;M,N,K...] [--reps=20] [--out=FILE.json]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "core/fp8.h"
#include "experiments/bench/cuda/bench_util.h"

#define LT_CHECK(call)                                                                                       \
  do {                                                                                                       \
    const cublasStatus_t lt_st_ = (call);                                                                    \
    SL_CHECK(lt_st_ == CUBLAS_STATUS_SUCCESS, "bench_fp8_gemm: ", #call, " failed: ", cublasGetStatusName(lt_st_), \
             " (", cublasGetStatusString(lt_st_), ")");                                                      \
  } while (0)

namespace sl {
namespace {

struct Shape3 {
  int M, N, K;
};

struct Options {
  std::vector<Shape3> shapes{{1, 1024, 4096}, {8, 1024, 4096}, {1, 4096, 8192}, {8, 4096, 8192},
                             {1, 32768, 1024}, {8, 32768, 1024}, {1, 512, 640},   {3, 512, 640},
                             {64, 4096, 4096}, {2048, 4096, 4096}};
  int reps = 20;
  std::string out, command_line;
};

// A device buffer freed on scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { BENCH_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  void upload(const std::vector<T>& v) {
    BENCH_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
};

// The quantized operands: codes as core/fp8.h makes them, then every block's scale multiplied by
// a random power of two (2^-3 .. 2^3) and its codes left as they are, so that the value a block
// means depends on finding the right scale.
struct Operand {
  lowp::Fp8Blocks q;
  std::vector<float> scale;   // per block, row-major [scale_rows, scale_cols], as a float
  std::vector<double> value;  // the dequantized matrix
};

Operand make_operand(int rows, int cols, int block_rows, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(size_t(rows) * cols);
  for (float& v : x) v = u(rng);
  Operand o;
  o.q = lowp::quantize_fp8_blocks(x.data(), rows, cols, block_rows, 128);
  std::uniform_int_distribution<int> e(-3, 3);
  o.scale.resize(o.q.scales.size());
  for (size_t i = 0; i < o.scale.size(); ++i) o.scale[i] = std::ldexp(lowp::e8m0_to_float(o.q.scales[i]), e(rng));
  o.value.resize(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      o.value[size_t(r) * cols + c] = double(lowp::e4m3_to_float(o.q.codes[size_t(r) * cols + c])) *
                                      o.scale[size_t((r / block_rows) * o.q.scale_cols() + c / 128)];
  return o;
}

// A candidate layout of a scale tensor in cuBLASLt's terms: the operand as it is stored
// (column-major, `outer` columns of `inner` = K values each; blocks along K are `kb`, along the
// outer dimension `ob`), and where the scale of block (ob, kb) goes.
struct Layout {
  const char* name;
  size_t (*index)(size_t ob, size_t kb, size_t OB, size_t KB);
};
const Layout kLayouts[] = {
    {"k-blocks fastest", [](size_t ob, size_t kb, size_t, size_t KB) { return ob * KB + kb; }},
    {"outer fastest", [](size_t ob, size_t kb, size_t OB, size_t) { return kb * OB + ob; }},
    {"k-blocks fastest, padded to 4", [](size_t ob, size_t kb, size_t, size_t KB) { return ob * ((KB + 3) / 4 * 4) + kb; }},
    {"outer fastest, padded to 4", [](size_t ob, size_t kb, size_t OB, size_t) { return kb * ((OB + 3) / 4 * 4) + ob; }},
};

std::vector<float> lay_out(const Operand& o, const Layout& l) {
  const size_t OB = size_t(o.q.scale_rows()), KB = size_t(o.q.scale_cols());
  size_t n = 0;
  for (size_t ob = 0; ob < OB; ++ob)
    for (size_t kb = 0; kb < KB; ++kb) n = std::max(n, l.index(ob, kb, OB, KB) + 1);
  std::vector<float> s(n, 1.f);
  for (size_t ob = 0; ob < OB; ++ob)
    for (size_t kb = 0; kb < KB; ++kb) s[l.index(ob, kb, OB, KB)] = o.scale[ob * KB + kb];
  return s;
}

// One cuBLASLt FP8 GEMM: D[m, n] (column-major, bf16) = op(A)[m, k] . B[k, n], A stored as
// k x m (transposed: "TN", the layout FP8 needs), B as k x n. Returns false when cuBLASLt has no
// algorithm for it (the status is in *why).
struct LtGemm {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  void* workspace = nullptr;
  size_t workspace_bytes = size_t(32) << 20;
  ~LtGemm() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
  // fp8: A / B e4m3 with the given scale modes and pointers; else bf16 operands, no scales.
  bool setup(cublasLtHandle_t h, void* ws, int m, int n, int k, bool fp8, int a_mode, const void* a_scale, int b_mode,
             const void* b_scale, std::string* why) {
    lt = h;
    workspace = ws;
    LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
    if (fp8) {
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    }
    const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, in, k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, in, k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, n, m));
    cublasLtMatmulPreference_t pref = nullptr;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                  sizeof workspace_bytes));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, 1, &heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      *why = st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusName(st) : "no algorithm";
      return false;
    }
    return true;
  }
  cublasStatus_t run(const void* A, const void* B, void* D, cudaStream_t s) {
    const float alpha = 1.f, beta = 0.f;
    return cublasLtMatmul(lt, desc, &alpha, A, a, B, b, &beta, D, d, D, d, &heur.algo, workspace, workspace_bytes, s);
  }
};

std::vector<float> download_bf16(const DevBuf& d, size_t n) {
  std::vector<uint16_t> h(n);
  BENCH_CUDA_CHECK(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_float(h[i]);
  return f;
}

// Median microseconds of `fn` over reps, the L2 flushed before each.
template <class F>
double time_us(int reps, F&& fn) {
  static DevBuf flush(size_t(256) << 20);
  cudaEvent_t e0, e1;
  BENCH_CUDA_CHECK(cudaEventCreate(&e0));
  BENCH_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    BENCH_CUDA_CHECK(cudaMemsetAsync(flush.p, i, size_t(256) << 20));
    BENCH_CUDA_CHECK(cudaEventRecord(e0));
    fn();
    BENCH_CUDA_CHECK(cudaEventRecord(e1));
    BENCH_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) us.push_back(ms * 1e3);
  }
  BENCH_CUDA_CHECK(cudaEventDestroy(e0));
  BENCH_CUDA_CHECK(cudaEventDestroy(e1));
  return bench::median(us);
}

int run(const Options& o) {
  std::string why;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    std::fprintf(stderr, "bench_fp8_gemm: no CUDA device; nothing measured\n");
    return 2;
  }
  cublasLtHandle_t lt = nullptr;
  LT_CHECK(cublasLtCreate(&lt));
  std::printf("cuBLASLt version %zu\n", cublasLtGetVersion());
  DevBuf ws(size_t(32) << 20);
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 rng(2026);
  const double copy_bw = bench::copy_bandwidth_bytes_per_s(nullptr);
  std::printf("device-to-device copy: median %.1f GB/s\n", copy_bw / 1e9);
  for (const Shape3& sh : o.shapes) {
    const int M = sh.M, N = sh.N, K = sh.K;
    const Operand w = make_operand(N, K, 128, rng);  // 128 x 128 blocks
    const Operand x = make_operand(M, K, 1, rng);    // 1 x 128 groups
    // The reference: out[m, n] = sum_k x[m, k] w[n, k] in fp64, on every row up to 16 rows, else
    // on 16 rows spread over M (a misplaced scale shows in any row).
    std::vector<int> check_rows;
    for (int i = 0; i < std::min(M, 16); ++i) check_rows.push_back(M <= 16 ? i : int(int64_t(i) * (M - 1) / 15));
    std::vector<double> ref(size_t(M) * N);
    for (int m : check_rows)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) acc += x.value[size_t(m) * K + k] * w.value[size_t(n) * K + k];
        ref[size_t(m) * N + n] = acc;
      }
    DevBuf dw(w.q.codes.size()), dx(x.q.codes.size()), dd(size_t(M) * N * 2);
    dw.upload(w.q.codes);
    dx.upload(x.q.codes);
    nlohmann::json row = {{"M", M}, {"N", N}, {"K", K}};
    std::string best;
    double best_us = 0;
    // Role assignments: the weight as A (D = [N, M] col-major = out row-major), or the
    // activation as A (D = [M, N] col-major = out transposed).
    for (int weight_is_a = 1; weight_is_a >= 0; --weight_is_a) {
      const Operand& A = weight_is_a ? w : x;
      const Operand& B = weight_is_a ? x : w;
      const int m = weight_is_a ? N : M, n = weight_is_a ? M : N;
      const int a_mode = weight_is_a ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      const int b_mode = weight_is_a ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      const std::string roles = weight_is_a ? "A=weight(128x128), B=activation(1x128)" : "A=activation(1x128), B=weight(128x128)";
      bool unsupported = false;
      for (const Layout& la : kLayouts)
        for (const Layout& lb : kLayouts) {
          if (unsupported) break;
          const std::vector<float> sa = lay_out(A, la), sb = lay_out(B, lb);
          DevBuf dsa(sa.size() * 4), dsb(sb.size() * 4);
          dsa.upload(sa);
          dsb.upload(sb);
          LtGemm g;
          std::string no;
          const std::string what = roles + "; A scales " + la.name + ", B scales " + lb.name;
          if (!g.setup(lt, ws.p, m, n, K, true, a_mode, dsa.p, b_mode, dsb.p, &no)) {
            row["configs"].push_back({{"config", what}, {"supported", false}, {"status", no}});
            std::printf("M=%d N=%d K=%d %s: not supported (%s)\n", M, N, K, roles.c_str(), no.c_str());
            unsupported = true;  // the layout does not change support: on to the next role assignment
            break;
          }
          BENCH_CUDA_CHECK(cudaMemset(dd.p, 0, size_t(M) * N * 2));
          const cublasStatus_t st = g.run(weight_is_a ? dw.p : dx.p, weight_is_a ? dx.p : dw.p, dd.p, nullptr);
          BENCH_CUDA_CHECK(cudaDeviceSynchronize());
          if (st != CUBLAS_STATUS_SUCCESS) {
            row["configs"].push_back({{"config", what}, {"supported", false}, {"status", cublasGetStatusName(st)}});
            continue;
          }
          const std::vector<float> got = download_bf16(dd, size_t(M) * N);
          double num = 0, den = 0;
          for (int mm : check_rows)
            for (int nn = 0; nn < N; ++nn) {
              const double r = ref[size_t(mm) * N + nn];
              const double v = weight_is_a ? got[size_t(mm) * N + nn] : got[size_t(nn) * M + mm];
              num += (v - r) * (v - r);
              den += r * r;
            }
          const double err = std::sqrt(num / den);
          const bool match = err < 1e-2;
          nlohmann::json c = {{"config", what}, {"supported", true}, {"rel_err", err}, {"matches", match}};
          if (match) {
            const double us = time_us(o.reps, [&] { g.run(weight_is_a ? dw.p : dx.p, weight_is_a ? dx.p : dw.p, dd.p, nullptr); });
            c["median_us"] = us;
            if (best.empty() || us < best_us) best = what, best_us = us;
          }
          std::printf("M=%d N=%d K=%d %s: rel err %.2e%s\n", M, N, K, what.c_str(), err, match ? "  MATCH" : "");
          row["configs"].push_back(c);
        }
    }
    // bf16 GEMM of the same shape (weight as A), the yardstick.
    {
      DevBuf bw(size_t(N) * K * 2), bx(size_t(M) * K * 2);
      std::vector<uint16_t> hw(size_t(N) * K), hx(size_t(M) * K);
      for (size_t i = 0; i < hw.size(); ++i) hw[i] = float_to_bf16(float(w.value[i]));
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = float_to_bf16(float(x.value[i]));
      bw.upload(hw);
      bx.upload(hx);
      LtGemm g;
      std::string no;
      if (g.setup(lt, ws.p, N, M, K, false, 0, nullptr, 0, nullptr, &no)) {
        const double us = time_us(o.reps, [&] { g.run(bw.p, bx.p, dd.p, nullptr); });
        row["bf16_median_us"] = us;
        std::printf("M=%d N=%d K=%d bf16: %.1f us (%.0f%% of copy bw)", M, N, K, us,
                    100.0 * double(N) * K * 2 / (us * 1e-6) / copy_bw);
        if (!best.empty())
          std::printf("; fp8 best %.1f us (%.0f%% of copy bw, %.2fx bf16) with %s", best_us,
                      100.0 * double(N) * K / (best_us * 1e-6) / copy_bw, us / best_us, best.c_str());
        std::printf("\n");
      }
    }
    row["fp8_best"] = best;
    row["fp8_best_us"] = best_us;
    rows.push_back(row);
    std::fflush(stdout);
  }
  cublasLtDestroy(lt);
  if (!o.out.empty()) {
    nlohmann::json j = {{"provenance", bench::provenance(o.command_line)},
                        {"cublaslt_version", cublasLtGetVersion()},
                        {"copy_bandwidth_GBps", copy_bw / 1e9},
                        {"shapes", rows}};
    bench::write_json_atomic(o.out, j);
    std::printf("wrote %s\n", o.out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace sl

int main(int argc, char** argv) {
  sl::Options o;
  o.command_line = sl::bench::command_line(argc, argv);
  auto parse = [&o](const char* arg) {
    using sl::bench::flag_value;
    if (auto v = flag_value(arg, "--shapes=")) {
      o.shapes.clear();
      for (const std::string& item : sl::bench::split(v, ';')) {
        const std::vector<int> d = sl::bench::parse_ints(item);
        SL_CHECK(d.size() == 3 && d[0] >= 1 && d[1] >= 1 && d[2] >= 128 && d[1] % 16 == 0 && d[2] % 128 == 0,
                 "--shapes: '", item, "' is not M,N,K with N a multiple of 16 and K of 128");
        // The host builds both operands and an fp64 reference: keep them within a few GB.
        SL_CHECK(d[0] <= 65536 && int64_t(d[1]) * d[2] <= (int64_t(1) << 28) && int64_t(d[0]) * d[2] <= (int64_t(1) << 28),
                 "--shapes: '", item, "' is too large (at most 65536 rows, and N x K and M x K at most 2^28 each)");
        o.shapes.push_back({d[0], d[1], d[2]});
      }
    } else if (auto v = flag_value(arg, "--reps=")) {
      o.reps = sl::bench::parse_int("--reps=", v, 1, 10000);
    } else if (auto v = flag_value(arg, "--out=")) {
      o.out = v;
    } else {
      sl::fail("unknown argument '", arg, "' (--help lists them)");
    }
    return true;
  };
  const char* usage =
      "bench_fp8_gemm [--shapes=M,N,K;M,N,K...] [--reps=20] [--out=FILE.json]\n"
      "Does cuBLASLt run DeepSeek's block-scaled FP8 GEMM (128x128 weight blocks, 1x128 activation\n"
      "groups, fp32 scales) here, with which scale layout, and how fast against bf16 (see the header\n"
      "of bench_fp8_gemm.cpp).\n";
  return sl::bench::bench_main(argc, argv, "bench_fp8_gemm", usage, parse, [&o] { return sl::run(o); });
}
