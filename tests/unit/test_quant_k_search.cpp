// Q5_K's sub-block scale search (pack_k_scales, ggml's make_qkx2_quants): on Gaussian weights
// it lowers the round-trip RMS error against the min/max fit (the search with no steps), and
// quantize_row's Q5_K blocks are the searched ones (Q4_K's the min/max ones).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "quant/block_formats.h"
#include "quant/k_quant_scales.h"

namespace llmrun::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  return x;
}

// The values of a 256-value K-quant block whose scales pack_k_scales chose: each rounded to
// its sub-block's nearest level of the stored scale and min, as the quantizers do.
std::vector<float> k_round_trip(const float* x, int levels, const KScaleSearch& search) {
  uint8_t head[16];
  const KScales k = pack_k_scales(x, levels, search, head);
  std::vector<float> y(256);
  for (int j = 0; j < 8; ++j) {
    const float s = k.d * float(k.ls[j]), m = k.dmin * float(k.lm[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = x[32 * j + l];
      const int q = s > 0 ? std::clamp(int(std::lrintf((v + m) / s)), 0, levels) : 0;
      y[size_t(32 * j + l)] = s * float(q) - m;
    }
  }
  return y;
}

double rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0;
  for (size_t i = 0; i < x.size(); ++i) se += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return std::sqrt(se / double(x.size()));
}

// quantize_row + dequantize_row of x as t.
std::vector<float> quantized(QType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(row_bytes(t, n));
  std::vector<float> y(x.size());
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

TEST(QuantKSearch, SearchLowersQ5_KRoundTripError) {
  const int64_t n = 256 * 64;
  const std::vector<float> x = gaussian(n, 11);
  std::vector<float> minmax5, searched5, minmax4;
  for (int64_t b = 0; b < n; b += 256) {
    for (auto [out, levels, search] :
         {std::tuple{&minmax5, 31, KScaleSearch{}}, std::tuple{&searched5, 31, kQ5KSearch},
          std::tuple{&minmax4, 15, KScaleSearch{}}}) {
      const std::vector<float> y = k_round_trip(x.data() + b, levels, search);
      out->insert(out->end(), y.begin(), y.end());
    }
  }
  // quantize_row's blocks: Q5_K the searched ones, Q4_K the min/max ones
  EXPECT_EQ(quantized(QType::q5_k, x), searched5);
  EXPECT_EQ(quantized(QType::q4_k, x), minmax4);
  // The search's first candidate is the min/max fit, so it is never worse; on Gaussian
  // weights it gains 4.9% of the RMS error, well above noise.
  const double before = rms_error(x, minmax5), after = rms_error(x, searched5);
  std::printf("Q5_K round-trip RMS error: min/max %.4g, searched %.4g (%.1f%% less)\n", before,
              after, 100 * (1 - after / before));
  EXPECT_LT(after, 0.97 * before);
}

}  // namespace
}  // namespace llmrun::quant
