// QuantPlan::run over several threads (its one parallel region per call: quant_matmul.cpp,
// issue 19): at every SIMD level the CPU has, each element is bitwise what one thread computes
// and what the row gives alone (n = 1), at 2 and 3 threads (rows and groups that do not split
// evenly), for small and large matrices, plans that mix x16 types with a type on the tile path,
// and the bias / accumulate epilogue.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/quant_matmul.h"

using namespace llmrun::quant;

namespace {

std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  return x;
}

struct Part {
  QType type;
  int64_t rows;
  std::vector<uint8_t> data;
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// y [n, out] (+ bias, added into a copy of `start`) at `threads` threads.
std::vector<float> run(const QuantPlan& plan, const std::vector<float>& x, int64_t n,
                       const std::vector<float>& bias, const std::vector<float>& start,
                       int threads) {
  omp_set_num_threads(threads);
  std::vector<float> y(start.begin(), start.begin() + n * plan.out());
  plan.run(x.data(), n, y.data(), plan.out(), bias.data(), true);
  return y;
}

}  // namespace

TEST(QuantMatmul, ThreadSplitsEqualOneThreadAndRowAloneBitwise) {
  const int threads = omp_get_max_threads();
  const SimdLevel initial = active_simd_level();
  // (types and row counts of the parts, columns): llama-small-like and GPT-2-like widths
  struct Shape {
    std::vector<std::pair<QType, int64_t>> parts;
    int64_t cols;
  };
  const std::vector<Shape> shapes = {
      {{{QType::q8_0, 200}, {QType::q8_0, 56}}, 256},
      {{{QType::q4_k, 150}, {QType::q6_k, 70}, {QType::f16, 21}}, 512},
      {{{QType::q8_0, 1000}, {QType::q4_0, 37}}, 544},
      {{{QType::q4_k, 700}, {QType::q6_k, 500}, {QType::f16, 40}}, 768},
  };
  const int64_t max_n = 133;
  for (SimdLevel level : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512}) {
    if (!simd_level_supported(level)) continue;
    set_simd_level(level);
    for (const Shape& shape : shapes) {
      std::vector<Part> ps;
      std::vector<QuantMatrix> parts;
      uint32_t seed = 1;
      for (const auto& [type, rows] : shape.parts) {
        Part p{type, rows, std::vector<uint8_t>(row_bytes(type, shape.cols) * size_t(rows))};
        for (int64_t r = 0; r < rows; ++r)
          quantize_row(type, values(shape.cols, seed++).data(),
                       p.data.data() + size_t(r) * row_bytes(type, shape.cols), shape.cols);
        ps.push_back(std::move(p));
      }
      for (const Part& p : ps) parts.push_back({p.type, p.rows, shape.cols, p.data.data()});
      const QuantPlan plan(parts);
      const int64_t out = plan.out();
      const std::vector<float> x = values(max_n * shape.cols, 500);
      const std::vector<float> bias = values(out, 600), start = values(max_n * out, 700);
      std::vector<float> alone(size_t(max_n * out));
      for (int64_t i = 0; i < max_n; ++i) {
        std::vector<float> y(start.begin() + i * out, start.begin() + (i + 1) * out);
        plan.run(x.data() + i * shape.cols, 1, y.data(), out, bias.data(), true);
        std::copy(y.begin(), y.end(), alone.begin() + i * out);
      }
      for (int64_t n : {64, 100, 133}) {
        const std::vector<float> one = run(plan, x, n, bias, start, 1);
        const std::vector<float> two = run(plan, x, n, bias, start, 2);
        const std::vector<float> three = run(plan, x, n, bias, start, 3);
        for (int64_t k = 0; k < n * out; ++k) {
          ASSERT_TRUE(same_bits(one[size_t(k)], alone[size_t(k)]))
              << simd_level_name(level) << " cols " << shape.cols << " n " << n << " row "
              << k / out << " out " << k % out;
          ASSERT_TRUE(same_bits(two[size_t(k)], one[size_t(k)]))
              << simd_level_name(level) << " cols " << shape.cols << " n " << n << " row "
              << k / out << " out " << k % out << " (2 threads)";
          ASSERT_TRUE(same_bits(three[size_t(k)], one[size_t(k)]))
              << simd_level_name(level) << " cols " << shape.cols << " n " << n << " row "
              << k / out << " out " << k % out << " (3 threads)";
        }
      }
    }
  }
  set_simd_level(initial);
  omp_set_num_threads(threads);
}
