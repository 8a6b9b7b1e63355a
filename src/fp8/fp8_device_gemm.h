// The FP8 linears' GEMMs on a backend with FP8 tensor cores (backend/fp8_gemm.h: cuBLASLt on
// compute capability 8.9+): each operand is cast once by the fused cast + transpose + amax
// kernel, in the orientation the "TN"-only FP8 GEMM needs, and multiplied with its tensor's
// scale_inv passed as a device pointer. Every tensor's scale, scale_inv, step amax and
// over/underflow counts live in one device buffer: the scales go up once after each update and
// the amaxes come down once per step, so a step never waits on the device per tensor.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/fp8_gemm.h"

namespace llmrun {

class Fp8DeviceGemms {
 public:
  // tensors: how many FP8 tensors (Fp8Linears' list) the state holds.
  Fp8DeviceGemms(Backend& be, Fp8GemmOps& ops, int tensors);

  bool shape_ok(int64_t m, int64_t n, int64_t k) const { return ops_.fp8_shape_supported(m, n, k); }
  // The tensors' current scales (and their inverses) to the device.
  void set_scales(const std::vector<float>& scale, const std::vector<float>& scale_inv);
  // Zeroes the step amaxes and counts.
  void begin_step();
  // This step's amax and (overflows, underflows) of every tensor.
  void read_step(std::vector<float>& amax, std::vector<int32_t>& counts);

  struct Cast {
    Tensor q, qt;  // [rows, cols] and [cols, rows] in FP8 (empty when not asked for)
  };
  // x (f32 [rows, cols]) cast with tensor `t`'s scale into scratch slot `slot` (0..2), recording
  // its amax and counts when `record`.
  Cast cast(const Tensor& x, int t, DType format, int slot, bool want_q, bool want_qt, bool record);
  // out = scale_inv[ta] * scale_inv[tb] * a b^T + beta * out (+ bias).
  void gemm(Tensor out, const Tensor& a, int ta, const Tensor& b, int tb, float beta,
            const Tensor* bias);

 private:
  Tensor scalar(int block, int t) const;  // f32 [1] at block (0 scale, 1 scale_inv, 2 amax)
  Backend& be_;
  Fp8GemmOps& ops_;
  int tensors_;
  Buffer state_;  // f32 scale[T], scale_inv[T], amax[T], then i32 counts[2T]
  Buffer q_[3], qt_[3];
};

}  // namespace llmrun
