// QuantizedLinear: the per-site quantized plans behind the inference LinearRunner seam.
#include "quant/quantized_linear.h"

#include "model/transformer.h"
#include "util/error.h"

namespace llmrun::quant {

void QuantizedLinear::set(LinearSite site, std::vector<QuantMatrix> parts) {
  sites_.insert_or_assign({site.layer, int(site.kind)}, QuantPlan(parts));
}

void QuantizedLinear::attach(Transformer& model, const SiteParts& sites) {
  for (const auto& [key, parts] : sites) set({key.first, LinearKind(key.second)}, parts);
  model.set_inference_linear(this);
  model.set_linear_runner(this);
}

bool QuantizedLinear::has(LinearSite site) const {
  return sites_.count({site.layer, int(site.kind)}) != 0;
}

size_t QuantizedLinear::weight_bytes() const {
  size_t total = 0;
  for (const auto& [site, plan] : sites_) total += plan.weight_bytes();
  return total;
}

void QuantizedLinear::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x,
                              const Tensor& W, const Tensor* bias, bool accumulate) {
  auto it = sites_.find({site.layer, int(site.kind)});
  if (it == sites_.end()) return inference_linear().forward(be, site, y, x, W, bias, accumulate);
  const QuantPlan& plan = it->second;
  LLMRUN_CHECK(x.cols() == plan.cols() && y.cols() == plan.out() && y.rows() == x.rows(),
               std::string("quantized ") + linear_kind_name(site.kind) + ": x " + x.shape_str() +
                   ", y " + y.shape_str());
  plan.run(x.f32(), x.rows(), y.f32(), y.cols(), bias ? bias->f32() : nullptr, accumulate);
}

}  // namespace llmrun::quant
