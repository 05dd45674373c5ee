// Every op of the fp32 CPU backend against an independent expectation: double-precision
// reference loops written here (they never call backend code) or hand-computed cases. Inputs
// are fresh random numbers from std::mt19937 with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/cpu/cpu_backend.h"

using sl::AllocKind;
using sl::CompressedKeys;
using sl::DType;
using sl::Shape;
using sl::Tensor;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------ fixture and helpers

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<sl::Backend> be = sl::make_cpu_backend();
  sl::Stream s{0};
  std::mt19937 rng{12345};

  std::vector<float> uniform(size_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  }
  Tensor f32(const std::string& name, Shape shape, const std::vector<float>& v) {
    Tensor t = be->alloc(name, DType::F32, shape, AllocKind::Activation);
    EXPECT_EQ(size_t(t.numel()), v.size()) << name;
    be->upload(s, t, v.data(), v.size() * sizeof(float));
    return t;
  }
  Tensor i32(const std::string& name, Shape shape, const std::vector<int32_t>& v) {
    Tensor t = be->alloc(name, DType::I32, shape, AllocKind::Activation);
    EXPECT_EQ(size_t(t.numel()), v.size()) << name;
    be->upload(s, t, v.data(), v.size() * sizeof(int32_t));
    return t;
  }
  Tensor zeros(const std::string& name, DType dt, Shape shape) { return be->alloc(name, dt, shape, AllocKind::Activation); }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    be->download(v.data(), t, v.size() * sizeof(float));
    return v;
  }
  std::vector<int32_t> geti(const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    be->download(v.data(), t, v.size() * sizeof(int32_t));
    return v;
  }
  void pool_case(bool overlap);  // compressor_pool scenario, defined with its reference below
};

// max |got - want| relative to max |want| (a scale-aware relative error: elementwise relative
// error is meaningless for values that cancel to ~0).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0, err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    double e = std::fabs(double(got[i]) - want[i]);
    ASSERT_FALSE(std::isnan(got[i])) << what << " [" << i << "] is NaN";
    if (e > err) err = e, worst = i;
  }
  if (scale == 0.0) scale = 1.0;
  EXPECT_LE(err / scale, rtol) << what << ": worst element " << worst << " got " << got[worst] << " want "
                               << want[worst] << " (scale " << scale << ")";
}

double sigmoid_d(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Double-precision RoPE of one vector's last R dims with the angles of one table row.
void ref_rope(double* v, int len, const float* row, int R, bool inverse) {
  double* r = v + (len - R);
  for (int i = 0; i < R / 2; ++i) {
    double c = row[i], sn = inverse ? -double(row[R / 2 + i]) : double(row[R / 2 + i]);
    double e = r[2 * i], o = r[2 * i + 1];
    r[2 * i] = e * c - o * sn;
    r[2 * i + 1] = o * c + e * sn;
  }
}

// A random angle table [P, R]: R/2 cos then R/2 sin of arbitrary angles.
std::vector<float> random_table(std::mt19937& rng, int P, int R) {
  std::uniform_real_distribution<double> ang(-6.0, 6.0);
  std::vector<float> t(size_t(P) * R);
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < R / 2; ++i) {
      double a = ang(rng);
      t[size_t(p) * R + i] = float(std::cos(a));
      t[size_t(p) * R + R / 2 + i] = float(std::sin(a));
    }
  return t;
}

// ------------------------------------------------------------------ memory, streams, init

TEST_F(CpuOps, AllocIsZeroedAlignedNamedAndCounted) {
  Tensor w = be->alloc("w0", DType::F32, {3, 5}, AllocKind::Weight);
  Tensor a = be->alloc("act", DType::BF16, {7}, AllocKind::Activation);
  Tensor c = be->alloc("cache", DType::I32, {2, 9}, AllocKind::Cache);
  Tensor k = be->alloc("ws", DType::U8, {13}, AllocKind::Workspace);
  for (const Tensor* t : {&w, &a, &c, &k}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);
    const unsigned char* b = static_cast<const unsigned char*>(t->data);
    for (size_t i = 0; i < t->bytes(); ++i) ASSERT_EQ(b[i], 0) << be->buffer_name(t->buffer);
  }
  EXPECT_NE(w.buffer, a.buffer);
  EXPECT_NE(a.buffer, c.buffer);
  EXPECT_NE(c.buffer, k.buffer);
  EXPECT_EQ(be->buffer_name(w.buffer), "w0");
  EXPECT_EQ(be->buffer_name(c.buffer), "cache");
  EXPECT_THROW(be->buffer_name(12345), sl::Error);
  sl::MemoryStats m = be->memory();
  EXPECT_EQ(m.weights_bytes, 60u);
  EXPECT_EQ(m.activations_bytes, 14u + 72u + 13u);
  EXPECT_EQ(m.peak_bytes, 60u + 14u + 72u + 13u);
  EXPECT_EQ(be->act_dtype(), DType::F32);
  EXPECT_EQ(be->weight_dtype(), DType::F32);
  EXPECT_EQ(be->name(), "cpu");
}

TEST_F(CpuOps, StreamsAreNumberedLabelsAndEventsAreNoOps) {
  sl::Stream a = be->create_stream("aux0", 0), b = be->create_stream("aux1", -1), c = be->create_stream("aux2", 0);
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(b.id, 2);
  EXPECT_EQ(c.id, 3);
  sl::Event e = be->create_event("fork");
  be->record(e, s);
  be->wait(a, e);
  be->synchronize();
  be->destroy_stream(b);
  EXPECT_THROW(be->wait(b, e), sl::Error);  // destroyed
  EXPECT_THROW(be->record(sl::Event{99}, s), sl::Error);
}

TEST_F(CpuOps, InitUniformIsScaleTimesUniformPlusOffset) {
  Tensor t = zeros("t", DType::F32, {4, 33});
  Tensor h = zeros("h", DType::BF16, {50});
  be->init_uniform(s, t, 7, sl::hash_name("layers.0.attn.wq_a.weight"), 0.25f, 1.5f);
  be->init_uniform(s, h, 7, 99, 2.f, -0.5f);
  std::vector<float> v = get(t);
  for (size_t i = 0; i < v.size(); ++i) {
    float want = 0.25f * sl::uniform_pm1(7, sl::hash_name("layers.0.attn.wq_a.weight"), i);
    want = want + 1.5f;
    ASSERT_EQ(v[i], want) << i;
  }
  std::vector<uint16_t> hv(50);
  be->download(hv.data(), h, 100);
  for (size_t i = 0; i < 50; ++i) {
    float want = 2.f * sl::uniform_pm1(7, 99, i);
    ASSERT_EQ(hv[i], sl::float_to_bf16(want + -0.5f)) << i;
  }
  EXPECT_THROW(be->init_uniform(s, zeros("i", DType::I32, {3}), 1, 2, 1.f, 0.f), sl::Error);
}

TEST_F(CpuOps, FillAndCopy) {
  Tensor f = zeros("f", DType::F32, {5});
  Tensor b = zeros("b", DType::BF16, {5});
  Tensor i = zeros("i", DType::I32, {5});
  be->fill(s, f, 2.5f);
  be->fill(s, b, 2.5f);
  be->fill(s, i, -3.f);
  for (float x : get(f)) EXPECT_EQ(x, 2.5f);
  for (int32_t x : geti(i)) EXPECT_EQ(x, -3);
  std::vector<uint16_t> bv(5);
  be->download(bv.data(), b, 10);
  for (uint16_t x : bv) EXPECT_EQ(sl::bf16_to_float(x), 2.5f);
  Tensor g = f32("g", {5}, {1, 2, 3, 4, 5});
  be->copy(s, f, g);
  EXPECT_EQ(get(f), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_THROW(be->copy(s, i, g), sl::Error);                         // dtype
  EXPECT_THROW(be->copy(s, zeros("h", DType::F32, {4}), g), sl::Error);  // numel
}

// ------------------------------------------------------------------ dense math

std::vector<double> ref_gemm(const std::vector<float>& a, const std::vector<float>& w, int M, int N, int K) {
  std::vector<double> out(size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(a[size_t(m) * K + k]) * w[size_t(n) * K + k];
      out[size_t(m) * N + n] = acc;
    }
  return out;
}

TEST_F(CpuOps, GemmMatchesDoubleReference) {
  // Sizes that are not multiples of the kernel's 4-row tiles, 64-row panels or 8-lane sums.
  for (auto [M, N, K] : {std::tuple{37, 70, 53}, std::tuple{1, 3, 7}, std::tuple{8, 130, 256}}) {
    std::vector<float> a = uniform(size_t(M) * K), w = uniform(size_t(N) * K);
    Tensor ta = f32("a", {M, K}, a), tw = f32("w", {N, K}, w), to = zeros("o", DType::F32, {M, N});
    be->gemm(s, to, ta, tw);
    expect_close(get(to), ref_gemm(a, w, M, N, K), 1e-5, "gemm");
  }
}

// gemm_fp8 on a case worked out by hand (docs/model.md 8): the activation's groups quantized to
// e4m3 with a power-of-two scale, the weight's 128 x 128 blocks scaled.
TEST_F(CpuOps, GemmFp8ByHand) {
  const int M = 1, N = 130, K = 256;  // two weight row blocks (0..127, 128..129), two K groups
  std::vector<uint8_t> codes(size_t(N) * K, 0);
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < 4; ++k) codes[size_t(n) * K + k] = 0x38;  // 1.0
    codes[size_t(n) * K + 128] = 0x40;                            // 2.0
  }
  Tensor w = be->alloc("w", DType::U8, {N, K}, AllocKind::Weight);
  be->upload(s, w, codes.data(), codes.size());
  // Block scales [2, 2]: rows 0..127 x group 0 -> 0.5, rows 128.. x group 0 -> 4, group 1 -> 1.
  Tensor ws = f32("w_scale", {2, 2}, {0.5f, 1.f, 4.f, 1.f});
  std::vector<float> a(size_t(K), 0.f);
  // Group 0: amax 3, scale 2^-7 (the power of two just above 3/448): 1.1 / 2^-7 = 140.8 lies
  // between the e4m3 neighbours 128 and 144 and rounds to 144: 1.125. 2, 3 and -0.5 are exact.
  a[0] = 1.1f, a[1] = 2.f, a[2] = 3.f, a[3] = -0.5f;
  // Group 1: amax 7, scale 2^-6 = 7/448: 7 / 2^-6 = 448, the largest e4m3: exact.
  a[128] = 7.f;
  Tensor ta = f32("a", {M, K}, a), to = zeros("o", DType::F32, {M, N});
  be->gemm_fp8(s, to, ta, w, ws, 1);
  const std::vector<float> got = get(to);
  const double g0 = 1.125 + 2 + 3 - 0.5, g1 = 7.0 * 2.0;
  for (int n = 0; n < N; ++n) EXPECT_EQ(got[size_t(n)], float((n < 128 ? 0.5 : 4.0) * g0 + g1)) << n;
  // Bad arguments name the op and what is wrong.
  Tensor w2 = be->alloc("w2", DType::U8, {4, 200}, AllocKind::Weight);
  EXPECT_THROW(be->gemm_fp8(s, to, ta, w2, ws, 1), sl::Error);  // K not a multiple of 128
  Tensor bad_scale = f32("bad_scale", {1, 2}, {1.f, 1.f});
  try {
    be->gemm_fp8(s, to, ta, w, bad_scale, 1);
    ADD_FAILURE() << "a w_scale of the wrong shape was accepted";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_fp8: w_scale"), std::string::npos) << e.what();
  }
  Tensor wf = zeros("wf", DType::F32, {N, K});
  EXPECT_THROW(be->gemm_fp8(s, to, ta, wf, ws, 1), sl::Error);  // codes must be U8
}

// gemm_fp8 against a double-precision reference of the same quantization (random data).
TEST_F(CpuOps, GemmFp8MatchesDoubleReference) {
  const int M = 5, N = 200, K = 384;
  std::vector<float> a = uniform(size_t(M) * K, -3.f, 3.f);
  std::vector<uint8_t> codes(size_t(N) * K);
  std::uniform_int_distribution<int> c(0, 255);
  for (auto& x : codes) {
    do x = uint8_t(c(rng)); while ((x & 0x7F) == 0x7F);  // no NaN codes
  }
  const int NB = 2, KB = 3;
  std::vector<float> scale = uniform(size_t(NB * KB), 0.01f, 0.1f);
  Tensor w = be->alloc("w", DType::U8, {N, K}, AllocKind::Weight);
  be->upload(s, w, codes.data(), codes.size());
  Tensor ta = f32("a", {M, K}, a), ws = f32("ws", {NB, KB}, scale), to = zeros("o", DType::F32, {M, N});
  be->gemm_fp8(s, to, ta, w, ws, 1);
  // The reference quantizes with its own arithmetic: e4m3 by nearest-value search.
  auto e4m3 = [](int code) {
    const int e = (code >> 3) & 15, m = code & 7;
    const double v = e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10);
    return (code & 0x80) ? -v : v;
  };
  std::vector<double> want(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < KB; ++g) {
      double amax = 0;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(double(a[size_t(m) * K + g * 128 + i])));
      double sc = 1;
      while (sc < amax / 448) sc *= 2;
      while (sc / 2 >= amax / 448 && amax > 0) sc /= 2;
      for (int i = 0; i < 128; ++i) {
        const double x = a[size_t(m) * K + g * 128 + i] / sc;
        double best = 0;
        for (int code = 0; code < 256; ++code)
          if ((code & 0x7F) != 0x7F && std::fabs(e4m3(code) - x) < std::fabs(best - x)) best = e4m3(code);
        const double q = best * sc;
        for (int n = 0; n < N; ++n)
          want[size_t(m) * N + n] += q * e4m3(codes[size_t(n) * K + g * 128 + i]) * scale[size_t((n / 128) * KB + g)];
      }
    }
  expect_close(get(to), want, 1e-5, "gemm_fp8");
}

// A grouped gemm_fp8 (wo_a, the tiny configs' 64-row groups that share a 128-row scale block):
// activations of small integers, which the group quantization keeps exact, against a double
// block-diagonal product of the dequantized weights.
TEST_F(CpuOps, GemmFp8Grouped) {
  const int M = 3, G = 2, N = 64, K = 256;
  std::vector<uint8_t> codes(size_t(G * N) * K);
  std::uniform_int_distribution<int> c(0, 253);
  for (auto& x : codes) x = uint8_t(c(rng) >= 127 ? c(rng) % 127 : c(rng) % 127 + 128);  // no NaN codes
  std::vector<float> scale = {0.25f, 0.5f};  // [1 row block, 2 K blocks]
  std::vector<float> a(size_t(M) * G * K);
  std::uniform_int_distribution<int> ai(-7, 7);
  for (auto& x : a) x = float(ai(rng));
  Tensor w = be->alloc("w", DType::U8, {G * N, K}, AllocKind::Weight);
  be->upload(s, w, codes.data(), codes.size());
  Tensor ta = f32("a", {M, G * K}, a), ws = f32("ws", {1, 2}, scale), to = zeros("o", DType::F32, {M, G * N});
  be->gemm_fp8(s, to, ta, w, ws, G);
  const std::vector<float> got = get(to);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < G; ++g)
      for (int n = 0; n < N; ++n) {
        double want = 0;
        for (int k = 0; k < K; ++k)
          want += double(a[size_t(m) * G * K + g * K + k]) *
                  double(sl::lowp::e4m3_to_float(codes[size_t(g * N + n) * K + k])) * scale[size_t(k / 128)];
        EXPECT_NEAR(got[size_t(m) * G * N + g * N + n], want, 1e-4 * (1 + std::fabs(want))) << m << " " << g << " " << n;
      }
  // Rows of a must be whole groups of K.
  Tensor bad = f32("bad", {M, K}, std::vector<float>(size_t(M) * K, 1.f));
  EXPECT_THROW(be->gemm_fp8(s, to, bad, w, ws, G), sl::Error);
  EXPECT_THROW(be->gemm_fp8(s, to, ta, w, ws, 3), sl::Error);  // 128 rows are not 3 groups
}

// quantize_fp8 and quantize_mxfp4 on values worked out by hand: the block / group each value
// falls in, its scale and its code, partial blocks, all-zero blocks, and the MXFP4 nibble order.
TEST_F(CpuOps, QuantizeNativeFormatsByHand) {
  const int R = 130, C = 200;  // 2 x 2 blocks, the last row and column blocks partial
  std::vector<float> v(size_t(R) * C, 0.f);
  v[0] = 3.f;                          // block (0, 0): amax 3 -> scale 2^-7; 3 / 2^-7 = 384 -> 0x7C
  v[5] = -1.f;                         // -128 = -2^7 -> 0x80 | 14 << 3 = 0xF0
  v[150] = 1792.f;                     // block (0, 1): 448 * 4 -> scale 4, code 0x7E
  v[size_t(128) * C + 3] = 1.f;        // block (1, 0): amax 1 -> scale 2^-8; 256 -> 0x78
  v[size_t(129) * C + 7] = 0.001f;     // 0.256 -> 2^-2 * 1.024 -> 0x28
  Tensor src = f32("src", {R, C}, v), codes = be->alloc("codes", DType::U8, {R, C}, AllocKind::Weight);
  Tensor scale = zeros("scale", DType::F32, {2, 2});
  be->quantize_fp8(s, codes, scale, src);
  EXPECT_EQ(get(scale), (std::vector<float>{std::ldexp(1.f, -7), 4.f, std::ldexp(1.f, -8), 1.f}));
  std::vector<uint8_t> cb(size_t(R) * C);
  be->download(cb.data(), codes, cb.size());
  EXPECT_EQ(cb[0], 0x7C);
  EXPECT_EQ(cb[5], 0xF0);
  EXPECT_EQ(cb[150], 0x7E);
  EXPECT_EQ(cb[size_t(128) * C + 3], 0x78);
  EXPECT_EQ(cb[size_t(129) * C + 7], 0x28);
  EXPECT_EQ(cb[1], 0x00);
  EXPECT_THROW(be->quantize_fp8(s, codes, zeros("s2", DType::F32, {1, 2}), src), sl::Error);

  // MXFP4 [2, 64]: row 0 group 0 amax 5 -> scale 2^0 (code 127): 5 ties between 4 and 6 and goes
  // to the even code 6 (4.0); 1.5 -> 3; -0.25 ties between 0 and 0.5 -> -0 (8); -6 -> 0xF.
  // Group 1 all zero: scale 2^0, codes 0. Row 1: amax 0.75 -> 2^-3 (124): 0.75 -> 6 -> code 7.
  std::vector<float> m(128, 0.f);
  m[0] = 5.f, m[1] = 1.5f, m[2] = -0.25f, m[3] = -6.f, m[64] = 0.75f;
  Tensor msrc = f32("m", {2, 64}, m), packed = be->alloc("p", DType::U8, {2, 32}, AllocKind::Weight);
  Tensor msc = be->alloc("ms", DType::U8, {2, 2}, AllocKind::Weight);
  be->quantize_mxfp4(s, packed, msc, msrc);
  std::vector<uint8_t> pb(64), sb(4);
  be->download(pb.data(), packed, 64);
  be->download(sb.data(), msc, 4);
  EXPECT_EQ(sb, (std::vector<uint8_t>{127, 127, 124, 127}));
  EXPECT_EQ(pb[0], 0x36);
  EXPECT_EQ(pb[1], 0xF8);
  EXPECT_EQ(pb[2], 0x00);
  EXPECT_EQ(pb[32], 0x07);
  Tensor odd = f32("odd", {2, 48}, std::vector<float>(96, 1.f));
  EXPECT_THROW(be->quantize_mxfp4(s, packed, msc, odd), sl::Error);  // 48 columns: not whole groups of 32
}

TEST_F(CpuOps, GemmRowsDoNotDependOnBatch) {
  // A row's result is bit-identical whether it is computed alone or inside a batch (so
  // prefill and token-by-token decode agree exactly).
  const int M = 11, N = 9, K = 45;
  std::vector<float> a = uniform(size_t(M) * K), w = uniform(size_t(N) * K);
  Tensor ta = f32("a", {M, K}, a), tw = f32("w", {N, K}, w), to = zeros("o", DType::F32, {M, N});
  be->gemm(s, to, ta, tw);
  std::vector<float> all = get(to);
  for (int m = 0; m < M; ++m) {
    Tensor one = zeros("o1", DType::F32, {1, N});
    be->gemm(s, one, ta.rows(m, m + 1), tw);
    std::vector<float> r = get(one);
    for (int n = 0; n < N; ++n) ASSERT_EQ(r[n], all[size_t(m) * N + n]) << m << "," << n;
  }
}

TEST_F(CpuOps, GemmGroupedIsBlockDiagonal) {
  const int M = 5, G = 3, N = 7, K = 11;
  std::vector<float> a = uniform(size_t(M) * G * K), w = uniform(size_t(G) * N * K);
  Tensor ta = f32("a", {M, G * K}, a), tw = f32("w", {G * N, K}, w), to = zeros("o", DType::F32, {M, G * N});
  be->gemm_grouped(s, to, ta, tw, G);
  std::vector<double> want(size_t(M) * G * N);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < G; ++g)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) acc += double(a[size_t(m) * G * K + g * K + k]) * w[size_t(g * N + n) * K + k];
        want[size_t(m) * G * N + g * N + n] = acc;
      }
  expect_close(get(to), want, 1e-5, "gemm_grouped");
}

TEST_F(CpuOps, RmsnormWithAndWithoutWeight) {
  const int rows = 6, D = 37;
  const float eps = 1e-6f;
  std::vector<float> x = uniform(size_t(rows) * D, -3.f, 3.f), w = uniform(D, 0.5f, 1.5f);
  Tensor tx = f32("x", {2, 3, D}, x), tw = f32("w", {D}, w), to = zeros("o", DType::F32, {2, 3, D});
  std::vector<double> want_w(x.size()), want_nw(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += double(x[r * D + d]) * x[r * D + d];
    double inv = 1.0 / std::sqrt(ss / D + double(eps));
    for (int d = 0; d < D; ++d) {
      want_nw[r * D + d] = x[r * D + d] * inv;
      want_w[r * D + d] = w[d] * x[r * D + d] * inv;
    }
  }
  be->rmsnorm(s, to, tx, tw, eps);
  expect_close(get(to), want_w, 1e-5, "rmsnorm with weight");
  be->rmsnorm(s, tx, tx, Tensor{}, eps);  // in place, no weight (the per-head Q norm)
  expect_close(get(tx), want_nw, 1e-5, "rmsnorm without weight, in place");
}

TEST_F(CpuOps, Add) {
  std::vector<float> a = uniform(19), b = uniform(19);
  Tensor ta = f32("a", {19}, a), tb = f32("b", {19}, b), to = zeros("o", DType::F32, {19});
  be->add(s, to, ta, tb);
  std::vector<float> o = get(to);
  for (int i = 0; i < 19; ++i) EXPECT_EQ(o[i], a[i] + b[i]);
}

TEST_F(CpuOps, RopeMatchesDoubleAndInverseCancels) {
  const int T = 4, H = 3, dim = 20, R = 8, P = 10;
  std::vector<float> x = uniform(size_t(T) * H * dim, -2.f, 2.f);
  std::vector<float> table = random_table(rng, P, R);
  std::vector<int32_t> pos = {0, 9, 3, 3};
  Tensor tx = f32("x", {T, H, dim}, x), tt = f32("table", {P, R}, table), tp = i32("pos", {T}, pos);

  std::vector<double> want(x.begin(), x.end());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) ref_rope(&want[(size_t(t) * H + h) * dim], dim, &table[size_t(pos[t]) * R], R, false);
  be->rope(s, tx, tp, tt, false);
  std::vector<float> fwd = get(tx);
  expect_close(fwd, want, 1e-6, "rope forward");
  // The nope dims are untouched, bit for bit.
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < dim - R; ++d) {
        size_t i = (size_t(t) * H + h) * dim + d;
        ASSERT_EQ(fwd[i], x[i]);
      }
  be->rope(s, tx, tp, tt, true);
  expect_close(get(tx), std::vector<double>(x.begin(), x.end()), 1e-6, "rope then inverse rope");

  // The inverse on its own matches the double inverse; a 2-D [T, dim] x is one head.
  std::vector<float> y = uniform(size_t(T) * dim);
  Tensor ty = f32("y", {T, dim}, y);
  std::vector<double> wy(y.begin(), y.end());
  for (int t = 0; t < T; ++t) ref_rope(&wy[size_t(t) * dim], dim, &table[size_t(pos[t]) * R], R, true);
  be->rope(s, ty, tp, tt, true);
  expect_close(get(ty), wy, 1e-6, "rope inverse on [T, dim]");
}

TEST_F(CpuOps, SwigluClampsAsSpecified) {
  auto ref = [](double g, double u, double L) {
    g = std::min(g, L);                  // above only
    u = std::min(std::max(u, -L), L);    // both sides
    return g / (1.0 + std::exp(-g)) * u;
  };
  for (float L : {10.f, 0.5f}) {
    // Values below, at and above +-L for both inputs, plus large gates (> 20).
    std::vector<float> g = {-30.f, -12.f, -10.f, -0.7f, -0.5f, -0.2f, 0.f, 0.3f, 0.5f, 0.6f,
                            5.f,   9.9f,  10.f,  10.1f, 20.5f, 25.f,  50.f, 1.f, 1.f, 1.f};
    std::vector<float> u = {2.f,  -2.f, 3.f, 0.4f, -0.6f, 11.f, 5.f, -11.f, 0.5f, -0.5f,
                            12.f, -12.f, 1.f, 1.f,  1.f,   -30.f, 30.f, 10.f, -10.f, 0.49f};
    std::vector<float> rg = uniform(40, -15.f, 25.f), ru = uniform(40, -15.f, 15.f);
    g.insert(g.end(), rg.begin(), rg.end());
    u.insert(u.end(), ru.begin(), ru.end());
    const int n = int(g.size());
    Tensor tg = f32("g", {n}, g), tu = f32("u", {n}, u), to = zeros("o", DType::F32, {n});
    be->swiglu(s, to, tg, tu, L);
    std::vector<float> o = get(to);
    for (int i = 0; i < n; ++i) {
      double w = ref(g[i], u[i], L);
      EXPECT_NEAR(o[i], w, 2e-6 * std::max(1.0, std::fabs(w))) << "L " << L << " g " << g[i] << " u " << u[i];
    }
    // Spot checks by hand: for g above the limit the output is silu(L) * clamp(u).
    double silu_L = L / (1.0 + std::exp(-double(L)));
    EXPECT_NEAR(o[15], silu_L * -L, 1e-6);  // g 25 -> L, u -30 -> -L
    EXPECT_NEAR(o[16], silu_L * L, 1e-6);   // g 50 -> L, u 30 -> L
  }
}

// ------------------------------------------------------------------ embedding, sampling

TEST_F(CpuOps, EmbedWithAndWithoutZeroPos0) {
  const int V = 6, D = 5, T = 4;
  std::vector<float> table = uniform(size_t(V) * D);
  std::vector<int32_t> ids = {3, 0, 5, 3}, pos = {0, 1, 0, 7};
  Tensor tt = f32("table", {V, D}, table), ti = i32("ids", {T}, ids), tp = i32("pos", {T}, pos);
  Tensor o = zeros("o", DType::F32, {T, D});
  be->embed(s, o, ti, tt, tp, false);
  std::vector<float> v = get(o);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) ASSERT_EQ(v[size_t(t) * D + d], table[size_t(ids[t]) * D + d]);
  be->embed(s, o, ti, tt, tp, true);
  v = get(o);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) ASSERT_EQ(v[size_t(t) * D + d], pos[t] == 0 ? 0.f : table[size_t(ids[t]) * D + d]);
  EXPECT_THROW(be->embed(s, o, i32("bad", {T}, {0, 1, 6, 2}), tt, tp, false), sl::Error);
}

TEST_F(CpuOps, ArgmaxTiesGoToLowestIndex) {
  std::vector<float> l = {0, 1, 5, 2, 5, 5,          // tie at 2, 4, 5 -> 2
                          -3, -3, -3, -3, -3, -3,    // all equal -> 0
                          -9, -8, -7, -6, -5, -4.5,  // last
                          7, 1, 2, 3, 7, 0};         // tie first/other -> 0
  Tensor tl = f32("l", {4, 6}, l), to = zeros("o", DType::I32, {4});
  be->argmax(s, to, tl);
  EXPECT_EQ(geti(to), (std::vector<int32_t>{2, 0, 5, 0}));
}

TEST_F(CpuOps, ShiftTokens) {
  Tensor tok = i32("tok", {6}, {10, 11, 12, 20, 21, 22}), smp = i32("smp", {2}, {13, 23});
  Tensor o = zeros("o", DType::I32, {6});
  be->shift_tokens(s, o, tok, smp);
  EXPECT_EQ(geti(o), (std::vector<int32_t>{11, 12, 13, 21, 22, 23}));
  Tensor tok1 = i32("tok1", {2}, {5, 6}), o1 = zeros("o1", DType::I32, {2});  // T0 = 1
  be->shift_tokens(s, o1, tok1, smp);
  EXPECT_EQ(geti(o1), (std::vector<int32_t>{13, 23}));
}

TEST_F(CpuOps, GatherRows) {
  std::vector<float> in = uniform(5 * 3);
  Tensor ti = f32("in", {5, 3}, in), rows = i32("rows", {4}, {4, 0, 4, 2}), o = zeros("o", DType::F32, {4, 3});
  be->gather_rows(s, o, ti, rows);
  std::vector<float> v = get(o);
  const int want_rows[4] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(v[size_t(i) * 3 + c], in[size_t(want_rows[i]) * 3 + c]);
  // Any dtype and rank: I32 rows of [2, 2].
  Tensor ii = i32("ii", {3, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), oi = zeros("oi", DType::I32, {2, 2, 2});
  be->gather_rows(s, oi, ii, i32("r2", {2}, {2, 1}));
  EXPECT_EQ(geti(oi), (std::vector<int32_t>{8, 9, 10, 11, 4, 5, 6, 7}));
  EXPECT_THROW(be->gather_rows(s, o, ti, i32("bad", {4}, {0, 5, 1, 1})), sl::Error);
}

// ------------------------------------------------------------------ mHC

struct HcRef {
  std::vector<double> y, post, comb;
};

// docs/model.md 3.4 in double, written from the document.
HcRef ref_hc_pre(const std::vector<float>& X, const std::vector<float>& fn, const std::vector<float>& scale,
                 const std::vector<float>& base, int T, int hc, int D, int iters, double hc_eps, double rms_eps) {
  const int n = hc * D, mix = (2 + hc) * hc;
  HcRef r;
  r.y.assign(size_t(T) * D, 0);
  r.post.assign(size_t(T) * hc, 0);
  r.comb.assign(size_t(T) * hc * hc, 0);
  for (int t = 0; t < T; ++t) {
    const float* x = &X[size_t(t) * n];
    double ss = 0;
    for (int j = 0; j < n; ++j) ss += double(x[j]) * x[j];
    double rr = 1.0 / std::sqrt(ss / n + rms_eps);
    std::vector<double> m(mix);
    for (int k = 0; k < mix; ++k) {
      double acc = 0;
      for (int j = 0; j < n; ++j) acc += double(fn[size_t(k) * n + j]) * x[j];
      m[k] = acc * rr;
    }
    std::vector<double> pre(hc);
    for (int k = 0; k < hc; ++k) {
      pre[k] = sigmoid_d(m[k] * scale[0] + base[k]) + hc_eps;
      r.post[size_t(t) * hc + k] = 2.0 * sigmoid_d(m[hc + k] * scale[1] + base[hc + k]);
    }
    std::vector<double> C(size_t(hc) * hc);
    for (int k = 0; k < hc * hc; ++k) C[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
    for (int i = 0; i < hc; ++i) {
      double mx = -1e300, sum = 0;
      for (int j = 0; j < hc; ++j) mx = std::max(mx, C[i * hc + j]);
      for (int j = 0; j < hc; ++j) sum += std::exp(C[i * hc + j] - mx);
      for (int j = 0; j < hc; ++j) C[i * hc + j] = std::exp(C[i * hc + j] - mx) / sum + hc_eps;
    }
    auto cols = [&] {
      for (int j = 0; j < hc; ++j) {
        double sum = 0;
        for (int i = 0; i < hc; ++i) sum += C[i * hc + j];
        for (int i = 0; i < hc; ++i) C[i * hc + j] /= sum + hc_eps;
      }
    };
    auto rows = [&] {
      for (int i = 0; i < hc; ++i) {
        double sum = 0;
        for (int j = 0; j < hc; ++j) sum += C[i * hc + j];
        for (int j = 0; j < hc; ++j) C[i * hc + j] /= sum + hc_eps;
      }
    };
    cols();
    for (int it = 1; it < iters; ++it) rows(), cols();
    for (int k = 0; k < hc * hc; ++k) r.comb[size_t(t) * hc * hc + k] = C[k];
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int st = 0; st < hc; ++st) acc += pre[st] * x[st * D + d];
      r.y[size_t(t) * D + d] = acc;
    }
  }
  return r;
}

TEST_F(CpuOps, HcPreMatchesDoubleReference) {
  const int T = 3, hc = 4, D = 64, mix = 24, iters = 20;
  const float hc_eps = 1e-6f, rms_eps = 1e-6f;
  std::vector<float> X = uniform(size_t(T) * hc * D, -2.f, 2.f), fn = uniform(size_t(mix) * hc * D, -0.2f, 0.2f);
  std::vector<float> scale = {0.7f, 1.3f, 0.9f}, base = uniform(mix, -0.5f, 0.5f);
  Tensor tX = f32("X", {T, hc, D}, X), tfn = f32("fn", {mix, hc * D}, fn), tsc = f32("scale", {3}, scale),
         tb = f32("base", {mix}, base);
  Tensor y = zeros("y", DType::F32, {T, D}), post = zeros("post", DType::F32, {T, hc}),
         comb = zeros("comb", DType::F32, {T, hc, hc});
  be->hc_pre(s, y, post, comb, tX, tfn, tsc, tb, iters, hc_eps, rms_eps);
  HcRef r = ref_hc_pre(X, fn, scale, base, T, hc, D, iters, hc_eps, rms_eps);
  expect_close(get(y), r.y, 1e-5, "hc_pre y");
  expect_close(get(post), r.post, 1e-5, "hc_pre post");
  expect_close(get(comb), r.comb, 1e-5, "hc_pre comb");
}

TEST_F(CpuOps, SinkhornCombIsDoublyStochastic) {
  const int T = 8, hc = 4, D = 32, mix = 24;
  // Comb logits spread over several units (|m * scale[2] + base| up to ~4), so the initial
  // row softmax is far from doubly stochastic and the 20 iterations have work to do.
  std::vector<float> X = uniform(size_t(T) * hc * D, -3.f, 3.f), fn = uniform(size_t(mix) * hc * D, -0.1f, 0.1f);
  Tensor tX = f32("X", {T, hc, D}, X), tfn = f32("fn", {mix, hc * D}, fn), tsc = f32("scale", {3}, {1.f, 1.f, 1.f}),
         tb = f32("base", {mix}, uniform(mix, -2.f, 2.f));
  Tensor y = zeros("y", DType::F32, {T, D}), post = zeros("post", DType::F32, {T, hc}),
         comb = zeros("comb", DType::F32, {T, hc, hc});
  be->hc_pre(s, y, post, comb, tX, tfn, tsc, tb, 20, 1e-6f, 1e-6f);
  std::vector<float> C = get(comb);
  double worst_row = 0, worst_col = 0;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < hc; ++i) {
      double row = 0, col = 0;
      for (int j = 0; j < hc; ++j) {
        row += C[(size_t(t) * hc + i) * hc + j];
        col += C[(size_t(t) * hc + j) * hc + i];
        EXPECT_GT(C[(size_t(t) * hc + i) * hc + j], 0.f);
      }
      worst_row = std::max(worst_row, std::fabs(row - 1));
      worst_col = std::max(worst_col, std::fabs(col - 1));
      EXPECT_NEAR(row, 1.0, 1e-3) << "token " << t << " row " << i;
      EXPECT_NEAR(col, 1.0, 1e-3) << "token " << t << " column " << i;
    }
  std::printf("[ sinkhorn ] max |row sum - 1| %.2e, max |column sum - 1| %.2e\n", worst_row, worst_col);
  for (float p : get(post)) EXPECT_TRUE(p > 0.f && p < 2.f);
}

TEST_F(CpuOps, HcPostHasTheTransposeAndMayRunInPlace) {
  const int T = 3, hc = 4, D = 10;
  std::vector<float> f = uniform(size_t(T) * D), res = uniform(size_t(T) * hc * D), post = uniform(size_t(T) * hc, 0, 2),
                     comb = uniform(size_t(T) * hc * hc, 0, 1);
  std::vector<double> want(res.size());
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < hc; ++j)
      for (int d = 0; d < D; ++d) {
        double acc = double(post[t * hc + j]) * f[t * D + d];
        for (int i = 0; i < hc; ++i) acc += double(comb[(t * hc + i) * hc + j]) * res[(t * hc + i) * D + d];
        want[(size_t(t) * hc + j) * D + d] = acc;
      }
  Tensor tf = f32("f", {T, D}, f), tr = f32("res", {T, hc, D}, res), tp = f32("post", {T, hc}, post),
         tc = f32("comb", {T, hc, hc}, comb), to = zeros("X", DType::F32, {T, hc, D});
  be->hc_post(s, to, tf, tr, tp, tc);
  expect_close(get(to), want, 1e-6, "hc_post");
  be->hc_post(s, tr, tf, tr, tp, tc);  // X_out aliases res
  expect_close(get(tr), want, 1e-6, "hc_post in place");
}

TEST_F(CpuOps, HcHeadMatchesDoubleReference) {
  const int T = 4, hc = 4, D = 48;
  const float hc_eps = 1e-6f, rms_eps = 1e-6f;
  std::vector<float> X = uniform(size_t(T) * hc * D, -2.f, 2.f), fn = uniform(size_t(hc) * hc * D, -0.2f, 0.2f),
                     base = uniform(hc, -1.f, 1.f);
  const float scale = 0.8f;
  std::vector<double> want(size_t(T) * D);
  for (int t = 0; t < T; ++t) {
    const float* x = &X[size_t(t) * hc * D];
    double ss = 0;
    for (int j = 0; j < hc * D; ++j) ss += double(x[j]) * x[j];
    double r = 1.0 / std::sqrt(ss / (hc * D) + rms_eps);
    double w[4];
    for (int k = 0; k < hc; ++k) {
      double m = 0;
      for (int j = 0; j < hc * D; ++j) m += double(fn[size_t(k) * hc * D + j]) * x[j];
      w[k] = sigmoid_d(m * r * scale + base[k]) + hc_eps;
    }
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int k = 0; k < hc; ++k) acc += w[k] * x[k * D + d];
      want[size_t(t) * D + d] = acc;
    }
  }
  Tensor tX = f32("X", {T, hc, D}, X), tfn = f32("fn", {hc, hc * D}, fn), tsc = f32("scale", {1}, {scale}),
         tb = f32("base", {hc}, base), h = zeros("h", DType::F32, {T, D});
  be->hc_head(s, h, tX, tfn, tsc, tb, hc_eps, rms_eps);
  expect_close(get(h), want, 1e-5, "hc_head");
}

TEST_F(CpuOps, HcExpandAndMtpCombine) {
  const int T = 2, hc = 4, D = 3;
  std::vector<float> e = uniform(size_t(T) * D), hp = uniform(size_t(T) * hc * D);
  Tensor te = f32("e", {T, D}, e), thp = f32("hp", {T, hc, D}, hp), X = zeros("X", DType::F32, {T, hc, D});
  be->hc_expand(s, X, te);
  std::vector<float> x = get(X);
  for (int t = 0; t < T; ++t)
    for (int st = 0; st < hc; ++st)
      for (int d = 0; d < D; ++d) ASSERT_EQ(x[(size_t(t) * hc + st) * D + d], e[size_t(t) * D + d]);
  be->mtp_combine(s, X, thp, te);
  x = get(X);
  for (int t = 0; t < T; ++t)
    for (int st = 0; st < hc; ++st)
      for (int d = 0; d < D; ++d)
        ASSERT_EQ(x[(size_t(t) * hc + st) * D + d], hp[(size_t(t) * hc + st) * D + d] + e[size_t(t) * D + d]);
}

// ------------------------------------------------------------------ attention

TEST_F(CpuOps, SwaInsertWritesSlotPosModCapWithTag) {
  const int B = 2, cap = 3, d = 2;
  Tensor cache = zeros("swa", DType::F32, {B, cap, d}), tags = zeros("tags", DType::I32, {B, cap});
  be->fill(s, tags, -1.f);
  // seq 0 gets positions 0..4 (wraps: slots hold 3, 4, 2), seq 1 gets position 7.
  std::vector<float> k = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 7, 7};
  be->swa_insert(s, cache, tags, f32("k", {6, d}, k), i32("pos", {6}, {0, 1, 2, 3, 4, 7}),
                 i32("seq", {6}, {0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(geti(tags), (std::vector<int32_t>{3, 4, 2, -1, 7, -1}));
  EXPECT_EQ(get(cache), (std::vector<float>{3, 3, 4, 4, 2, 2, 0, 0, 7, 7, 0, 0}));
}

TEST_F(CpuOps, CompressorSaveAddsApeAndTags) {
  const int B = 1, S = 8, cd = 3, ratio = 4;
  std::vector<float> u = uniform(5 * cd), g = uniform(5 * cd), ape = uniform(ratio * cd);
  std::vector<int32_t> pos = {2, 3, 4, 5, 11};
  Tensor su = zeros("su", DType::F32, {B, S, cd}), sg = zeros("sg", DType::F32, {B, S, cd}),
         st = zeros("st", DType::I32, {B, S});
  be->fill(s, st, -1.f);
  be->compressor_save(s, su, sg, st, f32("u", {5, cd}, u), f32("g", {5, cd}, g), f32("ape", {ratio, cd}, ape),
                      i32("pos", {5}, pos), i32("seq", {5}, {0, 0, 0, 0, 0}), ratio);
  std::vector<int32_t> tags = geti(st);
  std::vector<float> vu = get(su), vg = get(sg);
  // Position 11 overwrote slot 3 (position 3).
  EXPECT_EQ(tags, (std::vector<int32_t>{-1, -1, 2, 11, 4, 5, -1, -1}));
  for (int t : {0, 2, 3, 4}) {
    int slot = pos[t] % S;
    for (int c = 0; c < cd; ++c) {
      EXPECT_EQ(vu[slot * cd + c], u[t * cd + c]);
      EXPECT_EQ(vg[slot * cd + c], g[t * cd + c] + ape[(pos[t] % ratio) * cd + c]);
    }
  }
}

// The compressor pooling of docs/model.md 5.3 in double, from the raw per-position u and g (before
// ape) rather than from the backend's state: entry j of one sequence.
std::vector<double> ref_pool(const std::vector<float>& U, const std::vector<float>& Gr, const std::vector<float>& ape,
                             const std::vector<bool>& present, int j, int ratio, bool overlap, int d,
                             const std::vector<float>& norm_w, const std::vector<float>& table, int R, double eps) {
  const int c = overlap ? 2 : 1, cd = c * d;
  std::vector<double> e(d);
  for (int ch = 0; ch < d; ++ch) {
    std::vector<std::pair<double, double>> cand;  // (score, value)
    auto add = [&](int q, int off) {
      if (q < 0 || !present[q]) return;
      cand.push_back({double(Gr[size_t(q) * cd + off + ch]) + ape[size_t(q % ratio) * cd + off + ch],
                      U[size_t(q) * cd + off + ch]});
    };
    if (overlap)
      for (int q = (j - 1) * ratio; q < j * ratio; ++q) add(q, 0);
    for (int q = j * ratio; q < (j + 1) * ratio; ++q) add(q, overlap ? d : 0);
    double mx = -1e300, den = 0, num = 0;
    for (auto& [sc, v] : cand) mx = std::max(mx, sc);
    for (auto& [sc, v] : cand) den += std::exp(sc - mx), num += std::exp(sc - mx) * v;
    e[ch] = num / den;
  }
  double ss = 0;
  for (double v : e) ss += v * v;
  double r = 1.0 / std::sqrt(ss / d + eps);
  for (int ch = 0; ch < d; ++ch) e[ch] = e[ch] * r * norm_w[ch];
  ref_rope(e.data(), d, &table[size_t(j) * ratio * R], R, false);
  return e;
}


void CpuOps::pool_case(bool overlap) {
  const int B = 2, ratio = 4, d = 12, R = 4, c = overlap ? 2 : 1, cd = c * d, S = 16, n_max = 5, npos = 16;
  const float eps = 1e-6f;
  // Per sequence, raw u and g (before ape) for positions 0..npos-1.
  std::vector<float> U[2] = {uniform(size_t(npos) * cd, -2, 2), uniform(size_t(npos) * cd, -2, 2)};
  std::vector<float> Gr[2] = {uniform(size_t(npos) * cd, -3, 3), uniform(size_t(npos) * cd, -3, 3)};
  std::vector<float> ape = uniform(size_t(ratio) * cd), norm_w = uniform(d, 0.5f, 1.5f);
  std::vector<float> table = random_table(rng, n_max * ratio, R);

  Tensor su = zeros("su", DType::F32, {B, S, cd}), sg = zeros("sg", DType::F32, {B, S, cd}),
         st = zeros("st", DType::I32, {B, S}), ent = zeros("entries", DType::F32, {B, n_max, d});
  be->fill(s, st, -1.f);
  be->fill(s, ent, 7.f);  // sentinel: entries never pooled stay 7
  Tensor tape = f32("ape", {ratio, cd}, ape), tnw = f32("norm", {d}, norm_w),
         ttab = f32("table", {n_max * ratio, R}, table);

  // Save seq 0 positions 0..11 and seq 1 positions 0..7, interleaved in one batch.
  std::vector<int32_t> pos, seq;
  std::vector<float> u, g;
  for (int p = 0; p < 12; ++p)
    for (int b = 0; b < 2; ++b) {
      if (b == 1 && p >= 8) continue;
      pos.push_back(p);
      seq.push_back(b);
      u.insert(u.end(), U[b].begin() + ptrdiff_t(p) * cd, U[b].begin() + ptrdiff_t(p + 1) * cd);
      g.insert(g.end(), Gr[b].begin() + ptrdiff_t(p) * cd, Gr[b].begin() + ptrdiff_t(p + 1) * cd);
    }
  const int T = int(pos.size());
  be->compressor_save(s, su, sg, st, f32("u", {T, cd}, u), f32("g", {T, cd}, g), tape, i32("pos", {T}, pos),
                      i32("seq", {T}, seq), ratio);
  // Seq 1 loses position 5 (its slot's tag no longer matches): absent from its pooling.
  std::vector<int32_t> tags = geti(st);
  tags[S + 5] = -1;
  be->upload(s, st, tags.data(), tags.size() * 4);
  std::vector<bool> present[2] = {std::vector<bool>(npos, false), std::vector<bool>(npos, false)};
  for (int p = 0; p < 12; ++p) present[0][p] = true;
  for (int p = 0; p < 8; ++p) present[1][p] = p != 5;

  // Pool: seq 0 entries 0 (j = 0: no previous block), 1 and 2; seq 1 entry 1 (a missing
  // slot) and entry 3 (pos 15: none of its positions saved, so it is left unwritten). A token
  // that does not complete a block (pos 5) pools nothing.
  std::vector<int32_t> ppos = {3, 5, 7, 11, 7, 15}, pseq = {0, 0, 0, 0, 1, 1};
  be->compressor_pool(s, ent, su, sg, st, tnw, ttab, i32("ppos", {6}, ppos), i32("pseq", {6}, pseq), ratio, overlap,
                      eps);
  std::vector<float> got = get(ent);
  auto entry = [&](int b, int j) {
    return std::vector<float>(got.begin() + (ptrdiff_t(b) * n_max + j) * d,
                              got.begin() + (ptrdiff_t(b) * n_max + j + 1) * d);
  };
  const char* what = overlap ? "overlap pool" : "non-overlap pool";
  for (int j = 0; j < 3; ++j) {
    SCOPED_TRACE("seq 0 entry " + std::to_string(j));
    expect_close(entry(0, j), ref_pool(U[0], Gr[0], ape, present[0], j, ratio, overlap, d, norm_w, table, R, eps),
                 2e-5, what);
  }
  {
    SCOPED_TRACE("seq 1 entry 1 (position 5 missing)");
    expect_close(entry(1, 1), ref_pool(U[1], Gr[1], ape, present[1], 1, ratio, overlap, d, norm_w, table, R, eps),
                 2e-5, what);
  }
  for (float v : entry(1, 3)) EXPECT_EQ(v, 7.f) << what << ": an all-absent entry stays unwritten";
  for (float v : entry(0, 3)) EXPECT_EQ(v, 7.f) << what << ": no token completed seq 0 entry 3";
  for (float v : entry(1, 0)) EXPECT_EQ(v, 7.f) << what << ": no token completed seq 1 entry 0";
}

TEST_F(CpuOps, CompressorPoolOverlap) { pool_case(true); }
TEST_F(CpuOps, CompressorPoolNonOverlap) { pool_case(false); }

TEST_F(CpuOps, CompressorPoolSoftmaxByHand) {
  // Non-overlap, ratio 2, d = 2 (no RoPE rotation: every angle 0), unit norm weight: entry 0
  // pools positions 0 and 1. Channel 0: scores ln 1, ln 3 -> weights 1/4, 3/4 of values 4, 8
  // -> 7. Channel 1: equal scores -> mean of 1 and 3 -> 2. Then RMSNorm: (7, 2) / sqrt(26.5).
  Tensor su = zeros("su", DType::F32, {1, 2, 2}), sg = zeros("sg", DType::F32, {1, 2, 2}),
         st = zeros("st", DType::I32, {1, 2}), ent = zeros("e", DType::F32, {1, 1, 2});
  be->compressor_save(s, su, sg, st, f32("u", {2, 2}, {4, 1, 8, 3}),
                      f32("g", {2, 2}, {0.f, 0.5f, std::log(3.f), 0.5f}), f32("ape", {2, 2}, {0, 0, 0, 0}),
                      i32("pos", {2}, {0, 1}), i32("seq", {2}, {0, 0}), 2);
  be->compressor_pool(s, ent, su, sg, st, f32("w", {2}, {1, 1}), f32("tab", {1, 2}, {1, 0}), i32("p", {1}, {1}),
                      i32("q", {1}, {0}), 2, false, 0.f);
  std::vector<float> e = get(ent);
  EXPECT_NEAR(e[0], 7.0 / std::sqrt(26.5), 1e-6);
  EXPECT_NEAR(e[1], 2.0 / std::sqrt(26.5), 1e-6);
}

// Indexer scores in double, then the stable rule: higher score first, ties to lower index.
std::vector<int32_t> ref_topk(const std::vector<float>& q, const std::vector<float>& w, const std::vector<float>& keys,
                              int t, int b, int p, int Hi, int di, int n_max, int K, int ratio) {
  const int n_c = (p + 1) / ratio;
  std::vector<double> score(n_c);
  for (int j = 0; j < n_c; ++j) {
    double acc = 0;
    for (int h = 0; h < Hi; ++h) {
      double qk = 0;
      for (int c = 0; c < di; ++c)
        qk += double(q[(size_t(t) * Hi + h) * di + c]) * keys[(size_t(b) * n_max + j) * di + c];
      acc += double(w[size_t(t) * Hi + h]) / std::sqrt(double(di)) / std::sqrt(double(Hi)) * std::max(qk, 0.0);
    }
    score[j] = acc;
  }
  std::vector<int32_t> idx(n_c);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int c) { return score[a] > score[c]; });
  std::vector<int32_t> out(K, -1);
  for (int i = 0; i < std::min(K, n_c); ++i) out[i] = idx[i];
  return out;
}

TEST_F(CpuOps, IndexerTopkAgainstDoubleWithFewAndManyCandidates) {
  const int B = 2, Hi = 3, di = 8, n_max = 12, K = 4, ratio = 4;
  std::vector<float> keys = uniform(size_t(B) * n_max * di);
  // Exact ties: seq 0 entry 5 duplicates entry 2; entries 8 and 9 are zero (score exactly 0,
  // like any entry whose every head's logit is negative after the ReLU).
  for (int c = 0; c < di; ++c) {
    keys[5 * di + c] = keys[2 * di + c];
    keys[8 * di + c] = 0.f;
    keys[9 * di + c] = 0.f;
  }
  // Tokens: n_c = 0, 3 (< K), 10 and 12 (> K), on both sequences.
  std::vector<int32_t> pos = {2, 11, 39, 47, 47, 13}, seq = {0, 0, 0, 0, 1, 1};
  const int T = int(pos.size());
  std::vector<float> q = uniform(size_t(T) * Hi * di), w = uniform(size_t(T) * Hi, -1.f, 1.f);
  Tensor sel = zeros("sel", DType::I32, {T, K});
  be->indexer_topk(s, sel, f32("q", {T, Hi, di}, q), f32("w", {T, Hi}, w), f32("keys", {B, n_max, di}, keys),
                   i32("pos", {T}, pos), i32("seq", {T}, seq), ratio);
  std::vector<int32_t> got = geti(sel);
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> want = ref_topk(q, w, keys, t, seq[t], pos[t], Hi, di, n_max, K, ratio);
    std::vector<int32_t> row(got.begin() + t * K, got.begin() + (t + 1) * K);
    EXPECT_EQ(row, want) << "token " << t << " pos " << pos[t];
  }
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + K), (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(got[K + 3], -1);  // n_c = 3 < K: padded
}

TEST_F(CpuOps, IndexerTopkBreaksExactTiesToLowerIndex) {
  // One head, q = e0: score(j) = w * relu(key_j[0]) / sqrt(di). Entries 1, 4 and 6 tie at
  // the top, 0 and 3 tie below them; K = 4 must give 1, 4, 6, then 0 (not 3).
  const int di = 4, K = 4;
  std::vector<float> keys(8 * di, 0.f);
  const float k0[8] = {2, 5, -1, 2, 5, 1, 5, -3};
  for (int j = 0; j < 8; ++j) keys[j * di] = k0[j], keys[j * di + 1] = float(j);  // dim 1 is ignored (q[1] = 0)
  Tensor sel = zeros("sel", DType::I32, {1, K});
  be->indexer_topk(s, sel, f32("q", {1, 1, di}, {1, 0, 0, 0}), f32("w", {1, 1}, {1}), f32("keys", {1, 8, di}, keys),
                   i32("pos", {1}, {31}), i32("seq", {1}, {0}), 4);
  EXPECT_EQ(geti(sel), (std::vector<int32_t>{1, 4, 6, 0}));
}

TEST_F(CpuOps, SparseAttentionAllModesWithSinkAndWindowEviction) {
  const int B = 2, H = 3, Dh = 16, W = 4, cap = 6, n_max = 5, ratio = 2, K = 3;
  // Window keys by position: seq 0 positions 0..9 (the ring of 6 keeps 4..9), seq 1 0..2.
  const int n0 = 10, n1 = 3;
  std::vector<float> kw0 = uniform(size_t(n0) * Dh, -2, 2), kw1 = uniform(size_t(n1) * Dh, -2, 2);
  Tensor swa = zeros("swa", DType::F32, {B, cap, Dh}), tags = zeros("tags", DType::I32, {B, cap});
  be->fill(s, tags, -1.f);
  {
    std::vector<float> k(kw0);
    k.insert(k.end(), kw1.begin(), kw1.end());
    std::vector<int32_t> pos, seq;
    for (int p = 0; p < n0; ++p) pos.push_back(p), seq.push_back(0);
    for (int p = 0; p < n1; ++p) pos.push_back(p), seq.push_back(1);
    be->swa_insert(s, swa, tags, f32("k", {n0 + n1, Dh}, k), i32("p", {n0 + n1}, pos), i32("s", {n0 + n1}, seq));
  }
  std::vector<float> comp = uniform(size_t(B) * n_max * Dh, -2, 2);
  Tensor tcomp = f32("comp", {B, n_max, Dh}, comp);
  std::vector<float> sink = {0.3f, 5.f, -kInf};  // an ordinary, a dominant and a padded (-inf) sink
  // Queries: p 9 (window 6..9; 4 and 5 still in the ring but outside the window), p 7, p 3
  // (its whole window was overwritten in the ring), seq 1 p 2.
  std::vector<int32_t> pos = {9, 7, 3, 2}, seq = {0, 0, 0, 1};
  std::vector<int32_t> sel = {4, -1, 0, -1, -1, -1, 1, 0, -1, 0, -1, -1};
  const int T = 4;
  std::vector<float> q = uniform(size_t(T) * H * Dh, -2, 2);
  Tensor tq = f32("q", {T, H, Dh}, q), tsel = i32("sel", {T, K}, sel), tsink = f32("sink", {H}, sink),
         tpos = i32("pos", {T}, pos), tseq = i32("seq", {T}, seq);

  auto window_key = [&](int b, int p) -> const float* {
    // Present iff it is the latest position written to its ring slot.
    int n = b == 0 ? n0 : n1;
    if (p + cap < n) return nullptr;
    return b == 0 ? &kw0[size_t(p) * Dh] : &kw1[size_t(p) * Dh];
  };
  for (CompressedKeys mode : {CompressedKeys::None, CompressedKeys::All, CompressedKeys::Selected}) {
    std::vector<double> want(size_t(T) * H * Dh, 0.0);
    for (int t = 0; t < T; ++t) {
      std::vector<const float*> keys;
      for (int p = std::max(0, pos[t] - W + 1); p <= pos[t]; ++p)
        if (const float* k = window_key(seq[t], p)) keys.push_back(k);
      if (mode == CompressedKeys::All)
        for (int j = 0; j < (pos[t] + 1) / ratio; ++j) keys.push_back(&comp[(size_t(seq[t]) * n_max + j) * Dh]);
      if (mode == CompressedKeys::Selected)
        for (int i = 0; i < K; ++i)
          if (sel[t * K + i] >= 0) keys.push_back(&comp[(size_t(seq[t]) * n_max + sel[t * K + i]) * Dh]);
      for (int h = 0; h < H; ++h) {
        const float* qh = &q[(size_t(t) * H + h) * Dh];
        std::vector<double> sc;
        double M = sink[h];
        for (const float* k : keys) {
          double d = 0;
          for (int c = 0; c < Dh; ++c) d += double(qh[c]) * k[c];
          sc.push_back(d / std::sqrt(double(Dh)));
          M = std::max(M, sc.back());
        }
        double den = std::isinf(sink[h]) ? 0.0 : std::exp(sink[h] - M);
        for (double& v : sc) v = std::exp(v - M), den += v;
        for (size_t i = 0; i < keys.size(); ++i)
          for (int c = 0; c < Dh; ++c) want[(size_t(t) * H + h) * Dh + c] += sc[i] / den * keys[i][c];
      }
    }
    Tensor o = zeros("o", DType::F32, {T, H, Dh});
    be->sparse_attention(s, o, tq, swa, tags, tcomp, tsel, tsink, tpos, tseq, W, mode, ratio);
    const char* name = mode == CompressedKeys::None ? "None" : mode == CompressedKeys::All ? "All" : "Selected";
    SCOPED_TRACE(name);
    expect_close(get(o), want, 1e-5, "sparse_attention");
    if (mode == CompressedKeys::None) {
      // p 3 of seq 0 has no key left: every head outputs 0.
      std::vector<float> v = get(o);
      for (int c = 0; c < H * Dh; ++c) EXPECT_EQ(v[size_t(2) * H * Dh + c], 0.f);
    }
  }
}

// ------------------------------------------------------------------ MoE

double softplus_d(double z) { return z > 20 ? z : std::log1p(std::exp(z)); }

TEST_F(CpuOps, RouteBiasChangesSelectionButNotWeights) {
  const int E = 6, k = 2;
  const float scaling = 1.5f;
  // Unbiased top-2 is {5 (z = 100: above the softplus threshold softplus(z) = z, where
  // log1p(exp(z)) would overflow to inf), 0}; the bias moves the selection to {2, 3}, but the
  // weights come from the unbiased scores.
  std::vector<float> z = {3.f, 2.5f, 0.1f, 0.f, -1.f, 100.f};
  std::vector<double> sc(E);
  for (int e = 0; e < E; ++e) sc[e] = std::sqrt(softplus_d(z[e]));
  Tensor tz = f32("z", {1, E}, z), ids = zeros("ids", DType::I32, {1, k}), wt = zeros("w", DType::F32, {1, k});
  be->route(s, ids, wt, tz, f32("zero", {E}, std::vector<float>(E, 0.f)), Tensor{}, Tensor{}, scaling);
  EXPECT_EQ(geti(ids), (std::vector<int32_t>{5, 0}));
  expect_close(get(wt), {sc[5] / (sc[5] + sc[0]) * scaling, sc[0] / (sc[5] + sc[0]) * scaling}, 1e-6, "unbiased");

  be->route(s, ids, wt, tz, f32("bias", {E}, {0, 0, 10, 10, 0, 0}), Tensor{}, Tensor{}, scaling);
  EXPECT_EQ(geti(ids), (std::vector<int32_t>{2, 3}));
  expect_close(get(wt), {sc[2] / (sc[2] + sc[3]) * scaling, sc[3] / (sc[2] + sc[3]) * scaling}, 1e-6, "biased");
}

TEST_F(CpuOps, RouteTiesGoToLowerExpert) {
  Tensor ids = zeros("ids", DType::I32, {2, 2}), wt = zeros("w", DType::F32, {2, 2});
  be->route(s, ids, wt, f32("z", {2, 5}, {1, 2, 2, 0.5f, 2, 0, 0, 0, 0, 0}), Tensor{}, Tensor{}, Tensor{}, 1.f);
  EXPECT_EQ(geti(ids), (std::vector<int32_t>{1, 2, 0, 1}));
  for (float w : get(wt)) EXPECT_FLOAT_EQ(w, 0.5f);
}

TEST_F(CpuOps, RouteAgainstDoubleReferenceAroundTheSoftplusThreshold) {
  const int T = 9, E = 16, k = 4;
  const float scaling = 2.5f;
  std::vector<float> z = uniform(size_t(T) * E, -6.f, 30.f), bias = uniform(E, -0.5f, 0.5f);
  for (int e = 0; e < E; ++e) z[e] = 19.f + 0.25f * float(e);  // token 0 straddles z = 20
  Tensor ids = zeros("ids", DType::I32, {T, k}), wt = zeros("w", DType::F32, {T, k});
  be->route(s, ids, wt, f32("z", {T, E}, z), f32("bias", {E}, bias), Tensor{}, Tensor{}, scaling);
  std::vector<int32_t> gi = geti(ids);
  std::vector<double> want_w;
  for (int t = 0; t < T; ++t) {
    std::vector<double> sc(E), key(E);
    for (int e = 0; e < E; ++e) sc[e] = std::sqrt(softplus_d(z[size_t(t) * E + e])), key[e] = sc[e] + bias[e];
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key[a] > key[b]; });
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += sc[idx[i]];
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(gi[size_t(t) * k + i], idx[i]) << "token " << t << " slot " << i;
      want_w.push_back(sc[idx[i]] / sum * scaling);
    }
  }
  expect_close(get(wt), want_w, 2e-6, "route weights");
}

TEST_F(CpuOps, HashRoutingFollowsTid2eid) {
  const int V = 5, E = 6, k = 2, T = 4;
  std::vector<int32_t> tid2eid = {0, 1, 5, 2, 3, 4, 1, 0, 2, 5};
  std::vector<int32_t> tokens = {3, 0, 3, 4};
  std::vector<float> z = uniform(size_t(T) * E, -3.f, 3.f);
  Tensor ids = zeros("ids", DType::I32, {T, k}), wt = zeros("w", DType::F32, {T, k});
  // A bias is given but must not matter: hash layers take the ids from the table.
  be->route(s, ids, wt, f32("z", {T, E}, z), f32("bias", {E}, {9, 9, 9, 9, 9, 9}), i32("tid2eid", {V, k}, tid2eid),
            i32("tok", {T}, tokens), 1.5f);
  std::vector<int32_t> gi = geti(ids);
  std::vector<double> want_w;
  for (int t = 0; t < T; ++t) {
    double sc[2], sum = 0;
    for (int i = 0; i < k; ++i) {
      int e = tid2eid[size_t(tokens[t]) * k + i];
      EXPECT_EQ(gi[size_t(t) * k + i], e);
      sc[i] = std::sqrt(softplus_d(z[size_t(t) * E + e]));
      sum += sc[i];
    }
    for (int i = 0; i < k; ++i) want_w.push_back(sc[i] / sum * 1.5);
  }
  expect_close(get(wt), want_w, 1e-6, "hash weights");
  EXPECT_THROW(be->route(s, ids, wt, f32("z2", {T, E}, z), Tensor{}, i32("t2", {V, k}, tid2eid),
                         i32("tok2", {T}, {0, 1, 5, 2}), 1.f),
               sl::Error);  // token 5 outside the table
}

// round_fp8_blocks by hand: a block of amax 1 gets the scale 2^-8 (the smallest power of two >=
// 1 / 448), so 0.3 -> 76.8 -> e4m3 80 (the grid near 64..128 steps by 8) -> 0.3125, -0.01 ->
// -2.56 -> -2.5 (steps of 0.25 near 2) -> -0.009765625, 1 -> 256 -> 1. An all-zero block stays
// zero (its scale comes from the 1e-4 floor); the columns past `cols` (a cache entry's rope dims)
// become bf16, as the cache keeps them: 0.3 (0x3E99999A) -> 0x3E9A = 0.30078125, -0.01 -> 0xBC24 =
// -0.010009765625, 1e-9 -> 0x3089, 7 stays; rounding again changes nothing; bf16 gives the same
// values.
TEST_F(CpuOps, RoundFp8BlocksByHand) {
  std::vector<float> row(16 + 4, 0.f);  // two blocks of 8, then 4 "rope" values
  row[0] = 0.3f, row[1] = -0.01f, row[2] = 1.f;
  row[16] = 0.3f, row[17] = -0.01f, row[18] = 1e-9f, row[19] = 7.f;
  std::vector<float> want = row;
  want[0] = 0.3125f, want[1] = -0.009765625f, want[2] = 1.f;
  want[16] = 0.30078125f, want[17] = -0.010009765625f, want[18] = sl::bf16_to_float(0x3089);
  Tensor t = f32("t", {2, 20}, [&] {
    std::vector<float> v = row;
    v.insert(v.end(), row.begin(), row.end());
    return v;
  }());
  be->round_fp8_blocks(s, t, 16, 8, Tensor{}, Tensor{}, 1);
  std::vector<float> got = get(t);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 20; ++i) EXPECT_EQ(got[size_t(r * 20 + i)], want[size_t(i)]) << "row " << r << " col " << i;
  be->round_fp8_blocks(s, t, 16, 8, Tensor{}, Tensor{}, 1);
  EXPECT_EQ(get(t), got) << "rounding twice changed values";
  // Random values: every rounded value is the e4m3 code of its block's scale, and bf16 agrees.
  const std::vector<float> v = uniform(4 * 128, -3.f, 3.f);
  Tensor a = f32("a", {4, 128}, v);
  Tensor b = be->alloc("b", DType::BF16, {4, 128}, AllocKind::Activation);
  std::vector<uint16_t> vb(v.size());
  for (size_t i = 0; i < v.size(); ++i) vb[i] = sl::float_to_bf16(v[i]);
  be->upload(s, b, vb.data(), vb.size() * 2);
  Tensor af = f32("af", {4, 128}, [&] {
    std::vector<float> x(v.size());
    for (size_t i = 0; i < v.size(); ++i) x[i] = sl::bf16_to_float(vb[i]);
    return x;
  }());
  be->round_fp8_blocks(s, af, 128, 64, Tensor{}, Tensor{}, 1);
  be->round_fp8_blocks(s, b, 128, 64, Tensor{}, Tensor{}, 1);
  const std::vector<float> ra = get(af);
  std::vector<uint16_t> rb(vb.size());
  be->download(rb.data(), b, rb.size() * 2);
  for (size_t i = 0; i < ra.size(); ++i) {
    ASSERT_EQ(sl::bf16_to_float(rb[i]), ra[i]) << i << ": the rounded value is not exact in bf16";
    float amax = 0.f;
    const size_t b0 = i / 64 * 64;
    for (size_t j = b0; j < b0 + 64; ++j) amax = std::max(amax, std::fabs(sl::bf16_to_float(vb[j])));
    const float sc = sl::lowp::fp8_group_scale(std::max(amax, 1e-4f));
    EXPECT_EQ(ra[i], sl::lowp::e4m3_to_float(sl::lowp::float_to_e4m3(sl::bf16_to_float(vb[i]) / sc)) * sc) << i;
  }
  EXPECT_THROW(be->round_fp8_blocks(s, a, 100, 64, Tensor{}, Tensor{}, 1), sl::Error);  // 100 is not whole blocks of 64
  EXPECT_THROW(be->round_fp8_blocks(s, a, 256, 64, Tensor{}, Tensor{}, 1), sl::Error);  // wider than the rows

  // The 1e-4 floor: a block whose amax is 1e-6 takes the scale of amax 1e-4, 2^-22, so 1e-6 ->
  // 4.19 -> e4m3 4 -> 9.5367e-7 (without the floor: 2^-28, 268 -> 272 -> 1.0133e-6).
  Tensor tiny = f32("tiny", {1, 8}, {1e-6f, 0, 0, 0, 0, 0, 0, 0});
  be->round_fp8_blocks(s, tiny, 8, 8, Tensor{}, Tensor{}, 1);
  EXPECT_EQ(get(tiny)[0], std::ldexp(4.f, -22));

  // Entries mode: a cache [B = 2, n = 3, 16]; tokens at (seq, pos) (0, 3), (1, 5), (1, 7) with
  // ratio 4 complete entry 0 of sequence 0 and entry 1 of sequence 1; nothing else changes.
  std::vector<float> cache(2 * 3 * 16, 0.3f);
  Tensor c = f32("cache", {2, 3, 16}, cache);
  Tensor pos = be->alloc("pos", DType::I32, {3}, AllocKind::Activation), seq = be->alloc("seq", DType::I32, {3},
                                                                                         AllocKind::Activation);
  const std::vector<int32_t> pv{3, 5, 7}, sv{0, 1, 1};
  be->upload(s, pos, pv.data(), 12);
  be->upload(s, seq, sv.data(), 12);
  be->round_fp8_blocks(s, c, 16, 8, pos, seq, 4);
  const std::vector<float> cv = get(c);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < 16; ++i) {
      const bool rounded = r == 0 * 3 + 0 || r == 1 * 3 + 1;
      EXPECT_EQ(cv[size_t(r * 16 + i)], rounded ? 0.3125f : 0.3f) << "entry row " << r;  // amax 0.3: scale 2^-10
    }
}

// shard_routing by hand: experts [2, 4) of a shard; the rest become local expert 0 with weight 0.
TEST_F(CpuOps, ShardRoutingByHand) {
  Tensor ids = be->alloc("ids", DType::I32, {2, 3}, AllocKind::Activation);
  const std::vector<int32_t> id{0, 2, 3, 5, 3, 1};
  be->upload(s, ids, id.data(), id.size() * 4);
  Tensor w = f32("w", {2, 3}, {0.5f, 0.25f, 0.125f, 1.f, 2.f, 4.f});
  Tensor io = zeros("io", DType::I32, {2, 3}), wo = zeros("wo", DType::F32, {2, 3});
  be->shard_routing(s, io, wo, ids, w, 2, 2);
  EXPECT_EQ(geti(io), (std::vector<int32_t>{0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(get(wo), (std::vector<float>{0.f, 0.25f, 0.125f, 0.f, 2.f, 0.f}));
  EXPECT_THROW(be->shard_routing(s, io, wo, ids, w, -1, 2), sl::Error);
  EXPECT_THROW(be->shard_routing(s, io, wo, ids, w, 0, 0), sl::Error);
}

TEST_F(CpuOps, RouteZeroScoresDivideByOne) {
  // softplus(-200) underflows to 0 in fp32: every score is 0 and the guard keeps weights 0.
  Tensor ids = zeros("ids", DType::I32, {1, 2}), wt = zeros("w", DType::F32, {1, 2});
  be->route(s, ids, wt, f32("z", {1, 3}, {-200, -200, -200}), Tensor{}, Tensor{}, Tensor{}, 1.5f);
  EXPECT_EQ(get(wt), (std::vector<float>{0.f, 0.f}));
  EXPECT_EQ(geti(ids), (std::vector<int32_t>{0, 1}));
}

// Random MXFP4 experts w1 [E, F, D], w2 [E, D, F], w3 [E, F, D] (values in +-0.3, quantized by
// core/fp8.h): their packed codes and scales on the backend, and the dequantized values.
struct Mxfp4Experts {
  std::vector<Tensor> packed, scales;
  std::vector<std::vector<float>> deq;
};
Mxfp4Experts mxfp4_experts(sl::Backend& be, sl::Stream s, std::mt19937& rng, int E, int D, int F) {
  Mxfp4Experts m;
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  for (auto [rows, cols] : {std::pair{F, D}, std::pair{D, F}, std::pair{F, D}}) {  // w1, w2, w3
    std::vector<float> w(size_t(E) * rows * cols);
    for (float& x : w) x = dist(rng);
    const sl::lowp::Mxfp4 q = sl::lowp::quantize_mxfp4(w.data(), int64_t(E) * rows, cols);
    std::vector<float> back(w.size());
    sl::lowp::dequantize_mxfp4(q, back.data());
    Tensor p = be.alloc("w", DType::U8, {E, rows, cols / 2}, AllocKind::Weight);
    Tensor sc = be.alloc("w_scale", DType::U8, {E, rows, cols / 32}, AllocKind::Weight);
    be.upload(s, p, q.packed.data(), q.packed.size());
    be.upload(s, sc, q.scales.data(), q.scales.size());
    m.packed.push_back(p), m.scales.push_back(sc), m.deq.push_back(std::move(back));
  }
  return m;
}

// The MXFP4 experts compute exactly what moe_experts computes on the dequantized weights
// (core/fp8.h, whose packing and scales are checked by hand in test_fp8.cpp).
TEST_F(CpuOps, MoeExpertsMxfp4IsMoeExpertsOnTheDequantizedWeights) {
  const int T = 5, k = 2, E = 3, D = 64, F = 96;
  std::vector<float> x = uniform(size_t(T) * D, -2.f, 2.f), wts = uniform(size_t(T) * k, 0.1f, 1.f);
  std::vector<int32_t> ids = {1, 0, 2, 1, 1, 2, 0, 1, 1, 2};
  Tensor tx = f32("x", {T, D}, x), tid = i32("ids", {T, k}, ids), tw = f32("wts", {T, k}, wts);
  const Mxfp4Experts m = mxfp4_experts(*be, s, rng, E, D, F);
  const std::vector<Tensor>&packed = m.packed, &scales = m.scales;
  const std::vector<Tensor> deq = {f32("w1_deq", {E, F, D}, m.deq[0]), f32("w2_deq", {E, D, F}, m.deq[1]),
                                   f32("w3_deq", {E, F, D}, m.deq[2])};
  Tensor ws = be->alloc("ws", DType::U8, {int64_t(be->moe_workspace_bytes(T, k, D, F, E))}, AllocKind::Workspace);
  Tensor got = zeros("got", DType::F32, {T, D}), want = zeros("want", DType::F32, {T, D});
  be->moe_experts_mxfp4(s, got, tx, tid, tw, packed[0], scales[0], packed[1], scales[1], packed[2], scales[2], 10.f,
                        false, ws);
  be->moe_experts(s, want, tx, tid, tw, deq[0], deq[1], deq[2], 10.f, ws);
  EXPECT_EQ(get(got), get(want));
  // A scale tensor of the wrong shape is refused, naming it.
  try {
    be->moe_experts_mxfp4(s, got, tx, tid, tw, packed[0], scales[1], packed[1], scales[1], packed[2], scales[2], 10.f,
                          false, ws);
    ADD_FAILURE() << "w1_scale of w2's shape was accepted";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_experts_mxfp4: w1_scale"), std::string::npos) << e.what();
  }
}

// W4A8 (fp8_act): per token and slot, x rounded to FP8 per 128-value group, the dequantized
// experts in double, the SwiGLU output rounded the same way before w2 (from bf16: w1 x, w3 x and
// h rounded to bf16 first, as in DeepSeek's reference inference). The rounding here goes
// through lowp::quantize_fp8_blocks (codes and e8m0 scales) and back, not round_fp8_groups. A
// rounding of h may fall on the other side of a tie in double (one code apart), hence a
// tolerance; dropping either rounding moves the result by far more (checked below).
TEST_F(CpuOps, MoeExpertsMxfp4Fp8ActRoundsBothInputs) {
  const int T = 4, k = 2, E = 3, D = 256, F = 128;
  const float limit = 10.f;
  std::vector<float> x = uniform(size_t(T) * D, -2.f, 2.f), wts = uniform(size_t(T) * k, 0.1f, 1.f);
  const std::vector<int32_t> ids = {1, 0, 2, 1, 1, 2, 0, 2};
  Tensor tx = f32("x", {T, D}, x), tid = i32("ids", {T, k}, ids), tw = f32("wts", {T, k}, wts);
  const Mxfp4Experts m = mxfp4_experts(*be, s, rng, E, D, F);
  const std::vector<Tensor>&packed = m.packed, &scales = m.scales;
  const std::vector<std::vector<float>>& deq = m.deq;
  auto round_row = [](std::vector<double>& v) {  // per 128 values, through e4m3 codes and e8m0 scales
    const std::vector<float> f(v.begin(), v.end());
    const sl::lowp::Fp8Blocks q = sl::lowp::quantize_fp8_blocks(f.data(), 1, int64_t(f.size()), 1, 128);
    std::vector<float> back(f.size());
    sl::lowp::dequantize_fp8_blocks(q, back.data());
    v.assign(back.begin(), back.end());
  };
  std::vector<double> want(size_t(T) * D, 0.0), plain(size_t(T) * D, 0.0);  // plain: no rounding
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < k; ++i)
      for (const bool rounded : {true, false}) {
        const int e = ids[size_t(t) * k + i];
        std::vector<double> xr(x.begin() + t * D, x.begin() + (t + 1) * D), h(F);
        if (rounded) round_row(xr);
        for (int f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int d = 0; d < D; ++d) {
            g += double(deq[0][(size_t(e) * F + f) * D + d]) * xr[size_t(d)];
            u += double(deq[2][(size_t(e) * F + f) * D + d]) * xr[size_t(d)];
          }
          if (rounded) g = sl::round_bf16(float(g)), u = sl::round_bf16(float(u));
          g = std::min(g, double(limit));
          u = std::min(std::max(u, -double(limit)), double(limit));
          h[size_t(f)] = g / (1 + std::exp(-g)) * u;
          if (rounded) h[size_t(f)] = sl::round_bf16(float(h[size_t(f)]));
        }
        if (rounded) round_row(h);
        for (int d = 0; d < D; ++d) {
          double y = 0;
          for (int f = 0; f < F; ++f) y += double(deq[1][(size_t(e) * D + d) * F + f]) * h[size_t(f)];
          (rounded ? want : plain)[size_t(t) * D + d] += double(wts[size_t(t) * k + i]) * y;
        }
      }
  Tensor ws = be->alloc("ws", DType::U8, {int64_t(be->moe_workspace_bytes(T, k, D, F, E))}, AllocKind::Workspace);
  Tensor got = zeros("got", DType::F32, {T, D});
  be->moe_experts_mxfp4(s, got, tx, tid, tw, packed[0], scales[0], packed[1], scales[1], packed[2], scales[2], limit,
                        true, ws);
  const std::vector<float> g = get(got);
  double amax = 0, err = 0, moved = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    amax = std::max(amax, std::fabs(want[j]));
    err = std::max(err, std::fabs(double(g[j]) - want[j]));
    moved = std::max(moved, std::fabs(plain[j] - want[j]));
  }
  EXPECT_LT(err, 2e-3 * amax) << "W4A8 against the rounded double reference";
  EXPECT_GT(moved, 20 * err) << "the FP8 rounding must matter far more than the tolerance";
  // fp8_act needs whole 128-value groups: F = 96 is refused, naming the op.
  const int F2 = 96;
  Tensor p1 = be->alloc("w1", DType::U8, {E, F2, D / 2}, AllocKind::Weight), s1 = be->alloc(
      "w1_scale", DType::U8, {E, F2, D / 32}, AllocKind::Weight);
  Tensor p2 = be->alloc("w2", DType::U8, {E, D, F2 / 2}, AllocKind::Weight), s2 = be->alloc(
      "w2_scale", DType::U8, {E, D, F2 / 32}, AllocKind::Weight);
  Tensor ws2 = be->alloc("ws2", DType::U8, {int64_t(be->moe_workspace_bytes(T, k, D, F2, E))}, AllocKind::Workspace);
  try {
    be->moe_experts_mxfp4(s, got, tx, tid, tw, p1, s1, p2, s2, p1, s1, limit, true, ws2);
    ADD_FAILURE() << "F = 96 with fp8_act was accepted";
  } catch (const sl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 128 with FP8 activations"), std::string::npos) << e.what();
  }
}

TEST_F(CpuOps, MoeExpertsMatchPerTokenDoubleReference) {
  const int T = 7, k = 2, E = 4, D = 16, F = 12;
  for (auto [limit, xscale] : {std::pair{10.f, 10.f}, std::pair{0.5f, 3.f}}) {
    std::vector<float> x = uniform(size_t(T) * D, -xscale, xscale), w1 = uniform(size_t(E) * F * D, -0.5f, 0.5f),
                       w3 = uniform(size_t(E) * F * D, -0.5f, 0.5f), w2 = uniform(size_t(E) * D * F, -0.5f, 0.5f),
                       wts = uniform(size_t(T) * k, 0.1f, 1.f);
    // Expert 3 gets no token; expert 1 gets most.
    std::vector<int32_t> ids = {1, 0, 2, 1, 1, 2, 0, 1, 1, 2, 2, 0, 1, 0};
    std::vector<double> want(size_t(T) * D, 0.0);
    int clamped_g = 0, clamped_u = 0;
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < k; ++i) {
        int e = ids[size_t(t) * k + i];
        std::vector<double> h(F);
        for (int f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int d = 0; d < D; ++d) {
            g += double(w1[(size_t(e) * F + f) * D + d]) * x[size_t(t) * D + d];
            u += double(w3[(size_t(e) * F + f) * D + d]) * x[size_t(t) * D + d];
          }
          clamped_g += g > limit;
          clamped_u += std::fabs(u) > limit;
          g = std::min(g, double(limit));
          u = std::min(std::max(u, -double(limit)), double(limit));
          h[f] = g / (1 + std::exp(-g)) * u;
        }
        for (int d = 0; d < D; ++d) {
          double y = 0;
          for (int f = 0; f < F; ++f) y += double(w2[(size_t(e) * D + d) * F + f]) * h[f];
          want[size_t(t) * D + d] += double(wts[size_t(t) * k + i]) * y;
        }
      }
    EXPECT_GT(clamped_g, 0) << "limit " << limit << ": the test must exercise the gate clamp";
    EXPECT_GT(clamped_u, 0) << "limit " << limit << ": the test must exercise the up clamp";
    Tensor ws = be->alloc("ws", DType::U8, {int64_t(be->moe_workspace_bytes(T, k, D, F, E))}, AllocKind::Workspace);
    Tensor out = zeros("out", DType::F32, {T, D});
    be->fill(s, out, 123.f);  // out is overwritten, not accumulated into
    Tensor tx = f32("x", {T, D}, x), tid = i32("ids", {T, k}, ids), tw = f32("wts", {T, k}, wts),
           t1 = f32("w1", {E, F, D}, w1), t2 = f32("w2", {E, D, F}, w2), t3 = f32("w3", {E, F, D}, w3);
    be->moe_experts(s, out, tx, tid, tw, t1, t2, t3, limit, ws);
    SCOPED_TRACE("limit " + std::to_string(limit));
    expect_close(get(out), want, 1e-5, "moe_experts");
    Tensor small = be->alloc("small", DType::U8, {int64_t(be->moe_workspace_bytes(T, k, D, F, E)) - 1},
                             AllocKind::Workspace);
    EXPECT_THROW(be->moe_experts(s, out, tx, tid, tw, t1, t2, t3, limit, small), sl::Error);
  }
}

// ------------------------------------------------------------------ argument validation

TEST_F(CpuOps, ShapeMismatchThrowsWithOpAndShapes) {
  Tensor a = zeros("a", DType::F32, {3, 5}), w = zeros("w", DType::F32, {4, 6}), o = zeros("o", DType::F32, {3, 4});
  try {
    be->gemm(s, o, a, w);
    FAIL() << "gemm with K 5 vs 6 did not throw";
  } catch (const sl::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("gemm"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 6]"), std::string::npos) << m;
  }
  Tensor w5 = zeros("w5", DType::F32, {4, 5});
  EXPECT_THROW(be->gemm(s, zeros("o2", DType::F32, {3, 3}), a, w5), sl::Error);          // out N
  EXPECT_THROW(be->gemm(s, o, zeros("ai", DType::I32, {3, 5}), w5), sl::Error);          // dtype
  EXPECT_THROW(be->gemm_grouped(s, o, a, w5, 3), sl::Error);                             // 4 rows / 3 groups
  EXPECT_THROW(be->rmsnorm(s, a, a, zeros("rw", DType::F32, {4}), 1e-6f), sl::Error);    // weight dim
  EXPECT_THROW(be->add(s, a, a, o), sl::Error);                                          // sizes
  EXPECT_THROW(be->rope(s, zeros("x", DType::F32, {2, 1, 6}), zeros("p", DType::I32, {2}),
                        zeros("tb", DType::F32, {4, 8}), false),
               sl::Error);  // R 8 > dim 6
  EXPECT_THROW(be->rope(s, zeros("x2", DType::F32, {1, 1, 8}), i32("p2", {1}, {4}), zeros("tb2", DType::F32, {4, 8}),
                        false),
               sl::Error);  // position outside the table
  try {
    be->hc_pre(s, zeros("y", DType::F32, {2, 8}), zeros("po", DType::F32, {2, 4}), zeros("c", DType::F32, {2, 4, 4}),
               zeros("X", DType::F32, {2, 4, 8}), zeros("fn", DType::F32, {24, 33}), zeros("sc", DType::F32, {3}),
               zeros("b", DType::F32, {24}), 20, 1e-6f, 1e-6f);
    FAIL() << "hc_pre with a bad fn did not throw";
  } catch (const sl::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("hc_pre"), std::string::npos) << m;
    EXPECT_NE(m.find("[24, 33]"), std::string::npos) << m;
  }
  EXPECT_THROW(be->swa_insert(s, zeros("sw", DType::F32, {1, 4, 8}), zeros("tg", DType::I32, {1, 4}),
                              zeros("k", DType::F32, {1, 7}), i32("p3", {1}, {0}), i32("s3", {1}, {0})),
               sl::Error);  // k width
  EXPECT_THROW(be->swa_insert(s, zeros("sw2", DType::F32, {1, 4, 8}), zeros("tg2", DType::I32, {1, 4}),
                              zeros("k2", DType::F32, {1, 8}), i32("p4", {1}, {0}), i32("s4", {1}, {1})),
               sl::Error);  // seq outside B
  // A state ring smaller than the 2 * ratio positions an overlapping block reads.
  EXPECT_THROW(be->compressor_pool(s, zeros("en", DType::F32, {1, 2, 4}), zeros("su", DType::F32, {1, 7, 8}),
                                   zeros("sg", DType::F32, {1, 7, 8}), zeros("st", DType::I32, {1, 7}),
                                   zeros("nw", DType::F32, {4}), zeros("tb3", DType::F32, {8, 4}), i32("p5", {1}, {3}),
                                   i32("s5", {1}, {0}), 4, true, 1e-6f),
               sl::Error);
  EXPECT_THROW(be->indexer_topk(s, zeros("sel", DType::I32, {1, 2}), zeros("q", DType::F32, {1, 2, 4}),
                                zeros("iw", DType::F32, {1, 2}), zeros("ik", DType::F32, {1, 3, 4}),
                                i32("p6", {1}, {15}), i32("s6", {1}, {0}), 4),
               sl::Error);  // n_c = 4 entries but keys hold 3
  EXPECT_THROW(be->upload(s, a, std::vector<float>(16).data(), 64), sl::Error);  // 64 bytes into 60
}

// ------------------------------------------------------------------ scale

TEST_F(CpuOps, TinyScaleGemmTiming) {
  // The dense GEMMs of one `tiny` forward (D 256, vocab 1024, 6 layers + MTP, H 4 x Dh 128,
  // Lq 128, G 2 x Lo 64, F 128, 8 experts, k 2) over 50 tokens, plus the mHC mixes. Printed,
  // not asserted: the machine is shared. It should be a few tens of milliseconds.
  const int T = 50, D = 256;
  struct G {
    int N, K, reps;
  };
  std::vector<G> shapes = {
      {128, 256, 7},  {128, 256, 7},  {512, 128, 7},  {256, 128, 7},   // wq_a, wkv, wq_b, wo_b
      {512, 256, 2},  {512, 256, 2},  {256, 256, 2},  {256, 256, 2},   // c4a compressor, c128a compressor
      {512, 128, 2},  {4, 256, 2},    {256, 256, 4},                   // indexer wq_b, weights_proj, compressor
      {8, 256, 7},    {128, 256, 14}, {256, 128, 7},                   // router, shared expert
      {24, 1024, 14}, {1024, 256, 2},                                  // hc_pre mixes, LM head (target + MTP)
      {384, 256, 21},                                                  // routed experts: T*k rows, 3 matrices
  };
  std::vector<Tensor> a, w, o;
  for (const G& g : shapes) {
    a.push_back(f32("a", {T, g.K}, uniform(size_t(T) * g.K)));
    w.push_back(f32("w", {g.N, g.K}, uniform(size_t(g.N) * g.K)));
    o.push_back(zeros("o", DType::F32, {T, g.N}));
  }
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < shapes.size(); ++i)
    for (int r = 0; r < shapes[i].reps; ++r) be->gemm(s, o[i], a[i], w[i]);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing   ] tiny-scale forward GEMMs over %d tokens (D %d): %.1f ms\n", T, D, ms);
  RecordProperty("tiny_gemm_ms", std::to_string(ms));
  EXPECT_LT(ms, 5000.0);  // only catches a pathological regression
}

}  // namespace
