// The x16 layout of Q8_0 and Q4_0 weights (quant/x16_ops.h, x16_q8_avx512.cpp): a packed
// matrix's dot products against the exact sum within the fp32 rounding bound of its
// arithmetic (and against the scalar reference), and bitwise the same for a row whatever
// the number of activation rows in the call and the row's position among them; row counts
// that are no multiple of 16 and odd block counts. Skipped on a CPU without AVX-512 VNNI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/quant_matmul.h"
#include "quant/x16_layout.h"

namespace llmrun::quant {
namespace {

using detail::kX16Rows;
using detail::X16Matrix;

std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = g(rng) * std::pow(10.0f, float((i / 32 + seed) % 5) - 3.0f);
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Case {
  QType type;
  int64_t rows, cols;
};

// Weights, prepared activations and the packed matrix of one case.
struct Packed {
  std::vector<uint8_t> w, acts, prepared;
  size_t wb, ab, pb;
  std::unique_ptr<X16Matrix> m;
  Packed(const Case& k, int n) {
    wb = row_bytes(k.type, k.cols);
    ab = activation_row_bytes(k.type, k.cols);
    w.resize(wb * size_t(k.rows));
    for (int64_t r = 0; r < k.rows; ++r)
      quantize_row(k.type, random_row(k.cols, uint32_t(r)).data(), w.data() + size_t(r) * wb,
                   k.cols);
    m = std::make_unique<X16Matrix>(k.type, detail::x16_ops(k.type), k.rows, k.cols, w.data(), wb);
    pb = m->act_bytes();
    acts.resize(ab * size_t(n));
    prepared.resize(pb * size_t(n));
    for (int c = 0; c < n; ++c) {
      prepare_activation(k.type, random_row(k.cols, uint32_t(1000 + c)).data(),
                         acts.data() + size_t(c) * ab, k.cols);
      if (m->prepares_act())
        m->prepare_act(acts.data() + size_t(c) * ab, prepared.data() + size_t(c) * pb);
      else
        std::memcpy(prepared.data() + size_t(c) * pb, acts.data() + size_t(c) * ab, ab);
    }
  }
};

const Case kCases[] = {{QType::q8_0, 16, 32},  {QType::q8_0, 37, 96}, {QType::q8_0, 5, 544},
                       {QType::q8_0, 48, 768}, {QType::q4_0, 16, 32}, {QType::q4_0, 37, 96},
                       {QType::q4_0, 5, 544},  {QType::q4_0, 48, 768}};

bool have_x16() {
  return simd_level_supported(SimdLevel::avx512) && detail::x16_ops(QType::q8_0) != nullptr;
}

// Each value against the exact dot product of the dequantized rows (in double): the kernel
// rounds each block's scale product and each block's fused multiply-add once, so its error is
// at most (blocks + 1) x 2^-24 x sum |w a|; the scalar reference sums in another order and
// lies within the same bound.
TEST(QuantX16, DotMatchesExactSumAndScalarReference) {
  if (!have_x16()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const int n = 3;
  for (const Case& k : kCases) {
    Packed s(k, n);
    std::vector<float> y(size_t(n * k.rows), -1.0f);
    s.m->run(0, k.rows, s.prepared.data(), s.pb, n, y.data(), k.rows, nullptr, false);
    std::vector<float> wd(size_t(k.cols)), ad(size_t(k.cols));
    const double blocks = double(k.cols / 32);
    for (int c = 0; c < n; ++c) {
      dequantize_row(QType::q8_0, s.acts.data() + size_t(c) * s.ab, ad.data(), k.cols);
      for (int64_t r = 0; r < k.rows; ++r) {
        dequantize_row(k.type, s.w.data() + size_t(r) * s.wb, wd.data(), k.cols);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < k.cols; ++i) {
          exact += double(wd[size_t(i)]) * ad[size_t(i)];
          mag += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
        }
        const double bound = (blocks + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
        const float got = y[size_t(c * k.rows + r)];
        ASSERT_NEAR(got, exact, bound)
            << type_name(k.type) << " " << k.rows << "x" << k.cols << " row " << r << " act " << c;
        const float ref = vec_dot_scalar(k.type, k.cols, s.w.data() + size_t(r) * s.wb,
                                         s.acts.data() + size_t(c) * s.ab);
        ASSERT_NEAR(got, ref, 2 * bound) << type_name(k.type) << " row " << r;
      }
    }
  }
}

// One activation row alone (C = 1, the decode step) and the same row at every position of
// calls with C = 2..40 (every tile remainder of the kernel) give bitwise the same values.
TEST(QuantX16, RowAloneEqualsRowInAnyBatchBitwise) {
  if (!have_x16()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const int max_n = 40;
  for (const Case& k : kCases) {
    Packed s(k, max_n);
    std::vector<float> alone(size_t(max_n * k.rows));
    for (int c = 0; c < max_n; ++c)
      s.m->run(0, k.rows, s.prepared.data() + size_t(c) * s.pb, s.pb, 1,
               alone.data() + size_t(c) * size_t(k.rows), k.rows, nullptr, false);
    for (int C = 2; C <= max_n; ++C)
      for (int first = 0; first + C <= max_n; first += std::max(1, (max_n - C) / 3)) {
        std::vector<float> y(size_t(C * k.rows));
        s.m->run(0, k.rows, s.prepared.data() + size_t(first) * s.pb, s.pb, C, y.data(), k.rows,
                 nullptr, false);
        for (int c = 0; c < C; ++c)
          for (int64_t r = 0; r < k.rows; ++r)
            ASSERT_TRUE(
                same_bits(y[size_t(c * k.rows + r)], alone[size_t((first + c) * k.rows + r)]))
                << type_name(k.type) << " C=" << C << " position " << c << " row " << r;
      }
  }
}

// A range of rows that starts and ends inside groups, with bias and accumulation: only those
// rows are written, each bitwise the whole run's value (+ bias, + the old value).
TEST(QuantX16, RowRangeWithBiasAndAccumulate) {
  if (!have_x16()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const Case k{QType::q8_0, 53, 256};
  const int n = 5;
  Packed s(k, n);
  std::vector<float> full(size_t(n * k.rows)), y(size_t(n * k.rows), 2.0f), bias(size_t(k.rows));
  for (int64_t r = 0; r < k.rows; ++r) bias[size_t(r)] = 0.25f * float(r);
  s.m->run(0, k.rows, s.prepared.data(), s.pb, n, full.data(), k.rows, nullptr, false);
  const int64_t r0 = 7, r1 = 41;
  s.m->run(r0, r1, s.prepared.data(), s.pb, n, y.data(), k.rows, bias.data(), true);
  for (int c = 0; c < n; ++c)
    for (int64_t r = 0; r < k.rows; ++r) {
      const float got = y[size_t(c * k.rows + r)];
      if (r < r0 || r >= r1) {
        ASSERT_EQ(got, 2.0f) << "row " << r << " outside the range was written";
      } else {
        const float expect = 2.0f + (full[size_t(c * k.rows + r)] + bias[size_t(r)]);
        ASSERT_TRUE(same_bits(got, expect)) << "row " << r;
      }
    }
}

// A plan built at AVX-512 (its Q8_0 and Q4_0 parts repacked) and run after the level was
// lowered runs the original rows: vec_dot's values at that level, bitwise, for n = 1 and a
// batch; back at AVX-512 the x16 values again.
TEST(QuantX16, PlanFollowsTheLevelLoweredAfterConstruction) {
  if (!have_x16()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const SimdLevel initial = active_simd_level();
  set_simd_level(SimdLevel::avx512);
  const int64_t cols = 256, n = 6;
  Packed q8({QType::q8_0, 21, cols}, 1), q4({QType::q4_0, 19, cols}, 1);
  const QuantPlan plan(
      {{QType::q8_0, 21, cols, q8.w.data()}, {QType::q4_0, 19, cols, q4.w.data()}});
  std::vector<float> x(size_t(n * cols));
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> v = random_row(cols, uint32_t(500 + i));
    std::copy(v.begin(), v.end(), x.begin() + i * cols);
  }
  for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    if (!simd_level_supported(level)) continue;
    set_simd_level(level);
    for (int64_t batch : {int64_t(1), n}) {
      std::vector<float> y(size_t(batch * plan.out()));
      plan.run(x.data(), batch, y.data(), plan.out(), nullptr, false);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t o = 0; o < plan.out(); ++o) {
          const Packed& p = o < 21 ? q8 : q4;
          const QType t = o < 21 ? QType::q8_0 : QType::q4_0;
          const int64_t r = o < 21 ? o : o - 21;
          std::vector<uint8_t> a(activation_row_bytes(t, cols));
          prepare_activation(t, x.data() + i * cols, a.data(), cols);
          const uint8_t* wr = p.w.data() + size_t(r) * p.wb;
          float expect = vec_dot(t, cols, wr, a.data());
          if (level == SimdLevel::avx512) {  // the x16 dot of that row alone
            const X16Matrix one(t, detail::x16_ops(t), 1, cols, wr, p.wb);
            std::vector<uint8_t> pa(one.act_bytes());
            one.prepare_act(a.data(), pa.data());
            one.run(0, 1, pa.data(), 0, 1, &expect, 0, nullptr, false);
          }
          ASSERT_TRUE(same_bits(y[size_t(i * plan.out() + o)], expect))
              << simd_level_name(level) << " n=" << batch << " row " << o;
        }
    }
  }
  set_simd_level(initial);
}

// Below AVX-512 no type has a table (the plans then run the original rows).
TEST(QuantX16, NoTableBelowAvx512) {
  const SimdLevel initial = active_simd_level();
  set_simd_level(SimdLevel::scalar);
  EXPECT_EQ(detail::x16_ops(QType::q8_0), nullptr);
  EXPECT_EQ(detail::x16_ops(QType::q4_0), nullptr);
  set_simd_level(initial);
  EXPECT_EQ(detail::x16_ops(QType::f16), nullptr);
  if (simd_level_supported(SimdLevel::avx2)) {
    set_simd_level(SimdLevel::avx2);
    EXPECT_EQ(detail::x16_ops(QType::q8_0), nullptr);
    set_simd_level(initial);
  }
}

}  // namespace
}  // namespace llmrun::quant
