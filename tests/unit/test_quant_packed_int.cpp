// GPTQ / AWQ unpacking against hand-written packed words (the formats' documented layouts),
// and the requantization into Q4_0 / Q4_1 / Q8_0 / F32 rows read back by the block decoders
// (exact, but for Q4_1's f16 min, which stays within its documented bound); act-order (g_idx
// splitting blocks of 32): the inputs sorted by group and padded, and QuantizedLinear
// gathering x through that order against x W^T by GPTQ's formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend_factory.h"
#include "quant/block_formats.h"
#include "quant/packed_int_weights.h"
#include "quant/quantized_linear.h"
#include "tensor/tensor.h"
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

TEST(PackedInt, GroupIndexPicksEachBlocksScale) {
  Tiny t;
  t.qweight.assign(8 * 8, 0);
  t.qzeros = {0x77777777, 0x66666666};  // group 0 zero 8, group 1 zero 7
  t.scales = halves(8, 1.0f);
  const std::vector<uint16_t> g1 = halves(8, 3.0f);
  t.scales.insert(t.scales.end(), g1.begin(), g1.end());
  t.g_idx.assign(64, 0);
  for (int i = 0; i < 32; ++i) t.g_idx[size_t(i)] = 1;  // act-order moving a whole block
  PackedLinear p = t.linear(PackedFormat::gptq);
  p.in = 64;
  const GroupedInts g = unpack_packed_linear(p);
  EXPECT_TRUE(g.gather.empty());  // every block in one group: the inputs stay in order
  EXPECT_EQ(g.in, 64);
  EXPECT_EQ(g.zero[0], 7);
  EXPECT_EQ(g.scale[0], to_f16(3.0f));
  EXPECT_EQ(g.zero[1], 8);
  t.g_idx[5] = 2;
  p = t.linear(PackedFormat::gptq);
  p.in = 64;
  try {
    unpack_packed_linear(p);
    FAIL() << "accepted a g_idx naming group 2 of 2";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("layer.q_proj.g_idx[5] is 2, not a group below 2"),
              std::string::npos)
        << e.what();
  }
}

// A random 4-bit GPTQ linear (v1 zeros) and its weights by GPTQ's formula with g_idx:
// w[c, i] = scale[g_idx[i], c] * (q[i, c] - (stored_zero[g_idx[i], c] + 1)).
struct RandomGptq {
  int64_t in, out, groups;
  std::vector<int32_t> qweight, qzeros, g_idx;
  std::vector<uint16_t> scales;
  std::vector<float> w;  // [out, in]
  RandomGptq(int64_t in_, int64_t out_, std::vector<int32_t> gi, uint32_t seed)
      : in(in_), out(out_), g_idx(std::move(gi)) {
    groups = *std::max_element(g_idx.begin(), g_idx.end()) + 1;
    std::mt19937 rng(seed);
    std::vector<int> q(size_t(in * out)), z(size_t(groups * out));  // q [in, out], z stored
    for (int& v : q) v = int(rng() % 16);
    for (int& v : z) v = int(rng() % 16);
    qweight.assign(size_t(in / 8 * out), 0);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t c = 0; c < out; ++c)
        qweight[size_t(i / 8 * out + c)] |=
            int32_t(uint32_t(q[size_t(i * out + c)]) << (4 * (i % 8)));
    qzeros.assign(size_t(groups * out / 8), 0);
    for (int64_t k = 0; k < groups; ++k)
      for (int64_t c = 0; c < out; ++c)
        qzeros[size_t(k * out / 8 + c / 8)] |=
            int32_t(uint32_t(z[size_t(k * out + c)]) << (4 * (c % 8)));
    for (int64_t k = 0; k < groups * out; ++k)
      scales.push_back(to_f16(0.001f * float(1 + rng() % 1000)));
    w.resize(size_t(out * in));
    for (int64_t c = 0; c < out; ++c)
      for (int64_t i = 0; i < in; ++i) {
        const int64_t k = g_idx[size_t(i)];
        w[size_t(c * in + i)] = from_f16(scales[size_t(k * out + c)]) *
                                float(q[size_t(i * out + c)] - (z[size_t(k * out + c)] + 1));
      }
  }
  PackedLinear linear() const {
    PackedLinear p;
    p.name = "layer.k_proj";
    p.in = in;
    p.out = out;
    p.group_size = 32;  // unused with a g_idx but for the group count
    p.qweight = qweight.data();
    p.qzeros = qzeros.data();
    p.scales = scales.data();
    p.g_idx = g_idx.data();
    return p;
  }
};

TEST(PackedInt, ActOrderSortsInputsByGroupAndPadsEachToWholeBlocks) {
  // Group 0: inputs 5 and 32..63 (33, padded to 64 columns); group 1: 0..4 and 6..31 (31,
  // padded to 32).
  std::vector<int32_t> gi(64, 0);
  for (int i = 0; i < 32; ++i) gi[size_t(i)] = 1;
  gi[5] = 0;
  const RandomGptq r(64, 8, gi, 1);
  const GroupedInts g = unpack_packed_linear(r.linear());
  ASSERT_EQ(g.in, 96);
  EXPECT_EQ(g.inputs, 64);
  ASSERT_EQ(g.gather.size(), 96u);
  EXPECT_EQ(g.gather[0], 5);
  EXPECT_EQ(g.gather[1], 32);
  EXPECT_EQ(g.gather[32], 63);
  for (int j = 33; j < 64; ++j) EXPECT_EQ(g.gather[size_t(j)], -1) << j;
  EXPECT_EQ(g.gather[64], 0);
  EXPECT_EQ(g.gather[69], 6);
  EXPECT_EQ(g.gather[94], 31);
  EXPECT_EQ(g.gather[95], -1);
  // Each stored block has its group's scale and zero; a pad's q is that zero (clamped to 15).
  for (int64_t c = 0; c < 8; ++c) {
    for (int b = 0; b < 3; ++b) {
      const int k = b < 2 ? 0 : 1;
      EXPECT_EQ(g.scale[size_t(c * 3 + b)], r.scales[size_t(k * 8 + c)]);
    }
    EXPECT_EQ(g.q[size_t(c * 96 + 40)], std::min<int>(g.zero[size_t(c * 3 + 1)], 15));
  }
  // The formula's weights, in the linear's own input order.
  std::vector<float> w(size_t(8 * 64), -1.0f);
  dequantize_grouped(g, w.data());
  EXPECT_EQ(w, r.w);
}

// y = x W^T (+ bias) from the parts' block rows through QuantizedLinear, gathering x.
std::vector<float> run_linear(const std::vector<QuantMatrix>& parts,
                              const std::vector<QuantizedLinear::Gather>& gathers,
                              std::vector<float> x, int64_t n, int64_t in, int64_t out,
                              std::vector<float>* bias) {
  QuantizedLinear runner;
  const LinearSite site{0, LinearKind::qkv};
  runner.set(site, parts, gathers);
  EXPECT_TRUE(runner.has(site));
  std::vector<float> y(size_t(n * out), 0.0f);
  Tensor xt(x.data(), DType::f32, {n, in}), yt(y.data(), DType::f32, {n, out});
  std::unique_ptr<Tensor> bt;
  if (bias)
    bt = std::make_unique<Tensor>(bias->data(), DType::f32, std::initializer_list<int64_t>{out});
  const std::unique_ptr<Backend> cpu = make_backend(BackendKind::cpu);
  runner.forward(*cpu, site, yt, xt, xt, bt.get(), false);
  return y;
}

std::vector<float> reference(const std::vector<float>& x, int64_t n, int64_t in,
                             const std::vector<const std::vector<float>*>& ws,
                             const std::vector<float>& bias) {
  std::vector<float> y;
  for (int64_t i = 0; i < n; ++i)
    for (const std::vector<float>* w : ws)
      for (int64_t c = 0; c < int64_t(w->size()) / in; ++c) {
        double acc = bias.empty() ? 0.0 : bias[y.size() % bias.size()];
        for (int64_t k = 0; k < in; ++k)
          acc += double(x[size_t(i * in + k)]) * (*w)[size_t(c * in + k)];
        y.push_back(float(acc));
      }
  return y;
}

TEST(PackedInt, ActOrderLinearGathersItsInputs) {
  // Three parts of one fused site reading the same x: two act-order linears with different
  // orders (q, k, v quantized apart) around one in input order. Held as F32 rows (exact
  // weights), y matches x W^T to fp32 rounding; as Q4_1 (the block type llmrun uses), to the
  // Q8_0 activations' rounding.
  const int64_t in = 128, n = 5;
  std::mt19937 rng(4);
  std::vector<int32_t> gi_a(static_cast<size_t>(in)), gi_c(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) gi_a[size_t(i)] = gi_c[size_t(i)] = int32_t(i / 32);
  std::shuffle(gi_a.begin(), gi_a.end(), rng);
  std::shuffle(gi_c.begin(), gi_c.end(), rng);
  gi_c[0] = 3;  // uneven groups: group 3 holds 33 inputs, so pads
  const RandomGptq a(in, 16, gi_a, 2), plain(in, 8, std::vector<int32_t>(size_t(in), 0), 3),
      c(in, 24, gi_c, 4);
  const GroupedInts ga = unpack_packed_linear(a.linear()),
                    gp = unpack_packed_linear(plain.linear()),
                    gc = unpack_packed_linear(c.linear());
  ASSERT_FALSE(ga.gather.empty());
  ASSERT_TRUE(gp.gather.empty());
  ASSERT_EQ(gc.in, 160);  // 5 groups' runs: 32 + 32 + 32 + 64 (33 + 31 pads)
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(size_t(n * in)), bias(48);
  for (float& v : x) v = u(rng);
  for (float& v : bias) v = u(rng);
  const std::vector<float> want = reference(x, n, in, {&a.w, &plain.w, &c.w}, bias);
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::fabs(v)));
  for (QType t : {QType::f32, QType::q4_1}) {
    const std::vector<uint8_t> ra = to_block_rows(ga, t), rp = to_block_rows(gp, t),
                               rc = to_block_rows(gc, t);
    const std::vector<QuantMatrix> parts = {
        {t, 16, ga.in, ra.data()}, {t, 8, gp.in, rp.data()}, {t, 24, gc.in, rc.data()}};
    const std::vector<float> got =
        run_linear(parts, {ga.gather, gp.gather, gc.gather}, x, n, in, 48, &bias);
    ASSERT_EQ(got.size(), want.size());
    // fp32 sums of 128 products; Q8_0 activations: half a step (1/254 of the block's largest
    // |x|) per value times sum |w| (< 128 * 16 * 1.0 here: the tolerance scales with |y|).
    const double tol = t == QType::f32 ? 1e-5 * scale : 2e-2 * scale;
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], want[k], tol) << type_name(t) << " value " << k;
  }
  // Merging: the same gather on consecutive parts, or none, is one segment; a wrong width is
  // refused.
  const std::vector<uint8_t> ra = to_block_rows(ga, QType::f32);
  EXPECT_THROW(run_linear({{QType::f32, 16, ga.in, ra.data()}}, {std::vector<int32_t>(7, 0)}, x, n,
                          in, 16, nullptr),
               std::exception);
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
