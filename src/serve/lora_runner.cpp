// LoraBatchRunner: per-row-group LoRA deltas over the base GEMM (see the header).
#include "serve/lora_runner.h"

#include <omp.h>

#include <optional>
#include <string>

#include "util/error.h"

namespace llmrun {

namespace {

// A step's deltas of one GEMM smaller than this (multiply-adds over all its row groups) run
// on the calling thread. Each delta is two small products per adapter (decode at 16 sequences
// of a 256-wide model: 4 rows x 48 x 256), and the CPU backend gives a product above ~131k
// multiply-adds an OpenMP parallel region of its own. On the loaded 2-core VM a region costs
// far more than such a product (the other thread must be scheduled before the region ends):
// measured there, the deltas took as long as the base GEMMs with a region per product.
// Below this size the whole delta (~1 ms single-threaded) is cheaper than one region.
constexpr int64_t kSerialMacs = int64_t(1) << 22;

// While alive, OpenMP parallel regions on this thread run with one thread (no team is woken).
// The CPU backend's kernels compute every output element the same way at any thread count,
// so the results are unchanged; other backends do not use OpenMP for their kernels.
class SerialRegions {
 public:
  SerialRegions() : saved_(omp_get_max_active_levels()) { omp_set_max_active_levels(0); }
  ~SerialRegions() { omp_set_max_active_levels(saved_); }
  SerialRegions(const SerialRegions&) = delete;
  SerialRegions& operator=(const SerialRegions&) = delete;

 private:
  int saved_;
};

}  // namespace

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
  if (x.rows() != rows_ || groups_.empty()) return;
  int64_t macs = 0;
  for (const RowGroup& g : groups_)
    if (const ServedLora::Site* s = g.lora->site(site))
      macs += (g.end - g.begin) * s->a.rows() * (s->a.cols() + s->b.rows());
  if (macs == 0) return;
  std::optional<SerialRegions> serial;
  if (be.device() == Device::cpu && macs < kSerialMacs) serial.emplace();
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
