// QuantizedLinear: the per-site quantized plans behind the inference LinearRunner seam.
#include "quant/quantized_linear.h"

#include <omp.h>

#include <algorithm>

#include "model/transformer.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

// xg [n, gather.size()]: row i's column j is x[i, gather[j]], or 0 where gather[j] < 0.
void gather_columns(const float* x, int64_t n, int64_t in, const QuantizedLinear::Gather& gather,
                    float* xg) {
  const int64_t cols = int64_t(gather.size());
#pragma omp parallel for if (n > 1 && n * cols > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float* src = x + i * in;
    float* dst = xg + i * cols;
    for (int64_t j = 0; j < cols; ++j) dst[j] = gather[size_t(j)] >= 0 ? src[gather[size_t(j)]] : 0;
  }
}

}  // namespace

void QuantizedLinear::set(LinearSite site, const std::vector<QuantMatrix>& parts,
                          const std::vector<Gather>& gathers,
                          const detail::CopyProgress& progress) {
  LLMRUN_CHECK(!parts.empty(), "quantized linear: no weight parts");
  LLMRUN_CHECK(gathers.empty() || gathers.size() == parts.size(),
               "quantized linear: one gather per part");
  static const Gather kInOrder;
  auto gather_of = [&](size_t k) -> const Gather& {
    return gathers.empty() ? kInOrder : gathers[k];
  };
  // Every part reads the same x: a part in input order is as wide as x, and a gather reads up
  // to x's last input (act-order's gathers hold each input once).
  auto width = [&](size_t k) {
    const Gather& g = gather_of(k);
    LLMRUN_CHECK(g.empty() || int64_t(g.size()) == parts[k].cols,
                 "quantized linear: a gather is not one entry per stored column");
    int64_t in = g.empty() ? parts[k].cols : 0;
    for (int32_t i : g) in = std::max<int64_t>(in, int64_t(i) + 1);
    return in;
  };
  Site s;
  s.in = width(0);
  for (size_t k = 1; k < parts.size(); ++k)
    LLMRUN_CHECK(width(k) == s.in, "quantized linear: parts read inputs of different widths");
  for (size_t k = 0; k < parts.size();) {
    size_t e = k + 1;
    while (e < parts.size() && gather_of(e) == gather_of(k)) ++e;
    const std::vector<QuantMatrix> run(parts.begin() + int64_t(k), parts.begin() + int64_t(e));
    s.segments.push_back({gather_of(k), s.out, QuantPlan(run, progress)});
    s.out += s.segments.back().plan.out();
    k = e;
  }
  sites_.insert_or_assign({site.layer, int(site.kind)}, std::move(s));
}

void QuantizedLinear::attach(Transformer& model, const SiteParts& sites, const SiteGathers& gathers,
                             const detail::CopyProgress& progress) {
  for (const auto& [key, parts] : sites) {
    auto g = gathers.find(key);
    set({key.first, LinearKind(key.second)}, parts,
        g == gathers.end() ? std::vector<Gather>{} : g->second, progress);
  }
  model.set_inference_linear(this);
  model.set_linear_runner(this);
}

bool QuantizedLinear::has(LinearSite site) const {
  return sites_.count({site.layer, int(site.kind)}) != 0;
}

size_t QuantizedLinear::weight_bytes() const {
  size_t total = 0;
  for (const auto& [key, site] : sites_)
    for (const Segment& seg : site.segments) total += seg.plan.weight_bytes();
  return total;
}

void QuantizedLinear::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x,
                              const Tensor& W, const Tensor* bias, bool accumulate) {
  auto it = sites_.find({site.layer, int(site.kind)});
  if (it == sites_.end()) return inference_linear().forward(be, site, y, x, W, bias, accumulate);
  const Site& s = it->second;
  LLMRUN_CHECK(x.cols() == s.in && y.cols() == s.out && y.rows() == x.rows(),
               std::string("quantized ") + linear_kind_name(site.kind) + ": x " + x.shape_str() +
                   ", y " + y.shape_str());
  const int64_t n = x.rows();
  std::vector<float> gathered;
  for (const Segment& seg : s.segments) {
    const float* xs = x.f32();
    if (!seg.gather.empty()) {
      gathered.resize(size_t(n) * seg.gather.size());
      gather_columns(x.f32(), n, s.in, seg.gather, gathered.data());
      xs = gathered.data();
    }
    seg.plan.run(xs, n, y.f32() + seg.first_out, y.cols(),
                 bias ? bias->f32() + seg.first_out : nullptr, accumulate);
  }
}

}  // namespace llmrun::quant
