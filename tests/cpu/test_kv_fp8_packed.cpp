// FP8 KV caches packed as vLLM stores them (model/kv_fp8_entry.h): the entry layout byte by byte
// against hand-computed values, the block scale against core/fp8.h's rule, a packed entry read back
// against the emulated rounding (round_fp8_blocks), and whole models with packed caches against the
// same models with emulated ones (a CPU backend that declines packed caches): the same values, so
// the same logits, drafts and acceptances, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "model/cpu/cpu_backend.h"
#include "model/deepseek_v4.h"
#include "model/forwarding_backend.h"
#include "model/kv_cache.h"
#include "model/kv_fp8_entry.h"
#include "model/op_checks.h"

namespace sl {
namespace {

// ---------------------------------------------------------------- the layout

TEST(KvFp8Layout, EntryWidthGivesTheNopeWidth) {
  EXPECT_EQ(kvfp8::kv_entry_bytes(448, 64), 584);  // flash: 448 + 128 + 7 + 1 pad
  EXPECT_EQ(kvfp8::kv_entry_nope(512, 584), 448);
  EXPECT_EQ(kvfp8::kv_entry_bytes(64, 64), 200);  // tiny: 64 + 128 + 1, padded to 200
  EXPECT_EQ(kvfp8::kv_entry_nope(128, 200), 64);
  EXPECT_EQ(kvfp8::kv_entry_nope(128, 199), -1);
  EXPECT_EQ(kvfp8::kv_entry_nope(128, 132), -1);  // an indexer key's width is not a KV entry's
  EXPECT_EQ(kvfp8::kv_entry_nope(128, 128 * 4), -1);
  EXPECT_EQ(kvfp8::indexer_key_bytes(128), 132);
}

TEST(KvFp8Layout, BlockScaleIsFp8GroupScaleOfAtLeast1em4) {
  std::vector<float> amax = {0.f, 1e-7f, 1e-4f, 1.5e-4f, 1.f, 3.5f, 447.9f, 448.f, 448.5f, 896.f, 1e30f,
                             std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 2000; ++i) amax.push_back(std::ldexp(1.f + 0.5f * uniform_pm1(3, 1, uint64_t(i)), i % 60 - 30));
  for (int e = -20; e <= 20; ++e) amax.push_back(std::ldexp(448.f, e));  // exactly a power of two times 448
  for (float a : amax) {
    const float want = lowp::fp8_group_scale(std::max(a, 1e-4f));
    EXPECT_EQ(kvfp8::scale_from_code(kvfp8::block_scale_code(a)), want) << "amax " << a;
  }
  // By hand: amax 7.875 -> 7.875 / 448 = 0.0176 -> 2^-5 (code 122); 448 -> 2^0 (127); 0 -> 1e-4 / 448 -> 2^-22.
  EXPECT_EQ(kvfp8::block_scale_code(7.875f), 122);
  EXPECT_EQ(kvfp8::block_scale_code(448.f), 127);
  EXPECT_EQ(kvfp8::block_scale_code(0.f), 127 - 22);
}

TEST(KvFp8Layout, E4m3DecodeMatchesCore) {
  for (int q = 0; q < 256; ++q) {
    if ((q & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(kvfp8::e4m3_value(uint8_t(q)), lowp::e4m3_to_float(uint8_t(q))) << "code " << q;
  }
}

// ---------------------------------------------------------------- the ops

struct Packed {
  std::unique_ptr<Backend> be = make_cpu_backend();
  Tensor i32(const std::vector<int32_t>& v) {
    Tensor t = be->alloc("i", DType::I32, {int64_t(v.size())}, AllocKind::Activation);
    std::copy(v.begin(), v.end(), t.ptr<int32_t>());
    return t;
  }
};

// One key of 72 values (64 nope, 8 rope) into slot 5 % 3 = 2 of sequence 1: entries of 64 + 16 + 1
// = 81 bytes, padded to 88.
TEST(PackedKvOps, SwaInsertWritesVllmBytesByHand) {
  Packed p;
  const int64_t Dh = 72, bytes = 88;
  ASSERT_EQ(kvfp8::kv_entry_bytes(64, 8), bytes);
  Tensor cache = p.be->alloc("swa", DType::U8, {2, 3, bytes}, AllocKind::Cache);
  Tensor tags = p.be->alloc("tags", DType::I32, {2, 3}, AllocKind::Cache);
  p.be->fill(Stream{}, tags, -1.f);
  Tensor k = p.be->alloc("k", DType::F32, {1, Dh}, AllocKind::Activation);
  for (int i = 0; i < 64; ++i) k.ptr<float>()[i] = float(i) / 8.f;  // amax 7.875: scale 2^-5
  for (int i = 0; i < 8; ++i) k.ptr<float>()[64 + i] = -0.25f * float(i + 1);
  p.be->swa_insert(Stream{}, cache, tags, k, p.i32({5}), p.i32({1}));

  EXPECT_EQ(tags.ptr<int32_t>()[1 * 3 + 2], 5);
  const uint8_t* e = cache.ptr<uint8_t>() + (1 * 3 + 2) * bytes;
  // Codes of x / 2^-5 = 4i: 0 -> 0x00, 32 = 2^5 -> exponent 5 + 7 = 12 -> 0x60, 36 = 1.125 * 2^5 ->
  // 0x61, 252 rounds to 256 = 2^8 -> 0x78.
  EXPECT_EQ(e[0], 0x00);
  EXPECT_EQ(e[8], 0x60);
  EXPECT_EQ(e[9], 0x61);
  EXPECT_EQ(e[63], 0x78);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(e[i], lowp::float_to_e4m3(4.f * float(i))) << "code " << i;
  // The rope values in bf16, little-endian: -0.25 = 0xBE80, -0.5 = 0xBF00.
  EXPECT_EQ(e[64], 0x80);
  EXPECT_EQ(e[65], 0xBE);
  EXPECT_EQ(e[66], 0x00);
  EXPECT_EQ(e[67], 0xBF);
  EXPECT_EQ(e[80], 122);  // the scale byte after the rope values
  for (int64_t i = 81; i < bytes; ++i) EXPECT_EQ(e[i], 0) << "pad byte " << i;
  // Nothing else was written.
  for (int64_t i = 0; i < 2 * 3 * bytes; ++i) {
    if (i < (1 * 3 + 2) * bytes || i >= (1 * 3 + 3) * bytes) {
      ASSERT_EQ(cache.ptr<uint8_t>()[i], 0) << "byte " << i;
    }
  }
}

// Random keys whose blocks span 2^-12 .. 2^12, read back from packed entries, are exactly what the
// emulated cache holds after round_fp8_blocks (the rope values rounded to bf16).
TEST(PackedKvOps, ReadBackEqualsTheEmulatedRounding) {
  Packed p;
  const int64_t Dh = 512, nope = 448, T = 16, bytes = kvfp8::kv_entry_bytes(nope, Dh - nope);
  Tensor cache = p.be->alloc("swa", DType::U8, {1, T, bytes}, AllocKind::Cache);
  Tensor tags = p.be->alloc("tags", DType::I32, {1, T}, AllocKind::Cache);
  Tensor k = p.be->alloc("k", DType::F32, {T, Dh}, AllocKind::Activation);
  Tensor emulated = p.be->alloc("e", DType::F32, {T, Dh}, AllocKind::Activation);
  for (int64_t i = 0; i < T * Dh; ++i) {
    const int64_t block = i / 64;
    k.ptr<float>()[i] = std::ldexp(uniform_pm1(9, 2, uint64_t(i)), int(block % 25) - 12);
  }
  k.ptr<float>()[3 * Dh + 70] = 0.f;  // a block with a zero
  for (int64_t i = 0; i < 64; ++i) k.ptr<float>()[5 * Dh + i] = 0.f;  // an all-zero block: scale 2^-22
  std::copy(k.ptr<float>(), k.ptr<float>() + T * Dh, emulated.ptr<float>());
  std::vector<int32_t> pos, seq(size_t(T), 0);
  for (int t = 0; t < T; ++t) pos.push_back(t);
  p.be->swa_insert(Stream{}, cache, tags, k, p.i32(pos), p.i32(seq));
  p.be->round_fp8_blocks(Stream{}, emulated, nope, 64, Tensor{}, Tensor{}, 1);
  int differ = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < Dh; ++i) {
      const float got = kvfp8::kv_value(cache.ptr<uint8_t>() + t * bytes, i, nope, Dh - nope);
      differ += got != emulated.ptr<float>()[t * Dh + i];
    }
  EXPECT_EQ(differ, 0);
  // The rounding acted (so the comparison can fail): most values moved.
  int moved = 0;
  for (int64_t i = 0; i < T * Dh; ++i) moved += emulated.ptr<float>()[i] != k.ptr<float>()[i];
  EXPECT_GT(moved, T * Dh / 2);
}

// cache_rollback clears the packed entries of blocks a rollback left incomplete, whole rows of
// bytes: new_len 5 with ratio 4 keeps entry 0 (positions 0..3), clears entries 1 and 2 (the extent
// 8 reaches position 12, entry 2's last is 11) and leaves entry 3 alone.
TEST(PackedKvOps, RollbackClearsWholePackedEntries) {
  Packed p;
  const int64_t bytes = 200;
  Tensor entries = p.be->alloc("entries", DType::U8, {1, 4, bytes}, AllocKind::Cache);
  Tensor tags = p.be->alloc("tags", DType::I32, {1, 8}, AllocKind::Cache);
  std::fill_n(entries.ptr<uint8_t>(), 4 * bytes, uint8_t(0xAB));
  for (int i = 0; i < 8; ++i) tags.ptr<int32_t>()[i] = i;
  p.be->cache_rollback(Stream{}, tags, entries, p.i32({5}), 4, 8);
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < bytes; ++i)
      ASSERT_EQ(entries.ptr<uint8_t>()[j * bytes + i], (j == 1 || j == 2) ? 0 : 0xAB) << "entry " << j << " byte " << i;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(tags.ptr<int32_t>()[i], i < 5 ? i : -1);
}

// A backend whose rules do not take packed caches refuses one with a
// message that says so, rather than reading bytes as bf16.
TEST(PackedKvOps, ABackendWithoutThemRefusesPackedCaches) {
  Packed p;
  using NoPacked = checks::Rules<checks::Presence::Data, checks::Floats::F32, checks::Floats::F32, false>;
  Tensor cache = p.be->alloc("swa", DType::U8, {1, 4, 200}, AllocKind::Cache);
  Tensor tags = p.be->alloc("tags", DType::I32, {1, 4}, AllocKind::Cache);
  Tensor k = p.be->alloc("k", DType::F32, {1, 128}, AllocKind::Activation);
  const Tensor pos = p.i32({0}), seq = p.i32({0});
  try {
    checks::validate_swa_insert<NoPacked>(cache, tags, k, pos, seq);
    ADD_FAILURE() << "a packed cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packed FP8 cache"), std::string::npos) << e.what();
  }
  // The CPU backend takes it, and refuses an entry width that is no packed layout.
  EXPECT_NO_THROW(p.be->swa_insert(Stream{}, cache, tags, k, pos, seq));
  Tensor odd = p.be->alloc("odd", DType::U8, {1, 4, 199}, AllocKind::Cache);
  EXPECT_THROW(p.be->swa_insert(Stream{}, odd, tags, k, pos, seq), Error);
}

// ---------------------------------------------------------------- whole models

// A CPU backend that declines packed caches: --kv-cache fp8 is emulated on it.
class EmulatedFp8Kv final : public ForwardingBackend {
 public:
  EmulatedFp8Kv() : ForwardingBackend(make_cpu_backend()) {}
  bool packed_kv_caches() const override { return false; }
};

std::vector<int32_t> prompt(int B, int T0, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < B * T0; ++i) t.push_back(int32_t(splitmix64(77 + uint64_t(i)) % uint64_t(vocab)));
  return t;
}

// tiny with one MTP layer of ratio 4 (a compressed cache with an indexer in every kind of layer).
ModelConfig tiny_fp8(int draft_steps) {
  ModelConfig c = load_config("tiny");
  c.num_nextn_predict_layers = 1;
  c.draft_steps = draft_steps;
  c.mtp_compress_ratio = 4;
  c.compress_ratios.back() = 4;
  c.batch = 2;
  validate(c);
  return c;
}

void expect_same_step(const StepOutput& a, const StepOutput& b, const char* what) {
  EXPECT_EQ(a.sampled, b.sampled) << what;
  EXPECT_EQ(a.drafts, b.drafts) << what;
  EXPECT_EQ(a.accepted, b.accepted) << what;
  ASSERT_EQ(a.last_logits.size(), b.last_logits.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < a.last_logits.size(); ++i) differ += a.last_logits[i] != b.last_logits[i];
  EXPECT_EQ(differ, 0u) << what << ": logits differ (of " << a.last_logits.size() << ")";
}

void expect_packed_equals_emulated(bool verify) {
  const ModelConfig c = tiny_fp8(verify ? 2 : 1);
  const int n = 45, steps = 6;  // positions 47 and 51 complete blocks of 4 (and 47 of 16)
  RunShape s;
  s.batch = c.batch;
  s.kv_fp8 = true;
  s.verify = verify;
  s.max_seq_tokens = n;
  s.max_positions = n + (steps + 2) * (1 + c.draft_steps);
  auto cpu = make_cpu_backend();
  EmulatedFp8Kv emu;
  DeepSeekV4 a(*cpu, c, StreamPolicy::parse("shared"), s), b(emu, c, StreamPolicy::parse("shared"), s);
  ASSERT_TRUE(a.kv_packed());
  ASSERT_FALSE(b.kv_packed());
  for (size_t l = 0; l < a.caches().size(); ++l) {
    const LayerCache& lc = a.caches()[l];
    EXPECT_EQ(lc.swa.dtype, DType::U8) << "layer " << l;
    EXPECT_EQ(lc.swa.dim(2), int64_t(kv_entry_bytes(c, DType::F32, true))) << "layer " << l;
    if (lc.type != LayerType::Sliding) {
      EXPECT_EQ(lc.comp.entries.dtype, DType::U8) << "layer " << l;
    }
    if (lc.type == LayerType::C4A) {
      EXPECT_EQ(lc.indexer.entries.dim(2), int64_t(indexer_key_bytes(c, DType::F32, true))) << "layer " << l;
    }
    EXPECT_EQ(b.caches()[l].swa.dtype, DType::F32) << "layer " << l;
  }
  a.init_random(c.seed);
  b.init_random(c.seed);
  const std::vector<int32_t> p = prompt(c.batch, n, c.vocab_size);
  expect_same_step(a.prefill(p, n), b.prefill(p, n), "prefill");
  for (int i = 0; i < steps; ++i) {
    const std::string what = "decode step " + std::to_string(i);
    expect_same_step(a.decode_step(), b.decode_step(), what.c_str());
    EXPECT_EQ(a.position(0), b.position(0));
    EXPECT_EQ(a.position(1), b.position(1));
  }
}

TEST(PackedKvModel, DecodeEqualsEmulated) { expect_packed_equals_emulated(false); }
// Verifying steps roll rejected positions back (cache_rollback clears packed entries).
TEST(PackedKvModel, VerifyingStepsEqualEmulated) { expect_packed_equals_emulated(true); }

}  // namespace
}  // namespace sl
