// The one-activation-row (decode) path of QuantPlan (quant_gemv.h): at every SIMD level the
// CPU has, each output of a decode step is bitwise vec_dot's value (the x16 dot's where the
// type runs in that layout: plan_row_reference, within fp32 rounding of the scalar
// reference) and the same row's value inside a batch, with the rows split between two
// threads, over plans of several parts and types (row counts no multiple of 16, parts that
// start inside a 16-row group), odd block counts and the bias / accumulate epilogue.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/quant_gemv.h"
#include "quant/quant_matmul.h"
#include "quant_row_reference.h"

using namespace llmrun::quant;

namespace {

std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = g(rng) * std::pow(10.0f, float((i / 32) % 4) - 2);
  return x;
}

struct Matrix {
  QType type;
  int64_t rows, cols;
  std::vector<uint8_t> data;
  Matrix(QType t, int64_t r, int64_t c, uint32_t seed) : type(t), rows(r), cols(c) {
    data.resize(row_bytes(t, c) * size_t(r));
    for (int64_t i = 0; i < r; ++i)
      quantize_row(t, values(c, seed + uint32_t(i)).data(), data.data() + i * row_bytes(t, c), c);
  }
  QuantMatrix view() const { return {type, rows, cols, data.data()}; }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(QuantGemv, DecodeEqualsVecDotAndBatchBitwise) {
  const int threads = omp_get_max_threads();
  const SimdLevel initial = active_simd_level();
  omp_set_num_threads(2);
  // (types of the parts, columns): 544 columns = 17 blocks of 32, an unpaired last block
  const std::vector<std::pair<std::vector<QType>, int64_t>> plans = {
      {{QType::q8_0}, 544},
      {{QType::q4_0}, 544},
      {{QType::q8_0, QType::q4_0}, 768},
      {{QType::q4_k, QType::q6_k, QType::q4_k}, 768},
      {{QType::q6_k}, 512},
      {{QType::q4_k, QType::f16}, 256},
  };
  for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    if (!simd_level_supported(level)) continue;
    set_simd_level(level);
    for (const auto& [types, cols] : plans) {
      std::vector<Matrix> ms;
      std::vector<QuantMatrix> parts;
      for (size_t k = 0; k < types.size(); ++k)
        ms.emplace_back(types[k], 37 + 30 * int64_t(k), cols, 10 * uint32_t(k));
      for (const Matrix& m : ms) parts.push_back(m.view());
      const QuantPlan plan(parts);
      const int64_t out = plan.out(), batch = 5;
      std::vector<float> x(size_t(batch * cols));
      for (int64_t i = 0; i < batch; ++i) {
        const std::vector<float> v = values(cols, 1000 + uint32_t(i));
        std::copy(v.begin(), v.end(), x.begin() + i * cols);
      }
      std::vector<float> bias = values(out, 7);
      std::vector<float> batched(size_t(batch * out));
      plan.run(x.data(), batch, batched.data(), out, nullptr, false);
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<float> y(static_cast<size_t>(out));
        plan.run(x.data() + i * cols, 1, y.data(), out, nullptr, false);
        std::vector<float> acc(size_t(out), 0.5f);
        plan.run(x.data() + i * cols, 1, acc.data(), out, bias.data(), true);
        int64_t o = 0;
        for (const Matrix& m : ms) {
          std::vector<uint8_t> a(activation_row_bytes(m.type, cols));
          prepare_activation(m.type, x.data() + i * cols, a.data(), cols);
          for (int64_t r = 0; r < m.rows; ++r, ++o) {
            const uint8_t* wr = m.data.data() + r * row_bytes(m.type, cols);
            const float v = plan_row_reference(m.type, cols, wr, a.data());
            // the x16 layout's values are the scalar reference's within fp32 rounding
            std::vector<float> wd(static_cast<size_t>(cols));
            dequantize_row(m.type, wr, wd.data(), cols);
            double mag = 0;
            for (int64_t k = 0; k < cols; ++k)
              mag += std::fabs(double(wd[size_t(k)]) * x[size_t(i * cols + k)]);
            ASSERT_NEAR(v, vec_dot_scalar(m.type, cols, wr, a.data()), 2e-5 * mag + 1e-9)
                << simd_level_name(level) << " " << type_name(m.type) << " row " << o;
            ASSERT_TRUE(same_bits(y[size_t(o)], v))
                << simd_level_name(level) << " " << type_name(m.type) << " row " << o << ": "
                << y[size_t(o)] << " vs " << v;
            ASSERT_TRUE(same_bits(batched[size_t(i * out + o)], v))
                << simd_level_name(level) << " " << type_name(m.type) << " row " << o;
            float expect = v;
            expect += bias[size_t(o)];
            ASSERT_TRUE(same_bits(acc[size_t(o)], 0.5f + expect))
                << simd_level_name(level) << " row " << o;
          }
        }
      }
    }
  }
  set_simd_level(initial);
  omp_set_num_threads(threads);
}

TEST(QuantGemv, RowsMatchVecDotForLongRows) {
  // Rows of 4096 values (128 Q8_0 blocks, 16 Q4_K superblocks) and of 2304 (9 superblocks, an
  // odd count), through gemv_rows directly: bitwise vec_dot at each level, and within fp32
  // summation error of the scalar reference (so a kernel that shares a mistake with its
  // level's vec_dot fails too).
  const SimdLevel initial = active_simd_level();
  for (int64_t n : {4096, 2304})
    for (QType t : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q6_k}) {
      const size_t rb = row_bytes(t, n);
      const Matrix m(t, 9, n, 55);
      const std::vector<float> x = values(n, 3);
      std::vector<uint8_t> a(activation_row_bytes(t, n));
      prepare_activation(t, x.data(), a.data(), n);
      std::vector<float> xd(static_cast<size_t>(n)), wd(static_cast<size_t>(n));
      dequantize_row(activation_type(t), a.data(), xd.data(), n);
      for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
        if (!simd_level_supported(level)) continue;
        set_simd_level(level);
        std::vector<float> y(9);
        gemv_rows(t, n, m.data.data(), rb, 9, a.data(), y.data());
        for (int64_t r = 0; r < 9; ++r) {
          const uint8_t* w = m.data.data() + size_t(r) * rb;
          EXPECT_TRUE(same_bits(y[size_t(r)], vec_dot(t, n, w, a.data())))
              << type_name(t) << " " << simd_level_name(level) << " row " << r;
          dequantize_row(t, w, wd.data(), n);
          double mag = 0;
          for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wd[size_t(i)]) * xd[size_t(i)]);
          EXPECT_NEAR(y[size_t(r)], vec_dot_scalar(t, n, w, a.data()), 2e-6 * mag + 1e-9)
              << type_name(t) << " " << simd_level_name(level) << " row " << r;
        }
      }
    }
  set_simd_level(initial);
}
