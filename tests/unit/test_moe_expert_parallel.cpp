// One MoE layer under expert parallelism against the same layer on one rank: two in-process
// ranks (tests/unit/thread_comm.h) each hold half the experts and their own tokens; each
// rank's output and input gradient must equal what one rank holding every expert computes
// for those tokens, its router gradient that rank's, and each expert's weight gradient the sum
// over both ranks' tokens. Rank 1's tokens lean towards the router's first expert, so the
// ranks send each other uneven row counts.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "model/moe.h"
#include "thread_comm.h"

namespace llmrun {
namespace {

constexpr int P = 2, E = 4, K = 2, D = 16, F = 8, N = 7;

ModelConfig layer_config(int ep) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.d_model = D;
  c.moe.experts = E;
  c.moe.top_k = K;
  c.moe.expert_ffn = F;
  c.moe.aux_loss = 0.01f;
  c.moe.z_loss = 0.001f;
  c.moe.ep = ep;
  return c;
}

std::vector<float> random_values(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Host tensors over vectors kept alive by the owner.
struct Arena {
  std::vector<std::vector<float>> floats;
  std::vector<std::vector<int32_t>> ints;
  Tensor alloc(DType t, std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (t == DType::i32) {
      ints.emplace_back(size_t(n), 0);
      return Tensor(ints.back().data(), t, dims);
    }
    floats.emplace_back(size_t(n), 0.0f);
    return Tensor(floats.back().data(), t, dims);
  }
  Tensor of(std::vector<float> v, std::initializer_list<int64_t> dims) {
    floats.push_back(std::move(v));
    return Tensor(floats.back().data(), DType::f32, dims);
  }
};

// The layer's weights: the router, then experts [first, first + count).
struct Weights {
  std::vector<float> router;
  std::vector<std::vector<float>> gate_up, down;
};
Weights full_weights() {
  Weights w;
  w.router = random_values(size_t(E) * D, 1, 0.5f);
  for (int e = 0; e < E; ++e) {
    w.gate_up.push_back(random_values(size_t(2 * F) * D, 10 + e, 0.3f));
    w.down.push_back(random_values(size_t(D) * F, 20 + e, 0.3f));
  }
  return w;
}
MoeTensors tensors(Arena& a, const Weights& w, int first, int count, bool zeros) {
  MoeTensors t;
  t.router = a.of(zeros ? std::vector<float>(w.router.size()) : w.router, {E, D});
  for (int e = first; e < first + count; ++e) {
    t.gate_up.push_back(
        a.of(zeros ? std::vector<float>(w.gate_up[size_t(e)].size()) : w.gate_up[size_t(e)],
             {2 * F, D}));
    t.down.push_back(
        a.of(zeros ? std::vector<float>(w.down[size_t(e)].size()) : w.down[size_t(e)], {D, F}));
  }
  return t;
}

struct Result {
  std::vector<float> y, dx, router;
  std::vector<std::vector<float>> gate_up, down;  // gradients of the experts the rank holds
};

// One rank's forward and backward over its tokens (seeded by `rank`).
Result run_layer(Backend& be, const Weights& w, int rank, int first, int count, int ep,
                 Communicator* comm) {
  const ModelConfig cfg = layer_config(ep);
  Arena a;
  const MoeAllocator alloc = [&](DType t, std::initializer_list<int64_t> dims) {
    return a.alloc(t, dims);
  };
  MoeActivations acts = allocate_moe_activations(cfg, N, alloc);
  MoeScratch s = allocate_moe_scratch(cfg, N, alloc);
  s.loss_scale = 0.5f;
  const MoeTensors wt = tensors(a, w, first, count, false), g = tensors(a, w, first, count, true);
  // Rank 1's tokens lean to the first experts: uneven routing across ranks.
  std::vector<float> xv = random_values(size_t(N) * D, 100 + rank, 1.0f);
  for (int t = 0; t < N && rank == 1; ++t)
    for (int c = 0; c < D; ++c) xv[size_t(t) * D + c] += 0.8f * w.router[size_t(c)];
  const Tensor x = a.of(xv, {N, D}),
               res = a.of(random_values(size_t(N) * D, 200 + rank, 1.0f), {N, D});
  const Tensor dy = a.of(random_values(size_t(N) * D, 300 + rank, 1.0f), {N, D});
  const Tensor y = a.alloc(DType::f32, {N, D}), dx = a.alloc(DType::f32, {N, D});
  moe_forward(be, cfg.moe, wt, acts, x, res, y, false, comm);
  moe_backward(be, cfg.moe, wt, g, acts, s, dy, x, dx, comm);
  Result r;
  r.y.assign(y.f32(), y.f32() + y.numel());
  r.dx.assign(dx.f32(), dx.f32() + dx.numel());
  r.router.assign(g.router.f32(), g.router.f32() + g.router.numel());
  for (int j = 0; j < count; ++j) {
    const Tensor& gu = g.gate_up[size_t(j)];
    const Tensor& dn = g.down[size_t(j)];
    r.gate_up.emplace_back(gu.f32(), gu.f32() + gu.numel());
    r.down.emplace_back(dn.f32(), dn.f32() + dn.numel());
  }
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << what << " element " << i;
}

TEST(MoeExpertParallel, TwoRanksEqualOneRankHoldingEveryExpert) {
  const Weights w = full_weights();
  auto be = make_cpu_backend(1);
  std::vector<Result> one;
  for (int rank = 0; rank < P; ++rank) one.push_back(run_layer(*be, w, rank, 0, E, 1, nullptr));

  testing::Mailbox box;
  std::vector<Result> split(P);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < P; ++rank)
    ranks.emplace_back([&, rank] {
      auto rank_be = make_cpu_backend(1);
      testing::ThreadComm ep(box, rank, P);
      split[size_t(rank)] = run_layer(*rank_be, w, rank, rank * (E / P), E / P, P, &ep);
    });
  for (auto& t : ranks) t.join();

  int from_other_rank = 0;  // rows that really crossed ranks
  for (int rank = 0; rank < P; ++rank) {
    const std::string r = "rank " + std::to_string(rank);
    expect_close(split[size_t(rank)].y, one[size_t(rank)].y, r + " output");
    expect_close(split[size_t(rank)].dx, one[size_t(rank)].dx, r + " input gradient");
    expect_close(split[size_t(rank)].router, one[size_t(rank)].router, r + " router gradient");
    for (int j = 0; j < E / P; ++j) {
      const int e = rank * (E / P) + j;
      std::vector<float> gu(one[0].gate_up[size_t(e)].size()), dn(one[0].down[size_t(e)].size());
      for (int p = 0; p < P; ++p) {
        for (size_t i = 0; i < gu.size(); ++i) gu[i] += one[size_t(p)].gate_up[size_t(e)][i];
        for (size_t i = 0; i < dn.size(); ++i) dn[i] += one[size_t(p)].down[size_t(e)][i];
        if (p != rank)
          for (float v : one[size_t(p)].down[size_t(e)]) from_other_rank += v != 0.0f;
      }
      expect_close(split[size_t(rank)].gate_up[size_t(j)], gu,
                   "expert " + std::to_string(e) + " gate_up gradient");
      expect_close(split[size_t(rank)].down[size_t(j)], dn,
                   "expert " + std::to_string(e) + " down gradient");
    }
  }
  EXPECT_GT(from_other_rank, 0) << "no token was routed to another rank's expert";
}

}  // namespace
}  // namespace llmrun
