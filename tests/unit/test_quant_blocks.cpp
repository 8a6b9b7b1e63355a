// ggml block formats: sizes and byte layouts against hand-built blocks (the documented
// formulas), quantize/dequantize round trips within the error the format allows, the dot
// products (every SIMD level this CPU runs against the scalar reference against fp32; tiles
// against single dots bitwise), and the quantized GEMM's batch invariance at every level.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/block_formats.h"
#include "quant/quant_dot.h"
#include "quant/quant_matmul.h"
#include "quant_row_reference.h"

namespace llmrun::quant {
namespace {

const QType kTypes[] = {QType::f32,  QType::f16,  QType::bf16, QType::q8_0,
                        QType::q4_0, QType::q4_1, QType::q5_0, QType::q5_1,
                        QType::q4_k, QType::q5_k, QType::q6_k};

std::vector<float> random_row(int64_t n, uint32_t seed) {
  // Blocks of very different magnitudes, as real weight rows have.
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float scale = std::pow(10.0f, float((i / 32) % 5) - 3.0f);
    x[size_t(i)] = g(rng) * scale;
  }
  return x;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = to_f16(v);
  std::memcpy(p, &h, 2);
}

TEST(QuantBlocks, SizesMatchGgml) {
  EXPECT_EQ(row_bytes(QType::q8_0, 32), 34u);
  EXPECT_EQ(row_bytes(QType::q4_0, 32), 18u);
  EXPECT_EQ(row_bytes(QType::q4_k, 256), 144u);
  EXPECT_EQ(row_bytes(QType::q6_k, 256), 210u);
  EXPECT_EQ(row_bytes(QType::q8_k, 256), 292u);
  EXPECT_EQ(row_bytes(QType::q4_1, 32), 20u);
  EXPECT_EQ(row_bytes(QType::q5_0, 32), 22u);
  EXPECT_EQ(row_bytes(QType::q5_1, 32), 24u);
  EXPECT_EQ(row_bytes(QType::q5_k, 256), 176u);
  EXPECT_EQ(uint32_t(QType::q4_1), 3u);  // ggml's type ids
  EXPECT_EQ(uint32_t(QType::q5_0), 6u);
  EXPECT_EQ(uint32_t(QType::q5_1), 7u);
  EXPECT_EQ(uint32_t(QType::q5_k), 13u);
  EXPECT_EQ(row_bytes(QType::f16, 10), 20u);
  EXPECT_EQ(row_bytes(QType::bf16, 10), 20u);
  EXPECT_FALSE(fits(QType::q4_k, 128));
  EXPECT_TRUE(fits(QType::q8_0, 64));
}

TEST(QuantBlocks, Q8_0Layout) {
  uint8_t b[34];
  put_f16(b, 0.5f);
  for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(j - 16));
  float y[32];
  dequantize_row(QType::q8_0, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * float(j - 16));
}

TEST(QuantBlocks, Q4_0Layout) {
  uint8_t b[18];
  put_f16(b, 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(QType::q4_0, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * float(j - 8));       // low nibble: element j
    EXPECT_EQ(y[j + 16], 2.0f * float(7 - j));  // high nibble: element j + 16
  }
}

TEST(QuantBlocks, Q4_KLayout) {
  // Sub-block j has 6-bit scale sc[j] and min m[j]; the upper two bits of scales 4..7 live in
  // the top bits of bytes 0..7.
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 62}, m[8] = {0, 5, 60, 1, 40, 2, 63, 16};
  uint8_t b[144] = {};
  put_f16(b, 0.25f);
  put_f16(b + 2, 0.125f);
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b[16 + 32 * c + l] = uint8_t((l % 16) | (((l + c) % 16) << 4));
  float y[256];
  dequantize_row(QType::q4_k, b, y, 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int j0 = 2 * c, j1 = 2 * c + 1;
      EXPECT_EQ(y[64 * c + l], 0.25f * sc[j0] * float(l % 16) - 0.125f * m[j0]) << c << " " << l;
      EXPECT_EQ(y[64 * c + 32 + l], 0.25f * sc[j1] * float((l + c) % 16) - 0.125f * m[j1]);
    }
}

TEST(QuantBlocks, Q6_KLayout) {
  // Value i of each 128-half: 4 low bits in ql (low nibble for i < 64 from ql[i % 64], high
  // nibble beyond), 2 high bits in qh[i % 32] at bit 2 * (i / 32); scale per 16 values.
  uint8_t b[210] = {};
  int q[256];
  for (int i = 0; i < 256; ++i) q[i] = (i * 7 + 3) % 64;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 128; ++i) {
      const int v = q[128 * h + i];
      uint8_t& lo = b[64 * h + (i % 64)];
      lo = uint8_t(lo | ((v & 15) << (i < 64 ? 0 : 4)));
      b[128 + 32 * h + (i % 32)] |= uint8_t((v >> 4) << (2 * (i / 32)));
    }
  for (int k = 0; k < 16; ++k) b[192 + k] = uint8_t(int8_t(k - 8));
  put_f16(b + 208, 0.5f);
  float y[256];
  dequantize_row(QType::q6_k, b, y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.5f * float(i / 16 - 8) * float(q[i] - 32)) << i;
}

TEST(QuantBlocks, Q4_1Layout) {
  uint8_t b[20];
  put_f16(b, 0.5f);
  put_f16(b + 2, -3.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(QType::q4_1, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * float(j) - 3.0f);
    EXPECT_EQ(y[j + 16], 0.5f * float(15 - j) - 3.0f);
  }
}

// Q5_0/Q5_1: the fifth bit of element j is bit j of the little-endian uint32 qh.
void fill_q5(uint8_t* qh, uint8_t* qs, int* q) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = (j * 13 + 5) % 32;
    h |= uint32_t(q[j] >> 4) << j;
  }
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 15) | ((q[j + 16] & 15) << 4));
  qh[0] = uint8_t(h), qh[1] = uint8_t(h >> 8), qh[2] = uint8_t(h >> 16), qh[3] = uint8_t(h >> 24);
}

TEST(QuantBlocks, Q5_0AndQ5_1Layout) {
  int q[32];
  uint8_t b0[22];
  put_f16(b0, 0.25f);
  fill_q5(b0 + 2, b0 + 6, q);
  float y[32];
  dequantize_row(QType::q5_0, b0, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * float(q[j] - 16)) << j;
  uint8_t b1[24];
  put_f16(b1, 0.25f);
  put_f16(b1 + 2, 1.5f);
  fill_q5(b1 + 4, b1 + 8, q);
  dequantize_row(QType::q5_1, b1, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * float(q[j]) + 1.5f) << j;
}

TEST(QuantBlocks, Q5_KLayout) {
  // Q4_K's scales and nibbles; the fifth bit of value l of sub-block j is bit j of qh[l].
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 62}, m[8] = {0, 5, 60, 1, 40, 2, 63, 16};
  uint8_t b[176] = {};
  put_f16(b, 0.25f);
  put_f16(b + 2, 0.125f);
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  int q[256];
  for (int i = 0; i < 256; ++i) q[i] = (i * 7 + 3) % 32;
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      const int v = q[32 * j + l];
      b[48 + 32 * (j / 2) + l] |= uint8_t((v & 15) << (4 * (j % 2)));
      b[16 + l] |= uint8_t((v >> 4) << j);
    }
  float y[256];
  dequantize_row(QType::q5_k, b, y, 256);
  for (int i = 0; i < 256; ++i) {
    const int j = i / 32;
    EXPECT_EQ(y[i], 0.25f * sc[j] * float(q[i]) - 0.125f * m[j]) << i;
  }
}

// quantize + dequantize of x stays within max_block_error of each block's largest value.
void expect_round_trip(QType t, const std::vector<float>& x, std::vector<float>& y) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(row_bytes(t, n));
  y.assign(x.size(), 0.0f);
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  const int64_t bv = std::max<int64_t>(block_values(t), 1);
  for (int64_t b0 = 0; b0 < n; b0 += bv) {
    double amax = 0;
    for (int64_t i = b0; i < b0 + bv; ++i) amax = std::max(amax, double(std::fabs(x[size_t(i)])));
    const double tol = max_block_error(t, amax);
    for (int64_t i = b0; i < b0 + bv; ++i)
      ASSERT_LE(std::fabs(double(x[size_t(i)]) - y[size_t(i)]), tol)
          << type_name(t) << " value " << i << " of block amax " << amax;
  }
}

TEST(QuantBlocks, RoundTripWithinTheFormatsError) {
  for (QType t : kTypes)
    for (uint32_t seed : {7u, 8u, 9u}) {
      std::vector<float> y, y2;
      expect_round_trip(t, random_row(1024, seed), y);
      expect_round_trip(t, y, y2);  // and again from the dequantized values
    }
  // A block of zeros and a constant block.
  for (QType t : kTypes) {
    std::vector<float> y;
    expect_round_trip(t, std::vector<float>(256, 0.0f), y);
    for (float v : y) EXPECT_EQ(v, 0.0f) << type_name(t);
    expect_round_trip(t, std::vector<float>(256, -0.75f), y);
  }
}

TEST(QuantBlocks, ErrorBoundIsTight) {
  // The bound is not vacuous: each 4- and 5-bit format does err by a visible fraction of it.
  const std::vector<float> x = random_row(1024, 3);
  for (QType t : {QType::q4_0, QType::q4_1, QType::q5_0, QType::q5_1, QType::q5_k}) {
    std::vector<uint8_t> q(row_bytes(t, 1024));
    std::vector<float> y(1024);
    quantize_row(t, x.data(), q.data(), 1024);
    dequantize_row(t, q.data(), y.data(), 1024);
    const int64_t bv = block_values(t);
    double worst = 0;
    for (int64_t b0 = 0; b0 < 1024; b0 += bv) {
      double amax = 0, err = 0;
      for (int64_t i = b0; i < b0 + bv; ++i) {
        amax = std::max(amax, double(std::fabs(x[size_t(i)])));
        err = std::max(err, double(std::fabs(x[size_t(i)] - y[size_t(i)])));
      }
      worst = std::max(worst, err / max_block_error(t, amax));
    }
    EXPECT_GT(worst, 0.2) << type_name(t);
  }
}

// The levels this CPU can run, each set for the scope of one test body.
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512})
    if (simd_level_supported(l)) out.push_back(l);
  return out;
}

struct LevelGuard {
  SimdLevel saved = active_simd_level();
  ~LevelGuard() { set_simd_level(saved); }
};

// Row width per type: an odd number of 32-value blocks where the format allows (kernels that
// pair blocks, as the x16 ones do, leave the last one alone).
int64_t width(QType t, int64_t k_width) { return block_values(t) == 256 ? k_width : k_width + 32; }

TEST(QuantDot, SimdMatchesScalarAndFloat) {
  LevelGuard guard;
  for (SimdLevel level : levels()) {
    set_simd_level(level);
    for (QType t : kTypes) {
      const int64_t n = width(t, 2048);
      const std::vector<float> w = random_row(n, 11), x = random_row(n, 12);
      std::vector<uint8_t> wq(row_bytes(t, n)), a(activation_row_bytes(t, n));
      quantize_row(t, w.data(), wq.data(), n);
      prepare_activation(t, x.data(), a.data(), n);
      std::vector<float> wd(static_cast<size_t>(n)), xd(static_cast<size_t>(n));
      dequantize_row(t, wq.data(), wd.data(), n);
      dequantize_row(activation_type(t), a.data(), xd.data(), n);
      // Against the dequantized rows the only differences are fp32 summation order.
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(wd[size_t(i)]) * xd[size_t(i)];
        mag += std::fabs(double(wd[size_t(i)]) * xd[size_t(i)]);
      }
      const float simd = vec_dot(t, n, wq.data(), a.data());
      const float scalar = vec_dot_scalar(t, n, wq.data(), a.data());
      EXPECT_NEAR(scalar, exact, 1e-5 * mag + 1e-9) << type_name(t);
      EXPECT_NEAR(simd, exact, 1e-5 * mag + 1e-9) << type_name(t) << " (" << simd_level() << ")";
      // and the SIMD kernel against the scalar one directly (the same integer sums per block)
      EXPECT_NEAR(simd, scalar, 2e-6 * mag + 1e-9) << type_name(t) << " (" << simd_level() << ")";
      // Against fp32 x: the activation's quantization error, bounded per block.
      double bound = 1e-5 * mag;
      const int64_t bv = std::max<int64_t>(block_values(activation_type(t)), 1);
      for (int64_t b0 = 0; b0 < n; b0 += bv) {
        double amax = 0;
        for (int64_t i = b0; i < b0 + bv; ++i)
          amax = std::max(amax, double(std::fabs(x[size_t(i)])));
        for (int64_t i = b0; i < b0 + bv; ++i)
          bound += std::fabs(wd[size_t(i)]) * max_block_error(activation_type(t), amax);
      }
      double fp = 0;
      for (int64_t i = 0; i < n; ++i) fp += double(wd[size_t(i)]) * x[size_t(i)];
      EXPECT_NEAR(simd, fp, bound) << type_name(t) << " (" << simd_level() << ")";
    }
  }
}

TEST(QuantDot, LevelsReportAndSwitch) {
  LevelGuard guard;
  EXPECT_TRUE(simd_level_supported(SimdLevel::scalar));
  set_simd_level(SimdLevel::scalar);
  EXPECT_STREQ(simd_level(), "scalar");
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    ASSERT_TRUE(simd_level_supported(SimdLevel::avx512));
    set_simd_level(SimdLevel::avx512);
    EXPECT_STREQ(simd_level(), "avx512");
  }
#endif
}

// The activation quantizers (vectorized at the avx512 level) write the scalar quantizers'
// bytes: random rows, an all-zero block, and blocks whose max is 127 so that x * id lands on
// exact halves (roundf rounds them away from zero for Q8_0, lrintf to even for Q8_K).
TEST(QuantDot, ActivationQuantizersEqualScalarBytewise) {
  LevelGuard guard;
  const int64_t n = 1024;
  std::vector<std::vector<float>> rows = {random_row(n, 7), random_row(n, 8),
                                          std::vector<float>(size_t(n), 0.0f)};
  std::vector<float> ties(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ties[size_t(i)] = i % 32 == 0 ? 127.0f : float((i * 37) % 200 - 100) + (i % 2 ? 0.5f : -0.5f);
  rows.push_back(ties);
  for (auto& v : ties) v *= 3.0e-3f;  // the same pattern at another scale
  rows.push_back(ties);
  rows[0][5] = -rows[0][5] * 40.0f;  // a negative maximum
  for (QType t : {QType::q8_0, QType::q8_k}) {
    for (const auto& x : rows) {
      std::vector<uint8_t> ref(row_bytes(t, n)), got(row_bytes(t, n));
      set_simd_level(SimdLevel::scalar);
      quantize_row(t, x.data(), ref.data(), n);
      for (SimdLevel level : levels()) {
        set_simd_level(level);
        std::fill(got.begin(), got.end(), uint8_t(0xAA));
        quantize_row(t, x.data(), got.data(), n);
        ASSERT_EQ(got, ref) << type_name(t) << " (" << simd_level() << ")";
      }
    }
  }
}

// Every tile shape gives each element bitwise what vec_dot gives it, at every level.
TEST(QuantDot, TilesEqualVecDotBitwise) {
  LevelGuard guard;
  for (SimdLevel level : levels()) {
    set_simd_level(level);
    for (QType t : kTypes) {
      const int64_t n = width(t, 512);
      const size_t wb = row_bytes(t, n), ab = activation_row_bytes(t, n);
      std::vector<uint8_t> w(wb * kDotTileMax), a(ab * kDotTileCols);
      for (int r = 0; r < kDotTileMax; ++r)
        quantize_row(t, random_row(n, uint32_t(30 + r)).data(), w.data() + r * wb, n);
      for (int c = 0; c < kDotTileCols; ++c)
        prepare_activation(t, random_row(n, uint32_t(40 + c)).data(), a.data() + c * ab, n);
      for (int R = 1; R <= kDotTileMax; ++R)
        for (int C = 1; C <= kDotTileCols; ++C) {
          const uint8_t* rows[kDotTileMax];
          for (int r = 0; r < R; ++r) rows[r] = w.data() + (kDotTileMax - R + r) * wb;
          float out[kDotTileMax * kDotTileCols];
          dot_tile(t, n, rows, R, a.data(), ab, C, out);
          for (int c = 0; c < C; ++c)
            for (int r = 0; r < R; ++r)
              ASSERT_EQ(out[c * R + r], vec_dot(t, n, rows[r], a.data() + c * ab))
                  << type_name(t) << " " << R << "x" << C << " (" << simd_level() << ")";
        }
    }
  }
}

// The float types take any width: every tail the kernels' steps leave (16 and 32 values at
// AVX-512, 8 and 16 at AVX2) gives each element of every tile shape bitwise what vec_dot
// gives it, and that is the exact dot product within fp32 summation error.
TEST(QuantDot, FloatTilesAnyWidthEqualVecDotBitwise) {
  LevelGuard guard;
  for (SimdLevel level : levels()) {
    set_simd_level(level);
    for (QType t : {QType::f32, QType::f16, QType::bf16})
      for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 200}) {
        const size_t wb = row_bytes(t, n), ab = activation_row_bytes(t, n);
        std::vector<uint8_t> w(wb * kDotTileMax), a(ab * kDotTileMax);
        for (int r = 0; r < kDotTileMax; ++r) {
          quantize_row(t, random_row(n, uint32_t(50 + r)).data(), w.data() + r * wb, n);
          prepare_activation(t, random_row(n, uint32_t(60 + r)).data(), a.data() + r * ab, n);
        }
        for (int R = 1; R <= kDotTileMax; ++R)
          for (int C = 1; C <= kDotTileMax; ++C) {
            const uint8_t* rows[kDotTileMax];
            for (int r = 0; r < R; ++r) rows[r] = w.data() + (kDotTileMax - R + r) * wb;
            float out[kDotTileMax * kDotTileMax];
            dot_tile(t, n, rows, R, a.data(), ab, C, out);
            for (int c = 0; c < C; ++c)
              for (int r = 0; r < R; ++r) {
                const float d = vec_dot(t, n, rows[r], a.data() + c * ab);
                ASSERT_EQ(out[c * R + r], d) << type_name(t) << " n=" << n << " " << R << "x" << C
                                             << " (" << simd_level() << ")";
                std::vector<float> wd(static_cast<size_t>(n));
                dequantize_row(t, rows[r], wd.data(), n);
                const auto* x = reinterpret_cast<const float*>(a.data() + c * ab);
                double exact = 0, mag = 0;
                for (int64_t i = 0; i < n; ++i) {
                  exact += double(wd[size_t(i)]) * x[i];
                  mag += std::fabs(double(wd[size_t(i)]) * x[i]);
                }
                ASSERT_NEAR(d, exact, 1e-6 * mag + 1e-12)
                    << type_name(t) << " n=" << n << " (" << simd_level() << ")";
              }
          }
      }
  }
}

// Batch invariance through the GEMM: row i of a batch of n equals row i computed alone,
// bitwise, for n = 1..70 (every tile remainder, both the small-batch and the blocked path),
// at every level; weights of two types stacked (Q4_K_M files mix Q4_K and Q6_K rows) and a
// row count that is no multiple of the tile (nor of the x16 layout's 16-row groups). A row
// alone is bitwise vec_dot's value, or the x16 dot's where the type runs in that layout
// (plan_row_reference), and the scalar reference's within the summation-order tolerance. One
// thread: an element is never split between threads, and ~5000 tiny GEMMs would otherwise spend
// their time in OpenMP barriers on a loaded machine.
TEST(QuantMatmul, BatchedRowsEqualAloneBitwise) {
  LevelGuard guard;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const int64_t out = 39, max_n = 70;
  const std::vector<std::pair<QType, QType>> pairs = {
      {QType::q8_0, QType::q8_0}, {QType::q4_0, QType::q4_0}, {QType::q4_k, QType::q4_k},
      {QType::q6_k, QType::q6_k}, {QType::q4_k, QType::q6_k}, {QType::f16, QType::f16},
      {QType::bf16, QType::bf16}, {QType::f32, QType::f32}};
  for (SimdLevel level : levels()) {
    set_simd_level(level);
    for (const auto& [t0, t1] : pairs) {
      const int64_t in = block_values(t0) == 256 || block_values(t1) == 256 ? 512 : 544;
      const int64_t rows0 = 22, rows1 = out - rows0;
      std::vector<uint8_t> w0(row_bytes(t0, in) * rows0), w1(row_bytes(t1, in) * rows1);
      for (int64_t r = 0; r < out; ++r) {
        const std::vector<float> row = random_row(in, uint32_t(100 + r));
        if (r < rows0)
          quantize_row(t0, row.data(), w0.data() + size_t(r) * row_bytes(t0, in), in);
        else
          quantize_row(t1, row.data(), w1.data() + size_t(r - rows0) * row_bytes(t1, in), in);
      }
      const std::vector<QuantMatrix> parts = {{t0, rows0, in, w0.data()},
                                              {t1, rows1, in, w1.data()}};
      std::vector<float> x(static_cast<size_t>(max_n * in));
      for (int64_t i = 0; i < max_n; ++i) {
        const std::vector<float> row = random_row(in, uint32_t(200 + i));
        std::copy(row.begin(), row.end(), x.begin() + i * in);
      }
      std::vector<float> bias(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) bias[size_t(o)] = 0.01f * float(o);
      // Each row alone, checked against vec_dot and the scalar reference.
      std::vector<float> alone(size_t(max_n * out), 1.0f);
      for (int64_t i = 0; i < max_n; ++i) {
        quant_matmul(parts, x.data() + i * in, 1, alone.data() + i * out, out, bias.data(), true);
        for (int64_t o = 0; o < out; ++o) {
          const QType t = o < rows0 ? t0 : t1;
          const uint8_t* wr = o < rows0 ? w0.data() + size_t(o) * row_bytes(t0, in)
                                        : w1.data() + size_t(o - rows0) * row_bytes(t1, in);
          std::vector<uint8_t> a(activation_row_bytes(t, in));
          prepare_activation(t, x.data() + i * in, a.data(), in);
          const float d = plan_row_reference(t, in, wr, a.data());
          ASSERT_EQ(alone[size_t(i * out + o)], 1.0f + (d + bias[size_t(o)])) << type_name(t);
          // summation order only: within 1e-5 of sum |w x|
          std::vector<float> wd(static_cast<size_t>(in));
          dequantize_row(t, wr, wd.data(), in);
          double mag = 0;
          for (int64_t k = 0; k < in; ++k)
            mag += std::fabs(double(wd[size_t(k)]) * x[size_t(i * in + k)]);
          ASSERT_NEAR(d, vec_dot_scalar(t, in, wr, a.data()), 2e-5 * mag + 1e-9) << type_name(t);
        }
      }
      for (int64_t n = 2; n <= max_n; ++n) {
        std::vector<float> batched(size_t(n * out), 1.0f);
        quant_matmul(parts, x.data(), n, batched.data(), out, bias.data(), /*accumulate=*/true);
        for (int64_t k = 0; k < n * out; ++k)
          ASSERT_EQ(batched[size_t(k)], alone[size_t(k)])
              << type_name(t0) << "|" << type_name(t1) << " n=" << n << " row " << k / out
              << " col " << k % out << " (" << simd_level() << ")";
      }
    }
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace llmrun::quant
