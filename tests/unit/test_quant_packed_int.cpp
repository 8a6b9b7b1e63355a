// GPTQ / AWQ unpacking against hand-written packed words (the formats' documented layouts),
// and the requantization into Q4_0 / Q4_1 / Q8_0 / F32 rows read back by the block decoders
// (exact, but for Q4_1's f16 min, which stays within its documented bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/block_formats.h"
#include "quant/packed_int_weights.h"
#include "util/error.h"

namespace llmrun::quant {
namespace {

// 32 inputs, 8 outputs, one group of 32.
struct Tiny {
  std::vector<int32_t> qweight, qzeros, g_idx;
  std::vector<uint16_t> scales;
  PackedLinear linear(PackedFormat f, int bits = 4) const {
    PackedLinear p;
    p.name = "layer.q_proj";
    p.format = f;
    p.bits = bits;
    p.in = 32;
    p.out = 8;
    p.group_size = 32;
    p.qweight = qweight.data();
    p.qzeros = qzeros.data();
    p.scales = scales.data();
    p.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    return p;
  }
};

std::vector<uint16_t> halves(int n, float v) { return std::vector<uint16_t>(size_t(n), to_f16(v)); }

TEST(PackedInt, GptqPacksInputsAlongWordsAndStoresZeroMinusOne) {
  Tiny t;
  t.qweight.assign(4 * 8, 0x76543210);  // [in/8, out]: input 8r + k holds k
  t.qzeros = {0x76543210};              // [1, out/8]: output c stores c, so its zero is c + 1
  t.scales = halves(8, 0.5f);
  const GroupedInts g = unpack_packed_linear(t.linear(PackedFormat::gptq));
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(g.zero[size_t(c)], c + 1);
    EXPECT_EQ(g.scale[size_t(c)], to_f16(0.5f));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(g.q[size_t(c * 32 + i)], i % 8) << c << " " << i;
  }
  // Zero points other than 8 at 4 bits: Q4_1 (d = scale, m = -scale * zero; both exact in
  // f16 here) holds them; Q8_0 holds q - zero exactly too. The decoders give the formula.
  ASSERT_EQ(requant_block_type(g, 4), QType::q4_1);
  EXPECT_EQ(requant_error_bound(g, QType::q4_1), 0.5 * 8 * std::ldexp(1.0, -11));
  for (QType t : {QType::q4_1, QType::q8_0}) {
    const std::vector<uint8_t> rows = to_block_rows(g, t);
    ASSERT_EQ(rows.size(), 8 * block_bytes(t));
    std::vector<float> w(32 * 8), back(32);
    dequantize_grouped(g, w.data());
    for (int c = 0; c < 8; ++c) {
      dequantize_row(t, rows.data() + size_t(c) * block_bytes(t), back.data(), 32);
      for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(w[size_t(c * 32 + i)], 0.5f * float(i % 8 - (c + 1)));
        EXPECT_EQ(back[size_t(i)], w[size_t(c * 32 + i)]) << type_name(t);
      }
    }
  }
}

TEST(PackedInt, Q4_1MinRoundsWithinItsBound) {
  // Scales that make -scale * zero inexact in f16: every weight within requant_error_bound,
  // and the bound is not vacuous (some weight is off by more than a tenth of it).
  Tiny t;
  t.qweight.assign(4 * 8, int32_t(0xF7A35C10u));
  t.qzeros = {int32_t(0xE6D5C4B3u)};  // zeros 4..15 (stored + 1)
  t.scales.clear();
  for (int c = 0; c < 8; ++c) t.scales.push_back(to_f16(0.0123f * float(c + 1) + 0.00071f));
  const GroupedInts g = unpack_packed_linear(t.linear(PackedFormat::gptq));
  ASSERT_EQ(requant_block_type(g, 4), QType::q4_1);
  const double bound = requant_error_bound(g, QType::q4_1);
  const std::vector<uint8_t> rows = to_block_rows(g, QType::q4_1);
  std::vector<float> w(32 * 8), back(32 * 8);
  dequantize_grouped(g, w.data());
  dequantize_row(QType::q4_1, rows.data(), back.data(), 32 * 8);
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(double(w[i]) - back[i]));
  EXPECT_LE(worst, bound);
  EXPECT_GT(worst, 0.1 * bound);
}

TEST(PackedInt, AwqInterleavesOutputsZeroAsStored) {
  Tiny t;
  // [in, out/8]: nibble k holds output [0,2,4,6,1,3,5,7][k], so output j gets the value of the
  // nibble that holds it: 0 4 1 5 2 6 3 7.
  t.qweight.assign(32, 0x76543210);
  t.qzeros = {int32_t(0x88888888u)};  // every zero 8 (no "+1" in AWQ)
  t.scales = halves(8, 0.25f);
  const GroupedInts g = unpack_packed_linear(t.linear(PackedFormat::awq));
  const int want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(g.zero[size_t(c)], 8);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(g.q[size_t(c * 32 + i)], want[c]);
  }
  // All zeros 8 at 4 bits: Q4_0 with d = scale and nibble = q, bit for bit.
  ASSERT_EQ(requant_block_type(g, 4), QType::q4_0);
  const std::vector<uint8_t> rows = to_block_rows(g, QType::q4_0);
  ASSERT_EQ(rows.size(), 8u * 18);
  uint16_t d;
  std::memcpy(&d, rows.data() + 3 * 18, 2);
  EXPECT_EQ(d, to_f16(0.25f));
  EXPECT_EQ(rows[3 * 18 + 2], 0x55);  // output 3 holds 5 in both nibbles
  std::vector<float> back(32);
  dequantize_row(QType::q4_0, rows.data() + 3 * 18, back.data(), 32);
  for (float v : back) EXPECT_EQ(v, 0.25f * float(5 - 8));
}

TEST(PackedInt, AwqZerosUseTheSameInterleave) {
  Tiny t;
  t.qweight.assign(32, 0);
  t.qzeros = {0x76543210};
  t.scales = halves(8, 1.0f);
  const GroupedInts g = unpack_packed_linear(t.linear(PackedFormat::awq));
  const int want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int c = 0; c < 8; ++c) EXPECT_EQ(g.zero[size_t(c)], want[c]);
}

TEST(PackedInt, Gptq8BitSymmetricIsQ8_0AsymmetricFallsBackToF32) {
  Tiny t;
  t.qweight.assign(8 * 8, int32_t(0xFF800100u));  // [in/4, out]: inputs 4r.. hold 0, 1, 128, 255
  t.qzeros.assign(2, 0x7F7F7F7F);                 // [1, out/4]: stored 127, zero 128
  t.scales = halves(8, 2.0f);
  GroupedInts g = unpack_packed_linear(t.linear(PackedFormat::gptq, 8));
  EXPECT_EQ(g.q[0], 0);
  EXPECT_EQ(g.q[1], 1);
  EXPECT_EQ(g.q[2], 128);
  EXPECT_EQ(g.q[3], 255);
  EXPECT_EQ(g.zero[0], 128);
  EXPECT_EQ(requant_block_type(g, 8), QType::q8_0);  // q - 128 spans -128..127
  t.qzeros.assign(2, 0);                             // zero 1: 255 - 1 leaves int8
  g = unpack_packed_linear(t.linear(PackedFormat::gptq, 8));
  ASSERT_EQ(requant_block_type(g, 8), QType::f32);
  const std::vector<uint8_t> rows = to_block_rows(g, QType::f32);
  float w3;
  std::memcpy(&w3, rows.data() + 3 * 4, 4);
  EXPECT_EQ(w3, 2.0f * 254);
}

TEST(PackedInt, GroupIndexPicksEachBlocksScaleAndRefusesScatteredBlocks) {
  Tiny t;
  t.qweight.assign(8 * 8, 0);
  t.qzeros = {0x77777777, 0x66666666};  // group 0 zero 8, group 1 zero 7
  t.scales = halves(8, 1.0f);
  const std::vector<uint16_t> g1 = halves(8, 3.0f);
  t.scales.insert(t.scales.end(), g1.begin(), g1.end());
  t.g_idx.assign(64, 0);
  for (int i = 0; i < 32; ++i) t.g_idx[size_t(i)] = 1;  // act-order: the first block in group 1
  PackedLinear p = t.linear(PackedFormat::gptq);
  p.in = 64;
  const GroupedInts g = unpack_packed_linear(p);
  EXPECT_EQ(g.zero[0], 7);
  EXPECT_EQ(g.scale[0], to_f16(3.0f));
  EXPECT_EQ(g.zero[1], 8);
  t.g_idx[5] = 0;  // a block of 32 inputs over two groups: no single scale holds it
  p = t.linear(PackedFormat::gptq);
  p.in = 64;
  try {
    unpack_packed_linear(p);
    FAIL() << "accepted a block spanning two groups";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("layer.q_proj.g_idx puts inputs 0..31 in groups 1 and 0"),
              std::string::npos)
        << e.what();
  }
  t.g_idx[5] = 2;
  p = t.linear(PackedFormat::gptq);
  p.in = 64;
  EXPECT_THROW(unpack_packed_linear(p), UserError);  // no group 2
}

TEST(PackedInt, ShapesFollowEachFormat) {
  const PackedShapes g = packed_shapes(PackedFormat::gptq, 4, 256, 96, 128);
  EXPECT_EQ(g.qweight, (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(g.qzeros, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(g.scales, (std::vector<int64_t>{2, 96}));
  const PackedShapes a = packed_shapes(PackedFormat::awq, 4, 256, 96, 128);
  EXPECT_EQ(a.qweight, (std::vector<int64_t>{256, 12}));
  EXPECT_EQ(a.qzeros, (std::vector<int64_t>{2, 12}));
}

}  // namespace
}  // namespace llmrun::quant
