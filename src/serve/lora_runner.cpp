// LoraBatchRunner: per-row-group LoRA deltas over the base GEMM (see the header).
#include "serve/lora_runner.h"

#include <string>

#include "util/error.h"

namespace llmrun {

LoraBatchRunner::LoraBatchRunner(Transformer& model, int max_tokens, int64_t max_width)
    : model_(model),
      previous_(model.inference_linear_runner()),
      inner_(previous_ ? *previous_ : inference_linear()),
      max_tokens_(max_tokens),
      max_width_(max_width),
      u_(model.backend().allocate(size_t(max_tokens) * size_t(max_width) * 4)) {
  model_.set_inference_linear(this);
}

LoraBatchRunner::~LoraBatchRunner() { model_.set_inference_linear(previous_); }

void LoraBatchRunner::set_step(const std::vector<const ServedLora*>& seq_lora,
                               const std::vector<int32_t>& query_starts) {
  LLMRUN_CHECK(query_starts.size() == seq_lora.size() + 1, "LoraBatchRunner: inconsistent step");
  groups_.clear();
  rows_ = query_starts.back();
  for (size_t s = 0; s < seq_lora.size(); ++s) {
    const ServedLora* lora = seq_lora[s];
    if (lora == nullptr || query_starts[s] == query_starts[s + 1]) continue;
    LLMRUN_CHECK(lora->max_width() <= max_width_,
                 "LoraBatchRunner: adapter '" + lora->name() + "' is wider than its scratch");
    if (!groups_.empty() && groups_.back().lora == lora && groups_.back().end == query_starts[s])
      groups_.back().end = query_starts[s + 1];
    else
      groups_.push_back({query_starts[s], query_starts[s + 1], lora});
  }
}

void LoraBatchRunner::forward(Backend& be, LinearSite site, Tensor y, const Tensor& x,
                              const Tensor& W, const Tensor* bias, bool accumulate) {
  inner_.forward(be, site, y, x, W, bias, accumulate);
  // Only the step's token rows carry adapters (the LM head's gathered rows never do).
  if (x.rows() != rows_) return;
  for (const RowGroup& g : groups_) {
    const ServedLora::Site* s = g.lora->site(site);
    if (s == nullptr) continue;
    const int64_t n = g.end - g.begin, width = s->a.rows();
    const Tensor u = u_.as(DType::f32, {n, width});
    be.linear_rows(u, x.slice(g.begin, g.end), s->a, nullptr, false);
    be.linear_rows(y.slice(g.begin, g.end), u, s->b, nullptr, true);
  }
}

}  // namespace llmrun
