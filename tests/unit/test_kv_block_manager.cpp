// KvBlockManager: allocation, prefix sharing with reference counts, LRU eviction of cached
// blocks, and no leak after many random requests.
#include <gtest/gtest.h>

#include <random>

#include "serve/kv_block_manager.h"

using namespace llmrun;

namespace {
std::vector<int32_t> seq_tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7 + salt) % 50;
  return t;
}
}  // namespace

TEST(KvBlockManager, AllocatesWholeBlocksAndRefusesWhenShort) {
  KvBlockManager kv(4, 16, false);
  SeqBlocks a, b;
  EXPECT_TRUE(kv.ensure(a, 17));  // 2 blocks
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(kv.num_free(), 2);
  EXPECT_TRUE(kv.ensure(a, 32));  // still 2
  EXPECT_EQ(kv.num_free(), 2);
  EXPECT_FALSE(kv.ensure(b, 48));  // needs 3, has 2: nothing taken
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(kv.num_free(), 2);
  kv.release(a);
  EXPECT_EQ(kv.num_free(), 4);
  EXPECT_TRUE(kv.ensure(b, 64));
  EXPECT_EQ(kv.num_free(), 0);
}

TEST(KvBlockManager, SharesPublishedPrefixBlocksWithRefcounts) {
  KvBlockManager kv(8, 4, true);
  const auto toks = seq_tokens(10, 1);
  SeqBlocks a;
  EXPECT_EQ(kv.acquire_prefix(a, toks, 9), 0);
  ASSERT_TRUE(kv.ensure(a, 10));
  kv.publish(a, toks, 10);  // blocks 0 and 1 are full; block 2 (2 tokens) is not
  EXPECT_EQ(a.published, 2);
  EXPECT_EQ(kv.num_cached(), 2);

  SeqBlocks b;
  auto other = toks;
  other[9] = 49;  // same first two blocks, different tail
  EXPECT_EQ(kv.acquire_prefix(b, other, 9), 8);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  ASSERT_TRUE(kv.ensure(b, 10));
  EXPECT_NE(b.blocks[2], a.blocks[2]);
  EXPECT_EQ(kv.num_referenced(), 4);
  kv.release(a);
  EXPECT_EQ(kv.num_referenced(), 3);  // shared blocks still held by b
  kv.release(b);
  EXPECT_EQ(kv.num_referenced(), 0);
  EXPECT_EQ(kv.num_cached(), 2);  // kept for reuse

  // A different first block shares nothing; max_tokens caps what may be reused.
  SeqBlocks c;
  EXPECT_EQ(kv.acquire_prefix(c, seq_tokens(10, 2), 9), 0);
  SeqBlocks d;
  EXPECT_EQ(kv.acquire_prefix(d, toks, 7), 4);
  kv.release(d);
  EXPECT_EQ(kv.prefix_hits(), 8 + 4);
}

TEST(KvBlockManager, EvictsLeastRecentlyUsedCachedBlocks) {
  KvBlockManager kv(4, 2, true);
  const auto x = seq_tokens(4, 3), y = seq_tokens(4, 4);
  SeqBlocks a, b;
  ASSERT_TRUE(kv.ensure(a, 4));
  kv.publish(a, x, 4);
  kv.release(a);  // x's 2 blocks cached
  ASSERT_TRUE(kv.ensure(b, 4));
  kv.publish(b, y, 4);
  kv.release(b);  // y's 2 blocks cached, pool full of cached blocks
  EXPECT_EQ(kv.num_free(), 4);
  EXPECT_EQ(kv.num_cached(), 4);
  SeqBlocks c;
  ASSERT_TRUE(kv.ensure(c, 4));  // evicts x (older), y survives
  EXPECT_EQ(kv.num_cached(), 2);
  SeqBlocks hit_y, hit_x;
  EXPECT_EQ(kv.acquire_prefix(hit_y, y, 4), 4);
  EXPECT_EQ(kv.acquire_prefix(hit_x, x, 4), 0);
  kv.release(c);
  kv.release(hit_y);
  kv.release(hit_x);
  EXPECT_EQ(kv.num_free(), 4);
}

TEST(KvBlockManager, NoLeakAfterTenThousandRandomRequests) {
  for (bool prefix : {false, true}) {
    KvBlockManager kv(64, 4, prefix);
    std::mt19937 rng(prefix ? 2 : 1);
    std::vector<std::pair<SeqBlocks, std::vector<int32_t>>> live;
    for (int r = 0; r < 10000; ++r) {
      if (!live.empty() && (rng() % 3 == 0 || live.size() > 12)) {
        const size_t i = rng() % live.size();
        kv.release(live[i].first);
        live.erase(live.begin() + long(i));
        continue;
      }
      auto toks = seq_tokens(1 + int(rng() % 40), int(rng() % 4));
      SeqBlocks s;
      const int cached = kv.acquire_prefix(s, toks, int(toks.size()) - 1);
      ASSERT_EQ(cached % 4, 0);
      if (!kv.ensure(s, int(toks.size()))) {
        kv.release(s);
        continue;
      }
      kv.publish(s, toks, int(toks.size()));
      ASSERT_LE(kv.num_referenced(), 64);
      live.emplace_back(std::move(s), std::move(toks));
    }
    for (auto& [s, t] : live) kv.release(s);
    EXPECT_EQ(kv.num_free(), 64);
    EXPECT_EQ(kv.num_referenced(), 0);
    if (prefix) {
      EXPECT_GT(kv.prefix_hits(), 0);
    }
  }
}
