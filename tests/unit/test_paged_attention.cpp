// Paged attention and the pool scatter against a naive double-precision reference over
// contiguous per-sequence keys and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "test_backend.h"

using namespace llmrun;

namespace {

struct SeqCase {
  int context;  // tokens in cache after this step
  int n_new;    // new query tokens (the last n_new positions)
};

// Runs paged attention for `cases` with blocks placed at shuffled pool positions and compares
// every output with softmax(q k^T / sqrt(d)) v computed in double over the sequence's own keys.
void check_paged(const std::vector<SeqCase>& cases, int heads, int kv_heads, int d,
                 int block_size) {
  auto be = test::make_test_backend(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int kvd = kv_heads * d, hd = heads * d, S = static_cast<int>(cases.size());
  int total_blocks = 0, max_blocks = 1, tokens = 0;
  for (const auto& c : cases) {
    const int nb = (c.context + block_size - 1) / block_size;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb);
    tokens += c.n_new;
  }
  const int pool_blocks = total_blocks + 3;  // spare blocks stay garbage and must not be read
  std::vector<int> order(pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  std::vector<float> kpool(size_t(pool_blocks) * block_size * kvd), vpool(kpool.size());
  for (float& x : kpool) x = 1e3f;  // poison: any stray read shows
  for (float& x : vpool) x = 1e3f;
  std::vector<int32_t> tables(size_t(S) * max_blocks, -1), starts(S + 1, 0), lens(S);
  std::vector<std::vector<float>> keys(S), values(S);
  std::vector<float> q(size_t(tokens) * hd);
  for (float& x : q) x = nd(rng);
  int next = 0;
  for (int s = 0; s < S; ++s) {
    const int ctx = cases[s].context;
    lens[s] = ctx;
    starts[s + 1] = starts[s] + cases[s].n_new;
    keys[s].resize(size_t(ctx) * kvd);
    values[s].resize(size_t(ctx) * kvd);
    for (float& x : keys[s]) x = nd(rng);
    for (float& x : values[s]) x = nd(rng);
    for (int b = 0; b * block_size < ctx; ++b) tables[size_t(s) * max_blocks + b] = order[next++];
  }
  // The old positions are written directly; the new ones through scatter_rows from a fused
  // [q | k | v] activation, the way the engine fills the pool.
  std::vector<float> fused(size_t(tokens) * (hd + 2 * kvd));
  std::vector<int32_t> slots(tokens);
  for (int s = 0; s < S; ++s) {
    const int ctx = cases[s].context, first_new = ctx - cases[s].n_new;
    for (int p = 0; p < ctx; ++p) {
      const int64_t slot =
          int64_t(tables[size_t(s) * max_blocks + p / block_size]) * block_size + p % block_size;
      if (p < first_new) {
        std::copy_n(&keys[s][size_t(p) * kvd], kvd, &kpool[slot * kvd]);
        std::copy_n(&values[s][size_t(p) * kvd], kvd, &vpool[slot * kvd]);
      } else {
        const int t = starts[s] + p - first_new;
        slots[t] = static_cast<int32_t>(slot);
        float* row = &fused[size_t(t) * (hd + 2 * kvd)];
        std::copy_n(&q[size_t(t) * hd], hd, row);
        std::copy_n(&keys[s][size_t(p) * kvd], kvd, row + hd);
        std::copy_n(&values[s][size_t(p) * kvd], kvd, row + hd + kvd);
      }
    }
  }
  Tensor kp(kpool.data(), DType::f32, {int64_t(pool_blocks) * block_size, kvd});
  Tensor vp(vpool.data(), DType::f32, {int64_t(pool_blocks) * block_size, kvd});
  Tensor fused_t(fused.data(), DType::f32, {tokens, hd + 2 * kvd});
  Tensor slots_t(slots.data(), DType::i32, {tokens});
  be->scatter_rows(kp, fused_t, slots_t, hd);
  be->scatter_rows(vp, fused_t, slots_t, hd + kvd);

  std::vector<float> out(size_t(tokens) * hd, -7.0f);
  be->paged_attention(Tensor(out.data(), DType::f32, {tokens, hd}),
                      Tensor(q.data(), DType::f32, {tokens, hd}), kp, vp,
                      Tensor(tables.data(), DType::i32, {S, max_blocks}),
                      Tensor(starts.data(), DType::i32, {S + 1}),
                      Tensor(lens.data(), DType::i32, {S}), block_size, heads, kv_heads, d);

  const int group = heads / kv_heads;
  for (int s = 0; s < S; ++s)
    for (int t = starts[s]; t < starts[s + 1]; ++t) {
      const int pos = lens[s] - cases[s].n_new + (t - starts[s]);
      for (int h = 0; h < heads; ++h) {
        const int kh = h / group;
        std::vector<double> sc(pos + 1);
        double mx = -1e300, sum = 0;
        for (int p = 0; p <= pos; ++p) {
          double dot = 0;
          for (int c = 0; c < d; ++c)
            dot += double(q[size_t(t) * hd + h * d + c]) * keys[s][size_t(p) * kvd + kh * d + c];
          sc[p] = dot / std::sqrt(double(d));
          mx = std::max(mx, sc[p]);
        }
        for (double& x : sc) sum += x = std::exp(x - mx);
        for (int c = 0; c < d; ++c) {
          double want = 0;
          for (int p = 0; p <= pos; ++p)
            want += sc[p] / sum * values[s][size_t(p) * kvd + kh * d + c];
          ASSERT_NEAR(out[size_t(t) * hd + h * d + c], want, 1e-5)
              << "seq " << s << " token " << t << " head " << h << " col " << c;
        }
      }
    }
}

}  // namespace

TEST(PagedAttention, DecodeBatchMatchesReference) {
  check_paged({{1, 1}, {17, 1}, {16, 1}, {40, 1}}, 4, 4, 8, 16);
}

TEST(PagedAttention, ChunkedPrefillMixedWithDecodeAndGqa) {
  // Whole prompt, a middle chunk, decode steps; GQA with 2 query heads per kv head.
  check_paged({{23, 23}, {50, 13}, {9, 1}, {33, 16}}, 4, 2, 16, 8);
}

TEST(PagedAttention, BlockSizeOneAndLargeBlocks) {
  check_paged({{5, 5}, {3, 1}}, 2, 1, 4, 1);
  check_paged({{70, 30}, {2, 2}}, 2, 2, 4, 64);
}

TEST(PagedAttention, RejectsBadTables) {
  auto be = test::make_test_backend(1);
  std::vector<float> q(8), out(8), pool(4 * 8);
  std::vector<int32_t> table{5}, starts{0, 1}, lens{1};  // block 5 is outside a 2-block pool
  Tensor p(pool.data(), DType::f32, {4, 8});
  EXPECT_THROW(be->paged_attention(Tensor(out.data(), DType::f32, {1, 8}),
                                   Tensor(q.data(), DType::f32, {1, 8}), p, p,
                                   Tensor(table.data(), DType::i32, {1, 1}),
                                   Tensor(starts.data(), DType::i32, {2}),
                                   Tensor(lens.data(), DType::i32, {1}), 2, 1, 1, 8),
               std::logic_error);
  std::vector<int32_t> bad_slot{9};
  EXPECT_THROW(be->scatter_rows(p, Tensor(q.data(), DType::f32, {1, 8}),
                                Tensor(bad_slot.data(), DType::i32, {1}), 0),
               std::logic_error);
}
