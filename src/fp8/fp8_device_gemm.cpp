// Device state and calls of the native FP8 GEMM path (see the header).
#include "fp8/fp8_device_gemm.h"

#include "util/error.h"

namespace llmrun {

Fp8DeviceGemms::Fp8DeviceGemms(Backend& be, Fp8GemmOps& ops, int tensors)
    : be_(be), ops_(ops), tensors_(tensors) {
  state_ = be_.allocate(size_t(tensors_) * (3 * sizeof(float) + 2 * sizeof(int32_t)) + 16);
}

Tensor Fp8DeviceGemms::scalar(int block, int t) const {
  return Tensor(static_cast<float*>(state_.data()) + size_t(block) * tensors_ + t, DType::f32, {1},
                state_.device());
}

void Fp8DeviceGemms::set_scales(const std::vector<float>& scale,
                                const std::vector<float>& scale_inv) {
  LLMRUN_CHECK(int(scale.size()) == tensors_ && int(scale_inv.size()) == tensors_,
               "FP8 scales for another tensor count");
  if (tensors_ == 0) return;
  std::vector<float> both(scale);
  both.insert(both.end(), scale_inv.begin(), scale_inv.end());
  be_.copy(Tensor(state_.data(), DType::f32, {2 * int64_t(tensors_)}, state_.device()),
           Tensor(both.data(), DType::f32, {2 * int64_t(tensors_)}));
}

void Fp8DeviceGemms::begin_step() {
  if (tensors_ == 0) return;
  be_.fill(Tensor(static_cast<float*>(state_.data()) + 2 * size_t(tensors_), DType::f32,
                  {int64_t(tensors_)}, state_.device()),
           0.0f);
  be_.fill(Tensor(static_cast<float*>(state_.data()) + 3 * size_t(tensors_), DType::i32,
                  {2 * int64_t(tensors_)}, state_.device()),
           0.0f);
}

void Fp8DeviceGemms::read_step(std::vector<float>& amax, std::vector<int32_t>& counts) {
  amax.assign(size_t(tensors_), 0.0f);
  counts.assign(2 * size_t(tensors_), 0);
  if (tensors_ == 0) return;
  be_.copy(Tensor(amax.data(), DType::f32, {int64_t(tensors_)}),
           Tensor(static_cast<float*>(state_.data()) + 2 * size_t(tensors_), DType::f32,
                  {int64_t(tensors_)}, state_.device()));
  be_.copy(Tensor(counts.data(), DType::i32, {2 * int64_t(tensors_)}),
           Tensor(static_cast<float*>(state_.data()) + 3 * size_t(tensors_), DType::i32,
                  {2 * int64_t(tensors_)}, state_.device()));
}

Fp8DeviceGemms::Cast Fp8DeviceGemms::cast(const Tensor& x, int t, DType format, int slot,
                                          bool want_q, bool want_qt, bool record) {
  LLMRUN_CHECK(t >= 0 && t < tensors_ && slot >= 0 && slot < 3, "FP8 cast slot");
  const size_t bytes = size_t(x.numel());
  const int64_t rows = x.rows(), cols = x.cols();
  Cast c;
  if (want_q) {
    if (q_[slot].bytes() < bytes) q_[slot] = be_.allocate(bytes);
    c.q = Tensor(q_[slot].data(), format, {rows, cols}, q_[slot].device());
  }
  if (want_qt) {
    if (qt_[slot].bytes() < bytes) qt_[slot] = be_.allocate(bytes);
    c.qt = Tensor(qt_[slot].data(), format, {cols, rows}, qt_[slot].device());
  }
  Tensor amax, counts;
  if (record) {
    amax = scalar(2, t);
    counts = Tensor(static_cast<int32_t*>(state_.data()) + 3 * size_t(tensors_) + 2 * size_t(t),
                    DType::i32, {2}, state_.device());
  }
  ops_.fp8_cast_transpose(c.q, c.qt, amax, counts, x.view({rows, cols}), scalar(0, t), format);
  return c;
}

void Fp8DeviceGemms::gemm(Tensor out, const Tensor& a, int ta, const Tensor& b, int tb, float beta,
                          const Tensor* bias) {
  ops_.fp8_matmul(out, a, b, scalar(1, ta), scalar(1, tb), beta, bias);
}

}  // namespace llmrun
