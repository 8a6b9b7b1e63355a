// precision.compute: bf16 on a backend: matmul and linear_rows round both operands to bf16
// (round to nearest even) and accumulate in fp32. Checked against a double-precision product
// of the bf16-rounded operands, against the fp32 result (it must differ), and for the
// inference linear's batch invariance. Data moves through Backend::copy only, so the test
// runs on any backend (LLMRUN_TEST_BACKEND).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tensor/tensor.h"
#include "test_backend.h"

using namespace llmrun;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = nd(rng);
  return v;
}

float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// A device copy of host values, and back.
struct Dev {
  Buffer buf;
  Tensor t;
  Dev(Backend& be, const std::vector<float>& v, std::initializer_list<int64_t> dims)
      : buf(be.allocate(v.size() * 4)), t(buf.as(DType::f32, dims)) {
    be.copy(t, Tensor(const_cast<float*>(v.data()), DType::f32, {int64_t(v.size())}).view(dims));
  }
  std::vector<float> host(Backend& be) const {
    std::vector<float> v(size_t(t.numel()));
    be.copy(Tensor(v.data(), DType::f32, {t.numel()}), t.view({t.numel()}));
    return v;
  }
};

struct Gemm {
  int64_t m, n, k;
  bool ta, tb;
};

// out = alpha * op(a) op(b) + beta * out0 + bias, in double over bf16-rounded a and b; also the
// scale of each element's terms (sum of |products|) for the tolerance.
void reference(const Gemm& g, const std::vector<float>& a, const std::vector<float>& b,
               const std::vector<float>& out0, const std::vector<float>& bias, float alpha,
               float beta, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(size_t(g.m * g.n), 0.0);
  mag.assign(size_t(g.m * g.n), 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0, s_abs = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double x = bf16_round(g.ta ? a[size_t(p * g.m + i)] : a[size_t(i * g.k + p)]);
        const double y = bf16_round(g.tb ? b[size_t(j * g.k + p)] : b[size_t(p * g.n + j)]);
        s += x * y;
        s_abs += std::abs(x * y);
      }
      const size_t o = size_t(i * g.n + j);
      ref[o] = alpha * s + beta * double(out0[o]) + double(bias[size_t(j)]);
      mag[o] = std::abs(alpha) * s_abs + std::abs(beta * out0[o]) + std::abs(bias[size_t(j)]);
    }
}

}  // namespace

TEST(Bf16Gemm, MatmulEqualsProductOfRoundedOperands) {
  auto be = test::make_test_backend(2);
  const Gemm shapes[] = {{1, 7, 5, false, false},
                         {3, 65, 33, false, true},
                         {17, 9, 130, true, false},
                         {33, 40, 257, true, true},
                         {64, 48, 96, false, false}};
  for (const Gemm& g : shapes) {
    const auto a = random_values(size_t(g.m * g.k), 1), b = random_values(size_t(g.k * g.n), 2);
    const auto out0 = random_values(size_t(g.m * g.n), 3), bias = random_values(size_t(g.n), 4);
    const float alpha = 0.75f, beta = 0.5f;
    std::vector<double> ref, mag;
    reference(g, a, b, out0, bias, alpha, beta, ref, mag);
    const Dev da(*be, a, {g.ta ? g.k : g.m, g.ta ? g.m : g.k}),
        db(*be, b, {g.tb ? g.n : g.k, g.tb ? g.k : g.n});
    const Dev dbias(*be, bias, {g.n});
    std::vector<float> results[2];
    for (DType dt : {DType::f32, DType::bf16}) {
      const Dev dout(*be, out0, {g.m, g.n});
      be->set_gemm_dtype(dt);
      be->matmul(dout.t, da.t, db.t, g.ta, g.tb, alpha, beta, &dbias.t);
      results[dt == DType::bf16] = dout.host(*be);
    }
    be->set_gemm_dtype(DType::f32);
    double worst = 0, differs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(results[1][i] - ref[i]) / mag[i]);
      differs = std::max(differs, std::abs(double(results[1][i]) - results[0][i]) / mag[i]);
    }
    EXPECT_LT(worst, 1e-6) << g.m << "x" << g.n << "x" << g.k;
    // bf16 keeps 8 significant bits: the operands' rounding moves results far beyond fp32's.
    EXPECT_GT(differs, 1e-4) << g.m << "x" << g.n << "x" << g.k << ": bf16 and fp32 results agree";
  }
}

TEST(Bf16Gemm, LinearRowsEqualsProductOfRoundedOperandsAndStaysBatchInvariant) {
  auto be = test::make_test_backend(2);
  be->set_gemm_dtype(DType::bf16);
  const int64_t m = 9, n = 37, k = 70;
  const auto x = random_values(size_t(m * k), 5), w = random_values(size_t(n * k), 6);
  const std::vector<float> zeros(size_t(m * n), 0.0f), no_bias(size_t(n), 0.0f);
  std::vector<double> ref, mag;
  reference({m, n, k, false, true}, x, w, zeros, no_bias, 1.0f, 0.0f, ref, mag);
  const Dev dx(*be, x, {m, k}), dw(*be, w, {n, k}), dy(*be, zeros, {m, n});
  be->linear_rows(dy.t, dx.t, dw.t, nullptr, false);
  const std::vector<float> batch = dy.host(*be);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LT(std::abs(batch[i] - ref[i]) / mag[i], 1e-6) << i;
  for (int64_t r = 0; r < m; ++r) {  // each row alone: bitwise the batch's row
    const std::vector<float> xr(x.begin() + r * k, x.begin() + (r + 1) * k), yr(size_t(n), 0.0f);
    const Dev dxr(*be, xr, {1, k}), dyr(*be, yr, {1, n});
    be->linear_rows(dyr.t, dxr.t, dw.t, nullptr, false);
    const std::vector<float> alone = dyr.host(*be);
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(alone[size_t(j)], batch[size_t(r * n + j)]) << r << "," << j;
  }
}

// Attention under bf16 compute (backend.h, attention_bf16_operands): the matmul operands (Q,
// K, V, P, dout, dS) rounded to bf16, softmax, lse and delta in fp32, against a double-precision
// evaluation of that rule. One 64-key tile (seq 40), so the running maximum P is rounded
// against is the row's maximum. A P or dS element within an fp32 ulp of a bf16 rounding
// boundary may round the other way in double: one term moves by 2^-8, so the check allows a
// few elements (0.5%) a bf16-level error and holds the rest to fp32's.
TEST(Bf16Gemm, AttentionRoundsItsMatmulOperands) {
  auto be = test::make_test_backend(2);
  be->set_gemm_dtype(DType::bf16);
  const int seq = 40, heads = 4, kv = 2, d = 32, group = heads / kv;
  const AttentionShape s{1, seq, heads, kv, d};
  const int64_t cols = s.qkv_cols(), hd = int64_t(heads) * d;
  std::vector<float> qkv = random_values(size_t(seq * cols), 7),
                     dout = random_values(size_t(seq * hd), 8);
  for (float& x : qkv) x *= 1.5f;  // scores of order 1-3
  const Dev dqkv_in(*be, qkv, {seq, cols}), ddout(*be, dout, {seq, hd});
  const Dev dout_t(*be, std::vector<float>(size_t(seq * hd)), {seq, hd}),
      dlse(*be, std::vector<float>(size_t(heads * seq)), {1, heads, seq}),
      dgrad(*be, std::vector<float>(qkv.size()), {seq, cols});
  be->attention_fwd(dout_t.t, dlse.t, dqkv_in.t, s);
  be->attention_bwd(dgrad.t, ddout.t, dqkv_in.t, dout_t.t, dlse.t, s);
  const std::vector<float> out = dout_t.host(*be), lse = dlse.host(*be), grad = dgrad.host(*be);

  auto r = [&](int64_t i, int64_t c) { return double(bf16_round(qkv[size_t(i * cols + c)])); };
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> want_out(out.size()), want_lse(lse.size()), want_grad(grad.size(), 0.0);
  for (int h = 0; h < heads; ++h) {
    const int64_t qc = int64_t(h) * d, kc = int64_t(heads + h / group) * d,
                  vc = int64_t(heads + kv + h / group) * d;
    for (int i = 0; i < seq; ++i) {
      std::vector<double> sc(size_t(i + 1));
      double m = -INFINITY, l = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += r(i, qc + e) * r(j, kc + e);
        sc[size_t(j)] = float(dot * scale);  // the scores are fp32 values
        m = std::max(m, sc[size_t(j)]);
      }
      for (int j = 0; j <= i; ++j) l += std::exp(sc[size_t(j)] - m);
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (int j = 0; j <= i; ++j)
          acc += bf16_round(float(std::exp(sc[size_t(j)] - m))) * r(j, vc + e);
        want_out[size_t(i * hd + qc + e)] = acc / l;
      }
      want_lse[size_t(h * seq + i)] = m + std::log(l);
      // Backward, from the backend's own lse and out.
      double delta = 0;
      for (int e = 0; e < d; ++e)
        delta += double(dout[size_t(i * hd + qc + e)]) * out[size_t(i * hd + qc + e)];
      for (int j = 0; j <= i; ++j) {
        const double p = std::exp(sc[size_t(j)] - lse[size_t(h * seq + i)]);
        double dp = 0;
        for (int e = 0; e < d; ++e)
          dp += double(bf16_round(dout[size_t(i * hd + qc + e)])) * r(j, vc + e);
        const double ds = bf16_round(float(p * (dp - delta))), pr = bf16_round(float(p));
        for (int e = 0; e < d; ++e) {
          want_grad[size_t(j * cols + vc + e)] += pr * bf16_round(dout[size_t(i * hd + qc + e)]);
          want_grad[size_t(j * cols + kc + e)] += scale * ds * r(i, qc + e);
          want_grad[size_t(i * cols + qc + e)] += scale * ds * r(j, kc + e);
        }
      }
    }
  }
  auto check = [](const std::vector<float>& got, const std::vector<double>& want,
                  const char* what) {
    double peak = 0;
    for (double w : want) peak = std::max(peak, std::abs(w));
    int loose = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::abs(got[i] - want[i]) / peak;
      EXPECT_LT(e, 5e-3) << what << " [" << i << "]";
      loose += e > 1e-5;
    }
    EXPECT_LE(loose, int(got.size() / 200)) << what << ": elements beyond fp32 error";
  };
  check(out, want_out, "out");
  check(lse, want_lse, "lse");
  check(grad, want_grad, "dqkv");
}
