// Device sampling's math (kernels/sampling_math.cuh, compiled here for the CPU) against serve's
// TokenSampler: for the same seed, logits and temperature / top-k / min-p / top-p, the sorted
// walk picks the very token the host sampler picks. On a GPU, CudaBackend::sample_rows must
// pick what this host math picks for the same uniforms (skipped without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "../../kernels/sampling_math.cuh"
#include "backend/backend.h"
#include "serve/sampler.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace llmrun {
namespace {

// The ids of `logits` highest first, ties by lower id (the device's stable descending sort).
std::vector<int32_t> sorted_ids(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

int32_t host_math(const std::vector<float>& logits, const kernels::RowSampling& p) {
  const std::vector<int32_t> order = sorted_ids(logits);
  std::vector<float> sorted(logits.size());
  for (size_t i = 0; i < order.size(); ++i) sorted[i] = logits[size_t(order[i])];
  std::vector<double> w(logits.size());
  return order[size_t(kernels::sample_sorted(sorted.data(), int(sorted.size()), p, w.data()))];
}

struct Case {
  std::vector<float> logits;
  SamplingParams params;
};

std::vector<Case> cases() {
  std::mt19937 rng(7);
  std::vector<Case> out;
  const float temps[] = {0.3f, 0.7f, 1.0f, 1.6f};
  const int top_ks[] = {0, 1, 2, 5, 40};
  const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.05f};
  const float min_ps[] = {0.0f, 0.05f, 0.3f};
  for (int i = 0; i < 600; ++i) {
    Case c;
    const int vocab = 1 + int(rng() % 300);
    std::normal_distribution<float> logit(0.0f, 1.0f + float(i % 5));
    c.logits.resize(size_t(vocab));
    for (float& l : c.logits) l = logit(rng);
    // Ties: a quarter of the cases repeat values (the sort must keep the lower id first).
    if (i % 4 == 0)
      for (size_t j = 1; j < c.logits.size(); j += 3) c.logits[j] = c.logits[j - 1];
    c.params.temperature = temps[i % 4];
    c.params.top_k = top_ks[(i / 4) % 5];
    c.params.top_p = top_ps[(i / 20) % 4];
    c.params.min_p = min_ps[(i / 80) % 3];
    c.params.seed = 1000 + uint64_t(i);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(SamplingMath, PicksTheTokenTheHostSamplerPicks) {
  int drew = 0;
  for (const Case& c : cases()) {
    TokenSampler host(c.params);
    const int32_t want = host.sample(c.logits.data(), int(c.logits.size()));
    // The host sampler's first (and only) draw, when it draws: generate_canonical, as
    // discrete_distribution and TokenSampler::uniform both take it.
    std::mt19937_64 g(c.params.seed);
    const double u = std::generate_canonical<double, 53>(g);
    const kernels::RowSampling p{c.params.temperature, c.params.top_k, c.params.top_p,
                                 c.params.min_p, u};
    ASSERT_EQ(host_math(c.logits, p), want)
        << "vocab " << c.logits.size() << " T " << c.params.temperature << " top_k "
        << c.params.top_k << " top_p " << c.params.top_p << " min_p " << c.params.min_p;
    drew += want != sorted_ids(c.logits)[0];
  }
  EXPECT_GT(drew, 100);  // the draws reach past the top token, not only argmax-like cases
}

TEST(SamplingMath, TheUniformPicksAlongTheCumulativeMass) {
  // Weights exp(0), exp(-ln 2), exp(-ln 4) = 1, 1/2, 1/4 of 7/4: partial sums 4/7, 6/7, 1.
  const std::vector<float> sorted = {0.0f, -0.69314718f, -1.38629436f};
  std::vector<double> w(3);
  auto pick = [&](double u) {
    return kernels::sample_sorted(sorted.data(), 3, {1.0f, 0, 1.0f, 0.0f, u}, w.data());
  };
  EXPECT_EQ(pick(0.0), 0);
  EXPECT_EQ(pick(0.57), 0);
  EXPECT_EQ(pick(0.58), 1);
  EXPECT_EQ(pick(0.857), 1);
  EXPECT_EQ(pick(0.858), 2);
  EXPECT_EQ(pick(0.999999), 2);
  // top_k 2 keeps partial sums 2/3, 1; min_p 0.6 keeps only the top token, whatever u is.
  EXPECT_EQ(kernels::sample_sorted(sorted.data(), 3, {1.0f, 2, 1.0f, 0.0f, 0.7}, w.data()), 1);
  EXPECT_EQ(kernels::sample_sorted(sorted.data(), 3, {1.0f, 0, 1.0f, 0.6f, 0.99}, w.data()), 0);
}

TEST(SamplingMath, TheCpuBackendLeavesSamplingToTheHost) {
  auto cpu = make_cpu_backend(1);
  EXPECT_FALSE(cpu->sample_rows(Tensor(), Tensor(), {}));
}

TEST(CudaSampling, DeviceRowsPickWhatTheHostMathPicks) {
#if LLMRUN_HAVE_CUDA
  if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  auto be = make_cuda_backend(0);
  ASSERT_TRUE(be->sample_rows(Tensor(), Tensor(), {}));
  // Rows of one vocabulary per batch: 8 cases at a time, each its own row and parameters.
  const std::vector<Case> all = cases();
  std::mt19937_64 g(99);
  for (int vocab : {1, 37, 300, 50257}) {
    const int rows = 8;
    std::vector<float> logits(size_t(rows) * vocab);
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (float& l : logits) l = d(g);
    std::vector<Backend::RowSample> params(rows);
    for (int r = 0; r < rows; ++r) {
      const SamplingParams& sp = all[size_t(r * 37 + vocab % 7)].params;
      params[size_t(r)] = {sp.temperature, sp.top_k, sp.top_p, sp.min_p,
                           std::generate_canonical<double, 53>(g)};
    }
    Buffer lb = be->allocate(logits.size() * 4), ib = be->allocate(size_t(rows) * 4);
    const Tensor L = lb.as(DType::f32, {rows, vocab}), I = ib.as(DType::i32, {rows});
    be->copy(L, Tensor(logits.data(), DType::f32, {rows, vocab}));
    ASSERT_TRUE(be->sample_rows(I, L, params));
    std::vector<int32_t> got(static_cast<size_t>(rows));
    be->copy(Tensor(got.data(), DType::i32, {rows}), I);
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> row(logits.begin() + int64_t(r) * vocab,
                                   logits.begin() + int64_t(r + 1) * vocab);
      const Backend::RowSample& p = params[size_t(r)];
      EXPECT_EQ(got[size_t(r)], host_math(row, {p.temperature, p.top_k, p.top_p, p.min_p, p.u}))
          << "vocab " << vocab << " row " << r;
    }
  }
#else
  GTEST_SKIP() << "SKIPPED: no CUDA device (this build has no CUDA backend)";
#endif
}

}  // namespace
}  // namespace llmrun
