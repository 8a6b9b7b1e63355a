#pragma once
// The inference LinearRunner over quantized weights: each (layer, linear) site maps to the
// block-format matrices it multiplies by (q | k | v and gate | up as stacked parts); the fp32
// weight tensor the block code passes in is not read. Sites without quantized weights fall
// back to the batch-invariant fp32 inference runner. Host memory only (the CPU backend).
//
// A part may hold its inputs reordered (GPTQ act-order, quant/packed_int_weights.h): its
// gather says which input each stored column multiplies (-1: a zero pad), and the activation
// rows are gathered through it before the quantized product. Consecutive parts with the same
// gather share one gathered, quantized copy of x; parts with different gathers (q, k, v
// quantized with different orders) each get their own, writing their own columns of y.
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
  // Column j of a part multiplies input gather[j] (0 where it is -1); empty: the inputs in order.
  using Gather = std::vector<int32_t>;
  // Per site, one gather per part (a site absent here: no part gathers).
  using SiteGathers = std::map<std::pair<int, int>, std::vector<Gather>>;

  // gathers: empty, or one per part.
  void set(LinearSite site, const std::vector<QuantMatrix>& parts,
           const std::vector<Gather>& gathers = {}, const detail::CopyProgress& progress = {});
  // Sets every site of `sites`, then becomes `model`'s linear runner, for inference and for
  // eval's forward (which runs the training path). `progress`: see QuantPlan (a loader drops
  // the file pages of the rows a plan has copied, so file and copy are not both resident).
  void attach(Transformer& model, const SiteParts& sites, const SiteGathers& gathers = {},
              const detail::CopyProgress& progress = {});
  bool has(LinearSite site) const;
  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;
  // Bytes of quantized weights the runner multiplies by.
  size_t weight_bytes() const;

 private:
  // Parts that read x the same way, and the first column of y they write.
  struct Segment {
    Gather gather;
    int64_t first_out = 0;
    QuantPlan plan;
  };
  struct Site {
    int64_t in = 0, out = 0;  // x's and y's widths
    std::vector<Segment> segments;
  };
  std::map<std::pair<int, int>, Site> sites_;
};

}  // namespace llmrun::quant
