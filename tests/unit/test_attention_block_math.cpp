// The per-element math of the CUDA block attention (kernels/attention_block_math.cuh, compiled
// here for the CPU) against the CPU backend's attention_block_fwd, attention_lse_merge and
// attention_block_bwd on random inputs: a host walk that uses only that math (online softmax
// over 32-key tiles, the merge weights, probabilities recomputed from the final lse) must give
// what the CPU ops give, for the causal diagonal block and full blocks, with GQA. Plus the
// rows the kernels treat specially: lse = -inf ("no keys yet") on either side of a merge, and
// a fully masked row (no keys at all), which must end as out 0 / lse -inf and contribute no
// gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/attention_block_math.cuh"
#include "attention_test_util.h"
#include "backend/backend.h"

using namespace llmrun;
using namespace llmrun::attention_test;
namespace bm = llmrun::kernels::attention_block_math;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One block problem: queries q [batch*seq, heads*d] against keys/values [batch*nk, kv*d].
struct Block {
  int batch, seq, nk, heads, kv_heads, d;
  bool causal;
  AttentionShape shape() const { return {batch, seq, heads, kv_heads, d}; }
  int64_t hd() const { return int64_t(heads) * d; }
  int64_t kvd() const { return int64_t(kv_heads) * d; }
  size_t lse_n() const { return size_t(batch) * heads * seq; }
};
std::string block_name(const Block& p) {
  return std::string(p.causal ? "causal" : "full") + "_seq" + std::to_string(p.seq) + "_nk" +
         std::to_string(p.nk) + "_h" + std::to_string(p.heads) + "_kv" +
         std::to_string(p.kv_heads) + "_d" + std::to_string(p.d);
}
// gtest would print the struct's bytes, padding included: test names would vary by build.
void PrintTo(const Block& p, std::ostream* os) { *os << block_name(p); }

float dot(const float* a, const float* b, int d) {
  float s = 0.0f;
  for (int c = 0; c < d; ++c) s = std::fma(a[c], b[c], s);
  return s;
}

// The forward as the kernel walks it, with the math header only: 32-key tiles, the running
// maximum and denominator rescaled by exp_masked, the row ended by finish_row.
void math_fwd(const Block& p, const std::vector<float>& q, const std::vector<float>& k,
              const std::vector<float>& v, std::vector<float>& out, std::vector<float>& lse) {
  const float scale = 1.0f / std::sqrt(float(p.d));
  const int group = p.heads / p.kv_heads;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq; ++i) {
        const float* qr = &q[size_t((int64_t(b) * p.seq + i) * p.hd() + int64_t(h) * p.d)];
        float m = -kInf, l = 0.0f;
        std::vector<float> acc(size_t(p.d), 0.0f);
        const int64_t end = bm::key_end(p.causal, i, 1, p.nk);
        for (int64_t k0 = 0; k0 < end; k0 += 32) {
          float sc[32];
          float tile_max = -kInf;
          for (int j = 0; j < 32; ++j) {
            const int64_t key = k0 + j;
            sc[j] = -kInf;
            if (key < end && bm::key_visible(p.causal, i, key, p.nk))
              sc[j] =
                  dot(qr,
                      &k[size_t((int64_t(b) * p.nk + key) * p.kvd() + int64_t(h / group) * p.d)],
                      p.d) *
                  scale;
            tile_max = std::max(tile_max, sc[j]);
          }
          const float mnew = std::max(m, tile_max), alpha = bm::exp_masked(m, mnew);
          float sum = 0.0f;
          for (float& s : sc) sum += s = bm::exp_masked(s, mnew);
          l = l * alpha + sum;
          m = mnew;
          for (float& a : acc) a *= alpha;
          for (int j = 0; j < 32 && k0 + j < end; ++j) {
            const float* vr =
                &v[size_t((int64_t(b) * p.nk + k0 + j) * p.kvd() + int64_t(h / group) * p.d)];
            for (int c = 0; c < p.d; ++c) acc[size_t(c)] = std::fma(sc[j], vr[c], acc[size_t(c)]);
          }
        }
        const bm::RowEnd e = bm::finish_row(m, l);
        float* o = &out[size_t((int64_t(b) * p.seq + i) * p.hd() + int64_t(h) * p.d)];
        for (int c = 0; c < p.d; ++c) o[c] = acc[size_t(c)] * e.inv_l;
        lse[size_t((int64_t(b) * p.heads + h) * p.seq + i)] = e.lse;
      }
}

// The merge, element by element, with lse_merge / merge_value.
void math_merge(const Block& p, std::vector<float>& out, std::vector<float>& lse,
                const std::vector<float>& bout, const std::vector<float>& blse) {
  for (int64_t row = 0; row < int64_t(p.batch) * p.seq; ++row)
    for (int h = 0; h < p.heads; ++h) {
      const size_t li = size_t((row / p.seq * p.heads + h) * p.seq + row % p.seq);
      const bm::LseMerge w = bm::lse_merge(lse[li], blse[li]);
      for (int c = 0; c < p.d; ++c) {
        const size_t at = size_t(row * p.hd() + int64_t(h) * p.d + c);
        out[at] = bm::merge_value(w, out[at], bout[at]);
      }
      if (!w.skip) lse[li] = w.lse;
    }
}

// The backward, accumulating into dq, dk, dv, with block_prob / block_dscore.
void math_bwd(const Block& p, const std::vector<float>& q, const std::vector<float>& k,
              const std::vector<float>& v, const std::vector<float>& out,
              const std::vector<float>& lse, const std::vector<float>& dout, std::vector<float>& dq,
              std::vector<float>& dk, std::vector<float>& dv) {
  const float scale = 1.0f / std::sqrt(float(p.d));
  const int group = p.heads / p.kv_heads;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int i = 0; i < p.seq; ++i) {
        const size_t qa = size_t((int64_t(b) * p.seq + i) * p.hd() + int64_t(h) * p.d);
        const float row_lse = lse[size_t((int64_t(b) * p.heads + h) * p.seq + i)];
        const float delta = dot(&dout[qa], &out[qa], p.d);
        for (int64_t key = 0; key < p.nk; ++key) {
          if (!bm::key_visible(p.causal, i, key, p.nk)) continue;
          const size_t ka = size_t((int64_t(b) * p.nk + key) * p.kvd() + int64_t(h / group) * p.d);
          const float pr = bm::block_prob(dot(&q[qa], &k[ka], p.d) * scale, row_lse);
          const float ds = bm::block_dscore(pr, dot(&dout[qa], &v[ka], p.d), delta);
          for (int c = 0; c < p.d; ++c) {
            dq[qa + size_t(c)] += ds * k[ka + size_t(c)] * scale;
            dk[ka + size_t(c)] += ds * q[qa + size_t(c)] * scale;
            dv[ka + size_t(c)] += pr * dout[qa + size_t(c)];
          }
        }
      }
}

class AttentionBlockMath : public ::testing::TestWithParam<Block> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::mt19937 rng{2711};
};

TEST_P(AttentionBlockMath, ForwardMatchesTheCpuBlockForward) {
  const Block p = GetParam();
  std::vector<float> q = randn(size_t(p.batch * p.seq * p.hd()), rng),
                     k = randn(size_t(p.batch * p.nk * p.kvd()), rng),
                     v = randn(size_t(p.batch * p.nk * p.kvd()), rng);
  std::vector<float> out(q.size()), lse(p.lse_n()), want_out(q.size()), want_lse(p.lse_n());
  math_fwd(p, q, k, v, out, lse);
  be->attention_block_fwd(t2(want_out, p.batch * p.seq, p.hd()), t1(want_lse),
                          t2(q, p.batch * p.seq, p.hd()), t2(k, p.batch * p.nk, p.kvd()),
                          t2(v, p.batch * p.nk, p.kvd()), p.nk, p.causal, p.shape());
  expect_close(out, want_out, 1e-5, 1e-6, "block out");
  expect_close(lse, want_lse, 1e-5, 1e-6, "block lse");
}

TEST_P(AttentionBlockMath, BackwardAccumulatesAsTheCpuBlockBackward) {
  const Block p = GetParam();
  const int64_t qrows = p.batch * p.seq, krows = p.batch * p.nk;
  std::vector<float> q = randn(size_t(qrows * p.hd()), rng),
                     k = randn(size_t(krows * p.kvd()), rng),
                     v = randn(size_t(krows * p.kvd()), rng), dout = randn(q.size(), rng);
  // The final out and lse come from every block of the ring: this block's lse plus the mass of
  // keys elsewhere (a random positive amount), and an out that is not this block's alone.
  std::vector<float> out(q.size()), lse(p.lse_n());
  math_fwd(p, q, k, v, out, lse);
  std::uniform_real_distribution<float> more(0.0f, 1.5f);
  for (float& x : lse) x += more(rng);
  for (float& x : out) x += 0.3f * std::normal_distribution<float>(0.0f, 1.0f)(rng);
  // Gradients already hold other blocks' shares: both sides must add to them.
  std::vector<float> dq = randn(q.size(), rng), dk = randn(k.size(), rng),
                     dv = randn(v.size(), rng);
  std::vector<float> want_dq = dq, want_dk = dk, want_dv = dv;
  math_bwd(p, q, k, v, out, lse, dout, dq, dk, dv);
  be->attention_block_bwd(t2(want_dq, qrows, p.hd()), t2(want_dk, krows, p.kvd()),
                          t2(want_dv, krows, p.kvd()), t2(dout, qrows, p.hd()),
                          t2(out, qrows, p.hd()), t1(lse), t2(q, qrows, p.hd()),
                          t2(k, krows, p.kvd()), t2(v, krows, p.kvd()), p.nk, p.causal, p.shape());
  expect_close(dq, want_dq, 1e-4, 1e-5, "dq");
  expect_close(dk, want_dk, 1e-4, 1e-5, "dk");
  expect_close(dv, want_dv, 1e-4, 1e-5, "dv");
}

// Causal diagonal (GQA, over two 32-key tiles); a full block with more keys than queries; a
// full block with fewer; multi-head with head_dim not a power of two.
INSTANTIATE_TEST_SUITE_P(
    Blocks, AttentionBlockMath,
    ::testing::Values(Block{2, 37, 37, 4, 2, 16, true}, Block{1, 20, 45, 4, 1, 8, false},
                      Block{2, 33, 7, 2, 2, 12, false}, Block{1, 40, 40, 3, 3, 24, true}),
    [](const ::testing::TestParamInfo<Block>& i) { return block_name(i.param); });

// Random running results and blocks, with every combination of "no keys yet" (lse -inf) on
// either side: the math gives what CpuBackend::attention_lse_merge gives. The running out of
// a row without keys is 0, as ContextParallel fills it.
TEST(AttentionBlockMathMerge, MatchesTheCpuMergeIncludingRowsWithoutKeys) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(7);
  const Block p{3, 29, 29, 4, 2, 20, false};
  const int64_t rows = p.batch * p.seq;
  std::vector<float> out = randn(size_t(rows * p.hd()), rng), bout = randn(out.size(), rng);
  std::vector<float> lse = randn(p.lse_n(), rng, 3.0f), blse = randn(p.lse_n(), rng, 3.0f);
  int none = 0, only_block = 0, only_running = 0;
  for (size_t li = 0; li < lse.size(); ++li) {
    const int kind = int(li % 5);  // 0: neither has keys, 1: only the block, 2: only running
    if (kind == 0 || kind == 1) lse[li] = -kInf;
    if (kind == 0 || kind == 2) blse[li] = -kInf;
    none += kind == 0;
    only_block += kind == 1;
    only_running += kind == 2;
    if (lse[li] == -kInf) {  // that row's running out is ContextParallel's zero fill
      const int64_t b = int64_t(li) / (p.heads * p.seq), h = int64_t(li) / p.seq % p.heads,
                    t = int64_t(li) % p.seq;
      for (int c = 0; c < p.d; ++c) out[size_t((b * p.seq + t) * p.hd() + h * p.d + c)] = 0.0f;
    }
  }
  ASSERT_GT(none * only_block * only_running, 0);
  // Far-apart lse values: one side's weight underflows to 0.
  lse[3] = 80.0f;
  blse[3] = -30.0f;
  lse[4] = -50.0f;
  blse[4] = 60.0f;
  std::vector<float> want_out = out, want_lse = lse;
  math_merge(p, out, lse, bout, blse);
  be->attention_lse_merge(t2(want_out, rows, p.hd()), t1(want_lse), t2(bout, rows, p.hd()),
                          t1(blse), p.shape());
  expect_close(out, want_out, 2e-6, 1e-7, "merged out");
  expect_close(lse, want_lse, 2e-6, 1e-7, "merged lse");
  for (size_t li = 0; li < lse.size(); li += 5) EXPECT_EQ(lse[li], -kInf) << li;
}

// Merging blocks one after another in any order gives the attention over all their keys:
// three full blocks plus the causal one, merged in two different orders, against the CPU
// backend's single-chunk attention_fwd over the whole sequence.
TEST(AttentionBlockMathMerge, BlocksInAnyOrderGiveTheFullAttention) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(11);
  const int C = 13, n = 4, heads = 4, kv = 2, d = 8, S = C * n;
  const AttentionShape full{1, S, heads, kv, d};
  std::vector<float> qkv = randn(size_t(S * full.qkv_cols()), rng);
  std::vector<float> want_out(size_t(S * heads * d)), want_lse(size_t(heads * S));
  be->attention_fwd(t2(want_out, S, heads * d), t1(want_lse), t2(qkv, S, full.qkv_cols()), full);
  // The last chunk's queries against every chunk's keys.
  auto cols = [&](int chunk, int64_t from, int64_t width) {
    std::vector<float> x(size_t(C * width));
    for (int r = 0; r < C; ++r)
      for (int64_t c = 0; c < width; ++c)
        x[size_t(r * width + c)] = qkv[size_t((chunk * C + r) * full.qkv_cols() + from + c)];
    return x;
  };
  const std::vector<float> q = cols(n - 1, 0, heads * d);
  for (const std::vector<int>& order :
       {std::vector<int>{3, 0, 1, 2}, std::vector<int>{1, 3, 2, 0}}) {
    std::vector<float> out(q.size(), 0.0f), lse(size_t(heads * C), -kInf);
    for (int kc : order) {
      const Block p{1, C, C, heads, kv, d, kc == n - 1};
      std::vector<float> bout(q.size()), blse(lse.size());
      math_fwd(p, q, cols(kc, heads * d, kv * d), cols(kc, (heads + kv) * d, kv * d), bout, blse);
      math_merge(p, out, lse, bout, blse);
    }
    for (int t = 0; t < C; ++t)
      for (int c = 0; c < heads * d; ++c)
        EXPECT_NEAR(out[size_t(t * heads * d + c)],
                    want_out[size_t(((n - 1) * C + t) * heads * d + c)], 2e-5)
            << t << "," << c;
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < C; ++t)
        EXPECT_NEAR(lse[size_t(h * C + t)], want_lse[size_t(h * S + (n - 1) * C + t)], 2e-5);
  }
}

// A row that sees no key at all ends as out 0 and lse -inf; merged into a running result, it
// leaves that result exactly as the CPU backend's merge leaves it with a -inf block lse, and
// merge_value never lets a side without keys (even one holding NaN) into the result.
TEST(AttentionBlockMathRows, FullyMaskedRowEndsEmptyAndMergesAsNoKeys) {
  const bm::RowEnd e = bm::finish_row(-kInf, 0.0f);
  EXPECT_EQ(e.inv_l, 0.0f);
  EXPECT_EQ(e.lse, -kInf);
  // The online softmax of a row whose every score is masked: nothing accumulates, no NaN.
  EXPECT_EQ(bm::exp_masked(-kInf, -kInf), 0.0f);
  EXPECT_EQ(bm::exp_masked(-kInf, 3.0f), 0.0f);
  EXPECT_FLOAT_EQ(bm::exp_masked(1.0f, 3.0f), std::exp(-2.0f));

  auto be = make_cpu_backend(1);
  const Block p{1, 1, 1, 1, 1, 4, false};
  std::vector<float> out = {0.5f, -1.0f, 2.0f, 0.25f}, lse = {1.75f};
  std::vector<float> bout = {0.0f, 0.0f, 0.0f, 0.0f}, blse = {e.lse};
  std::vector<float> want_out = out, want_lse = lse;
  math_merge(p, out, lse, bout, blse);
  be->attention_lse_merge(t2(want_out, 1, 4), t1(want_lse), t2(bout, 1, 4), t1(blse), p.shape());
  EXPECT_EQ(out, want_out);
  EXPECT_EQ(lse, want_lse);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const bm::LseMerge block_empty = bm::lse_merge(1.75f, -kInf);
  EXPECT_FALSE(block_empty.skip);
  EXPECT_EQ(bm::merge_value(block_empty, 0.5f, nan), 0.5f);
  const bm::LseMerge running_empty = bm::lse_merge(-kInf, 0.5f);
  EXPECT_EQ(running_empty.lse, 0.5f);
  EXPECT_EQ(bm::merge_value(running_empty, nan, -2.0f), -2.0f);
  const bm::LseMerge both_empty = bm::lse_merge(-kInf, -kInf);
  EXPECT_TRUE(both_empty.skip);
  EXPECT_EQ(bm::merge_value(both_empty, 0.0f, nan), 0.0f);
}

// In the backward a row whose final lse is -inf has no probabilities: it adds nothing to any
// gradient. The CPU backend's gradients with that row's dout zeroed (so its dS vanishes) are
// the reference; the math must match them while that row's dout is random.
TEST(AttentionBlockMathRows, RowWithoutKeysAddsNoGradient) {
  EXPECT_EQ(bm::block_prob(5.0f, -kInf), 0.0f);
  EXPECT_EQ(bm::block_dscore(0.0f, 3.0f, -1.0f), 0.0f);
  auto be = make_cpu_backend(2);
  std::mt19937 rng(23);
  const Block p{1, 19, 19, 2, 1, 8, true};
  const int64_t rows = p.seq;
  std::vector<float> q = randn(size_t(rows * p.hd()), rng), k = randn(size_t(rows * p.kvd()), rng),
                     v = randn(size_t(rows * p.kvd()), rng), dout = randn(q.size(), rng);
  std::vector<float> out(q.size()), lse(p.lse_n());
  math_fwd(p, q, k, v, out, lse);
  const int masked_row = 6, masked_head = 1;
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  std::vector<float> want_dq = dq, want_dk = dk, want_dv = dv, zeroed = dout;
  for (int c = 0; c < p.d; ++c) zeroed[size_t(masked_row * p.hd() + masked_head * p.d + c)] = 0.0f;
  be->attention_block_bwd(t2(want_dq, rows, p.hd()), t2(want_dk, rows, p.kvd()),
                          t2(want_dv, rows, p.kvd()), t2(zeroed, rows, p.hd()),
                          t2(out, rows, p.hd()), t1(lse), t2(q, rows, p.hd()), t2(k, rows, p.kvd()),
                          t2(v, rows, p.kvd()), p.nk, p.causal, p.shape());
  lse[size_t(masked_head * p.seq + masked_row)] = -kInf;
  math_bwd(p, q, k, v, out, lse, dout, dq, dk, dv);
  expect_close(dq, want_dq, 1e-4, 1e-5, "dq");
  expect_close(dk, want_dk, 1e-4, 1e-5, "dk");
  expect_close(dv, want_dv, 1e-4, 1e-5, "dv");
}

TEST(AttentionBlockMathRows, KeyVisibility) {
  // Full block: every key of the chunk, none past it.
  EXPECT_TRUE(bm::key_visible(false, 0, 44, 45));
  EXPECT_FALSE(bm::key_visible(false, 50, 45, 45));
  // The causal diagonal: keys up to the query itself.
  EXPECT_TRUE(bm::key_visible(true, 7, 7, 20));
  EXPECT_FALSE(bm::key_visible(true, 7, 8, 20));
  EXPECT_EQ(bm::key_end(true, 32, 5, 64), 37);
  EXPECT_EQ(bm::key_end(false, 32, 5, 64), 64);
}

}  // namespace
