// FP8: casts (exhaustively against the definition in tests/fp8/check_fp8_casts.py; here the
// vectorised path against the scalar one), delayed scaling step by step, and the FP8 linear
// runner against a naive GEMM on FP8 values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "fp8/delayed_scaling.h"
#include "fp8/fp8_cast.h"
#include "fp8/fp8_linears.h"
#include "test_backend.h"
#include "util/error.h"

using namespace llmrun;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

}  // namespace

TEST(Fp8Cast, KnownValues) {
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_encode(1.0f, Fp8Format::e4m3), 0x38);   // 0.0111.000
  EXPECT_EQ(fp8_encode(-2.0f, Fp8Format::e5m2), 0xC0);  // 1.10000.00
  EXPECT_EQ(fp8_encode(448.0f, Fp8Format::e4m3), 0x7E);
  EXPECT_EQ(fp8_encode(1e9f, Fp8Format::e4m3), 0x7E);   // saturates
  EXPECT_EQ(fp8_encode(-kInf, Fp8Format::e4m3), 0xFE);  // no infinity: -max
  EXPECT_EQ(fp8_encode(kInf, Fp8Format::e5m2), 0x7B);   // saturating cast: max, not inf
  EXPECT_EQ(fp8_encode(kNaN, Fp8Format::e4m3) & 0x7F, 0x7F);
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -9), Fp8Format::e4m3), 0x01);  // smallest subnormal
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -10), Fp8Format::e4m3),
            0x00);  // half of it: tie to even (0)
  EXPECT_EQ(fp8_encode(std::ldexp(3.0f, -10), Fp8Format::e4m3),
            0x02);                                        // 1.5 x smallest: tie to even (2)
  EXPECT_EQ(fp8_encode(1.0625f, Fp8Format::e4m3), 0x38);  // tie between 1 and 1.125 -> even 1
  EXPECT_EQ(fp8_encode(1.1875f, Fp8Format::e4m3), 0x3A);  // tie between 1.125 and 1.25 -> even 1.25
  EXPECT_EQ(fp8_encode(464.0f, Fp8Format::e4m3), 0x7E);   // tie above max rounds to max (even)
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, Fp8Format::e4m3)));
  EXPECT_EQ(fp8_decode(0x7C, Fp8Format::e5m2), kInf);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7D, Fp8Format::e5m2)));
  EXPECT_TRUE(std::signbit(fp8_decode(0x80, Fp8Format::e4m3)));
}

// The vectorised round trip must be the scalar encode + decode, bit for bit, over a sweep of
// the whole fp32 space (every 509th bit pattern: all exponents, both signs, NaNs, infinities)
// and at several scales.
TEST(Fp8Cast, VectorisedRoundTripEqualsScalar) {
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 509)
    x.push_back(std::bit_cast<float>(uint32_t(b)));
  x.push_back(kInf);
  x.push_back(-kInf);
  std::vector<float> y(x.size());
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (float scale : {1.0f, 0.37f, 3.0e4f}) {
      const Fp8CastStats st = fp8_round_trip(x.data(), y.data(), int64_t(x.size()), scale, f);
      int64_t over = 0, under = 0, bad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float v = x[i] * scale;
        const uint8_t q = fp8_encode(v, f);
        const float want = fp8_decode(q, f);
        if (!same_bits(y[i], want) && bad++ < 5)
          ADD_FAILURE() << fp8_format_name(f) << " x=" << x[i] << " scale " << scale << ": " << y[i]
                        << " vs " << want;
        over += std::fabs(v) > fp8_max(f);
        under += x[i] != 0 && !std::isnan(x[i]) && (q & 0x7F) == 0;
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(st.overflows, over);
      EXPECT_EQ(st.underflows, under);
      EXPECT_TRUE(std::isnan(st.amax));  // the sweep holds NaNs
    }
  }
}

TEST(Fp8Cast, BufferCastsAgreeAndDequantize) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 30.0f);
  std::vector<float> x(50000), rt(x.size()), deq(x.size());
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> q(x.size());
  const float scale = 5.0f;
  const Fp8CastStats a =
      fp8_quantize(x.data(), q.data(), int64_t(x.size()), scale, Fp8Format::e4m3);
  const Fp8CastStats b =
      fp8_round_trip(x.data(), rt.data(), int64_t(x.size()), scale, Fp8Format::e4m3);
  fp8_dequantize(q.data(), deq.data(), int64_t(x.size()), 1.0f / scale, Fp8Format::e4m3);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(a.amax, amax);
  EXPECT_EQ(b.amax, amax);
  EXPECT_EQ(a.overflows, b.overflows);
  EXPECT_GT(a.overflows, 0);  // |x| * 5 > 448 happens for |x| > 89.6 (3 sigma)
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(rt[i], fp8_decode(q[i], Fp8Format::e4m3));
    ASSERT_EQ(deq[i], rt[i] * (1.0f / scale));
  }
}

// Hand-computed: history of 3, E4M3 (max 448), margin 0.
TEST(DelayedScaling, MaxOverHistoryStepByStep) {
  DelayedScaling d(3);
  EXPECT_EQ(d.scale(), 1.0f);  // Transformer Engine starts at 1
  struct Step {
    std::vector<float> recorded;
    float scale;
    std::vector<float> history_after;
  };
  const std::vector<Step> steps = {
      {{2.0f, 1.0f}, 224.0f, {0, 0, 2}},  // amax 2 (the running max of the step)
      {{8.0f}, 56.0f, {0, 2, 8}},         // max(8, 0, 2)
      {{4.0f}, 56.0f, {0, 8, 4}},         // max(4, 2, 8)
      {{1.0f}, 56.0f, {0, 4, 1}},         // max(1, 8, 4): 8 still in the window
      {{0.5f}, 112.0f, {0, 1, 0.5f}},     // 8 left the window: max(0.5, 4, 1)
      {{}, 448.0f, {0, 0.5f, 0}},         // nothing recorded: max(0, 1, 0.5)
      {{}, 896.0f, {0, 0, 0}},            // max 0.5
      {{}, 896.0f, {0, 0, 0}},            // amax 0: the scale is kept
      {{kInf}, 896.0f, {0, 0, kInf}},     // not finite: kept
      {{3.0f}, 896.0f, {0, kInf, 3}},     // inf still in the window: kept
      {{3.0f}, 896.0f, {0, 3, 3}},       {{}, 448.0f / 3.0f, {0, 3, 0}},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    for (float a : steps[i].recorded) d.record(a);
    d.update(AmaxCompute::max, 448.0f, 0);
    EXPECT_EQ(d.scale(), steps[i].scale) << "step " << i + 1;
    EXPECT_EQ(d.scale_inv(), 1.0f / steps[i].scale) << "step " << i + 1;
    EXPECT_EQ(d.amax_history(), steps[i].history_after) << "step " << i + 1;
  }
}

TEST(DelayedScaling, MostRecentMarginNanAndClamp) {
  DelayedScaling d(3);
  const std::vector<std::pair<float, float>> steps = {{2, 224}, {8, 56},     {4, 112},
                                                      {1, 448}, {0.5f, 896}, {0, 896}};
  for (auto [amax, scale] : steps) {
    d.record(amax);
    d.update(AmaxCompute::most_recent, 448.0f, 0);
    EXPECT_EQ(d.scale(), scale) << "amax " << amax;
  }
  DelayedScaling m(2);  // margin 1 halves the scale; E5M2's max
  m.record(2.0f);
  m.update(AmaxCompute::max, 57344.0f, 1);
  EXPECT_EQ(m.scale(), 57344.0f / 2 / 2);
  m.record(kNaN);
  m.record(1.0f);  // NaN sticks for the rest of the step
  EXPECT_TRUE(std::isnan(m.amax_history()[0]));
  m.update(AmaxCompute::max, 57344.0f, 1);
  EXPECT_EQ(m.scale(), 57344.0f / 2 / 2);
  DelayedScaling tiny(1);
  tiny.record(1e-40f);  // 448 / 1e-40 overflows fp32: clamped
  tiny.update(AmaxCompute::max, 448.0f, 0);
  EXPECT_EQ(tiny.scale(), std::numeric_limits<float>::max());
}

namespace {

Fp8Section fp8_recipe() {
  Fp8Section s;
  s.enabled = true;
  s.amax_history = 4;
  return s;
}

ModelConfig two_layers() {
  ModelConfig c;
  c.layers = 2;
  return c;
}

std::vector<float> randn(size_t n, float sd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> on_grid(const std::vector<float>& x, float scale, Fp8Format f) {
  std::vector<float> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) q[i] = fp8_decode(fp8_encode(x[i] * scale, f), f);
  return q;
}

// Sum of a[i] * b[i] in double, and the sum of |a[i] * b[i]| that bounds fp32 rounding.
struct Dot {
  double value = 0, magnitude = 0;
  void add(double a, double b) {
    value += a * b;
    magnitude += std::fabs(a * b);
  }
  // fp32 accumulation order differs from this one: a few ulps of the magnitude.
  double tolerance() const { return 1e-6 * magnitude + 1e-30; }
};

}  // namespace

TEST(Fp8Linears, ForwardAndBackwardAreGemmsOnFp8Values) {
  auto be = test::make_test_backend(2);
  auto dp = make_self_communicator("dp");
  Fp8Linears lin(fp8_recipe(), two_layers(), *be);
  const int N = 6, K = 40, M = 24;
  std::vector<float> x = randn(size_t(N) * K, 3.0f, 1), W = randn(size_t(M) * K, 0.05f, 2),
                     b = randn(M, 1.0f, 3);
  std::vector<float> dy = randn(size_t(N) * M, 1e-4f, 4);
  std::vector<float> y(size_t(N) * M), dx(size_t(N) * K), dW(size_t(M) * K, 0.0f), db(M, 0.0f);
  Tensor tx(x.data(), DType::f32, {N, K}), tW(W.data(), DType::f32, {M, K}),
      tb(b.data(), DType::f32, {M});
  Tensor ty(y.data(), DType::f32, {N, M}), tdy(dy.data(), DType::f32, {N, M}),
      tdx(dx.data(), DType::f32, {N, K});
  Tensor tdW(dW.data(), DType::f32, {M, K}), tdb(db.data(), DType::f32, {M});
  const LinearSite site{1, LinearKind::up};

  // Step 1 casts with scale 1 and records the amaxes; step 2 casts with the delayed scales.
  for (int step = 0; step < 2; ++step) {
    const float sx = lin.scaling("layers.1.up.input").scale(),
                sw = lin.scaling("layers.1.up.weight").scale();
    const float sg = lin.scaling("layers.1.up.grad_output").scale();
    lin.begin_step();
    lin.forward(*be, site, ty, tx, tW, &tb, false);
    std::fill(dW.begin(), dW.end(), 0.0f);
    std::fill(db.begin(), db.end(), 0.0f);
    lin.backward(*be, site, tdx, tdW, tdb, tdy, tx, tW);
    lin.end_step(*dp);

    const auto xq = on_grid(x, sx, Fp8Format::e4m3), wq = on_grid(W, sw, Fp8Format::e4m3);
    const auto gq = on_grid(dy, sg, Fp8Format::e5m2);  // hybrid: gradients in E5M2
    // y = (xq . wq^T) / (sx sw) + b
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < M; ++j) {
        Dot d;
        for (int k = 0; k < K; ++k) d.add(xq[size_t(i) * K + k], wq[size_t(j) * K + k]);
        const double scale = 1.0 / (double(sx) * sw);
        ASSERT_NEAR(y[size_t(i) * M + j], d.value * scale + b[size_t(j)],
                    d.tolerance() * scale + 1e-6)
            << "step " << step << " y " << i << "," << j;
      }
    // dx = (gq . wq) / (sg sw)
    for (int i = 0; i < N; ++i)
      for (int k = 0; k < K; ++k) {
        Dot d;
        for (int j = 0; j < M; ++j) d.add(gq[size_t(i) * M + j], wq[size_t(j) * K + k]);
        const double scale = 1.0 / (double(sg) * sw);
        ASSERT_NEAR(dx[size_t(i) * K + k], d.value * scale, d.tolerance() * scale)
            << "step " << step << " dx";
      }
    // dW = (gq^T . xq) / (sg sx); db from the unquantised gradient, as TE's fused dbias
    for (int j = 0; j < M; ++j) {
      double want_db = 0;
      for (int i = 0; i < N; ++i) want_db += dy[size_t(i) * M + j];
      ASSERT_NEAR(db[size_t(j)], want_db, 1e-9);
      for (int k = 0; k < K; ++k) {
        Dot d;
        for (int i = 0; i < N; ++i) d.add(gq[size_t(i) * M + j], xq[size_t(i) * K + k]);
        const double scale = 1.0 / (double(sg) * sx);
        ASSERT_NEAR(dW[size_t(j) * K + k], d.value * scale, d.tolerance() * scale)
            << "step " << step << " dW";
      }
    }
  }
  // After step 1 the scales are fp8_max / amax of what step 1 cast.
  float ax = 0, aw = 0;
  for (float v : x) ax = std::max(ax, std::fabs(v));
  for (float v : W) aw = std::max(aw, std::fabs(v));
  EXPECT_EQ(lin.scaling("layers.1.up.input").scale(), 448.0f / ax);
  EXPECT_EQ(lin.scaling("layers.1.up.weight").scale(), 448.0f / aw);
  // Only this site cast anything: the others keep scale 1 (amax 0 keeps the scale).
  EXPECT_EQ(lin.scaling("layers.0.qkv.input").scale(), 1.0f);
}

TEST(Fp8Linears, SkippedLayersRunPlainFp32AndNothingRecordsOutsideSteps) {
  auto be = test::make_test_backend(2);
  auto dp = make_self_communicator("dp");
  Fp8Section r = fp8_recipe();
  r.skip = {"embedding", "lm_head", "down"};
  Fp8Linears lin(r, two_layers(), *be);
  EXPECT_FALSE(lin.runs_fp8(LinearKind::down));
  EXPECT_FALSE(lin.runs_fp8(LinearKind::lm_head));
  EXPECT_TRUE(lin.runs_fp8(LinearKind::qkv));
  EXPECT_EQ(lin.tensor_names().size(), size_t(2 * 3 * 3));  // 2 layers x {qkv, out, up} x 3 tensors
  const int N = 5, K = 16, M = 8;
  std::vector<float> x = randn(size_t(N) * K, 1.0f, 5), W = randn(size_t(M) * K, 0.1f, 6);
  std::vector<float> y1(size_t(N) * M), y2(size_t(N) * M);
  Tensor tx(x.data(), DType::f32, {N, K}), tW(W.data(), DType::f32, {M, K});
  lin.begin_step();
  lin.forward(*be, {0, LinearKind::down}, Tensor(y1.data(), DType::f32, {N, M}), tx, tW, nullptr,
              false);
  fp32_linear().forward(*be, {0, LinearKind::down}, Tensor(y2.data(), DType::f32, {N, M}), tx, tW,
                        nullptr, false);
  EXPECT_EQ(y1, y2);
  lin.end_step(*dp);
  // A validation forward (outside begin/end) casts but records nothing.
  lin.forward(*be, {0, LinearKind::qkv}, Tensor(y1.data(), DType::f32, {N, M}), tx, tW, nullptr,
              false);
  EXPECT_EQ(lin.scaling("layers.0.qkv.input").amax_history()[0], 0.0f);
  EXPECT_NE(y1, y2);  // qkv did run in FP8
}

TEST(Fp8Linears, StateRoundTripsExactly) {
  auto be = test::make_test_backend(2);
  auto dp = make_self_communicator("dp");
  Fp8Linears a(fp8_recipe(), two_layers(), *be);
  const int N = 4, K = 8, M = 8;
  std::vector<float> x = randn(size_t(N) * K, 0.3f, 7), W = randn(size_t(M) * K, 0.07f, 8),
                     y(size_t(N) * M);
  for (int step = 0; step < 3; ++step) {
    a.begin_step();
    for (float& v : x) v *= 1.7f;
    a.forward(*be, {0, LinearKind::out}, Tensor(y.data(), DType::f32, {N, M}),
              Tensor(x.data(), DType::f32, {N, K}), Tensor(W.data(), DType::f32, {M, K}), nullptr,
              false);
    a.end_step(*dp);
  }
  x[3] = kNaN;  // a non-finite amax must survive the JSON trip too
  a.begin_step();
  a.forward(*be, {1, LinearKind::qkv}, Tensor(y.data(), DType::f32, {N, M}),
            Tensor(x.data(), DType::f32, {N, K}), Tensor(W.data(), DType::f32, {M, K}), nullptr,
            false);
  a.end_step(*dp);
  const nlohmann::json saved = nlohmann::json::parse(a.state().dump());

  Fp8Linears b(fp8_recipe(), two_layers(), *be);
  b.restore(saved, "test");
  for (const std::string& name : a.tensor_names()) {
    EXPECT_EQ(std::bit_cast<uint32_t>(a.scaling(name).scale()),
              std::bit_cast<uint32_t>(b.scaling(name).scale()))
        << name;
    const auto &ha = a.scaling(name).amax_history(), &hb = b.scaling(name).amax_history();
    ASSERT_EQ(ha.size(), hb.size());
    for (size_t i = 0; i < ha.size(); ++i)
      EXPECT_TRUE(same_bits(ha[i], hb[i])) << name << " entry " << i;
  }
  EXPECT_NE(b.scaling("layers.0.out.input").scale(), 1.0f);
  // A NaN amax is kept as infinity (also what crosses the data-parallel reduction).
  EXPECT_TRUE(std::isinf(b.scaling("layers.1.qkv.input").amax_history().back()));

  // Another format or history length: a fresh start, not an error.
  Fp8Section other = fp8_recipe();
  other.format = Fp8Scheme::e4m3;
  Fp8Linears c(other, two_layers(), *be);
  c.restore(saved, "test");
  EXPECT_EQ(c.scaling("layers.0.out.input").scale(), 1.0f);

  nlohmann::json broken = saved;
  broken["tensors"]["layers.0.out.input"]["scale"] = -1;
  EXPECT_THROW(b.restore(broken, "test"), UserError);
  broken = saved;
  broken["tensors"]["layers.0.out.input"]["amax_history"] = {1, 2};
  EXPECT_THROW(b.restore(broken, "test"), UserError);
}

// Under tensor parallelism a column-parallel linear's input and a row-parallel one's output
// gradient are whole on every tp rank: only tp rank 0 counts their over/underflows, so the
// counts summed over ranks are one rank's. Shards (weights, the other activations) count
// everywhere.
TEST(Fp8Linears, TensorsWholeOnEveryTpRankAreCountedOnce) {
  auto be = test::make_test_backend(2);
  auto ranks = make_self_communicator("world");
  const int N = 2, K = 4, M = 4;
  // At scale 1 every value above 448 saturates: 8 in x, 16 in W, 8 in dy.
  std::vector<float> x(size_t(N) * K, 1000.0f), W(size_t(M) * K, 1000.0f), dy(size_t(N) * M, 1e6f);
  std::vector<float> y(size_t(N) * M), dx(size_t(N) * K), dW(size_t(M) * K, 0.0f);
  const Tensor tx(x.data(), DType::f32, {N, K}), tW(W.data(), DType::f32, {M, K}),
      tdy(dy.data(), DType::f32, {N, M});
  auto counts = [&](LinearKind kind, int tp_rank) {
    Fp8Linears lin(fp8_recipe(), two_layers(), *be);
    lin.begin_step();
    lin.forward(*be, {0, kind}, Tensor(y.data(), DType::f32, {N, M}), tx, tW, nullptr, false);
    lin.backward(*be, {0, kind}, Tensor(dx.data(), DType::f32, {N, K}),
                 Tensor(dW.data(), DType::f32, {M, K}), Tensor(), tdy, tx, tW);
    lin.end_step(*ranks);
    return lin.take_counts(*ranks, tp_rank).overflows;
  };
  EXPECT_EQ(counts(LinearKind::qkv, 0), 8 + 16 + 8);
  EXPECT_EQ(counts(LinearKind::qkv, 1), 16 + 8);  // the input is whole on every rank
  EXPECT_EQ(counts(LinearKind::down, 0), 8 + 16 + 8);
  EXPECT_EQ(counts(LinearKind::down, 1), 8 + 16);  // the output gradient is whole on every rank
}
