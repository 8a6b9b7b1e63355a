// Context parallelism: the load-balanced chunk assignment, and the block attention with its
// log-sum-exp merge against the one-rank causal attention on random inputs, forward and
// backward (every rank of a ring simulated in one process, and ContextParallel itself).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_chunks.h"
#include "plan/comm_model.h"
#include "plan/layout_search.h"
#include "plan/memory_model.h"
#include "test_backend.h"

using namespace llmrun;

namespace {

TEST(CpChunks, EveryPositionOnceAndEqualCausalWork) {
  for (int cp : {1, 2, 3, 4}) {
    const int seq = 2 * cp * 5;
    std::multiset<int> seen;
    std::set<long> work;
    for (int r = 0; r < cp; ++r) {
      const CpChunks c{seq, cp, r};
      ASSERT_EQ(c.local_len(), 2 * 5);
      long keys = 0;
      for (int j = 0; j < c.local_len(); ++j) {
        seen.insert(c.position(j));
        keys += c.position(j) + 1;  // causal keys the token's query sees
        if (j > 0 && j != c.chunk_len()) {
          EXPECT_EQ(c.position(j), c.position(j - 1) + 1);
        }
      }
      // Rank r holds chunks r and 2cp-1-r.
      EXPECT_EQ(c.position(0), r * 5);
      EXPECT_EQ(c.position(c.chunk_len()), (2 * cp - 1 - r) * 5);
      work.insert(keys);
    }
    EXPECT_EQ(seen.size(), size_t(seq));
    for (int p = 0; p < seq; ++p) EXPECT_EQ(seen.count(p), 1u) << "cp " << cp << " pos " << p;
    EXPECT_EQ(work.size(), 1u) << "cp " << cp << ": ranks do unequal causal work";
  }
}

TEST(CpChunks, SplitProblemNamesTheReason) {
  EXPECT_FALSE(cp_split_problem(128, 1));
  EXPECT_FALSE(cp_split_problem(128, 4));
  const auto p = cp_split_problem(100, 4);
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("not divisible by 2 x cp = 8"), std::string::npos) << *p;
  EXPECT_FALSE(cp_split_problem(36, 3));
  EXPECT_TRUE(cp_split_problem(30, 4));
  EXPECT_EQ(cp_comm_from_name("all_gather"), CpComm::all_gather);
  EXPECT_FALSE(cp_comm_from_name("ring"));
}

TrainingShape long_shape(int seq_len) {
  TrainingShape s;
  s.model.arch = Arch::llama;
  s.model.layers = 2;
  s.model.d_model = 64;
  s.model.heads = 4;
  s.model.kv_heads = 2;
  s.model.ffn = 128;
  s.model.vocab = 256;
  s.model.seq_len = seq_len;
  s.micro_batch = 1;
  s.global_batch = 4;
  return s;
}

TEST(CpPlan, ActivationsShrinkWithCpAndTheRingIsPriced) {
  const TrainingShape s = long_shape(4096);
  TrainingLayout one, two, four;
  two.cp = 2;
  four.cp = 4;
  const double a1 = plan_memory(s, one)[0].act_in_flight;
  const double a2 = plan_memory(s, two)[0].act_in_flight;
  const double a4 = plan_memory(s, four)[0].act_in_flight;
  EXPECT_NEAR(a2, a1 / 2, a1 * 1e-3);  // saved activations follow the local tokens
  EXPECT_NEAR(a4, a1 / 4, a1 * 1e-3);
  EXPECT_GT(plan_memory(s, two)[0].act_workspace, 0.0);
  // p2p: per block and micro-batch, keys and values (2 x local tokens x kv_heads x head_dim
  // floats) go cp-1 hops forward and backward, their gradients cp hops.
  const double packed = 4.0 * 2 * (4096 / 4) * 2 * 16;
  double ring = 0;
  const std::vector<StageComm> comm = plan_communication(s, four);
  for (const CommItem& i : comm[0].items)
    if (i.group == "cp") ring += i.sent;
  const int micro = 4;  // global batch 4 at dp 1
  EXPECT_DOUBLE_EQ(ring, 2.0 * micro * packed * (3 + 3 + 4));
  TrainingLayout bad;
  bad.cp = 4;
  EXPECT_TRUE(layout_problem(long_shape(4100), bad));
}

// a2a (Ulysses) gives every cp rank heads/cp query heads and kv_heads/cp key/value heads of
// the heads a tp rank holds (kv_heads/tp, or 1 when tp replicates them).
TEST(CpHeads, A2aNeedsHeadsAndKvHeadsPerTpRankDivisibleByCp) {
  EXPECT_FALSE(cp_heads_problem(4, 2, 1, 2));
  EXPECT_FALSE(cp_heads_problem(8, 8, 2, 4));
  EXPECT_FALSE(cp_heads_problem(4, 2, 1, 1));  // cp 1: nothing to split
  const auto q = cp_heads_problem(4, 4, 1, 8);
  ASSERT_TRUE(q);
  EXPECT_NE(q->find("4 query heads are not divisible by cp = 8"), std::string::npos) << *q;
  const auto kv = cp_heads_problem(4, 2, 1, 4);
  ASSERT_TRUE(kv);
  EXPECT_NE(kv->find("2 kv heads are not divisible by cp = 4"), std::string::npos) << *kv;
  const auto replicated = cp_heads_problem(8, 2, 4, 2);  // tp 4 > kv_heads 2: one kv head each
  ASSERT_TRUE(replicated);
  EXPECT_NE(replicated->find("1 kv heads per tp rank"), std::string::npos) << *replicated;

  TrainingLayout a2a;
  a2a.cp = 4;
  a2a.cp_comm = CpComm::a2a;
  const auto refused = layout_problem(long_shape(4096), a2a);  // kv_heads 2, cp 4
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->key, "parallel.cp_comm");
  a2a.cp = 2;
  EXPECT_FALSE(layout_problem(long_shape(4096), a2a));
  EXPECT_EQ(cp_comm_from_name("a2a"), CpComm::a2a);
  EXPECT_STREQ(cp_comm_name(CpComm::a2a), "a2a");
}

TEST(CpPlan, A2aMovesAllButOneCpthOfQkvAndOutputThreeTimes) {
  const TrainingShape s = long_shape(4096);
  TrainingLayout l;
  l.cp = 2;
  l.cp_comm = CpComm::a2a;
  double sent = 0;
  const std::vector<StageComm> comm = plan_communication(s, l);
  for (const CommItem& i : comm[0].items)
    if (i.group == "cp") sent += i.sent;
  // Per block and micro-batch: q|k|v (4 + 2 x 2 heads of 16) and the output (4 heads), each
  // three times (forward; backward re-gather; gradients), over 2048 local tokens, half sent.
  const double per_block = 4.0 * 2048 * (8 + 4) * 16 * 3 * 0.5;
  EXPECT_DOUBLE_EQ(sent, per_block * 2 /* blocks */ * 4 /* micro-batches */);
  // The all-to-alls' buffers are priced as activation workspace beside the ring's.
  EXPECT_GT(plan_memory(s, l)[0].act_workspace, 0.0);
}

TEST(CpPlan, SearchIncludesCpOnlyForLongSequences) {
  PerfAssumptions a;
  a.peak_flops = 1e12;
  auto with_cp = [&](int seq) {
    int n = 0;
    for (const RankedLayout& r : search_layouts(long_shape(seq), 4, 0, a).ranked)
      n += r.layout.cp > 1;
    return n;
  };
  EXPECT_GT(with_cp(4096), 0);
  EXPECT_EQ(with_cp(1024), 0);
}

class BlockAttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = test::make_test_backend(2);
  std::vector<Buffer> bufs;
  std::mt19937 rng{77};

  void SetUp() override {
    if (be->device() != Device::cpu)
      GTEST_SKIP() << "these tests fill and read tensors on the host; on " << be->name()
                   << " Conformance.BlockAttentionRingMatchesNaiveCausalAttention runs the ring";
  }

  Tensor make(std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    bufs.push_back(be->allocate(size_t(n) * 4));
    return bufs.back().as(DType::f32, dims);
  }
  Tensor randn(std::initializer_list<int64_t> dims) {
    Tensor t = make(dims);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = nd(rng);
    return t;
  }
  static void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                           const std::string& what) {
    ASSERT_EQ(got.numel(), want.numel());
    int bad = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double g = got.f32()[i], w = want.f32()[i];
      if (std::fabs(g - w) <= atol + rtol * std::fabs(w)) continue;
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
    }
    EXPECT_EQ(bad, 0) << what;
  }

  // Simulates a cp-rank ring in one process: every query chunk merges the blocks of every
  // key chunk at or before it (in ring order, as rank r receives them), and the backward
  // accumulates each block's dq, dk, dv. Compared with the one-rank attention.
  void run(const AttentionShape& s, int cp) {
    const int C = s.seq / (2 * cp), n = 2 * cp;
    const int64_t hd = int64_t(s.heads) * s.head_dim, kvd = int64_t(s.kv_heads) * s.head_dim;
    const int64_t rows = int64_t(s.batch) * s.seq;
    Tensor qkv = randn({rows, s.qkv_cols()}), dout = randn({rows, hd});
    Tensor out = make({rows, hd}), lse = make({s.batch, s.heads, s.seq});
    Tensor dqkv = make({rows, s.qkv_cols()});
    be->attention_fwd(out, lse, qkv, s);
    be->attention_bwd(dqkv, dout, qkv, out, lse, s);

    // Chunk i of every sequence, as contiguous tensors.
    AttentionShape cs = s;
    cs.seq = C;
    const int64_t crows = int64_t(s.batch) * C;
    std::vector<Tensor> q(n), k(n), v(n), o(n), l(n), g(n), dq(n), dk(n), dv(n);
    for (int i = 0; i < n; ++i) {
      q[i] = make({crows, hd});
      k[i] = make({crows, kvd});
      v[i] = make({crows, kvd});
      g[i] = make({crows, hd});
      o[i] = make({crows, hd});
      l[i] = make({int64_t(s.batch), s.heads, C});
      dq[i] = make({crows, hd});
      dk[i] = make({crows, kvd});
      dv[i] = make({crows, kvd});
      for (int b = 0; b < s.batch; ++b) {
        const Tensor src = qkv.slice(int64_t(b) * s.seq + i * C, int64_t(b) * s.seq + (i + 1) * C);
        be->copy_cols(q[i].slice(b * C, (b + 1) * C), src, 0);
        be->copy_cols(k[i].slice(b * C, (b + 1) * C), src, hd);
        be->copy_cols(v[i].slice(b * C, (b + 1) * C), src, hd + kvd);
        be->copy(g[i].slice(b * C, (b + 1) * C),
                 dout.slice(int64_t(b) * s.seq + i * C, int64_t(b) * s.seq + (i + 1) * C));
      }
      be->fill(o[i], 0.0f);
      be->fill(l[i], -INFINITY);
    }
    Tensor bo = make({crows, hd}), bl = make({int64_t(s.batch), s.heads, C});
    // Key chunks in the order a ring delivers them to the rank holding query chunk i: its own
    // first (the causal one), then the others, which the merge must not care about.
    for (int i = 0; i < n; ++i)
      for (int step = 0; step <= i; ++step) {
        const int j = (i - step + n) % n;
        be->attention_block_fwd(bo, bl, q[i], k[j], v[j], C, j == i, cs);
        be->attention_lse_merge(o[i], l[i], bo, bl, cs);
      }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j <= i; ++j)
        be->attention_block_bwd(dq[i], dk[j], dv[j], g[i], o[i], l[i], q[i], k[j], v[j], C, j == i,
                                cs);
    for (int i = 0; i < n; ++i)
      for (int b = 0; b < s.batch; ++b) {
        const int64_t at = int64_t(b) * s.seq + i * C;
        Tensor want_o = out.slice(at, at + C), want_d = dqkv.slice(at, at + C);
        expect_close(o[i].slice(b * C, (b + 1) * C), want_o, 1e-5, 2e-6, "merged out");
        for (int h = 0; h < s.heads; ++h)
          expect_close(l[i].flat((int64_t(b) * s.heads + h) * C, C),
                       lse.flat((int64_t(b) * s.heads + h) * s.seq + i * C, C), 1e-5, 2e-6,
                       "merged lse");
        Tensor got = make({C, s.qkv_cols()});
        be->copy_into_cols(got, dq[i].slice(b * C, (b + 1) * C), 0);
        be->copy_into_cols(got, dk[i].slice(b * C, (b + 1) * C), hd);
        be->copy_into_cols(got, dv[i].slice(b * C, (b + 1) * C), hd + kvd);
        expect_close(got, want_d, 1e-4, 2e-5, "block dqkv");
      }
  }

  // ContextParallel on a group of one: both chunks on this rank, through its own packing,
  // merge and write-back.
  void run_class(const AttentionShape& s, CpComm mode) {
    const int64_t rows = int64_t(s.batch) * s.seq, hd = int64_t(s.heads) * s.head_dim;
    Tensor qkv = randn({rows, s.qkv_cols()}), dout = randn({rows, hd});
    Tensor out = make({rows, hd}), lse = make({s.batch, s.heads, s.seq});
    Tensor dqkv = make({rows, s.qkv_cols()});
    be->attention_fwd(out, lse, qkv, s);
    be->attention_bwd(dqkv, dout, qkv, out, lse, s);
    auto self = make_self_communicator("cp");
    ContextParallel cp(*be, *self, mode, s.seq);
    Tensor cp_out = make({rows, hd}), cp_lse = make({s.batch, s.heads, s.seq});
    Tensor cp_dqkv = randn({rows, s.qkv_cols()});  // garbage: overwritten
    cp.forward(cp_out, cp_lse, qkv, s);
    expect_close(cp_out, out, 1e-5, 2e-6, "ContextParallel out");
    cp.backward(cp_dqkv, dout, qkv, cp_out, cp_lse, s);
    expect_close(cp_dqkv, dqkv, 1e-4, 2e-5, "ContextParallel dqkv");
  }
};

// Chunks straddling the 64-row tiles, GQA and multi-head, batches of several sequences.
TEST_F(BlockAttentionTest, TwoRanksGqa) { run({2, 4 * 37, 4, 2, 16}, 2); }
TEST_F(BlockAttentionTest, FourRanksMultiHead) { run({1, 8 * 70, 2, 2, 8}, 4); }
TEST_F(BlockAttentionTest, ThreeRanksExactTilesManyKvTasks) { run({4, 6 * 64, 4, 4, 16}, 3); }
TEST_F(BlockAttentionTest, ContextParallelClassP2p) {
  run_class({2, 2 * 75, 4, 2, 16}, CpComm::p2p);
}
TEST_F(BlockAttentionTest, ContextParallelClassAllGather) {
  run_class({3, 2 * 40, 4, 1, 8}, CpComm::all_gather);
}

}  // namespace
