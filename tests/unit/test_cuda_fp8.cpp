// FP8 on the GPU (issue 18), against the CPU: the fused cast kernel bit for bit against
// src/fp8's casts (every bit pattern, and random values), cuBLASLt's FP8 GEMM against a double
// reference on the same quantised inputs (within fp32 accumulation-order tolerance), and the
// FP8 linears' native path against the exact CPU emulation. Skipped, saying so, without a CUDA
// device, or on a GPU without FP8 tensor cores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/fp8_gemm.h"
#include "comm/communicator.h"
#include "fp8/fp8_cast.h"
#include "fp8/fp8_linears.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

using namespace llmrun;

namespace {

#if LLMRUN_HAVE_CUDA

// The GPU backend with FP8 GEMMs, or a skip saying why there is none.
#define FP8_GPU_OR_SKIP(be, ops)                                           \
  if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device"; \
  auto be = make_backend(BackendKind::cuda);                               \
  Fp8GemmOps* ops = fp8_gemm_ops(*be);                                     \
  ASSERT_NE(ops, nullptr);                                                 \
  if (const std::string why = ops->fp8_unsupported(); !why.empty())        \
  GTEST_SKIP() << "SKIPPED: " << why

struct Dev {
  Buffer buf;
  Tensor t;
};

Dev upload(Backend& be, const void* host, DType dtype, int64_t rows, int64_t cols) {
  Dev d;
  const size_t bytes = size_t(rows * cols) * dtype_size(dtype);
  d.buf = be.allocate(bytes);
  d.t = Tensor(d.buf.data(), dtype, {rows, cols}, Device::cuda);
  if (host) be.copy(d.t, Tensor(const_cast<void*>(host), dtype, {rows, cols}));
  return d;
}

template <class T>
std::vector<T> download(Backend& be, const Tensor& t) {
  std::vector<T> v(size_t(t.numel()));
  be.copy(Tensor(v.data(), t.dtype, {t.numel()}), t.view({t.numel()}));
  be.synchronize();
  return v;
}

Fp8Format format_of(DType t) { return t == DType::fp8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2; }

TEST(CudaFp8, CastKernelMatchesTheCpuCastsBitForBit) {
  FP8_GPU_OR_SKIP(be, ops);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 20);
  for (const DType fmt : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const Fp8Format f = format_of(fmt);
    std::vector<float> x;
    for (int b = 0; b < 256; ++b) x.push_back(fp8_decode(uint8_t(b), f));
    while (x.size() < size_t(131 * 77)) x.push_back(std::ldexp(mant(rng), expo(rng)));
    const int64_t rows = 131, cols = 77;
    for (const float scale : {1.0f, 0.013f, 96.0f}) {
      Dev X = upload(*be, x.data(), DType::f32, rows, cols),
          S = upload(*be, &scale, DType::f32, 1, 1);
      Dev Q = upload(*be, nullptr, fmt, rows, cols), QT = upload(*be, nullptr, fmt, cols, rows);
      const float zero = 0.0f;
      const int32_t zeros[2] = {0, 0};
      Dev A = upload(*be, &zero, DType::f32, 1, 1), C = upload(*be, zeros, DType::i32, 1, 2);
      ops->fp8_cast_transpose(Q.t, QT.t, A.t, C.t, X.t, S.t, fmt);
      const auto q = download<uint8_t>(*be, Q.t), qt = download<uint8_t>(*be, QT.t);
      const auto amax = download<float>(*be, A.t);
      const auto counts = download<int32_t>(*be, C.t);
      std::vector<uint8_t> ref(x.size());
      const Fp8CastStats st = fp8_quantize(x.data(), ref.data(), int64_t(x.size()), scale, f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(int(q[size_t(r * cols + c)]), int(ref[size_t(r * cols + c)]))
              << fp8_format_name(f) << " x=" << x[size_t(r * cols + c)] << " scale " << scale;
          ASSERT_EQ(int(qt[size_t(c * rows + r)]), int(ref[size_t(r * cols + c)]));
        }
      EXPECT_EQ(std::isnan(amax[0]), std::isnan(st.amax));
      if (!std::isnan(st.amax)) {
        EXPECT_EQ(amax[0], st.amax);
      }
      EXPECT_EQ(counts[0], st.overflows);
      EXPECT_EQ(counts[1], st.underflows);
    }
  }
}

TEST(CudaFp8, GemmMatchesTheEmulationOnTheSameQuantisedInputs) {
  FP8_GPU_OR_SKIP(be, ops);
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  struct Case {
    int64_t m, n, k;
    DType fa, fb, out;
    float beta;
    bool bias;
  };
  const Case cases[] = {
      {64, 96, 128, DType::fp8_e4m3, DType::fp8_e4m3, DType::f32, 0.0f, false},
      {128, 48, 64, DType::fp8_e5m2, DType::fp8_e4m3, DType::f32, 1.0f, false},
      {32, 256, 160, DType::fp8_e4m3, DType::fp8_e5m2, DType::f32, 0.0f, true},
      {64, 64, 512, DType::fp8_e4m3, DType::fp8_e4m3, DType::bf16, 0.0f, false},
      // The 8B Llama's MLP shapes, scaled down in m: d 4096, ffn 14336.
      {16, 14336, 4096, DType::fp8_e4m3, DType::fp8_e4m3, DType::f32, 0.0f, false},
  };
  for (const Case& c : cases) {
    std::vector<float> a(size_t(c.m * c.k)), b(size_t(c.n * c.k)), bias(size_t(c.n)),
        init(size_t(c.m * c.n));
    for (float& v : a) v = d(rng);
    for (float& v : b) v = d(rng) * 0.02f;
    for (float& v : bias) v = d(rng);
    for (float& v : init) v = d(rng);
    const float sa = 64.0f, sb = 4096.0f, sa_inv = 1.0f / sa, sb_inv = 1.0f / sb;
    std::vector<uint8_t> qa(a.size()), qb(b.size());
    fp8_quantize(a.data(), qa.data(), int64_t(a.size()), sa, format_of(c.fa));
    fp8_quantize(b.data(), qb.data(), int64_t(b.size()), sb, format_of(c.fb));
    Dev A = upload(*be, qa.data(), c.fa, c.m, c.k), B = upload(*be, qb.data(), c.fb, c.n, c.k);
    Dev SA = upload(*be, &sa_inv, DType::f32, 1, 1), SB = upload(*be, &sb_inv, DType::f32, 1, 1);
    Dev BIAS = upload(*be, bias.data(), DType::f32, 1, c.n);
    Dev OUT = upload(*be, nullptr, c.out, c.m, c.n);
    if (c.out == DType::f32) be->copy(OUT.t, Tensor(init.data(), DType::f32, {c.m, c.n}));
    BIAS.t = BIAS.t.view({c.n});
    ops->fp8_matmul(OUT.t, A.t, B.t, SA.t, SB.t, c.beta, c.bias ? &BIAS.t : nullptr);
    std::vector<float> got(size_t(c.m * c.n));
    if (c.out == DType::f32) {
      got = download<float>(*be, OUT.t);
    } else {
      const auto h = download<uint16_t>(*be, OUT.t);
      for (size_t i = 0; i < h.size(); ++i) {
        const uint32_t u = uint32_t(h[i]) << 16;
        std::memcpy(&got[i], &u, 4);
      }
    }
    std::vector<float> fa(a.size()), fb(b.size());
    fp8_dequantize(qa.data(), fa.data(), int64_t(fa.size()), 1.0f, format_of(c.fa));
    fp8_dequantize(qb.data(), fb.data(), int64_t(fb.size()), 1.0f, format_of(c.fb));
    double worst = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double t = double(fa[size_t(i * c.k + p)]) * fb[size_t(j * c.k + p)];
          s += t;
          mag += std::fabs(t);
        }
        const double scale = double(sa_inv) * sb_inv;
        double ref = s * scale + (c.beta != 0 ? double(c.beta) * init[size_t(i * c.n + j)] : 0.0) +
                     (c.bias ? bias[size_t(j)] : 0.0);
        // fp32 accumulation in another order: k ulps of the magnitude; bf16 output: its rounding.
        double tol = 2e-7 * double(c.k) * mag * scale + 1e-6 * std::fabs(ref) + 1e-30;
        if (c.out == DType::bf16) tol += std::fabs(ref) * (1.0 / 256);
        const double err = std::fabs(got[size_t(i * c.n + j)] - ref);
        worst = std::max(worst, err / tol);
        ASSERT_LE(err, tol) << "m " << c.m << " n " << c.n << " k " << c.k << " at " << i << ","
                            << j << ": " << got[size_t(i * c.n + j)] << " vs " << ref;
      }
    std::printf("fp8 GEMM %ldx%ldx%ld: worst error %.3g of tolerance\n", long(c.m), long(c.n),
                long(c.k), worst);
  }
}

TEST(CudaFp8, LinearsNativePathMatchesTheCpuEmulation) {
  FP8_GPU_OR_SKIP(be, ops);
  auto cpu = make_cpu_backend(1);
  ModelConfig cfg;
  cfg.layers = 1;
  Fp8Linears gpu_fp8(Fp8Section{.enabled = true}, cfg, *be),
      cpu_fp8(Fp8Section{.enabled = true}, cfg, *cpu);
  ASSERT_TRUE(gpu_fp8.native());
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t n = 64, in = 128, out = 96;
  std::vector<float> x(size_t(n * in)), w(size_t(out * in)), dy(size_t(n * out));
  auto self = make_self_communicator("world");
  for (int step = 0; step < 3; ++step) {
    for (float& v : x) v = d(rng) * float(1 + step);
    for (float& v : w) v = d(rng) * 0.05f;
    for (float& v : dy) v = d(rng) * 1e-3f;
    std::vector<float> ref_y(size_t(n * out)), ref_dx(size_t(n * in)), ref_dw(size_t(out * in));
    const Tensor X(x.data(), DType::f32, {n, in}), W(w.data(), DType::f32, {out, in}),
        DY(dy.data(), DType::f32, {n, out});
    const LinearSite site{0, LinearKind::up};
    cpu_fp8.begin_step();
    cpu_fp8.forward(*cpu, site, Tensor(ref_y.data(), DType::f32, {n, out}), X, W, nullptr, false);
    cpu_fp8.backward(*cpu, site, Tensor(ref_dx.data(), DType::f32, {n, in}),
                     Tensor(ref_dw.data(), DType::f32, {out, in}), Tensor(), DY, X, W);
    cpu_fp8.end_step(*self);
    Dev gx = upload(*be, x.data(), DType::f32, n, in),
        gw = upload(*be, w.data(), DType::f32, out, in),
        gdy = upload(*be, dy.data(), DType::f32, n, out),
        gy = upload(*be, nullptr, DType::f32, n, out),
        gdx = upload(*be, nullptr, DType::f32, n, in),
        gdw = upload(*be, nullptr, DType::f32, out, in);
    gpu_fp8.begin_step();
    gpu_fp8.forward(*be, site, gy.t, gx.t, gw.t, nullptr, false);
    gpu_fp8.backward(*be, site, gdx.t, gdw.t, Tensor(), gdy.t, gx.t, gw.t);
    gpu_fp8.end_step(*self);
    const std::vector<float> y = download<float>(*be, gy.t), dx = download<float>(*be, gdx.t),
                             dw = download<float>(*be, gdw.t);
    for (const auto& [got, ref] : {std::pair{&y, &ref_y}, {&dx, &ref_dx}, {&dw, &ref_dw}}) {
      double max_ref = 0;
      for (float v : *ref) max_ref = std::max(max_ref, double(std::fabs(v)));
      for (size_t i = 0; i < ref->size(); ++i)
        ASSERT_NEAR((*got)[i], (*ref)[i], 1e-5 * max_ref + 1e-12) << "step " << step << " " << i;
    }
    EXPECT_EQ(gpu_fp8.state(), cpu_fp8.state()) << "step " << step;
  }
}

#else

TEST(CudaFp8, BuiltWithoutCuda) { GTEST_SKIP() << "SKIPPED: no CUDA device (CPU-only build)"; }

#endif

}  // namespace
