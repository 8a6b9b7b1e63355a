// One conformance suite for every backend built ({"cpu"} or {"cpu", "cuda"}): each backend runs
// backend_check against the CPU backend, and its ops against small naive references written
// here. Data moves through Backend::copy only, so the same tests drive a device backend. On a
// machine without a GPU the CUDA instances are skipped ("no CUDA device").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_check.h"
#include "forwarding_backend.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

using namespace llmrun;

namespace {

std::vector<std::string> built_backends_for_tests() {
#if LLMRUN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
#if LLMRUN_HAVE_CUDA
      if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
      be = make_cuda_backend(0);
#endif
    } else {
      be = make_cpu_backend(2);
    }
    ASSERT_TRUE(be);
  }

  // A tensor on the backend holding `v` (copied from the host).
  Tensor put(const std::vector<float>& v, std::initializer_list<int64_t> dims) {
    bufs.push_back(be->allocate(v.size() * sizeof(float)));
    Tensor t = bufs.back().as(DType::f32, dims);
    be->copy(t, Tensor(const_cast<float*>(v.data()), DType::f32, dims));
    return t;
  }
  Tensor put_ids(const std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
    bufs.push_back(be->allocate(v.size() * sizeof(int32_t)));
    Tensor t = bufs.back().as(DType::i32, dims);
    be->copy(t, Tensor(const_cast<int32_t*>(v.data()), DType::i32, dims));
    return t;
  }
  Tensor nan_tensor(std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return put(std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN()), dims);
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    be->copy(Tensor(v.data(), DType::f32, {t.numel()}), t.view({t.numel()}));
    return v;
  }
  std::vector<int32_t> get_ids(const Tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    be->copy(Tensor(v.data(), DType::i32, {t.numel()}), t.view({t.numel()}));
    return v;
  }
  std::vector<float> random(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }
  static void expect_near(const std::vector<float>& got, const std::vector<double>& want,
                          double rel, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double peak = 0;
    for (double w : want) peak = std::max(peak, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], rel * std::max(std::fabs(want[i]), 0.01 * peak) + 1e-7)
          << what << " element " << i;
  }

  std::unique_ptr<Backend> be;
  std::vector<Buffer> bufs;
  std::mt19937 rng{20261123};
};

TEST_P(Conformance, EveryOpMatchesTheCpuBackend) {
  auto ref = make_cpu_backend(1);
  const std::vector<OpCheck> rows = check_backend(*be, *ref, 7);
  EXPECT_GE(rows.size(), 40u);
  for (const OpCheck& r : rows)
    EXPECT_TRUE(r.pass) << r.op << " [" << r.shape << "]: max_rel_err " << r.max_rel_err << " > "
                        << r.tolerance << " " << r.note;
}

TEST_P(Conformance, MatmulMatchesNaive) {
  const int64_t M = 13, N = 21, K = 67;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::vector<float> a = random(M * K), b = random(K * N), bias = random(N),
                             c0 = random(M * N);
    Tensor A = ta ? put(a, {K, M}) : put(a, {M, K});
    Tensor B = tb ? put(b, {N, K}) : put(b, {K, N});
    Tensor Bias = put(bias, {N}), C = put(c0, {M, N});
    be->matmul(C, A, B, ta, tb, 0.5f, 2.0f, &Bias);
    std::vector<double> want(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
        want[i * N + j] = 0.5 * s + 2.0 * c0[i * N + j] + bias[j];
      }
    expect_near(get(C), want, 1e-5, "matmul");
  }
}

TEST_P(Conformance, LinearRowsMatchesNaiveAndIsBatchInvariant) {
  const int64_t M = 9, N = 11, K = 133;
  const std::vector<float> x = random(M * K), w = random(N * K), bias = random(N);
  Tensor X = put(x, {M, K}), W = put(w, {N, K}), Bias = put(bias, {N}), Y = nan_tensor({M, N});
  be->linear_rows(Y, X, W, &Bias, false);
  std::vector<double> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias[j];
      for (int64_t k = 0; k < K; ++k) s += double(x[i * K + k]) * w[j * K + k];
      want[i * N + j] = s;
    }
  const std::vector<float> batch = get(Y);
  expect_near(batch, want, 1e-5, "linear_rows");
  Tensor Y1 = nan_tensor({1, N});
  be->linear_rows(Y1, X.slice(4, 5), W, &Bias, false);
  const std::vector<float> alone = get(Y1);
  EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + 4 * N, N * sizeof(float)));
}

TEST_P(Conformance, NormsMatchNaive) {
  const int64_t R = 5, C = 77;
  const std::vector<float> x = random(R * C, -2, 3), w = random(C), b = random(C);
  Tensor X = put(x, {R, C}), Wt = put(w, {C}), Bt = put(b, {C});
  Tensor out = nan_tensor({R, C}), mean = nan_tensor({R}), rstd = nan_tensor({R});
  be->layernorm_fwd(out, mean, rstd, X, Wt, Bt, 1e-5f);
  Tensor rout = nan_tensor({R, C}), rrstd = nan_tensor({R});
  be->rmsnorm_fwd(rout, rrstd, X, Wt, 1e-6f);
  std::vector<double> ln(R * C), rms(R * C);
  for (int64_t r = 0; r < R; ++r) {
    double mu = 0, var = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[r * C + c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) {
      var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
      ss += double(x[r * C + c]) * x[r * C + c];
    }
    const double rs = 1 / std::sqrt(var / C + 1e-5), rr = 1 / std::sqrt(ss / C + 1e-6);
    for (int64_t c = 0; c < C; ++c) {
      ln[r * C + c] = (x[r * C + c] - mu) * rs * w[c] + b[c];
      rms[r * C + c] = x[r * C + c] * rr * w[c];
    }
  }
  expect_near(get(out), ln, 1e-5, "layernorm_fwd");
  expect_near(get(rout), rms, 1e-5, "rmsnorm_fwd");
}

TEST_P(Conformance, SoftmaxXentMatchesNaive) {
  const int64_t N = 6, V = 131;
  const std::vector<float> logits = random(N * V, -5, 5);
  const std::vector<int32_t> targets = {3, -1, 130, 0, 77, 77};
  Tensor L = put(logits, {N, V}), T = put_ids(targets, {N}), loss = nan_tensor({N});
  be->softmax_xent(loss, L, T, 0.25f);
  std::vector<double> want_loss(N), want_grad(N * V);
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] < 0) continue;
    double mx = -1e300, s = 0;
    for (int64_t c = 0; c < V; ++c) mx = std::max(mx, double(logits[r * V + c]));
    for (int64_t c = 0; c < V; ++c) s += std::exp(logits[r * V + c] - mx);
    want_loss[r] = mx + std::log(s) - logits[r * V + targets[r]];
    for (int64_t c = 0; c < V; ++c)
      want_grad[r * V + c] =
          0.25 * (std::exp(logits[r * V + c] - mx) / s - (c == targets[r] ? 1 : 0));
  }
  expect_near(get(loss), want_loss, 1e-5, "softmax_xent loss");
  expect_near(get(L), want_grad, 1e-5, "softmax_xent gradient");
}

TEST_P(Conformance, EmbeddingMatchesNaive) {
  const int64_t V = 10, D = 33;
  const std::vector<int32_t> ids = {4, -1, 9, 4, 0};
  const std::vector<float> table = random(V * D), dout = random(ids.size() * D);
  Tensor Tb = put(table, {V, D}), I = put_ids(ids, {int64_t(ids.size())}),
         out = nan_tensor({int64_t(ids.size()), D});
  be->embedding_fwd(out, I, Tb, false);
  Tensor dT = put(std::vector<float>(V * D, 0.5f), {V, D}),
         dO = put(dout, {int64_t(ids.size()), D});
  be->embedding_bwd(dT, dO, I);
  std::vector<double> want_out(ids.size() * D, 0.0), want_dt(V * D, 0.5);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < D; ++c)
      if (ids[i] >= 0) {
        want_out[i * D + c] = table[ids[i] * D + c];
        want_dt[ids[i] * D + c] += dout[i * D + c];
      }
  expect_near(get(out), want_out, 1e-6, "embedding_fwd");
  expect_near(get(dT), want_dt, 1e-6, "embedding_bwd");
}

TEST_P(Conformance, RopeMatchesNaive) {
  const int64_t R = 3, hd = 8, heads = 2, cols = heads * hd + 5;  // 5 trailing unrotated columns
  const std::vector<float> x = random(R * cols);
  const std::vector<int32_t> pos = {0, 7, 1234};
  Tensor X = put(x, {R, cols}), P = put_ids(pos, {R});
  be->rope(X, P, int(heads), int(hd), 10000.0f, RopeScaling{}, false);
  std::vector<double> want(x.begin(), x.end());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double f = std::pow(10000.0, -2.0 * i / hd), a = pos[r] * f;
        const double u = x[r * cols + h * hd + i], v = x[r * cols + h * hd + i + hd / 2];
        want[r * cols + h * hd + i] = u * std::cos(a) - v * std::sin(a);
        want[r * cols + h * hd + i + hd / 2] = v * std::cos(a) + u * std::sin(a);
      }
  expect_near(get(X), want, 1e-4, "rope");  // float32 angles at position 1234
}

TEST_P(Conformance, ReductionsArgmaxAndSumRowsMatchNaive) {
  const int64_t R = 7, C = 301;
  std::vector<float> x = random(R * C, -3, 2);
  Tensor X = put(x, {R, C});
  double s = 0, ss = 0, am = 0;
  for (float v : x) {
    s += v;
    ss += double(v) * v;
    am = std::max(am, double(std::fabs(v)));
  }
  EXPECT_NEAR(be->sum(X), s, 1e-9 * R * C * 3);
  EXPECT_NEAR(be->sum_squares(X), ss, 1e-6 * ss);
  EXPECT_EQ(be->amax(X), float(am));
  Tensor into = put({1.5f, 0.25f}, {2});
  be->sum_squares_into(into.flat(0, 1), X);
  be->amax_into(into.flat(1, 1), X);
  const std::vector<float> got = get(into);
  EXPECT_NEAR(got[0], 1.5 + ss, 1e-6 * ss);
  EXPECT_EQ(got[1], float(am));
  Tensor ids = put_ids(std::vector<int32_t>(R, -1), {R}), sums = nan_tensor({C});
  be->argmax_rows(ids, X);
  be->sum_rows(sums, X, false);
  const std::vector<int32_t> arg = get_ids(ids);
  std::vector<double> col(C, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(arg[r],
              std::max_element(x.begin() + r * C, x.begin() + (r + 1) * C) - (x.begin() + r * C));
    for (int64_t c = 0; c < C; ++c) col[c] += x[r * C + c];
  }
  expect_near(get(sums), col, 1e-6, "sum_rows");
}

TEST_P(Conformance, ActivationsAndAdamWMatchNaive) {
  const int64_t n = 1001;
  const std::vector<float> x = random(n, -4, 4), g = random(n), m0 = random(n, -0.1f, 0.1f),
                           v0 = random(n, 0, 0.01f);
  Tensor X = put(x, {n}), out = nan_tensor({n});
  be->gelu_fwd(out, X);
  std::vector<double> gelu(n);
  for (int64_t i = 0; i < n; ++i)
    gelu[i] =
        0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3))));
  expect_near(get(out), gelu, 1e-5, "gelu_fwd");

  Tensor gu = put(x, {1, n - 1}), sw = nan_tensor({1, (n - 1) / 2});
  be->swiglu_fwd(sw, gu);
  std::vector<double> want_sw((n - 1) / 2);
  for (int64_t i = 0; i < (n - 1) / 2; ++i) {
    const double a = x[i], u = x[i + (n - 1) / 2];
    want_sw[i] = a / (1 + std::exp(-a)) * u;
  }
  expect_near(get(sw), want_sw, 1e-5, "swiglu_fwd");

  Tensor P = put(x, {n}), G = put(g, {n}), M = put(m0, {n}), V = put(v0, {n});
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.weight_decay = 0.1f;
  hp.step = 2;
  be->adamw(P, G, M, V, hp);
  std::vector<double> want_p(n), want_m(n), want_v(n);
  for (int64_t i = 0; i < n; ++i) {
    want_m[i] = 0.9 * m0[i] + 0.1 * g[i];
    want_v[i] = 0.95 * v0[i] + 0.05 * double(g[i]) * g[i];
    const double mh = want_m[i] / (1 - 0.81), vh = want_v[i] / (1 - 0.95 * 0.95);
    want_p[i] = x[i] * (1 - 0.01 * 0.1) - 0.01 * mh / (std::sqrt(vh) + 1e-8);
  }
  expect_near(get(P), want_p, 1e-5, "adamw params");
  expect_near(get(M), want_m, 1e-5, "adamw m");
  expect_near(get(V), want_v, 1e-5, "adamw v");
}

// The MLP's fused GEMM + GELU (cuBLASLt epilogues on CUDA, matmul + gelu on the CPU), on an
// aligned shape the epilogue takes and an odd one that falls back.
TEST_P(Conformance, MatmulGeluEpiloguesMatchNaive) {
  for (const int64_t N : {64, 21}) {
    const int64_t M = 13, K = 40;
    const std::vector<float> x = random(M * K), w = random(N * K), bias = random(N),
                             dy = random(M * K), w2 = random(K * N);
    Tensor X = put(x, {M, K}), W = put(w, {N, K}), B = put(bias, {N});
    Tensor pre = nan_tensor({M, N}), act = nan_tensor({M, N});
    be->matmul_bias_gelu(pre, act, X, W, &B);
    std::vector<double> want_pre(M * N), want_act(M * N), gelu_d(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = bias[j];
        for (int64_t k = 0; k < K; ++k) s += double(x[i * K + k]) * w[j * K + k];
        const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (s + 0.044715 * s * s * s));
        want_pre[i * N + j] = s;
        want_act[i * N + j] = 0.5 * s * (1 + t);
        gelu_d[i * N + j] = 0.5 * (1 + t) + 0.5 * s * (1 - t * t) * c * (1 + 3 * 0.044715 * s * s);
      }
    expect_near(get(pre), want_pre, 1e-5, "matmul_bias_gelu pre");
    expect_near(get(act), want_act, 1e-5, "matmul_bias_gelu act");
    // dx[M,N] = (dy[M,K] W2[K,N]) * gelu'(pre).
    Tensor DY = put(dy, {M, K}), W2 = put(w2, {K, N}), dx = nan_tensor({M, N});
    be->matmul_dgelu(dx, DY, W2, pre);
    std::vector<double> want_dx(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(dy[i * K + k]) * w2[k * N + j];
        want_dx[i * N + j] = s * gelu_d[i * N + j];
      }
    // 1e-4: the CPU's GELU derivative takes a fast tanh (as its gelu_bwd does).
    expect_near(get(dx), want_dx, 1e-4, "matmul_dgelu");
  }
}

// Context parallelism's ring on one backend: the sequence in three chunks, every query chunk's
// blocks (its causal diagonal first, as a ring delivers them, then the full blocks before it)
// merged from lse -inf, the backward of every block accumulated, and the chunk gradients written
// back into one dqkv with copy_into_cols. Against naive causal attention with GQA in double.
TEST_P(Conformance, BlockAttentionRingMatchesNaiveCausalAttention) {
  const int B = 2, n = 3, C = 11, S = n * C, H = 4, KV = 2, D = 8;
  const int64_t hd = H * D, kvd = KV * D, cols = hd + 2 * kvd;
  const std::vector<float> qkv = random(size_t(B * S * cols), -2.0f, 2.0f),
                           dout = random(size_t(B * S * hd));
  // Naive forward and backward, per sequence and head.
  std::vector<double> want_out(size_t(B * S * hd)), want_lse(size_t(B * H * S)),
      want_dqkv(size_t(B * S * cols), 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / KV);
      auto at = [&](int t, int64_t col) { return size_t((int64_t(b) * S + t) * cols + col); };
      for (int i = 0; i < S; ++i) {
        std::vector<double> p(size_t(i + 1));
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double sc = 0;
          for (int e = 0; e < D; ++e)
            sc += double(qkv[at(i, h * D + e)]) * qkv[at(j, hd + g * D + e)];
          p[size_t(j)] = sc * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        for (double& x : p) sum += x = std::exp(x - mx);
        want_lse[size_t((b * H + h) * S + i)] = mx + std::log(sum);
        std::vector<double> o(size_t(D), 0.0);
        for (int j = 0; j <= i; ++j)
          for (int e = 0; e < D; ++e)
            o[size_t(e)] += p[size_t(j)] / sum * qkv[at(j, hd + kvd + g * D + e)];
        double delta = 0;
        const size_t orow = size_t((int64_t(b) * S + i) * hd + h * D);
        for (int e = 0; e < D; ++e) {
          want_out[orow + size_t(e)] = o[size_t(e)];
          delta += o[size_t(e)] * dout[orow + size_t(e)];
        }
        for (int j = 0; j <= i; ++j) {
          const double pj = p[size_t(j)] / sum;
          double dp = 0;
          for (int e = 0; e < D; ++e)
            dp += double(dout[orow + size_t(e)]) * qkv[at(j, hd + kvd + g * D + e)];
          const double ds = pj * (dp - delta);
          for (int e = 0; e < D; ++e) {
            want_dqkv[at(i, h * D + e)] += scale * ds * qkv[at(j, hd + g * D + e)];
            want_dqkv[at(j, hd + g * D + e)] += scale * ds * qkv[at(i, h * D + e)];
            want_dqkv[at(j, hd + kvd + g * D + e)] += pj * dout[orow + size_t(e)];
          }
        }
      }
    }

  // The chunks: rows b*C.. of chunk c hold sequence b's positions c*C .. c*C+C-1.
  const AttentionShape cs{B, C, H, KV, D};
  Tensor QKV = put(qkv, {B * S, cols}), DOUT = put(dout, {B * S, hd});
  std::vector<Tensor> q, k, v, g, o, l, dq, dk, dv;
  for (int c = 0; c < n; ++c) {
    q.push_back(nan_tensor({B * C, hd}));
    k.push_back(nan_tensor({B * C, kvd}));
    v.push_back(nan_tensor({B * C, kvd}));
    g.push_back(nan_tensor({B * C, hd}));
    o.push_back(put(std::vector<float>(size_t(B * C * hd), 0.0f), {B * C, hd}));
    l.push_back(put(std::vector<float>(size_t(B * H * C), -INFINITY), {B, H, C}));
    dq.push_back(put(std::vector<float>(size_t(B * C * hd), 0.0f), {B * C, hd}));
    dk.push_back(put(std::vector<float>(size_t(B * C * kvd), 0.0f), {B * C, kvd}));
    dv.push_back(put(std::vector<float>(size_t(B * C * kvd), 0.0f), {B * C, kvd}));
    for (int b = 0; b < B; ++b) {
      const Tensor rows = QKV.slice(int64_t(b) * S + c * C, int64_t(b) * S + (c + 1) * C);
      be->copy_cols(q.back().slice(b * C, (b + 1) * C), rows, 0);
      be->copy_cols(k.back().slice(b * C, (b + 1) * C), rows, hd);
      be->copy_cols(v.back().slice(b * C, (b + 1) * C), rows, hd + kvd);
      be->copy(g.back().slice(b * C, (b + 1) * C),
               DOUT.slice(int64_t(b) * S + c * C, int64_t(b) * S + (c + 1) * C));
    }
  }
  Tensor bo = nan_tensor({B * C, hd}), bl = nan_tensor({B, H, C});
  for (int i = 0; i < n; ++i)
    for (int j = i; j >= 0; --j) {
      be->attention_block_fwd(bo, bl, q[size_t(i)], k[size_t(j)], v[size_t(j)], C, j == i, cs);
      be->attention_lse_merge(o[size_t(i)], l[size_t(i)], bo, bl, cs);
    }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j)
      be->attention_block_bwd(dq[size_t(i)], dk[size_t(j)], dv[size_t(j)], g[size_t(i)],
                              o[size_t(i)], l[size_t(i)], q[size_t(i)], k[size_t(j)], v[size_t(j)],
                              C, j == i, cs);
  // Chunks back into sequence order: out rows, lse per head, gradients into one fused dqkv.
  Tensor DQKV = nan_tensor({B * S, cols});
  std::vector<double> got_out(want_out.size()), got_lse(want_lse.size());
  for (int c = 0; c < n; ++c) {
    for (int b = 0; b < B; ++b) {
      Tensor rows = DQKV.slice(int64_t(b) * S + c * C, int64_t(b) * S + (c + 1) * C);
      be->copy_into_cols(rows, dq[size_t(c)].slice(b * C, (b + 1) * C), 0);
      be->copy_into_cols(rows, dk[size_t(c)].slice(b * C, (b + 1) * C), hd);
      be->copy_into_cols(rows, dv[size_t(c)].slice(b * C, (b + 1) * C), hd + kvd);
    }
    const std::vector<float> oc = get(o[size_t(c)]), lc = get(l[size_t(c)]);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < C; ++t) {
        for (int64_t e = 0; e < hd; ++e)
          got_out[size_t((int64_t(b) * S + c * C + t) * hd + e)] =
              oc[size_t((int64_t(b) * C + t) * hd + e)];
        for (int h = 0; h < H; ++h)
          got_lse[size_t((b * H + h) * S + c * C + t)] = lc[size_t((b * H + h) * C + t)];
      }
  }
  auto as_floats = [](const std::vector<double>& x) {
    return std::vector<float>(x.begin(), x.end());
  };
  expect_near(as_floats(got_out), want_out, 1e-5, "ring out");
  expect_near(as_floats(got_lse), want_lse, 1e-5, "ring lse");
  expect_near(get(DQKV), want_dqkv, 1e-4, "ring dqkv");
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(built_backends_for_tests()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A backend that is the CPU backend except for one deliberately wrong op: check_backend must
// fail exactly that op (the check can fail, and a failure is not blamed on the others).
class OneWrongOp final : public test::ForwardingBackend {
 public:
  explicit OneWrongOp(std::string wrong)
      : ForwardingBackend(make_cpu_backend(1)), wrong_(std::move(wrong)) {}
  std::string name() const override { return "one-wrong-op"; }
  void gelu_fwd(Tensor o, const Tensor& x) override {
    ForwardingBackend::gelu_fwd(o, x);
    if (wrong_ == "gelu_fwd") o.f32()[o.numel() - 1] += 0.01f;  // one element off by 0.01
  }
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& m, const Tensor& r, bool acc) override {
    ForwardingBackend::layernorm_bwd(dx, dw, db, dy, x, w, m, r, acc);
    if (wrong_ == "layernorm_bwd") dw.f32()[3] += 1e-3f;
  }
  void embedding_fwd(Tensor o, const Tensor& i, const Tensor& t, bool acc) override {
    ForwardingBackend::embedding_fwd(o, i, t, acc);
    if (wrong_ == "embedding_fwd" && !acc)
      o.f32()[5] = std::numeric_limits<float>::quiet_NaN();  // unwritten
  }
  void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWParams& hp) override {
    if (wrong_ == "adamw") throw std::runtime_error("adamw kernel failed to launch");
    ForwardingBackend::adamw(p, g, m, v, hp);
  }

 private:
  std::string wrong_;
};

TEST(BackendCheck, FailsExactlyTheWrongOp) {
  for (const std::string wrong : {"gelu_fwd", "layernorm_bwd", "embedding_fwd", "adamw"}) {
    OneWrongOp test(wrong);
    auto ref = make_cpu_backend(1);
    const std::vector<OpCheck> rows = check_backend(test, *ref, 3);
    int failed = 0;
    for (const OpCheck& r : rows) {
      if (r.op == wrong) {
        failed += r.pass ? 0 : 1;  // a variant the fault does not touch may pass
      } else {
        EXPECT_TRUE(r.pass) << r.op << " [" << r.shape << "] failed while only " << wrong
                            << " is wrong: " << r.max_rel_err << " " << r.note;
      }
    }
    EXPECT_GE(failed, 1) << wrong;
    if (wrong == "adamw") {
      for (const OpCheck& r : rows) {
        if (r.op == "adamw") {
          EXPECT_NE(r.note.find("failed to launch"), std::string::npos);
        }
      }
    }
  }
}

}  // namespace
