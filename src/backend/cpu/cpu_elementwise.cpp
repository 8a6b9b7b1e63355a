// Elementwise ops: add, scale, and the activations GELU (tanh approximation) and SwiGLU.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

using cpu::check_f32;
using cpu::check_same_numel;
using cpu::fast_sigmoid;
using cpu::fast_tanh;
using cpu::kParallelMin;

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;
}  // namespace

void CpuBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  check_f32(out, "add out");
  check_f32(a, "add a");
  check_f32(b, "add b");
  check_same_numel(out, a, "add");
  check_same_numel(out, b, "add");
  const int64_t n = out.numel();
  float* o = out.f32();
  const float* x = a.f32();
  const float* y = b.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void CpuBackend::scale(Tensor x, float a) {
  check_f32(x, "scale x");
  const int64_t n = x.numel();
  float* p = x.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] *= a;
}

void CpuBackend::gelu_fwd(Tensor out, const Tensor& x) {
  check_f32(out, "gelu out");
  check_f32(x, "gelu x");
  check_same_numel(out, x, "gelu_fwd");
  const int64_t n = x.numel();
  const float* xp = x.f32();
  float* o = out.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    const float t = fast_tanh(kGeluK * (v + kGeluC * v * v * v));
    o[i] = 0.5f * v * (1.0f + t);
  }
}

void CpuBackend::gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) {
  check_f32(dx, "gelu dx");
  check_f32(dy, "gelu dy");
  check_f32(x, "gelu x");
  check_same_numel(dx, x, "gelu_bwd");
  check_same_numel(dy, x, "gelu_bwd");
  const int64_t n = x.numel();
  const float* xp = x.f32();
  const float* g = dy.f32();
  float* d = dx.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    const float t = fast_tanh(kGeluK * (v + kGeluC * v * v * v));
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * v * v);
    d[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void CpuBackend::swiglu_fwd(Tensor out, const Tensor& gate_up) {
  check_f32(out, "swiglu out");
  check_f32(gate_up, "swiglu gate_up");
  const int64_t rows = gate_up.rows(), f = gate_up.cols() / 2;
  LLMRUN_CHECK(gate_up.cols() % 2 == 0 && out.rows() == rows && out.cols() == f,
               "swiglu_fwd: out " + out.shape_str() + " for gate_up " + gate_up.shape_str());
  const float* gu = gate_up.f32();
  float* o = out.f32();
#pragma omp parallel for num_threads(threads_) if (rows * f > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gu + r * 2 * f;
    const float* up = gate + f;
    float* orow = o + r * f;
#pragma omp simd
    for (int64_t c = 0; c < f; ++c) orow[c] = gate[c] * fast_sigmoid(gate[c]) * up[c];
  }
}

void CpuBackend::swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) {
  check_f32(dgate_up, "swiglu dgate_up");
  check_f32(dout, "swiglu dout");
  check_f32(gate_up, "swiglu gate_up");
  const int64_t rows = gate_up.rows(), f = gate_up.cols() / 2;
  LLMRUN_CHECK(gate_up.cols() % 2 == 0 && dout.rows() == rows && dout.cols() == f,
               "swiglu_bwd: dout " + dout.shape_str() + " for gate_up " + gate_up.shape_str());
  check_same_numel(dgate_up, gate_up, "swiglu_bwd");
  const float* gu = gate_up.f32();
  const float* dy = dout.f32();
  float* dgu = dgate_up.f32();
#pragma omp parallel for num_threads(threads_) if (rows * f > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gu + r * 2 * f;
    const float* up = gate + f;
    const float* g = dy + r * f;
    float* dgate = dgu + r * 2 * f;
    float* dup = dgate + f;
#pragma omp simd
    for (int64_t c = 0; c < f; ++c) {
      const float a = gate[c], s = fast_sigmoid(a);
      const float silu = a * s;
      // d silu / da = s + a s (1 - s)
      dgate[c] = g[c] * up[c] * s * (1.0f + a * (1.0f - s));
      dup[c] = g[c] * silu;
    }
  }
}

}  // namespace llmrun
