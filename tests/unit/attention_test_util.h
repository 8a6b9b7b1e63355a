// Test data and comparisons shared by the attention tests that check kernels or kernel math
// against the CPU backend (test_attention_emulation.cpp, test_attention_block_math.cpp,
// tests/kernels/test_attention_block_emulation.cpp): normal random inputs, NaN-poisoned
// outputs (a value the code under test forgets to write cannot pass), tensor views and an
// element-wise comparison that reports the first few differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun::attention_test {

inline std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}
inline std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}
inline Tensor t2(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::f32, {rows, cols});
}
inline Tensor t1(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, {int64_t(v.size())});
}

// |got - want| <= atol + rtol |want| element by element; an infinite want (lse -inf: a row
// with no keys) must be matched exactly.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                         double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    if (!same_inf &&
        !(std::fabs(double(got[i]) - want[i]) <= atol + rtol * std::fabs(double(want[i]))) &&
        bad++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

}  // namespace llmrun::attention_test
