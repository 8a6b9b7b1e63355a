// The CPU inference linear (linear_rows): the product against a double-precision reference,
// and the property serving relies on, that a row's result does not depend on the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "test_backend.h"

using namespace llmrun;

namespace {

struct Problem {
  int64_t m, n, k;
  std::vector<float> x, w, bias, y0;
};

Problem make_problem(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Problem p{m, n, k, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t count) {
    v.resize(count);
    for (auto& e : v) e = nd(rng);
  };
  fill(p.x, size_t(m * k));
  fill(p.w, size_t(n * k));
  fill(p.bias, size_t(n));
  fill(p.y0, size_t(m * n));
  return p;
}

// linear_rows of rows [r0, r0 + rows) of p.x, with y starting from p.y0's rows.
std::vector<float> run(Backend& be, const Problem& p, int64_t r0, int64_t rows, bool with_bias,
                       bool accumulate) {
  std::vector<float> x(p.x.begin() + r0 * p.k, p.x.begin() + (r0 + rows) * p.k);
  std::vector<float> y(p.y0.begin() + r0 * p.n, p.y0.begin() + (r0 + rows) * p.n);
  std::vector<float> w = p.w, b = p.bias;
  Tensor bt(b.data(), DType::f32, {p.n});
  be.linear_rows(Tensor(y.data(), DType::f32, {rows, p.n}),
                 Tensor(x.data(), DType::f32, {rows, p.k}),
                 Tensor(w.data(), DType::f32, {p.n, p.k}), with_bias ? &bt : nullptr, accumulate);
  return y;
}

}  // namespace

// Shapes with every kind of remainder: k not a multiple of the 16 lanes, n and m not
// multiples of the 4 x 4 tile, one row (decode), and enough rows for several x blocks.
TEST(LinearRows, MatchesDoubleReference) {
  auto be = test::make_test_backend(2);
  const int64_t shapes[][3] = {{1, 7, 5},     {1, 301, 768}, {3, 65, 33},
                               {5, 130, 100}, {9, 17, 16},   {300, 37, 260}};
  for (const auto& s : shapes) {
    const Problem p = make_problem(s[0], s[1], s[2], 11);
    for (int mode = 0; mode < 4; ++mode) {
      const bool with_bias = mode & 1, accumulate = mode & 2;
      const std::vector<float> y = run(*be, p, 0, p.m, with_bias, accumulate);
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          double ref = 0;
          for (int64_t c = 0; c < p.k; ++c) ref += double(p.x[i * p.k + c]) * p.w[j * p.k + c];
          if (with_bias) ref += p.bias[j];
          if (accumulate) ref += p.y0[i * p.n + j];
          ASSERT_NEAR(y[i * p.n + j], ref, 1e-5 * (std::sqrt(double(p.k)) + 1) * 4)
              << "m=" << p.m << " n=" << p.n << " k=" << p.k << " mode " << mode << " at " << i
              << "," << j;
        }
    }
  }
}

// Each row of a many-row call is bitwise the row computed alone or in any other slice, with
// any thread count: what lets continuous batching reproduce single-sequence generation.
TEST(LinearRows, RowsAreBitwiseIndependentOfTheBatch) {
  const Problem p = make_problem(70, 203, 777, 3);
  auto be2 = test::make_test_backend(2);
  auto be1 = test::make_test_backend(1);
  const std::vector<float> all = run(*be2, p, 0, p.m, true, true);
  const int64_t slices[][2] = {{0, 1},  {5, 1},  {69, 1}, {3, 2},  {60, 3},
                               {20, 4}, {10, 7}, {1, 33}, {40, 30}};
  for (const auto& s : slices) {
    for (Backend* be : {be1.get(), be2.get()}) {
      const std::vector<float> part = run(*be, p, s[0], s[1], true, true);
      EXPECT_EQ(0, std::memcmp(part.data(), all.data() + s[0] * p.n, part.size() * sizeof(float)))
          << "rows " << s[0] << ".." << s[0] + s[1] << " with " << be->threads() << " threads";
    }
  }
}

// The decode path (up to 16 rows, all x rows against one W row at a time, lanes summed for
// several rows at once) and the 4 x 4 tiles beyond it give every element the bitwise result
// of the one-row call: each batch size 1..20, lengths with and without a lane tail.
TEST(LinearRows, EveryBatchSizeMatchesOneRowBitwise) {
  auto be1 = test::make_test_backend(1);
  auto be2 = test::make_test_backend(2);
  for (const int64_t k : {1, 7, 16, 17, 31, 32, 33, 48, 50, 64, 100, 512, 777, 785}) {
    const Problem p = make_problem(20, 45, k, 5 + uint32_t(k));
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < p.m; ++i) alone.push_back(run(*be1, p, i, 1, true, true));
    for (int64_t m = 1; m <= p.m; ++m)
      for (Backend* be : {be1.get(), be2.get()}) {
        const std::vector<float> y = run(*be, p, 0, m, true, true);
        for (int64_t i = 0; i < m; ++i)
          ASSERT_EQ(0, std::memcmp(y.data() + i * p.n, alone[size_t(i)].data(),
                                   size_t(p.n) * sizeof(float)))
              << "k=" << k << " m=" << m << " row " << i << " with " << be->threads() << " threads";
      }
  }
}

// Pins down each element's arithmetic, the contract every path (one row, decode passes,
// tiles) keeps: chunks of 16 values (the last zero-padded) fused-multiply-added
// into one 16-lane accumulator in k order, then the lanes summed as (l + l+8) pairs, those as
// (h + h+4), the quarter sums as (q0 + q2) + (q1 + q3). Widths with and without a tail, for
// one row and for batches on the decode and the tile paths.
TEST(LinearRows, ElementsAreTheSixteenLaneDotProduct) {
  auto be = test::make_test_backend(1);
  auto mul_add = [](float a, float b, float c) {
#ifdef __FMA__
    return std::fma(a, b, c);  // the kernels' vector multiply-adds are fused
#else
    return a * b + c;
#endif
  };
  for (const int64_t k : {5, 16, 20, 32, 40, 48, 63, 768, 3072, 777}) {
    const Problem p = make_problem(20, 9, k, 17 + uint32_t(k));
    for (const int64_t m : {1, 3, 20}) {
      const std::vector<float> y = run(*be, p, 0, m, true, false);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          float a[16] = {};
          for (int64_t c = 0; c * 16 < k; ++c)
            for (int l = 0; l < 16; ++l) {
              const int64_t e = c * 16 + l;
              const float xv = e < k ? p.x[size_t(i * k + e)] : 0.0f;
              const float wv = e < k ? p.w[size_t(j * k + e)] : 0.0f;
              a[l] = mul_add(xv, wv, a[l]);
            }
          float h[8], q[4];
          for (int l = 0; l < 8; ++l) h[l] = a[l] + a[l + 8];
          for (int l = 0; l < 4; ++l) q[l] = h[l] + h[l + 4];
          const float want = ((q[0] + q[2]) + (q[1] + q[3])) + p.bias[size_t(j)];
          const float got = y[size_t(i * p.n + j)];
          ASSERT_EQ(0, std::memcmp(&got, &want, sizeof got))
              << "k=" << k << " m=" << m << " at " << i << "," << j << ": " << got << " vs "
              << want;
        }
    }
  }
}

TEST(LinearRows, RejectsMismatchedShapes) {
  auto be = test::make_test_backend(1);
  std::vector<float> x(6), w(12), y(8);
  EXPECT_ANY_THROW(be->linear_rows(Tensor(y.data(), DType::f32, {2, 4}),
                                   Tensor(x.data(), DType::f32, {2, 3}),
                                   Tensor(w.data(), DType::f32, {3, 4}), nullptr, false));
}
