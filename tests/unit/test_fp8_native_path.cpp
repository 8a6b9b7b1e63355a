// The FP8 linears' native-GEMM path (fp8/fp8_device_gemm.h, used on GPUs with FP8 tensor
// cores) driven on the CPU: a backend offering Fp8GemmOps over host memory (casts by
// fp8_quantize, GEMMs on the decoded bytes) runs the very code the CUDA backend runs
// under it (orientation of every operand, transposed casts, scale indices, amax and counts
// read back once per step, scales re-uploaded after updates and checkpoint restores), and must
// give what the exact emulation gives. Plus the refusal of a GPU without FP8, and the CUDA
// backend's FP8 capability and shape rules (pure functions of the compute capability).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/fp8_support.h"
#include "backend/fp8_gemm.h"
#include "comm/communicator.h"
#include "forwarding_backend.h"
#include "fp8/fp8_cast.h"
#include "fp8/fp8_linears.h"
#include "util/error.h"

using namespace llmrun;

namespace {

class HostFp8Backend final : public test::ForwardingBackend, public Fp8GemmOps {
 public:
  explicit HostFp8Backend(std::string refusal = "")
      : ForwardingBackend(make_cpu_backend(1)), refusal_(std::move(refusal)) {}
  int casts = 0, gemms = 0;

  // --- Fp8GemmOps over host memory ---
  std::string fp8_unsupported() const override { return refusal_; }
  bool fp8_shape_supported(int64_t m, int64_t n, int64_t k) const override {
    return cuda::fp8_shape_ok(m, n, k);
  }
  void fp8_cast_transpose(Tensor q, Tensor qt, Tensor amax, Tensor counts, const Tensor& x,
                          const Tensor& scale, DType format) override {
    ++casts;
    const Fp8Format f = format == DType::fp8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    const int64_t rows = x.rows(), cols = x.cols();
    std::vector<uint8_t> bytes(size_t(x.numel()));
    const Fp8CastStats st = fp8_quantize(x.f32(), bytes.data(), x.numel(), scale.f32()[0], f);
    if (!q.empty()) std::copy(bytes.begin(), bytes.end(), static_cast<uint8_t*>(q.data));
    if (!qt.empty())
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          static_cast<uint8_t*>(qt.data)[c * rows + r] = bytes[size_t(r * cols + c)];
    if (!amax.empty()) {
      float& a = amax.f32()[0];
      if (std::isnan(st.amax) || st.amax > a) a = st.amax;
    }
    if (!counts.empty()) {
      counts.i32()[0] += int32_t(st.overflows);
      counts.i32()[1] += int32_t(st.underflows);
    }
  }
  void fp8_matmul(Tensor out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                  const Tensor& b_scale_inv, float beta, const Tensor* bias) override {
    ++gemms;
    EXPECT_TRUE(cuda::fp8_shape_ok(out.rows(), out.cols(), a.cols()));
    EXPECT_FALSE(a.dtype == DType::fp8_e5m2 && b.dtype == DType::fp8_e5m2);
    auto decode = [](const Tensor& t) {
      const Fp8Format f = t.dtype == DType::fp8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
      std::vector<float> v(size_t(t.numel()));
      fp8_dequantize(static_cast<const uint8_t*>(t.data), v.data(), t.numel(), 1.0f, f);
      return v;
    };
    std::vector<float> av = decode(a), bv = decode(b);
    inner().matmul(out, Tensor(av.data(), DType::f32, {a.rows(), a.cols()}),
                   Tensor(bv.data(), DType::f32, {b.rows(), b.cols()}), false, true,
                   a_scale_inv.f32()[0] * b_scale_inv.f32()[0], beta, bias);
  }

 private:
  std::string refusal_;
};

std::vector<float> random_vector(size_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

ModelConfig one_layer() {
  ModelConfig c;
  c.layers = 1;
  return c;
}

// One linear (the qkv site of layer 0) through forward and backward for a few optimizer
// steps, scales updating in between; returns y, dx and dW of every step, concatenated.
std::vector<float> run_steps(Backend& be, Fp8Linears& fp8, int64_t n, int64_t in, int64_t out,
                             int steps) {
  std::mt19937 rng(5);
  std::vector<float> w = random_vector(size_t(out * in), rng, 0.05f), dw(size_t(out * in), 0.0f);
  std::vector<float> bias = random_vector(size_t(out), rng, 0.1f), db(size_t(out), 0.0f);
  std::vector<float> all;
  auto self = make_self_communicator("world");
  for (int s = 0; s < steps; ++s) {
    // Inputs grow step by step, so the delayed scales change and matter.
    std::vector<float> x = random_vector(size_t(n * in), rng, 1.0f + 3.0f * float(s));
    std::vector<float> dy = random_vector(size_t(n * out), rng, 1e-3f * float(s + 1));
    std::vector<float> y(size_t(n * out), 0.0f), dx(size_t(n * in), 0.0f);
    const Tensor X(x.data(), DType::f32, {n, in}), W(w.data(), DType::f32, {out, in}),
        B(bias.data(), DType::f32, {out}), DY(dy.data(), DType::f32, {n, out});
    fp8.begin_step();
    const LinearSite site{0, LinearKind::qkv};
    fp8.forward(be, site, Tensor(y.data(), DType::f32, {n, out}), X, W, &B, false);
    fp8.backward(be, site, Tensor(dx.data(), DType::f32, {n, in}),
                 Tensor(dw.data(), DType::f32, {out, in}), Tensor(db.data(), DType::f32, {out}), DY,
                 X, W);
    fp8.end_step(*self);
    for (const auto* v : {&y, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
  }
  return all;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-5f * std::fabs(b[i]) + 1e-7f) << "element " << i;
}

TEST(Fp8NativePath, MatchesTheExactEmulationStepByStep) {
  auto cpu = make_cpu_backend(1);
  HostFp8Backend native;
  Fp8Linears emulated(Fp8Section{.enabled = true}, one_layer(), *cpu);
  Fp8Linears fast(Fp8Section{.enabled = true}, one_layer(), native);
  EXPECT_FALSE(emulated.native());
  ASSERT_TRUE(fast.native());
  const std::vector<float> ref = run_steps(*cpu, emulated, 32, 48, 64, 4);
  const std::vector<float> got = run_steps(native, fast, 32, 48, 64, 4);
  // Forward: 2 casts + 1 GEMM; backward: 3 casts + 2 GEMMs; per step.
  EXPECT_EQ(native.gemms, 3 * 4);
  EXPECT_EQ(native.casts, 5 * 4);
  expect_close(got, ref);
  // The same amaxes reached the scales: identical scaling state, hence identical checkpoints.
  EXPECT_EQ(fast.state(), emulated.state());
  EXPECT_NE(fast.scaling("layers.0.qkv.input").scale(), 1.0f);
}

TEST(Fp8NativePath, ShapesTheFp8GemmDoesNotTakeAreEmulated) {
  auto cpu = make_cpu_backend(1);
  HostFp8Backend native;
  Fp8Linears emulated(Fp8Section{.enabled = true}, one_layer(), *cpu);
  Fp8Linears fast(Fp8Section{.enabled = true}, one_layer(), native);
  const std::vector<float> ref = run_steps(*cpu, emulated, 20, 40, 24, 2);
  const std::vector<float> got = run_steps(native, fast, 20, 40, 24, 2);
  EXPECT_EQ(native.gemms, 0);
  expect_close(got, ref);
  EXPECT_EQ(fast.state(), emulated.state());
}

TEST(Fp8NativePath, RestoredScalesReachTheDevice) {
  auto cpu = make_cpu_backend(1);
  HostFp8Backend native;
  Fp8Linears emulated(Fp8Section{.enabled = true}, one_layer(), *cpu);
  run_steps(*cpu, emulated, 32, 48, 64, 3);
  // A resumed run: the native runner restores the emulated run's scales, then both go on.
  Fp8Linears fast(Fp8Section{.enabled = true}, one_layer(), native);
  run_steps(native, fast, 32, 48, 64, 1);  // device scales uploaded once
  fast.restore(emulated.state(), "test checkpoint");
  const std::vector<float> ref = run_steps(*cpu, emulated, 32, 48, 64, 2);
  const std::vector<float> got = run_steps(native, fast, 32, 48, 64, 2);
  expect_close(got, ref);
}

TEST(Fp8NativePath, AGpuWithoutFp8IsRefused) {
  const std::string why = cuda::fp8_refusal(8, 0, "NVIDIA A100-SXM4-80GB", 0);
  HostFp8Backend old_gpu(why);
  try {
    Fp8Linears fp8(Fp8Section{.enabled = true}, one_layer(), old_gpu);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
  EXPECT_THROW(require_fp8_device(old_gpu), UserError);
  HostFp8Backend hopper;
  EXPECT_NO_THROW(require_fp8_device(hopper));
  auto cpu = make_cpu_backend(1);
  EXPECT_NO_THROW(require_fp8_device(*cpu));  // the CPU emulates FP8 exactly
}

TEST(Fp8Support, ComputeCapabilities) {
  EXPECT_FALSE(cuda::fp8_gemm_supported(7, 5));  // Turing
  EXPECT_FALSE(cuda::fp8_gemm_supported(8, 0));  // A100
  EXPECT_FALSE(cuda::fp8_gemm_supported(8, 6));  // Ampere consumer
  EXPECT_TRUE(cuda::fp8_gemm_supported(8, 9));   // Ada (L4, L40S, RTX 4090)
  EXPECT_TRUE(cuda::fp8_gemm_supported(9, 0));   // H100, H200
  EXPECT_TRUE(cuda::fp8_gemm_supported(10, 0));  // B200
  EXPECT_TRUE(cuda::fp8_gemm_supported(12, 0));
  EXPECT_EQ(cuda::fp8_refusal(9, 0, "NVIDIA H100 80GB HBM3", 0), "");
  const std::string a100 = cuda::fp8_refusal(8, 0, "NVIDIA A100-SXM4-80GB", 3);
  EXPECT_EQ(a100.rfind("precision.fp8 needs FP8 tensor cores (compute capability 8.9 or newer", 0),
            0u)
      << a100;
  EXPECT_NE(a100.find("cuda:3 (NVIDIA A100-SXM4-80GB) has 8.0"), std::string::npos) << a100;
}

TEST(Fp8Support, GemmShapes) {
  EXPECT_TRUE(cuda::fp8_shape_ok(16, 16, 16));
  EXPECT_TRUE(cuda::fp8_shape_ok(4096, 14336, 8192));
  EXPECT_FALSE(cuda::fp8_shape_ok(20, 16, 16));
  EXPECT_FALSE(cuda::fp8_shape_ok(16, 24, 16));
  EXPECT_FALSE(cuda::fp8_shape_ok(16, 16, 8));
  EXPECT_FALSE(cuda::fp8_shape_ok(0, 16, 16));
}

}  // namespace
