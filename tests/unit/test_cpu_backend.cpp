// The CPU backend against naive double-precision references written here, plus central
// finite differences for every backward (through the backend's own forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "test_backend.h"

using namespace llmrun;

namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = test::make_test_backend(2);
  std::vector<Buffer> bufs;
  std::mt19937 rng{1234};

  Tensor make(std::initializer_list<int64_t> dims, DType t = DType::f32) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    bufs.push_back(be->allocate(static_cast<size_t>(n) * dtype_size(t)));
    return bufs.back().as(t, dims);
  }
  Tensor randn(std::initializer_list<int64_t> dims, float sd = 1.0f, float mean = 0.0f) {
    Tensor t = make(dims);
    std::normal_distribution<float> nd(mean, sd);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = nd(rng);
    return t;
  }
  Tensor clone(const Tensor& t) {
    bufs.push_back(be->allocate(t.bytes()));
    Tensor c = t;
    c.data = bufs.back().data();
    be->copy(c, t);
    return c;
  }
  Tensor ints(std::initializer_list<int64_t> dims, std::vector<int32_t> values) {
    Tensor t = make(dims, DType::i32);
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
    std::copy(values.begin(), values.end(), t.i32());
    return t;
  }
  // Up to k distinct indices in [0, n), always including the ends.
  std::vector<int64_t> sample(int64_t n, int k) {
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    if (n <= k) return idx;
    std::shuffle(idx.begin() + 1, idx.end() - 1, rng);
    idx.resize(k - 1);
    idx.push_back(n - 1);
    return idx;
  }
};

double dot(const Tensor& a, const Tensor& g) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.f32()[i]) * g.f32()[i];
  return s;
}

// Element-wise |a - ref| <= atol + rtol * |ref|; reports the first few offenders only.
void expect_close(const float* a, const std::vector<double>& ref, double rtol, double atol,
                  const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::fabs(a[i] - ref[i]) <= atol + rtol * std::fabs(ref[i])) continue;
    if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << a[i] << ", want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements off";
}

std::vector<double> to_double(const Tensor& t) {
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}

// Central differences of loss() with respect to x[i], i in idx, against grad[i]. The step
// actually taken (after float rounding) is the denominator.
void fd_check(float* x, const float* grad, const std::vector<int64_t>& idx,
              const std::function<double()>& loss, float eps, double rtol, double atol,
              const std::string& what) {
  int bad = 0;
  for (int64_t i : idx) {
    const float orig = x[i];
    const float up = orig + eps, down = orig - eps;
    x[i] = up;
    const double lp = loss();
    x[i] = down;
    const double lm = loss();
    x[i] = orig;
    const double fd = (lp - lm) / (static_cast<double>(up) - down);
    if (std::fabs(grad[i] - fd) <= atol + rtol * std::fabs(fd)) continue;
    if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << ", fd " << fd;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << idx.size() << " gradients off";
}

// ---------------------------------------------------------------------------------- dense

TEST_F(CpuBackendTest, MatmulMatchesNaiveForAllTransposes) {
  const int m = 37, n = 29, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain, 1: bias with beta 0, 2: bias with beta
        Tensor a = ta ? randn({k, m}) : randn({m, k});
        Tensor b = tb ? randn({n, k}) : randn({k, n});
        Tensor bias = randn({n});
        Tensor out = randn({m, n});
        const std::vector<double> before = to_double(out);
        const float alpha = 0.75f, beta = mode == 2 ? 0.5f : 0.0f;
        std::vector<double> ref(m * n);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p)
              s += static_cast<double>(ta ? a.f32()[p * m + i] : a.f32()[i * k + p]) *
                   (tb ? b.f32()[j * k + p] : b.f32()[p * n + j]);
            ref[i * n + j] = alpha * s + beta * before[i * n + j] + (mode ? bias.f32()[j] : 0.0);
          }
        be->matmul(out, a, b, ta, tb, alpha, beta, mode ? &bias : nullptr);
        expect_close(out.f32(), ref, 1e-5, 1e-5,
                     "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                         " mode=" + std::to_string(mode));
      }
}

TEST_F(CpuBackendTest, MatmulRejectsMismatchedShapes) {
  Tensor a = randn({4, 5}), b = randn({6, 3}), out = make({4, 3});
  EXPECT_THROW(be->matmul(out, a, b, false, false), std::logic_error);
  Tensor bias = randn({4});
  Tensor b2 = randn({5, 3});
  EXPECT_THROW(be->matmul(out, a, b2, false, false, 1, 0, &bias), std::logic_error);
}

// A linear layer's backward is three matmul/sum_rows calls; finite differences of
// L = sum(G * (x @ w^T + bias)) check the transposes and the accumulation into dw/db.
TEST_F(CpuBackendTest, MatmulGradientsMatchFiniteDifferences) {
  const int n = 9, in = 13, out_f = 7;
  Tensor x = randn({n, in}), w = randn({out_f, in}), bias = randn({out_f}), g = randn({n, out_f});
  Tensor y = make({n, out_f});
  auto loss = [&] {
    be->matmul(y, x, w, false, true, 1, 0, &bias);
    return dot(y, g);
  };
  Tensor dx = make({n, in}), dw = randn({out_f, in}), db = randn({out_f});
  const std::vector<double> dw0 = to_double(dw), db0 = to_double(db);
  be->matmul(dx, g, w, false, false);             // dx = G @ w
  be->matmul(dw, g, x, true, false, 1.0f, 1.0f);  // dw += G^T @ x
  be->sum_rows(db, g, true);                      // db += sum_rows(G)
  for (int64_t i = 0; i < dw.numel(); ++i) dw.f32()[i] -= static_cast<float>(dw0[i]);
  for (int64_t i = 0; i < db.numel(); ++i) db.f32()[i] -= static_cast<float>(db0[i]);
  fd_check(x.f32(), dx.f32(), sample(x.numel(), 200), loss, 1e-2f, 1e-2, 1e-3, "dx");
  fd_check(w.f32(), dw.f32(), sample(w.numel(), 200), loss, 1e-2f, 1e-2, 1e-3, "dw");
  fd_check(bias.f32(), db.f32(), sample(bias.numel(), 200), loss, 1e-2f, 1e-2, 1e-3, "db");
}

TEST_F(CpuBackendTest, SumRowsOverwritesOrAccumulates) {
  for (int cols : {5, 300}) {
    const int rows = 77;
    Tensor x = randn({rows, cols}), out = randn({cols});
    const std::vector<double> before = to_double(out);
    std::vector<double> ref(cols, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ref[c] += x.f32()[r * cols + c];
    be->sum_rows(out, x, false);
    expect_close(out.f32(), ref, 1e-6, 1e-5, "sum_rows");
    for (int c = 0; c < cols; ++c) ref[c] = 2 * ref[c];
    be->sum_rows(out, x, true);
    expect_close(out.f32(), ref, 1e-6, 1e-5, "sum_rows accumulate");
  }
}

// ----------------------------------------------------------------- memory and elementwise

TEST_F(CpuBackendTest, FillCopyCastAddScale) {
  Tensor a = randn({100000}), b = randn({100000}), out = make({100000});
  be->add(out, a, b);
  for (int64_t i = 0; i < a.numel(); i += 997) EXPECT_EQ(out.f32()[i], a.f32()[i] + b.f32()[i]);
  be->add(a, a, b);  // aliasing output
  for (int64_t i = 0; i < a.numel(); i += 997) EXPECT_EQ(a.f32()[i], out.f32()[i]);
  be->scale(out, -0.5f);
  for (int64_t i = 0; i < a.numel(); i += 997) EXPECT_EQ(out.f32()[i], -0.5f * a.f32()[i]);
  be->fill(out, 3.25f);
  EXPECT_EQ(out.f32()[0], 3.25f);
  EXPECT_EQ(out.f32()[99999], 3.25f);
  Tensor c = make({100000});
  be->copy(c, b);
  EXPECT_EQ(std::memcmp(c.data, b.data, b.bytes()), 0);

  Tensor h = make({100000}, DType::bf16), f = make({100000}, DType::f16), back = make({100000});
  be->cast(h, b, 2.0f);
  be->cast(f, b, 0.5f);
  for (int64_t i = 0; i < b.numel(); i += 997) {
    EXPECT_EQ(static_cast<uint16_t*>(h.data)[i], f32_to_bf16(b.f32()[i] * 2.0f));
    EXPECT_EQ(static_cast<uint16_t*>(f.data)[i], f32_to_f16(b.f32()[i] * 0.5f));
  }
  be->cast(back, h, 0.5f);
  for (int64_t i = 0; i < b.numel(); i += 997)
    EXPECT_EQ(back.f32()[i], bf16_to_f32(static_cast<uint16_t*>(h.data)[i]) * 0.5f);
  be->cast(back, f, 2.0f);
  for (int64_t i = 0; i < b.numel(); i += 997)
    EXPECT_EQ(back.f32()[i], f16_to_f32(static_cast<uint16_t*>(f.data)[i]) * 2.0f);
  be->fill(h, 1.5f);
  EXPECT_EQ(bf16_to_f32(static_cast<uint16_t*>(h.data)[12345]), 1.5f);
  EXPECT_THROW(be->copy(c, h), std::logic_error);
}

TEST_F(CpuBackendTest, Reductions) {
  Tensor x = randn({200003}, 1.0f, 0.3f);
  double s = 0, s2 = 0, mx = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    s += x.f32()[i];
    s2 += static_cast<double>(x.f32()[i]) * x.f32()[i];
    mx = std::max(mx, std::fabs(static_cast<double>(x.f32()[i])));
  }
  EXPECT_NEAR(be->sum(x), s, 1e-9 * x.numel());
  EXPECT_NEAR(be->sum_squares(x), s2, 1e-12 * s2 * 100);
  x.f32()[777] = -1000.0f;
  EXPECT_EQ(be->amax(x), 1000.0f);
  x.f32()[888] = std::nanf("");
  EXPECT_TRUE(std::isnan(be->amax(x)));
}

TEST_F(CpuBackendTest, ReductionsIntoTensorsAndArgmax) {
  Tensor x = randn({3, 1001});
  Tensor acc = make({1}), mx = make({1});
  acc.f32()[0] = 2.0f;
  be->sum_squares_into(acc, x);
  EXPECT_NEAR(acc.f32()[0], 2.0 + be->sum_squares(x), 1e-3);
  be->amax_into(mx, x);
  EXPECT_EQ(mx.f32()[0], be->amax(x));
  mx.f32()[0] = 1e6f;
  be->amax_into(mx, x);
  EXPECT_EQ(mx.f32()[0], 1e6f);  // keeps the larger running value

  Tensor ids = make({3}, DType::i32);
  x.f32()[0 * 1001 + 17] = 50.0f;
  x.f32()[1 * 1001 + 1000] = 50.0f;
  x.f32()[2 * 1001 + 5] = 50.0f;
  x.f32()[2 * 1001 + 9] = 50.0f;  // a tie: the lower column wins
  be->argmax_rows(ids, x);
  EXPECT_EQ(ids.i32()[0], 17);
  EXPECT_EQ(ids.i32()[1], 1000);
  EXPECT_EQ(ids.i32()[2], 5);

  // NaNs never win unless in column 0; -0 and +0 tie (the first wins); -inf rows give 0.
  Tensor y = make({4, 37});
  for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] = -1.0f - float(i % 5);
  y.f32()[0 * 37 + 3] = NAN;
  y.f32()[0 * 37 + 30] = 2.0f;
  y.f32()[1 * 37 + 0] = NAN;
  y.f32()[1 * 37 + 8] = 5.0f;
  y.f32()[2 * 37 + 6] = -0.0f;
  y.f32()[2 * 37 + 7] = 0.0f;
  for (int64_t c = 0; c < 37; ++c) y.f32()[3 * 37 + c] = -INFINITY;
  Tensor yid = make({4}, DType::i32);
  be->argmax_rows(yid, y);
  EXPECT_EQ(yid.i32()[0], 30);
  EXPECT_EQ(yid.i32()[1], 0);
  EXPECT_EQ(yid.i32()[2], 6);
  EXPECT_EQ(yid.i32()[3], 0);
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_F(CpuBackendTest, GeluForwardAndGradient) {
  Tensor x = randn({6, 1000}, 3.0f), out = make({6, 1000});
  x.f32()[0] = 0.0f;
  x.f32()[1] = 30.0f;
  x.f32()[2] = -30.0f;
  be->gelu_fwd(out, x);
  std::vector<double> ref(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) ref[i] = gelu_ref(x.f32()[i]);
  expect_close(out.f32(), ref, 1e-5, 1e-6, "gelu");

  Tensor g = randn({6, 1000}), dx = make({6, 1000});
  be->gelu_bwd(dx, g, x);
  auto loss = [&] {
    be->gelu_fwd(out, x);
    return dot(out, g);
  };
  fd_check(x.f32(), dx.f32(), sample(x.numel(), 300), loss, 1e-2f, 1e-2, 2e-3, "gelu dx");
}

TEST_F(CpuBackendTest, SwigluForwardAndGradient) {
  const int n = 7, f = 50;
  Tensor gu = randn({n, 2 * f}, 2.0f), out = make({n, f});
  be->swiglu_fwd(out, gu);
  std::vector<double> ref(n * f);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < f; ++c) {
      const double a = gu.f32()[r * 2 * f + c], u = gu.f32()[r * 2 * f + f + c];
      ref[r * f + c] = a / (1 + std::exp(-a)) * u;
    }
  expect_close(out.f32(), ref, 1e-5, 1e-6, "swiglu");

  Tensor g = randn({n, f}), dgu = make({n, 2 * f});
  be->swiglu_bwd(dgu, g, gu);
  auto loss = [&] {
    be->swiglu_fwd(out, gu);
    return dot(out, g);
  };
  fd_check(gu.f32(), dgu.f32(), sample(gu.numel(), 400), loss, 1e-2f, 1e-2, 2e-3,
           "swiglu dgate_up");
}

// ------------------------------------------------------------------------------ norms

TEST_F(CpuBackendTest, LayerNormForwardAndGradients) {
  const int n = 11, d = 96;
  Tensor x = randn({n, d}, 2.0f, 5.0f), w = randn({d}, 0.5f, 1.0f), b = randn({d});
  Tensor out = make({n, d}), mean = make({n}), rstd = make({n});
  const float eps = 1e-5f;
  be->layernorm_fwd(out, mean, rstd, x, w, b, eps);
  std::vector<double> ref(n * d), rm(n), rr(n);
  for (int r = 0; r < n; ++r) {
    double mu = 0, var = 0;
    for (int c = 0; c < d; ++c) mu += x.f32()[r * d + c];
    mu /= d;
    for (int c = 0; c < d; ++c) var += std::pow(x.f32()[r * d + c] - mu, 2);
    const double rs = 1 / std::sqrt(var / d + eps);
    rm[r] = mu;
    rr[r] = rs;
    for (int c = 0; c < d; ++c)
      ref[r * d + c] = (x.f32()[r * d + c] - mu) * rs * w.f32()[c] + b.f32()[c];
  }
  expect_close(out.f32(), ref, 1e-5, 1e-5, "layernorm out");
  expect_close(mean.f32(), rm, 1e-6, 1e-6, "layernorm mean");
  expect_close(rstd.f32(), rr, 1e-6, 1e-6, "layernorm rstd");

  Tensor g = randn({n, d}), dx = randn({n, d}), dw = randn({d}), db = randn({d});
  const std::vector<double> dx0 = to_double(dx), dw0 = to_double(dw), db0 = to_double(db);
  be->layernorm_bwd(dx, dw, db, g, x, w, mean, rstd, /*accumulate_dx=*/true);
  Tensor dx_over = make({n, d}), dw2 = make({d}), db2 = make({d});
  be->layernorm_bwd(dx_over, dw2, db2, g, x, w, mean, rstd, false);
  for (int64_t i = 0; i < dx.numel(); ++i)
    EXPECT_NEAR(dx.f32()[i] - dx0[i], dx_over.f32()[i], 1e-5);
  for (int i = 0; i < d; ++i) {  // parameter gradients accumulate onto what was there
    EXPECT_NEAR(dw.f32()[i] - dw0[i], dw2.f32()[i], 1e-5);
    EXPECT_NEAR(db.f32()[i] - db0[i], db2.f32()[i], 1e-5);
  }
  auto loss = [&] {
    be->layernorm_fwd(out, mean, rstd, x, w, b, eps);
    return dot(out, g);
  };
  fd_check(x.f32(), dx_over.f32(), sample(x.numel(), 300), loss, 1e-2f, 1e-2, 2e-3, "layernorm dx");
  fd_check(w.f32(), dw2.f32(), sample(d, 96), loss, 1e-2f, 1e-2, 2e-3, "layernorm dw");
  fd_check(b.f32(), db2.f32(), sample(d, 96), loss, 1e-2f, 1e-2, 2e-3, "layernorm db");
}

TEST_F(CpuBackendTest, RmsNormForwardAndGradients) {
  const int n = 13, d = 80;
  Tensor x = randn({n, d}, 2.0f, 1.0f), w = randn({d}, 0.5f, 1.0f);
  Tensor out = make({n, d}), rstd = make({n});
  const float eps = 1e-6f;
  be->rmsnorm_fwd(out, rstd, x, w, eps);
  std::vector<double> ref(n * d), rr(n);
  for (int r = 0; r < n; ++r) {
    double ms = 0;
    for (int c = 0; c < d; ++c) ms += std::pow(x.f32()[r * d + c], 2);
    rr[r] = 1 / std::sqrt(ms / d + eps);
    for (int c = 0; c < d; ++c) ref[r * d + c] = x.f32()[r * d + c] * rr[r] * w.f32()[c];
  }
  expect_close(out.f32(), ref, 1e-5, 1e-6, "rmsnorm out");
  expect_close(rstd.f32(), rr, 1e-6, 1e-7, "rmsnorm rstd");

  Tensor g = randn({n, d}), dx = randn({n, d}), dw = randn({d});
  const std::vector<double> dx0 = to_double(dx), dw0 = to_double(dw);
  be->rmsnorm_bwd(dx, dw, g, x, w, rstd, true);
  Tensor dx_over = make({n, d}), dw2 = make({d});
  be->rmsnorm_bwd(dx_over, dw2, g, x, w, rstd, false);
  for (int64_t i = 0; i < dx.numel(); ++i)
    EXPECT_NEAR(dx.f32()[i] - dx0[i], dx_over.f32()[i], 1e-5);
  for (int i = 0; i < d; ++i) EXPECT_NEAR(dw.f32()[i] - dw0[i], dw2.f32()[i], 1e-5);
  auto loss = [&] {
    be->rmsnorm_fwd(out, rstd, x, w, eps);
    return dot(out, g);
  };
  fd_check(x.f32(), dx_over.f32(), sample(x.numel(), 300), loss, 1e-2f, 1e-2, 2e-3, "rmsnorm dx");
  fd_check(w.f32(), dw2.f32(), sample(d, 80), loss, 1e-2f, 1e-2, 2e-3, "rmsnorm dw");
}

// ------------------------------------------------------------------------------- rope

// Hugging Face's float32 recipe: inv_freq and pos * inv_freq rounded to float.
std::vector<double> rope_ref(const Tensor& x, const std::vector<int32_t>& pos, int heads, int hd,
                             float theta) {
  const int64_t cols = x.cols();
  std::vector<double> out = to_double(x);
  for (int64_t r = 0; r < x.rows(); ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const float inv = 1.0f / static_cast<float>(
                                     std::pow(static_cast<double>(theta),
                                              static_cast<double>(static_cast<float>(2 * i) / hd)));
        const double a = static_cast<float>(pos[r]) * inv;
        const int64_t j1 = r * cols + h * hd + i, j2 = j1 + hd / 2;
        const double x1 = x.f32()[j1], x2 = x.f32()[j2];
        out[j1] = x1 * std::cos(a) - x2 * std::sin(a);
        out[j2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  return out;
}

TEST_F(CpuBackendTest, RopeMatchesReferenceAndInverseIsTranspose) {
  const int hd = 32, heads = 3, rotated = 2, rows = 10;
  // Dense positions use the per-call table; the sparse set exercises per-row angles.
  for (const std::vector<int32_t>& pos :
       {std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4},
        std::vector<int32_t>{5, 1000, 77, 4095, 123456, 0, 3, 9, 31337, 8191}}) {
    Tensor positions = ints({rows}, pos);
    Tensor x = randn({rows, heads * hd});
    const std::vector<double> ref = rope_ref(x, pos, rotated, hd, 10000.0f);
    Tensor y = clone(x);
    be->rope(y, positions, rotated, hd, 10000.0f, {}, false);
    expect_close(y.f32(), ref, 1e-5, 1e-5, "rope");
    for (int64_t r = 0; r < rows; ++r)  // the unrotated head is untouched
      for (int c = rotated * hd; c < heads * hd; ++c)
        EXPECT_EQ(y.f32()[r * heads * hd + c], x.f32()[r * heads * hd + c]);
    be->rope(y, positions, rotated, hd, 10000.0f, {}, true);
    expect_close(y.f32(), to_double(x), 1e-5, 1e-5, "rope then inverse");

    // <rope(x), z> == <x, rope_inv(z)>: the inverse is the backward.
    Tensor z = randn({rows, heads * hd});
    Tensor rx = clone(x), riz = clone(z);
    be->rope(rx, positions, rotated, hd, 10000.0f, {}, false);
    be->rope(riz, positions, rotated, hd, 10000.0f, {}, true);
    EXPECT_NEAR(dot(rx, z), dot(x, riz), 1e-4);
  }
}

// One-row calls (a decode step: the per-thread memo of frequencies and angles) give bitwise
// what the same rows give inside a multi-row call, as the position, direction, theta and
// head_dim change between calls, and repeat.
TEST_F(CpuBackendTest, RopeSingleRowStepsMatchBatchedRows) {
  struct Call {
    int32_t pos;
    bool inverse;
    float theta;
    int hd;
  };
  const std::vector<Call> calls = {{7, false, 10000.0f, 32},  {7, false, 10000.0f, 32},
                                   {7, true, 10000.0f, 32},   {8, false, 10000.0f, 32},
                                   {8, false, 500000.0f, 32}, {8, false, 500000.0f, 16},
                                   {8, false, 10000.0f, 32},  {3, false, 10000.0f, 32}};
  for (const Call& c : calls) {
    const int heads = 3, rows = 4;
    Tensor x = randn({rows, heads * c.hd});
    // the row at c.pos inside a batch of rows at distinct positions
    Tensor batch = clone(x);
    be->rope(batch, ints({rows}, {c.pos + 40, c.pos, c.pos + 3, 1}), heads, c.hd, c.theta, {},
             c.inverse);
    Tensor one = clone(x).slice(1, 2);
    be->rope(one, ints({1}, {c.pos}), heads, c.hd, c.theta, {}, c.inverse);
    for (int i = 0; i < heads * c.hd; ++i)
      ASSERT_EQ(one.f32()[i], batch.f32()[heads * c.hd + i])
          << "pos " << c.pos << " inverse " << c.inverse << " theta " << c.theta << " hd " << c.hd;
  }
}

// --------------------------------------------------------------------------- attention

struct AttnRef {
  std::vector<double> out, lse, dqkv;
};

// Full-matrix causal attention with explicit softmax, and its backward, in double.
AttnRef attention_ref(const float* qkv, const float* dout, const AttentionShape& s) {
  const int d = s.head_dim, t_n = s.seq, c = s.qkv_cols(), hd = s.heads * d;
  const int group = s.heads / s.kv_heads;
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  AttnRef r;
  r.out.assign(static_cast<size_t>(s.batch) * t_n * hd, 0);
  r.lse.assign(static_cast<size_t>(s.batch) * s.heads * t_n, 0);
  r.dqkv.assign(static_cast<size_t>(s.batch) * t_n * c, 0);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const int kvh = h / group;
      auto q = [&](int t, int e) {
        return static_cast<double>(qkv[(b * t_n + t) * c + h * d + e]);
      };
      auto k = [&](int t, int e) {
        return static_cast<double>(qkv[(b * t_n + t) * c + (s.heads + kvh) * d + e]);
      };
      auto v = [&](int t, int e) {
        return static_cast<double>(qkv[(b * t_n + t) * c + (s.heads + s.kv_heads + kvh) * d + e]);
      };
      std::vector<double> p(static_cast<size_t>(t_n) * t_n, 0.0);
      for (int i = 0; i < t_n; ++i) {
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double sc = 0;
          for (int e = 0; e < d; ++e) sc += q(i, e) * k(j, e);
          p[i * t_n + j] = sc * scale;
          mx = std::max(mx, sc * scale);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(p[i * t_n + j] - mx);
        r.lse[(b * s.heads + h) * t_n + i] = mx + std::log(z);
        for (int j = 0; j <= i; ++j) p[i * t_n + j] = std::exp(p[i * t_n + j] - mx) / z;
        for (int e = 0; e < d; ++e) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += p[i * t_n + j] * v(j, e);
          r.out[(b * t_n + i) * hd + h * d + e] = o;
        }
      }
      if (!dout) continue;
      auto g = [&](int t, int e) {
        return static_cast<double>(dout[(b * t_n + t) * hd + h * d + e]);
      };
      for (int i = 0; i < t_n; ++i) {
        std::vector<double> dp(i + 1);
        double corr = 0;
        for (int j = 0; j <= i; ++j) {
          for (int e = 0; e < d; ++e) dp[j] += g(i, e) * v(j, e);
          corr += dp[j] * p[i * t_n + j];
        }
        for (int j = 0; j <= i; ++j) {
          const double pij = p[i * t_n + j], ds = pij * (dp[j] - corr) * scale;
          for (int e = 0; e < d; ++e) {
            r.dqkv[(b * t_n + j) * c + (s.heads + s.kv_heads + kvh) * d + e] += pij * g(i, e);
            r.dqkv[(b * t_n + i) * c + h * d + e] += ds * k(j, e);
            r.dqkv[(b * t_n + j) * c + (s.heads + kvh) * d + e] += ds * q(i, e);
          }
        }
      }
    }
  return r;
}

class AttentionTest : public CpuBackendTest {
 protected:
  void run(const AttentionShape& s, int fd_samples) {
    const int64_t bt = static_cast<int64_t>(s.batch) * s.seq,
                  hd = static_cast<int64_t>(s.heads) * s.head_dim;
    Tensor qkv = randn({bt, s.qkv_cols()}), g = randn({bt, hd});
    Tensor out = make({bt, hd}), lse = make({s.batch, s.heads, s.seq});
    Tensor dqkv = randn({bt, s.qkv_cols()});  // garbage: the backward must overwrite it
    const AttnRef ref = attention_ref(qkv.f32(), g.f32(), s);
    be->attention_fwd(out, lse, qkv, s);
    expect_close(out.f32(), ref.out, 1e-5, 2e-6, "attention out");
    expect_close(lse.f32(), ref.lse, 1e-5, 2e-6, "attention lse");
    be->attention_bwd(dqkv, g, qkv, out, lse, s);
    expect_close(dqkv.f32(), ref.dqkv, 1e-4, 2e-5, "attention dqkv");
    auto loss = [&] {
      be->attention_fwd(out, lse, qkv, s);
      return dot(out, g);
    };
    fd_check(qkv.f32(), dqkv.f32(), sample(qkv.numel(), fd_samples), loss, 1e-2f, 1e-2, 3e-3,
             "attention dqkv (finite differences)");
  }
};

// Shapes straddle the 64-row tiles: partial blocks, exact multiples, GQA, and batch/head
// counts that take both backward schedules (per kv head, and split dk/dv + dq tasks).
TEST_F(AttentionTest, SingleTileGqa) { run({2, 37, 4, 2, 16}, 100); }
TEST_F(AttentionTest, PartialTilesGqaSplitSchedule) { run({1, 150, 4, 2, 32}, 80); }
TEST_F(AttentionTest, ExactTilesGqaFusedSchedule) { run({4, 128, 4, 2, 16}, 60); }
TEST_F(AttentionTest, MultiHeadFusedSchedule) { run({5, 70, 2, 2, 8}, 60); }

TEST_F(CpuBackendTest, AttentionCachedMatchesFullAttention) {
  const AttentionShape s{1, 100, 4, 2, 16};
  const int hd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
  Tensor qkv = randn({s.seq, s.qkv_cols()});
  const AttnRef ref = attention_ref(qkv.f32(), nullptr, s);
  Tensor q = make({s.seq, hd}), kc = make({s.seq + 5, kvd}), vc = make({s.seq + 5, kvd});
  for (int t = 0; t < s.seq; ++t) {
    const float* row = qkv.f32() + t * s.qkv_cols();
    std::copy(row, row + hd, q.f32() + t * hd);
    std::copy(row + hd, row + hd + kvd, kc.f32() + t * kvd);
    std::copy(row + hd + kvd, row + hd + 2 * kvd, vc.f32() + t * kvd);
  }
  // Prefill of everything, then a chunk and single-token decode steps from the middle.
  for (const auto& [start, n] :
       std::vector<std::pair<int, int>>{{0, 100}, {20, 70}, {63, 1}, {99, 1}, {0, 1}}) {
    Tensor out = make({n, hd});
    be->attention_cached(out, q.slice(start, start + n), kc, vc, start, s.heads, s.kv_heads,
                         s.head_dim);
    std::vector<double> want(ref.out.begin() + static_cast<int64_t>(start) * hd,
                             ref.out.begin() + static_cast<int64_t>(start + n) * hd);
    expect_close(out.f32(), want, 1e-5, 2e-6, "attention_cached start=" + std::to_string(start));
  }
}

// ---------------------------------------------------------------------- embedding and loss

TEST_F(CpuBackendTest, EmbeddingForwardAndAccumulatingBackward) {
  const int vocab = 11, d = 70;
  Tensor table = randn({vocab, d});
  Tensor ids = ints({6}, {3, 0, 3, 10, 3, 7});
  Tensor out = make({6, d});
  be->embedding_fwd(out, ids, table, false);
  for (int n = 0; n < 6; ++n)
    for (int c = 0; c < d; ++c) EXPECT_EQ(out.f32()[n * d + c], table.f32()[ids.i32()[n] * d + c]);
  Tensor base = randn({6, d}), acc = clone(base);
  be->embedding_fwd(acc, ids, table, true);
  for (int64_t i = 0; i < acc.numel(); ++i) EXPECT_EQ(acc.f32()[i], base.f32()[i] + out.f32()[i]);

  Tensor g = randn({6, d}), dtable = randn({vocab, d});
  const std::vector<double> before = to_double(dtable);
  be->embedding_bwd(dtable, g, ids);
  for (int64_t i = 0; i < dtable.numel(); ++i) dtable.f32()[i] -= static_cast<float>(before[i]);
  auto loss = [&] {
    be->embedding_fwd(out, ids, table, false);
    return dot(out, g);
  };
  fd_check(table.f32(), dtable.f32(), sample(table.numel(), 400), loss, 1e-2f, 1e-3, 1e-4,
           "embedding dtable");
  Tensor bad = ints({1}, {11});
  EXPECT_THROW(be->embedding_fwd(out.slice(0, 1), bad, table, false), std::logic_error);
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyLossAndGradient) {
  const int n = 6, v = 1000;
  Tensor logits = randn({n, v});
  logits.f32()[2 * v + 5] = 1000.0f;  // stability: a huge logit must not overflow
  Tensor targets = ints({n}, {5, 999, 5, -1, 0, 123});
  Tensor losses = make({n});
  const float grad_scale = 0.25f;
  std::vector<double> ref_loss(n), ref_grad(n * v);
  for (int r = 0; r < n; ++r) {
    const float* row = logits.f32() + r * v;
    const double mx = *std::max_element(row, row + v);
    double z = 0;
    for (int c = 0; c < v; ++c) z += std::exp(row[c] - mx);
    const int t = targets.i32()[r];
    ref_loss[r] = t < 0 ? 0.0 : mx + std::log(z) - row[t];
    for (int c = 0; c < v; ++c)
      ref_grad[r * v + c] = t < 0 ? 0.0 : grad_scale * (std::exp(row[c] - mx) / z - (c == t));
  }
  Tensor x = clone(logits);
  be->softmax_xent(losses, x, targets, grad_scale);
  expect_close(losses.f32(), ref_loss, 1e-5, 1e-5, "xent loss");
  expect_close(x.f32(), ref_grad, 1e-5, 1e-8, "xent grad");

  // The gradient is grad_scale * d(sum of losses)/d logits.
  Tensor scratch = make({n, v});
  auto loss = [&] {
    be->copy(scratch, logits);
    be->softmax_xent(losses, scratch, targets, 1.0f);
    double s = 0;
    for (int r = 0; r < n; ++r) s += grad_scale * losses.f32()[r];
    return s;
  };
  std::vector<int64_t> idx = sample(logits.numel(), 300);
  for (int r = 0; r < n; ++r) idx.push_back(r * v + std::max(0, targets.i32()[r]));
  // The float losses resolve ~5e-7, so gradients below ~3e-5 are within the noise.
  fd_check(logits.f32(), x.f32(), idx, loss, 1e-2f, 1e-2, 3e-5, "xent dlogits");
}

TEST_F(CpuBackendTest, EmbeddingSkipsNegativeIds) {
  const int d = 70;
  Tensor table = randn({5, d});
  Tensor ids = ints({3}, {2, -1, 4});
  Tensor out = randn({3, d});
  be->embedding_fwd(out, ids, table, false);
  for (int c = 0; c < d; ++c) EXPECT_EQ(out.f32()[d + c], 0.0f);
  Tensor acc = randn({3, d}), keep = clone(acc);
  be->embedding_fwd(acc, ids, table, true);
  for (int c = 0; c < d; ++c) EXPECT_EQ(acc.f32()[d + c], keep.f32()[d + c]);
  Tensor dtable = make({5, d});
  be->embedding_bwd(dtable, randn({3, d}), ids);
  double touched = 0;
  for (int r : {0, 1, 3})
    for (int c = 0; c < d; ++c) touched += std::abs(dtable.f32()[r * d + c]);
  EXPECT_EQ(touched, 0.0);
}

// The vocabulary split across "ranks" (column blocks, uneven) with the reductions done by
// hand gives the fused loss and gradient.
TEST_F(CpuBackendTest, VocabParallelCrossEntropyMatchesFused) {
  const int n = 5, v = 301;
  Tensor logits = randn({n, v});
  Tensor targets = ints({n}, {0, 300, -1, 150, 151});
  Tensor want_loss = make({n}), want_grad = clone(logits);
  be->softmax_xent(want_loss, want_grad, targets, 0.5f);
  const std::vector<int> cuts = {0, 150, 151, 301};
  const int ranks = int(cuts.size()) - 1;
  std::vector<Tensor> parts;
  Tensor row_max = make({n}), sums = make({2 * n}), part_max = make({n}), part_sums = make({2 * n});
  be->fill(row_max, -1e30f);
  for (int r = 0; r < ranks; ++r) {
    const int w = cuts[r + 1] - cuts[r];
    Tensor part = make({n, w});
    be->copy_cols(part, logits, cuts[r]);
    parts.push_back(part);
    be->xent_row_max(part_max, part);
    for (int i = 0; i < n; ++i) row_max.f32()[i] = std::max(row_max.f32()[i], part_max.f32()[i]);
  }
  std::vector<Tensor> local_targets;
  for (int r = 0; r < ranks; ++r) {
    Tensor t = ints({n}, {0, 0, 0, 0, 0});
    for (int i = 0; i < n; ++i) {
      const int g = targets.i32()[i];
      t.i32()[i] = g < 0 ? -1 : (g >= cuts[r] && g < cuts[r + 1] ? g - cuts[r] : -2);
    }
    local_targets.push_back(t);
    be->xent_partials(part_sums, parts[r], row_max, t);
    for (int i = 0; i < 2 * n; ++i) sums.f32()[i] += part_sums.f32()[i];
  }
  for (int r = 0; r < ranks; ++r) {
    Tensor losses = make({n});
    be->xent_finish(losses, parts[r], row_max, sums, local_targets[r], 0.5f);
    expect_close(losses.f32(), to_double(want_loss), 1e-6, 1e-6, "vocab-parallel loss");
    Tensor want_part = make({n, cuts[r + 1] - cuts[r]});
    be->copy_cols(want_part, want_grad, cuts[r]);
    expect_close(parts[r].f32(), to_double(want_part), 1e-5, 1e-8, "vocab-parallel grad");
  }
}

// ------------------------------------------------------------------------------ adamw

TEST_F(CpuBackendTest, AdamWMatchesDoubleReference) {
  const int n = 50000;
  Tensor p = randn({n}), m = make({n}), v = make({n});
  std::vector<double> rp = to_double(p), rm(n, 0), rv(n, 0);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  for (int step = 1; step <= 3; ++step) {
    Tensor g = randn({n});
    hp.step = step;
    be->adamw(p, g, m, v, hp);
    const double bc1 = 1 - std::pow(static_cast<double>(hp.beta1), step),
                 bc2 = 1 - std::pow(static_cast<double>(hp.beta2), step);
    for (int i = 0; i < n; ++i) {
      const double gi = g.f32()[i];
      rp[i] *= 1 - static_cast<double>(hp.lr) * hp.weight_decay;
      rm[i] = hp.beta1 * rm[i] + (1 - static_cast<double>(hp.beta1)) * gi;
      rv[i] = hp.beta2 * rv[i] + (1 - static_cast<double>(hp.beta2)) * gi * gi;
      rp[i] -= hp.lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + hp.eps);
    }
  }
  expect_close(p.f32(), rp, 1e-5, 1e-6, "adamw params");
  expect_close(m.f32(), rm, 1e-5, 1e-7, "adamw m");
  expect_close(v.f32(), rv, 1e-5, 1e-8, "adamw v");
}

}  // namespace
