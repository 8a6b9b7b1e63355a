// The x16 layout of Q4_K and Q6_K weights (x16_kquants_avx512.cpp, contract in x16_ops.h):
// every element of a group's dot equals vec_dot_scalar's value within fp32 rounding (random
// bytes, rows quantized from random floats, and the extremes of every integer range), an
// element is bitwise the same for one activation row and at any position among 2..40, and a
// group of fewer than 16 rows gives zeros past them without changing the others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/block_formats.h"
#include "quant/k_quant_scales.h"
#include "quant/quant_dot.h"
#include "quant/x16_ops.h"

using namespace llmrun::quant;
using llmrun::quant::detail::kX16Rows;
using llmrun::quant::detail::X16Ops;

namespace {

const X16Ops* ops_for(QType t) {
  return t == QType::q4_k ? detail::x16_ops_q4_k_avx512() : detail::x16_ops_q6_k_avx512();
}

#define SKIP_WITHOUT_OPS(t)                                                       \
  if (ops_for(t) == nullptr)                                                      \
  GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL/VNNI: the x16 " << type_name(t) \
               << " kernels are not available"

enum class Fill { random_bytes, quantized, extreme_high, extreme_low };

std::vector<float> gauss(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> x(size_t(n), 0.0f);
  for (auto& v : x) v = g(rng);
  return x;
}

// `rows` weight rows of type t, `cols` values each, contiguous.
std::vector<uint8_t> weight_rows(QType t, int rows, int64_t cols, Fill fill, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * size_t(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + rb * size_t(r);
    if (fill == Fill::quantized) {
      quantize_row(t, gauss(cols, rng, 0.05f * float(1 + r % 3)).data(), row, cols);
      continue;
    }
    for (size_t i = 0; i < rb; ++i)
      row[i] = fill == Fill::random_bytes   ? uint8_t(byte(rng))
               : fill == Fill::extreme_high ? 0xFF
                                            : 0x00;
    // finite f16 scales (random bytes could be NaN or infinity)
    for (int64_t b = 0; b < cols / 256; ++b) {
      uint8_t* blk = row + size_t(b) * block_bytes(t);
      const uint16_t d = to_f16(fill == Fill::random_bytes ? scale(rng) : 0.01f);
      if (t == QType::q4_k) {
        const uint16_t dmin = to_f16(fill == Fill::random_bytes ? scale(rng) : 0.01f);
        std::memcpy(blk, &d, 2);
        std::memcpy(blk + 2, &dmin, 2);
      } else {
        std::memcpy(blk + 208, &d, 2);
        // the extreme Q6_K scales: -128 against values 0 (q6 - 32 = -32), 127 against 63
        if (fill == Fill::extreme_low) std::memset(blk + 192, 0x80, 16);
        if (fill == Fill::extreme_high) std::memset(blk + 192, 0x7F, 16);
      }
    }
  }
  return w;
}

// `rows` Q8_K activation rows at `stride` bytes: random int8 values over the whole range
// (-128 included) with consistent block sums, or prepare_activation of random floats, or all
// -128 / all 127.
std::vector<uint8_t> activation_rows(int rows, int64_t cols, size_t stride, Fill fill,
                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> a(stride * size_t(rows), 0xA5);
  std::uniform_int_distribution<int> val(-128, 127);
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = a.data() + stride * size_t(r);
    if (fill == Fill::quantized) {
      prepare_activation(QType::q4_k, gauss(cols, rng, 1.0f).data(), row, cols);
      continue;
    }
    for (int64_t b = 0; b < cols / 256; ++b) {
      uint8_t* blk = row + 292 * size_t(b);
      const float da = d(rng);
      std::memcpy(blk, &da, 4);
      auto* q = reinterpret_cast<int8_t*>(blk + 4);
      for (int i = 0; i < 256; ++i)
        q[i] = int8_t(fill == Fill::random_bytes   ? val(rng)
                      : fill == Fill::extreme_high ? 127
                                                   : -128);
      for (int s = 0; s < 16; ++s) {
        int16_t sum = 0;
        for (int i = 0; i < 16; ++i) sum = int16_t(sum + q[16 * s + i]);
        std::memcpy(blk + 260 + 2 * s, &sum, 2);
      }
    }
  }
  return a;
}

// The largest fp32 rounding difference between two orders of evaluating one element: each
// superblock's terms (at most 2, each of magnitude <= sum |w_i a_i| plus, for Q4_K, the mins
// term) pass through a few roundings, and the running sum through one per term.
double tolerance(QType t, int64_t cols, const uint8_t* w, const uint8_t* a) {
  std::vector<float> wf(static_cast<size_t>(cols));
  dequantize_row(t, w, wf.data(), cols);
  double bound = 0;
  for (int64_t b = 0; b < cols / 256; ++b) {
    float da;
    std::memcpy(&da, a + 292 * b, 4);
    const auto* q = reinterpret_cast<const int8_t*>(a + 292 * b + 4);
    double dmin = 0;
    if (t == QType::q4_k) {
      uint16_t h;
      std::memcpy(&h, w + 144 * b + 2, 2);
      dmin = std::fabs(double(from_f16(h))) * 63;  // the largest min times dmin
    }
    for (int i = 0; i < 256; ++i)
      bound += std::fabs(double(da)) * std::fabs(double(q[i])) *
               (std::fabs(double(wf[size_t(256 * b + i)])) + 2 * dmin);
  }
  const double eps = std::ldexp(1.0, -23);
  return 2 * double(cols / 256 + 4) * eps * bound + 1e-30;
}

bool same_bits(float x, float y) { return std::memcmp(&x, &y, 4) == 0; }

struct Case {
  QType t;
  int64_t cols;
  Fill wfill, afill;
};

// Packs 16 rows, runs C = 1 per activation row and then C = 2..40, and checks every element.
void check_group(const Case& k, uint32_t seed) {
  const X16Ops& ops = *ops_for(k.t);
  const int kAct = 40;
  const size_t rb = row_bytes(k.t, k.cols);
  const size_t stride = activation_row_bytes(k.t, k.cols) + 36;  // not the packed row size
  const auto w = weight_rows(k.t, kX16Rows, k.cols, k.wfill, seed);
  const auto a = activation_rows(kAct, k.cols, stride, k.afill, seed + 1000);
  std::vector<const uint8_t*> rows(kX16Rows);
  for (int l = 0; l < kX16Rows; ++l) rows[size_t(l)] = w.data() + rb * size_t(l);
  std::vector<uint8_t> group(ops.group_bytes(k.cols), 0xCC);
  ops.pack(k.cols, rows.data(), kX16Rows, group.data());

  const size_t ldo = kX16Rows + 3;
  std::vector<float> one(size_t(kAct) * kX16Rows);
  for (int c = 0; c < kAct; ++c) {
    std::vector<float> o(ldo, NAN);
    ops.dot(k.cols, group.data(), a.data() + stride * size_t(c), stride, 1, o.data(), ldo);
    for (int l = 0; l < kX16Rows; ++l) {
      const uint8_t* ac = a.data() + stride * size_t(c);
      const float ref = vec_dot_scalar(k.t, k.cols, rows[size_t(l)], ac);
      const double tol = tolerance(k.t, k.cols, rows[size_t(l)], ac);
      ASSERT_NEAR(o[size_t(l)], ref, tol)
          << type_name(k.t) << " cols " << k.cols << " row " << l << " activation " << c;
      one[size_t(c * kX16Rows + l)] = o[size_t(l)];
    }
  }
  for (int C = 2; C <= kAct; ++C) {
    std::vector<float> o(ldo * size_t(C), NAN);
    ops.dot(k.cols, group.data(), a.data(), stride, C, o.data(), ldo);
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < kX16Rows; ++l)
        ASSERT_TRUE(same_bits(o[ldo * size_t(c) + size_t(l)], one[size_t(c * kX16Rows + l)]))
            << type_name(k.t) << " cols " << k.cols << " C " << C << " position " << c << " row "
            << l;
  }
}

void check_type(QType t) {
  uint32_t seed = 7;
  for (int64_t cols : {256, 768, 2048, 3072}) {
    check_group({t, cols, Fill::random_bytes, Fill::random_bytes}, seed++);
    check_group({t, cols, Fill::quantized, Fill::quantized}, seed++);
  }
  // the ends of every integer range: the largest values, scales and mins against -128 and 127
  for (Fill w : {Fill::extreme_high, Fill::extreme_low})
    for (Fill a : {Fill::extreme_high, Fill::extreme_low}) check_group({t, 768, w, a}, seed++);
}

// A group of nrows < 16: lanes past nrows are 0, the others bitwise a full group's.
void check_partial(QType t) {
  const X16Ops& ops = *ops_for(t);
  const int64_t cols = 768;
  const int C = 11;
  const size_t rb = row_bytes(t, cols), stride = activation_row_bytes(t, cols);
  const auto w = weight_rows(t, kX16Rows, cols, Fill::quantized, 99);
  const auto a = activation_rows(C, cols, stride, Fill::quantized, 98);
  std::vector<const uint8_t*> rows(kX16Rows);
  for (int l = 0; l < kX16Rows; ++l) rows[size_t(l)] = w.data() + rb * size_t(l);
  std::vector<uint8_t> full(ops.group_bytes(cols));
  ops.pack(cols, rows.data(), kX16Rows, full.data());
  std::vector<float> ref(size_t(C) * kX16Rows);
  ops.dot(cols, full.data(), a.data(), stride, C, ref.data(), kX16Rows);
  for (int nrows : {1, 5, 15}) {
    std::vector<uint8_t> part(ops.group_bytes(cols), 0xCC);
    ops.pack(cols, rows.data(), nrows, part.data());
    std::vector<float> o(size_t(C) * kX16Rows, NAN);
    ops.dot(cols, part.data(), a.data(), stride, C, o.data(), kX16Rows);
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < kX16Rows; ++l) {
        const size_t i = size_t(c * kX16Rows + l);
        if (l < nrows)
          ASSERT_TRUE(same_bits(o[i], ref[i])) << type_name(t) << " nrows " << nrows;
        else
          ASSERT_EQ(o[i], 0.0f) << type_name(t) << " nrows " << nrows << " lane " << l;
      }
  }
}

}  // namespace

TEST(X16KQuants, Q4_KMatchesScalarAndBatchBitwise) {
  SKIP_WITHOUT_OPS(QType::q4_k);
  check_type(QType::q4_k);
}

TEST(X16KQuants, Q4_KPartialGroup) {
  SKIP_WITHOUT_OPS(QType::q4_k);
  check_partial(QType::q4_k);
}

TEST(X16KQuants, Q6_KMatchesScalarAndBatchBitwise) {
  SKIP_WITHOUT_OPS(QType::q6_k);
  check_type(QType::q6_k);
}

TEST(X16KQuants, Q6_KPartialGroup) {
  SKIP_WITHOUT_OPS(QType::q6_k);
  check_partial(QType::q6_k);
}

// The layout's size: at most 3% more than the ggml blocks it holds (the RSS budget).
TEST(X16KQuants, GroupBytesNearGgml) {
  SKIP_WITHOUT_OPS(QType::q4_k);
  for (QType t : {QType::q4_k, QType::q6_k})
    for (int64_t cols : {256, 3072}) {
      const double ratio =
          double(ops_for(t)->group_bytes(cols)) / double(kX16Rows * row_bytes(t, cols));
      EXPECT_LE(ratio, 1.03) << type_name(t);
      EXPECT_GE(ratio, 1.0) << type_name(t);
    }
}
