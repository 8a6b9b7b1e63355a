// The decode-step attention kernel (cpu_decode_attention.h) against a double-precision scalar
// reference, and CpuBackend::attention_cached's decode path against its tiled path.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention_test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_decode_attention.h"

using namespace llmrun;
using attention_test::expect_close;
using attention_test::poisoned;

namespace {

struct Shape {
  int heads, kv_heads, d;
};

// Row r of q (position pos0 + r) over keys [0, pos0 + r], one head at a time, in double.
std::vector<float> reference(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, int nq, int64_t pos0, const Shape& s) {
  const int64_t hd = int64_t(s.heads) * s.d, kvd = int64_t(s.kv_heads) * s.d;
  const int group = s.heads / s.kv_heads;
  std::vector<float> out(size_t(nq * hd));
  for (int r = 0; r < nq; ++r)
    for (int h = 0; h < s.heads; ++h) {
      const int64_t n = pos0 + r + 1, kv = int64_t(h / group) * s.d;
      std::vector<double> p(static_cast<size_t>(n));
      double mx = -INFINITY, sum = 0;
      for (int64_t t = 0; t < n; ++t) {
        double dot = 0;
        for (int c = 0; c < s.d; ++c)
          dot += double(q[size_t(r * hd + h * s.d + c)]) * k[size_t(t * kvd + kv + c)];
        p[size_t(t)] = dot / std::sqrt(double(s.d));
        mx = std::max(mx, p[size_t(t)]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int c = 0; c < s.d; ++c) {
        double o = 0;
        for (int64_t t = 0; t < n; ++t) o += p[size_t(t)] * v[size_t(t * kvd + kv + c)];
        out[size_t(r * hd + h * s.d + c)] = float(o / sum);
      }
    }
  return out;
}

void check(const Shape& s, int nq, int64_t pos0, int threads) {
  std::mt19937 rng(uint32_t(s.heads * 1000 + s.d * 10 + nq + pos0));
  const int64_t hd = int64_t(s.heads) * s.d, kvd = int64_t(s.kv_heads) * s.d;
  const int64_t rows = pos0 + nq + 3;  // a cache longer than the keys read
  std::vector<float> q = attention_test::randn(size_t(nq * hd), rng);
  std::vector<float> k = attention_test::randn(size_t(rows * kvd), rng, 2.0f);
  std::vector<float> v = attention_test::randn(size_t(rows * kvd), rng);
  for (int64_t t = pos0 + nq; t < rows; ++t)  // keys past a row's position must not be read
    for (int64_t c = 0; c < kvd; ++c) k[size_t(t * kvd + c)] = v[size_t(t * kvd + c)] = NAN;
  std::vector<float> out = poisoned(size_t(nq * hd));
  cpu::decode_attention(q.data(), hd, k.data(), v.data(), kvd, out.data(), hd, nq, pos0, s.heads,
                        s.kv_heads, s.d, threads);
  expect_close(out, reference(q, k, v, nq, pos0, s), 2e-5, 2e-6,
               "decode_attention heads " + std::to_string(s.heads) + "/" +
                   std::to_string(s.kv_heads) + " d " + std::to_string(s.d) + " nq " +
                   std::to_string(nq) + " pos0 " + std::to_string(pos0) + " threads " +
                   std::to_string(threads));
}

}  // namespace

TEST(DecodeAttention, MatchesScalarReference) {
  for (const Shape& s : {Shape{12, 12, 64}, Shape{8, 8, 32}, Shape{8, 2, 16}, Shape{3, 1, 24},
                         Shape{4, 2, 128}, Shape{20, 20, 16}})
    for (int nq : {1, 2, 4})
      for (int64_t pos0 : {0, 1, 17, 130})
        for (int threads : {1, 2}) check(s, nq, pos0, threads);
}

// Enough work (keys x heads x head_dim above the threshold) for the heads to split over threads.
TEST(DecodeAttention, SplitsHeadsOverThreadsOnLongContexts) {
  for (int threads : {2, 3, 16}) check(Shape{12, 4, 64}, 1, 300, threads);
  check(Shape{5, 5, 64}, 2, 500, 2);  // heads not a multiple of the team
}

// attention_cached runs decode steps through the kernel above and longer blocks through the
// tiled flash kernel: the same rows must agree either way.
TEST(DecodeAttention, BackendDecodePathAgreesWithTiledPath) {
  CpuBackend be(2);
  const Shape s{8, 4, 32};
  const int hd = s.heads * s.d, kvd = s.kv_heads * s.d, total = 90, start = 80;
  std::mt19937 rng(7);
  std::vector<float> q = attention_test::randn(size_t(total * hd), rng);
  std::vector<float> k = attention_test::randn(size_t(total * kvd), rng);
  std::vector<float> v = attention_test::randn(size_t(total * kvd), rng);
  const Tensor kc(k.data(), DType::f32, {total, kvd}), vc(v.data(), DType::f32, {total, kvd});
  // rows [start, total) at once: the tiled path (10 rows)
  std::vector<float> tiled = poisoned(size_t((total - start) * hd));
  be.attention_cached(Tensor(tiled.data(), DType::f32, {total - start, hd}),
                      Tensor(q.data() + start * hd, DType::f32, {total - start, hd}), kc, vc, start,
                      s.heads, s.kv_heads, s.d);
  // the same rows one and three at a time: the decode path
  std::vector<float> steps = poisoned(tiled.size());
  for (int r = start; r < total;) {
    const int n = (r % 2 == 0 && r + 3 <= total) ? 3 : 1;
    be.attention_cached(Tensor(steps.data() + (r - start) * hd, DType::f32, {n, hd}),
                        Tensor(q.data() + r * hd, DType::f32, {n, hd}), kc, vc, r, s.heads,
                        s.kv_heads, s.d);
    r += n;
  }
  expect_close(steps, tiled, 1e-5, 2e-6, "decode path vs tiled path");
}
