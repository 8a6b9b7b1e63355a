// Helpers shared by the CPU kernels: a vectorisable exp, scheduling rules and checks.
#pragma once
#include <omp.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace llmrun::cpu {

// exp(x) for float with ~1 ulp error, written with arithmetic and bit operations only so
// that GCC vectorises loops calling it (libm's expf is an opaque call that blocks SIMD).
// Cephes-style: 2^n * exp(r), |r| <= ln2/2, degree-6 polynomial for exp(r). Inputs above
// 88 return inf (true values there exceed 1.6e38, so 2^n stays a normal float below);
// inputs below -87.33 (beyond the normal range) return exactly 0.
inline float fast_exp(float x) {
  const float hi = 88.0f, lo = -87.3365447504f;
  float xc = x > hi ? hi : (x < lo ? lo : x);
  // Round x*log2(e) to the nearest integer with the 1.5*2^23 trick (no libm call).
  const float shifter = 12582912.0f;
  float t = xc * 1.44269504088896341f + shifter;
  float n = t - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(shifter) + 127) << 23;
  float y = p * std::bit_cast<float>(e);
  y = x < lo ? 0.0f : y;  // underflow (and -inf) to exactly zero
  return x > hi ? __builtin_inff() : y;
}

inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

// tanh through exp: saturates cleanly to +-1 because fast_exp returns 0 or inf at the ends.
inline float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

// Below this many elements an elementwise loop runs on one thread: waking the pool costs
// more than the work.
constexpr int64_t kParallelMin = 1 << 14;

// `precision.compute: bf16` on the CPU: the GEMM operand x rounded to bf16 (round to nearest
// even, as f32_to_bf16) and widened back to f32 in `scratch`, so that an sgemm over the
// rounded operands is a bf16-input, fp32-accumulate GEMM up to summation order. Returns x's
// own memory when dt is f32.
const float* gemm_operand(const Tensor& x, DType dt, std::vector<float>& scratch, int threads);

inline void check_f32(const Tensor& t, const char* what) {
  LLMRUN_CHECK(t.data != nullptr && t.dtype == DType::f32 && t.device == Device::cpu,
               std::string(what) + " must be a host f32 tensor");
}
inline void check_f32(std::initializer_list<const Tensor*> ts, const char* what) {
  for (const Tensor* t : ts) check_f32(*t, what);
}
inline void check_i32(const Tensor& t, const char* what) {
  LLMRUN_CHECK(t.data != nullptr && t.dtype == DType::i32 && t.device == Device::cpu,
               std::string(what) + " must be a host i32 tensor");
}
inline void check_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  LLMRUN_CHECK(a.numel() == b.numel(),
               std::string(what) + ": " + a.shape_str() + " vs " + b.shape_str());
}

// Splits [0, n) into `parts` contiguous ranges; returns range `i`.
inline void split_range(int64_t n, int parts, int i, int64_t& begin, int64_t& end) {
  int64_t base = n / parts, rem = n % parts;
  begin = i * base + (i < rem ? i : rem);
  end = begin + base + (i < rem ? 1 : 0);
}

}  // namespace llmrun::cpu
