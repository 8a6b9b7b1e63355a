#include "model/linear.h"

namespace llmrun {

const char* linear_kind_name(LinearKind k) {
  switch (k) {
    case LinearKind::qkv:
      return "qkv";
    case LinearKind::out:
      return "out";
    case LinearKind::up:
      return "up";
    case LinearKind::down:
      return "down";
    case LinearKind::lm_head:
      return "lm_head";
  }
  return "?";
}

void LinearRunner::forward(Backend& be, LinearSite, Tensor y, const Tensor& x, const Tensor& W,
                           const Tensor* bias, bool accumulate) {
  be.matmul(y, x, W, /*trans_a=*/false, /*trans_b=*/true, 1.0f, accumulate ? 1.0f : 0.0f, bias);
}

void LinearRunner::backward(Backend& be, LinearSite, Tensor dx, const Tensor& dW, const Tensor& db,
                            const Tensor& dy, const Tensor& x, const Tensor& W) {
  be.linear_grads(dx, dW, dy, x, W);
  if (!db.empty()) be.sum_rows(db, dy, /*accumulate=*/true);
}

namespace {
class InferenceLinear final : public LinearRunner {
 public:
  void forward(Backend& be, LinearSite, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override {
    be.linear_rows(y, x, W, bias, accumulate);
  }
};
}  // namespace

LinearRunner& inference_linear() {
  static InferenceLinear runner;
  return runner;
}

LinearRunner& fp32_linear() {
  static LinearRunner plain;
  return plain;
}

}  // namespace llmrun
