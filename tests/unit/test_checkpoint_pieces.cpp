// Geometry of sharded checkpoint pieces: what one layout writes, another reads back exactly.
#include <gtest/gtest.h>

#include <random>

#include "ckpt/checkpoint_pieces.h"
#include "model/shard_copy.h"

namespace llmrun {
namespace {

ParamSpec spec_of(std::vector<int64_t> full, int axis, Slice ranges) {
  ParamSpec s;
  s.full_shape = full;
  s.shape = full;
  s.shard.axis = axis;
  s.shard.ranges = ranges;
  int64_t extent = 0;
  for (auto [lo, hi] : ranges) extent += hi - lo;
  s.shape[size_t(axis)] = extent;
  return s;
}

TEST(CheckpointPieces, SliceRunsFollowRowMajorOrderWithinTheSlice) {
  // [4, 6], rows 1..2, cols 2..4: elements (1,2) (1,3) (1,4) (2,2) (2,3) (2,4); take 1..4.
  const auto runs = slice_runs({4, 6}, {{1, 3}, {2, 5}}, 1, 5);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].global, 9);
  EXPECT_EQ(runs[0].local, 0);
  EXPECT_EQ(runs[0].count, 2);
  EXPECT_EQ(runs[1].global, 14);
  EXPECT_EQ(runs[1].local, 2);
  EXPECT_EQ(runs[1].count, 2);
  // Full-width rows merge into one run.
  const auto whole = slice_runs({4, 6}, {{1, 4}, {0, 6}}, 0, 18);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].global, 6);
  EXPECT_EQ(whole[0].count, 18);
}

TEST(CheckpointPieces, AdjacentRangesFormOneSlice) {
  // q|k|v at tp = 1: three ranges that continue one another are one whole-tensor piece.
  const ParamSpec s = spec_of({12, 4}, 0, {{0, 4}, {4, 8}, {8, 12}});
  const auto pieces = local_pieces(s, 0, s.numel());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].flat_end - pieces[0].flat_begin, s.full_numel());
}

// Any writer layout (tp shard + ZeRO-style flat partitions) read back by any reader layout:
// every element arrives once, with the value of its place in the full tensor.
TEST(CheckpointPieces, AnyWriterLayoutReadsBackUnderAnyReaderLayout) {
  std::mt19937 rng(7);
  const std::vector<int64_t> full = {12, 10};
  // Local tensors of tensor-parallel ranks: fused-q|k|v style ranges along rows, row-parallel
  // columns.
  const std::vector<std::pair<int, Slice>> shards = {{0, {{0, 12}}},
                                                     {0, {{0, 2}, {4, 6}, {8, 10}}},
                                                     {0, {{2, 4}, {6, 8}, {10, 12}}},
                                                     {1, {{0, 5}}},
                                                     {1, {{5, 10}}},
                                                     {0, {{3, 9}}}};
  for (int trial = 0; trial < 200; ++trial) {
    // Writers: a set of tp shards that tile the tensor, each cut into dp flat partitions.
    const int tiling = int(rng() % 3);
    std::vector<ParamSpec> writers;
    if (tiling == 0) writers = {spec_of(full, 0, shards[0].second)};
    if (tiling == 1)  // interleaved row ranges, as fused q|k|v splits are
      writers = {spec_of(full, 0, {{0, 1}, {4, 6}, {8, 10}}),
                 spec_of(full, 0, {{1, 4}, {6, 8}, {10, 12}})};
    if (tiling == 2)
      writers = {spec_of(full, 1, shards[3].second), spec_of(full, 1, shards[4].second)};
    struct Written {
      LocalPiece piece;
      std::vector<float> data;
    };
    std::vector<Written> written;
    for (const ParamSpec& w : writers) {
      std::vector<float> local(size_t(w.numel()));
      for_each_shard_run(w, [&](int64_t g, int64_t l, int64_t n) {
        for (int64_t i = 0; i < n; ++i) local[size_t(l + i)] = float(g + i);
      });
      const int64_t dp = 1 + int64_t(rng() % 4);
      for (int64_t r = 0; r < dp; ++r) {
        const int64_t a = w.numel() * r / dp, b = w.numel() * (r + 1) / dp;
        for (const LocalPiece& p : local_pieces(w, a, b)) {
          const int64_t n = p.flat_end - p.flat_begin;
          written.push_back({p, std::vector<float>(local.begin() + p.local_begin,
                                                   local.begin() + p.local_begin + n)});
        }
      }
    }
    // Reader: a random shard and a random flat range of it.
    const auto& [axis, ranges] = shards[rng() % shards.size()];
    const ParamSpec reader = spec_of(full, axis, ranges);
    const int64_t c = int64_t(rng() % uint64_t(reader.numel()));
    const int64_t d = c + 1 + int64_t(rng() % uint64_t(reader.numel() - c));
    std::vector<float> dst(size_t(d - c), -1.0f);
    std::vector<int> hits(size_t(d - c), 0);
    const auto want = local_runs(reader, c, d);
    for (const Written& w : written) {
      const auto have = slice_runs(full, w.piece.slice, w.piece.flat_begin, w.piece.flat_end);
      for_each_overlap(have, want, [&](int64_t from, int64_t to, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          dst[size_t(to + i)] = w.data[size_t(from + i)];
          ++hits[size_t(to + i)];
        }
      });
    }
    std::vector<float> expect(size_t(reader.numel()));
    for_each_shard_run(reader, [&](int64_t g, int64_t l, int64_t n) {
      for (int64_t i = 0; i < n; ++i) expect[size_t(l + i)] = float(g + i);
    });
    for (int64_t i = 0; i < d - c; ++i) {
      ASSERT_EQ(hits[size_t(i)], 1) << "trial " << trial << " element " << c + i;
      ASSERT_EQ(dst[size_t(i)], expect[size_t(c + i)]) << "trial " << trial << " element " << c + i;
    }
  }
}

}  // namespace
}  // namespace llmrun
