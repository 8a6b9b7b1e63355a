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

namespace llmrun {
class Transformer;
}

namespace llmrun::quant {

class QuantizedLinear final : public LinearRunner {
 public:
  // Each site's parts, keyed by (layer, int(kind)).
  using SiteParts = std::map<std::pair<int, int>, std::vector<QuantMatrix>>;

  void set(LinearSite site, std::vector<QuantMatrix> parts);
  // Sets every site of `sites`, then becomes `model`'s linear runner, for inference and for
  // eval's forward (which runs the training path).
  void attach(Transformer& model, const SiteParts& sites);
  bool has(LinearSite site) const;
  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;
  // Bytes of quantized weights the runner multiplies by.
  size_t weight_bytes() const;

 private:
  std::map<std::pair<int, int>, QuantPlan> sites_;
};

}  // namespace llmrun::quant
