#pragma once
// The seam through which the model runs its linear layers' GEMMs, so that a numerics
// recipe (FP8: src/fp8) can replace them without touching the block math. The default
// runner is the plain fp32 code; a runner sees which layer and which linear each call is,
// because recipes keep per-tensor state (FP8 scales and amax histories).
#include "backend/backend.h"

namespace llmrun {

// The linear layers a recipe can tell apart: the four GEMMs of a block and the LM head.
enum class LinearKind { qkv, out, up, down, lm_head };
inline constexpr int kLinearKinds = 5;
const char* linear_kind_name(LinearKind k);  // "qkv", "out", "up", "down", "lm_head"

struct LinearSite {
  int layer = 0;  // block index; the LM head uses the number of layers
  LinearKind kind = LinearKind::qkv;
};

class LinearRunner {
 public:
  virtual ~LinearRunner() = default;
  // y = x W^T (+ bias), added to y when `accumulate` (residual projections).
  // x [N, in], W [out, in], y [N, out], bias [out] or null.
  virtual void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
                       const Tensor* bias, bool accumulate);
  // The gradients of forward(): dW += dy^T x, db += sum over rows of dy (when db is not
  // empty), dx = dy W (overwritten).
  virtual void backward(Backend& be, LinearSite site, Tensor dx, const Tensor& dW, const Tensor& db,
                        const Tensor& dy, const Tensor& x, const Tensor& W);
};

// The fp32 runner: exactly the backend's GEMMs.
LinearRunner& fp32_linear();
// The inference runner (generation and serving): forward is the backend's batch-invariant
// linear_rows, so a sequence gets bitwise the same logits alone or in any batch.
LinearRunner& inference_linear();
// `runner`, or the fp32 one when null.
inline LinearRunner& linear_or_fp32(LinearRunner* runner) {
  return runner ? *runner : fp32_linear();
}

}  // namespace llmrun
