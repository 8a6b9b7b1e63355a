#pragma once
// The inference LinearRunner over quantized weights: each (layer, linear) site maps to the
// block-format matrices it multiplies by (q | k | v and gate | up as stacked parts); the fp32
// weight tensor the block code passes in is not read. Sites without quantized weights fall
// back to the batch-invariant fp32 inference runner. Host memory only (the CPU backend).
#include <map>
#include <utility>
#include <vector>

#include "model/linear.h"
#include "quant/quant_matmul.h"

namespace llmrun::quant {

class QuantizedLinear final : public LinearRunner {
 public:
  void set(LinearSite site, std::vector<QuantMatrix> parts);
  bool has(LinearSite site) const;
  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;
  // Bytes of quantized weights the runner multiplies by.
  size_t weight_bytes() const;

 private:
  std::map<std::pair<int, int>, QuantPlan> sites_;
};

}  // namespace llmrun::quant
