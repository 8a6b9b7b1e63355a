#include "parallel/expert_layout.h"

#include <string>

namespace llmrun {

std::optional<LayoutProblem> expert_parallel_problem(const ModelConfig& m,
                                                     const TrainingLayout& l) {
  if (l.ep == 1) return std::nullopt;
  const std::string ep = "ep=" + std::to_string(l.ep);
  if (l.ep < 1) return LayoutProblem{"parallel.ep", "must be at least 1"};
  if (!m.moe.enabled())
    return LayoutProblem{"parallel.ep", ep + " needs a mixture-of-experts model (model.moe): a "
                                             "dense model has no experts to split"};
  if (m.moe.experts % l.ep != 0)
    return LayoutProblem{"parallel.ep", "model.moe.experts=" + std::to_string(m.moe.experts) +
                                            " is not divisible by " + ep +
                                            " (each rank holds the same number of whole experts)"};
  if (l.dp % l.ep != 0)
    return LayoutProblem{"parallel.ep", ep + " must divide dp=" + std::to_string(l.dp) +
                                            " (expert parallelism is carved out of the "
                                            "data-parallel ranks: launch dp x tp x pp x cp ranks "
                                            "with dp a multiple of ep)"};
  return std::nullopt;
}

int local_experts(const MoeConfig& m, int ep) { return m.experts / (ep > 0 ? ep : 1); }

double expert_all_to_all_bytes(const ModelConfig& m, int ep, int64_t tokens) {
  if (ep <= 1 || !m.moe.enabled()) return 0;
  const double rows = double(tokens) * m.moe.top_k * double(ep - 1) / ep;
  return 4.0 * rows * double(m.d_model) * sizeof(float);
}

}  // namespace llmrun
