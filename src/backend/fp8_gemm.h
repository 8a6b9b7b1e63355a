// FP8 GEMMs on backends with FP8 tensor cores (the CUDA backend on compute capability 8.9 or
// newer, through cuBLASLt). A backend offers them by deriving from Fp8GemmOps beside Backend;
// src/fp8 finds them with fp8_gemm_ops() and otherwise emulates FP8 exactly (src/fp8/).
// Tensors live on the backend's device. FP8 tensors have dtype fp8_e4m3 or fp8_e5m2 (one byte
// per element); scale, scale_inv and amax are f32 [1] device scalars, so that delayed scaling
// never waits for the device per tensor.
#pragma once
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace llmrun {

class Fp8GemmOps {
 public:
  virtual ~Fp8GemmOps() = default;
  // "" when this device runs FP8 GEMMs, else why not (a sentence for a UserError).
  virtual std::string fp8_unsupported() const = 0;
  // Whether fp8_matmul takes out[m, n] from k-long dot products (cuBLASLt's FP8 kernels need
  // every dimension to be a multiple of 16).
  virtual bool fp8_shape_supported(int64_t m, int64_t n, int64_t k) const = 0;
  // One pass over x (f32 [rows, cols]): q = fp8(x * scale[0]) [rows, cols] and qt = its
  // transpose [cols, rows] in `format` (an empty tensor is not written), amax[0] = max(amax[0],
  // max |x|) and counts (i32 [2]) += (overflows, underflows) as fp8_quantize counts them (empty:
  // not recorded). Saturating round-to-nearest-even, bit for bit src/fp8/fp8_cast.h.
  virtual void fp8_cast_transpose(Tensor q, Tensor qt, Tensor amax, Tensor counts, const Tensor& x,
                                  const Tensor& scale, DType format) = 0;
  // out[M, N] = a_scale_inv[0] * b_scale_inv[0] * (a[M, K] b[N, K]^T) + beta * out (+ bias[N]),
  // the products summed in fp32; out f32 or bf16; a and b not both E5M2.
  virtual void fp8_matmul(Tensor out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                          const Tensor& b_scale_inv, float beta, const Tensor* bias) = 0;
};

inline Fp8GemmOps* fp8_gemm_ops(Backend& be) { return dynamic_cast<Fp8GemmOps*>(&be); }

}  // namespace llmrun
