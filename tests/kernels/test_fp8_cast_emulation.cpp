// The fused FP8 cast kernel (kernels/fp8_cast.cu) run on the CPU through
// tests/device/cuda_emulation.h and compared with the CPU casts of src/fp8/fp8_cast.cpp: every
// one of the 256 bit patterns of both formats, the midpoints between neighbouring patterns
// (the ties that round to even), values beyond the range, NaN and infinities, and random values
// over many magnitudes and scales. Bytes, the transposed copy, amax and the over/underflow
// counts must be identical, not close.
#define LLMRUN_KERNEL_EMULATION 1
#include <cstdint>
#include <cstring>

#include "../device/cuda_emulation.h"

// Shared memory: one block runs at a time, so a function-static array is that block's (as in
// test_kernel_emulation.cpp, so the shared templates of common.cuh are defined alike).
#undef __shared__
#define __shared__ static

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../../kernels/fp8_cast.cu"
#include "fp8/fp8_cast.h"

using namespace llmrun;

namespace {

namespace k = llmrun::kernels;

struct Cast {
  std::vector<uint8_t> q, qt;
  float amax = 0;
  int32_t counts[2] = {0, 0};
};

// The kernel over x [rows, cols] with `scale`; amax starts at `amax0`.
Cast run_kernel(const std::vector<float>& x, int64_t rows, int64_t cols, float scale, Fp8Format f,
                float amax0 = 0.0f) {
  Cast c;
  c.q.assign(x.size(), 0xAA);  // poisoned: every byte must be written
  c.qt.assign(x.size(), 0xAA);
  c.amax = amax0;
  k::fp8_cast_transpose(c.q.data(), c.qt.data(), &c.amax, c.counts, x.data(), rows, cols, &scale,
                        f == Fp8Format::e4m3 ? k::Fp8Kind::e4m3 : k::Fp8Kind::e5m2, nullptr);
  return c;
}

void expect_matches_cpu(const std::vector<float>& x, int64_t rows, int64_t cols, float scale,
                        Fp8Format f) {
  const Cast c = run_kernel(x, rows, cols, scale, f);
  std::vector<uint8_t> ref(x.size());
  const Fp8CastStats st = fp8_quantize(x.data(), ref.data(), int64_t(x.size()), scale, f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      const size_t i = size_t(r * cols + col);
      ASSERT_EQ(int(c.q[i]), int(ref[i])) << fp8_format_name(f) << " x=" << x[i] << " (bits "
                                          << std::hex << std::bit_cast<uint32_t>(x[i]) << std::dec
                                          << ") scale=" << scale << " at " << r << "," << col;
      ASSERT_EQ(int(c.qt[size_t(col * rows + r)]), int(ref[i]))
          << "transposed at " << r << "," << col;
    }
  if (std::isnan(st.amax))
    EXPECT_TRUE(std::isnan(c.amax));
  else
    EXPECT_EQ(std::bit_cast<uint32_t>(c.amax), std::bit_cast<uint32_t>(st.amax));
  EXPECT_EQ(c.counts[0], st.overflows) << fp8_format_name(f) << " scale " << scale;
  EXPECT_EQ(c.counts[1], st.underflows) << fp8_format_name(f) << " scale " << scale;
}

TEST(Fp8CastEmulation, EveryBitPatternAndEveryMidpoint) {
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    std::vector<float> x;
    for (int b = 0; b < 256; ++b) x.push_back(fp8_decode(uint8_t(b), f));
    // Midpoints between neighbouring finite magnitudes (ties: round to even), and points just
    // beside them, in both signs.
    for (int b = 0; b < 0x7F; ++b) {
      const float lo = fp8_decode(uint8_t(b), f), hi = fp8_decode(uint8_t(b + 1), f);
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      const float mid = lo + (hi - lo) / 2;
      for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (const float v : {inf, -inf, 1e30f, -1e30f, 1e-30f, -1e-30f, 1e-45f, 0.0f, -0.0f,
                          fp8_max(f) * 1.0625f, fp8_max(f) * 1.03f, -fp8_max(f) * 1.2f})
      x.push_back(v);
    while (x.size() % 32) x.push_back(0.5f);
    // Laid out as a matrix whose sides are not multiples of the 32 x 32 tile.
    const int64_t n = int64_t(x.size());
    const int64_t cols = 37, rows = (n + cols - 1) / cols;
    x.resize(size_t(rows * cols), 0.25f);
    expect_matches_cpu(x, rows, cols, 1.0f, f);
  }
}

TEST(Fp8CastEmulation, NanPatternsAndNanAmax) {
  // NaN inputs keep their sign and become the format's NaN code; amax becomes NaN.
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> x = {1.0f, nan, -nan, 3.0f, 2.0f, -1.0f};
    expect_matches_cpu(x, 2, 3, 2.0f, f);
    const Cast c = run_kernel(x, 2, 3, 2.0f, f);
    EXPECT_TRUE(std::isnan(c.amax));
  }
}

TEST(Fp8CastEmulation, RandomValuesOverManyMagnitudesAndScales) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 20);
  const int64_t rows = 70, cols = 45;  // 3 x 2 tiles, partial on both sides
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (const float scale : {1.0f, 0.0078125f, 37.5f, 1e-3f, 2048.0f}) {
      std::vector<float> x(size_t(rows * cols));
      for (float& v : x) v = std::ldexp(mant(rng), expo(rng));
      expect_matches_cpu(x, rows, cols, scale, f);
    }
}

TEST(Fp8CastEmulation, AmaxKeepsTheLargerRunningValueAndNullOutputsAreSkipped) {
  const std::vector<float> x = {0.5f, -3.0f, 2.0f, 1.0f};
  // A running amax larger than this tensor's stays; a smaller one is replaced.
  EXPECT_EQ(run_kernel(x, 2, 2, 1.0f, Fp8Format::e4m3, 7.0f).amax, 7.0f);
  EXPECT_EQ(run_kernel(x, 2, 2, 1.0f, Fp8Format::e4m3, 1.0f).amax, 3.0f);
  // Only the transposed copy, no amax or counts.
  std::vector<uint8_t> qt(4, 0xAA);
  const float scale = 1.0f;
  k::fp8_cast_transpose(nullptr, qt.data(), nullptr, nullptr, x.data(), 2, 2, &scale,
                        k::Fp8Kind::e4m3, nullptr);
  EXPECT_EQ(qt[1], fp8_encode(2.0f, Fp8Format::e4m3));  // qt[0][1] = x[1][0]
  EXPECT_EQ(qt[2], fp8_encode(-3.0f, Fp8Format::e4m3));
}

}  // namespace
