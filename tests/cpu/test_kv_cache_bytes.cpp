// What one cache entry takes in a real cache (model/kv_cache.h), the decode floor's KV bytes:
// vLLM's FP8 layout for flash as its source gives it byte by byte (448 e4m3 nope values, 64 bf16
// rope values, 7 ue8m0 scales, 1 pad byte = 584), the indexer's e4m3 key with its fp32 scale,
// and bf16 entries as they are.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/kv_cache.h"

namespace sl {
namespace {

TEST(KvCacheBytes, FlashEntriesAsVllmLaysThemOut) {
  const ModelConfig c = load_config("flash");
  ASSERT_EQ(c.head_dim, 512);
  ASSERT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(kv_entry_bytes(c, DType::BF16, true), 448u + 2 * 64 + 7 + 1);
  EXPECT_EQ(kv_entry_bytes(c, DType::BF16, false), 512u * 2);
  EXPECT_EQ(indexer_key_bytes(c, DType::BF16, true), size_t(c.index_head_dim) + 4);
  EXPECT_EQ(indexer_key_bytes(c, DType::BF16, false), size_t(c.index_head_dim) * 2);
}

// tiny: 64 nope values (one scale byte) + 64 rope values in bf16 = 193 bytes, padded to 200.
TEST(KvCacheBytes, OtherShapesPadToEightBytes) {
  const ModelConfig c = load_config("tiny");
  ASSERT_EQ(c.head_dim - c.qk_rope_head_dim, 64);
  EXPECT_EQ(kv_entry_bytes(c, DType::BF16, true), 200u);
  EXPECT_EQ(kv_entry_bytes(c, DType::F32, false), size_t(c.head_dim) * 4);
}

}  // namespace
}  // namespace sl
