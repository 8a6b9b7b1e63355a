// Host-side launch geometry of the CUDA attention kernels (kernels/attention_geometry.cuh):
// tile coverage, causal tile ranges, shared-memory budgets, bank-conflict-free strides and
// the paged-batch row bookkeeping. Plain C++: it builds and runs with or without CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "../../kernels/attention_geometry.cuh"

namespace geo = llmrun::kernels::attention_geometry;

TEST(AttentionGeometry, DimsPerLaneBucketsCoverEveryHeadDim) {
  EXPECT_EQ(geo::dims_per_lane(16), 1);
  EXPECT_EQ(geo::dims_per_lane(32), 1);
  EXPECT_EQ(geo::dims_per_lane(33), 2);
  EXPECT_EQ(geo::dims_per_lane(64), 2);
  EXPECT_EQ(geo::dims_per_lane(80), 4);
  EXPECT_EQ(geo::dims_per_lane(128), 4);
  EXPECT_EQ(geo::dims_per_lane(129), 8);
  EXPECT_EQ(geo::dims_per_lane(256), 8);
  for (int d = 1; d <= geo::kMaxHeadDim; ++d) {
    const int b = geo::dims_per_lane(d);
    EXPECT_TRUE(b == 1 || b == 2 || b == 4 || b == 8) << d;  // the instantiated buckets
    EXPECT_GE(b * geo::kWarpSize, d) << d;
    EXPECT_TRUE(geo::head_dim_supported(d));
  }
  EXPECT_FALSE(geo::head_dim_supported(0));
  EXPECT_FALSE(geo::head_dim_supported(257));
}

TEST(AttentionGeometry, LanePerRowStridesHitDistinctBanks) {
  for (int d = 1; d <= geo::kMaxHeadDim; ++d) {
    const int st = geo::lane_row_stride(d);
    ASSERT_GE(st, d);
    ASSERT_LE(st, d + 1);
    for (int c : {0, d / 2, d - 1}) {
      std::set<int> banks;
      for (int lane = 0; lane < geo::kWarpSize; ++lane) banks.insert((lane * st + c) % 32);
      EXPECT_EQ(banks.size(), 32u) << "head_dim " << d;
    }
  }
}

TEST(AttentionGeometry, TilesCoverRowsExactly) {
  static_assert(geo::kRowsPerWarp * geo::kWarps == geo::kTile);
  for (int n = 1; n <= 300; ++n) {
    int covered = 0;
    for (int t = 0; t < geo::tiles(n); ++t) {
      const int rows = geo::tile_rows(t, n);
      ASSERT_GE(rows, 1);
      ASSERT_LE(rows, geo::kTile);
      covered += rows;
    }
    EXPECT_EQ(covered, n);
    const geo::Dim3 g = geo::fwd_grid(3, n, 5);
    EXPECT_EQ(g.x, static_cast<unsigned>(geo::tiles(n)));
    EXPECT_EQ(g.y, 5u);
    EXPECT_EQ(g.z, 3u);
    const geo::Dim3 gkv = geo::bwd_dkv_grid(2, n, 4);
    EXPECT_EQ(gkv.x * geo::kTile >= static_cast<unsigned>(n) &&
                  (gkv.x - 1) * geo::kTile < static_cast<unsigned>(n),
              true);
    EXPECT_EQ(gkv.y, 4u);
  }
}

// Every (query, key) pair the causal mask keeps is visited by exactly the tiles the kernels
// loop over: the forward/dQ loop of the query's tile and the dK/dV loop of the key's tile.
TEST(AttentionGeometry, CausalTileRangesVisitEveryVisiblePair) {
  for (int seq : {1, 31, 32, 33, 64, 100}) {
    for (int pos0 : {0, 5, 40}) {  // pos0 > 0: attention_cached's prefill after a prefix
      for (int t = 0; t < seq; ++t) {
        const int qt = t / geo::kTile;
        const int64_t key_end =
            geo::query_tile_key_end(pos0, int64_t(qt) * geo::kTile, geo::tile_rows(qt, seq));
        EXPECT_GT(key_end, pos0 + t);    // all of 0..pos0+t is inside the loop
        EXPECT_LE(key_end, pos0 + seq);  // nothing past the cache's valid rows
      }
    }
    for (int kt = 0; kt < geo::tiles(seq); ++kt)
      for (int j = kt * geo::kTile; j < kt * geo::kTile + geo::tile_rows(kt, seq); ++j)
        for (int t = j; t < seq; ++t) {
          const int qt = t / geo::kTile;
          EXPECT_GE(qt, geo::first_query_tile_for_key_tile(kt));
          EXPECT_LT(qt, geo::tiles(seq));
        }
  }
}

TEST(AttentionGeometry, SharedMemoryFitsEveryTarget) {
  // Small heads launch without an opt-in; the largest fits the smallest target (sm_80).
  EXPECT_LE(geo::fwd_smem_bytes(64), geo::kDefaultSmemLimit);
  EXPECT_LE(geo::bwd_dkv_smem_bytes(64), geo::kDefaultSmemLimit);
  EXPECT_LE(geo::bwd_dq_smem_bytes(64), geo::kDefaultSmemLimit);
  for (int d = 1; d <= geo::kMaxHeadDim; ++d) {
    EXPECT_LE(geo::fwd_smem_bytes(d), geo::kSm80SmemLimit) << d;
    EXPECT_LE(geo::bwd_dkv_smem_bytes(d), geo::kSm80SmemLimit) << d;
    EXPECT_LE(geo::bwd_dq_smem_bytes(d), geo::kSm80SmemLimit) << d;
  }
  // Q [32][64] + K [32][65] + V [32][64] floats.
  EXPECT_EQ(geo::fwd_smem_bytes(64), 4u * 32 * (64 + 65 + 64));
  // K, V [32][80]; Q, dO [32][81]; lse and D [32].
  EXPECT_EQ(geo::bwd_dkv_smem_bytes(80), 4u * (32 * 80 * 2 + 32 * 81 * 2 + 64));
  EXPECT_EQ(geo::bwd_dq_smem_bytes(80), 4u * (32 * 80 * 2 + 32 * 81 * 2));
}

TEST(AttentionGeometry, BackwardWorkspaceAndDeltaGrid) {
  EXPECT_EQ(geo::bwd_workspace_bytes(2, 33, 12), 4u * 2 * 33 * 12);
  for (int rows : {1, 7, 8, 9, 1000})
    for (int heads : {1, 3, 12}) {
      const unsigned blocks = geo::bwd_delta_blocks(1, rows, heads);
      EXPECT_GE(int64_t(blocks) * geo::kWarps, int64_t(rows) * heads);
      EXPECT_LT(int64_t(blocks - 1) * geo::kWarps, int64_t(rows) * heads);
    }
}

TEST(AttentionGeometry, DecodeGridHasAWarpPerRowAndHead) {
  for (int heads : {1, 4, 5, 12, 32}) {
    const geo::Dim3 g = geo::decode_grid(17, heads);
    EXPECT_EQ(g.x, 17u);
    EXPECT_GE(int(g.y) * geo::kDecodeWarps, heads);
    EXPECT_LT(int(g.y - 1) * geo::kDecodeWarps, heads);
  }
}

TEST(AttentionGeometry, PagedRowsFindTheirSequencePositionAndSlot) {
  // Sequences 0 and 2 have no new rows; they share their start with the next one.
  const std::vector<int> starts = {0, 0, 3, 3, 5};
  const int owner[] = {1, 1, 1, 3, 3};
  for (int t = 0; t < 5; ++t) EXPECT_EQ(geo::paged_seq_of_row(starts.data(), 4, t), owner[t]) << t;
  // Brute force against a linear scan on random batches.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 9);
    std::vector<int> qs(n + 1, 0);
    for (int s = 0; s < n; ++s) qs[s + 1] = qs[s] + int(rng() % 4);
    for (int t = 0; t < qs[n]; ++t) {
      int want = 0;
      for (int s = 0; s < n; ++s)
        if (qs[s] <= t && t < qs[s + 1]) want = s;
      ASSERT_EQ(geo::paged_seq_of_row(qs.data(), n, t), want);
    }
  }
  // Context 10 including 3 new tokens at rows 4..6: positions 7, 8, 9 (as the CPU backend).
  EXPECT_EQ(geo::paged_query_pos(10, 4, 7, 4), 7);
  EXPECT_EQ(geo::paged_query_pos(10, 4, 7, 6), 9);
  const int table[] = {5, 2};
  EXPECT_EQ(geo::paged_slot(table, 4, 0), 20);
  EXPECT_EQ(geo::paged_slot(table, 4, 3), 23);
  EXPECT_EQ(geo::paged_slot(table, 4, 5), 9);
}
