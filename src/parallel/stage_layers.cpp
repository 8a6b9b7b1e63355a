#include "parallel/stage_layers.h"

#include <numeric>
#include <string>

#include "util/error.h"

namespace llmrun {

std::vector<int> virtual_stage_layers(int layers, int stages, int virtual_stages,
                                      const std::vector<int>& pp_layers) {
  const int total = stages * virtual_stages;
  if (!pp_layers.empty()) {
    if (static_cast<int>(pp_layers.size()) != total)
      throw UserError(
          "parallel.pp_layers has " + std::to_string(pp_layers.size()) +
          " entries; it needs one block count per virtual stage: pp x virtual_stages = " +
          std::to_string(total));
    for (int n : pp_layers)
      if (n < 1)
        throw UserError("parallel.pp_layers: every virtual stage needs at least one block, got " +
                        std::to_string(n));
    const int sum = std::accumulate(pp_layers.begin(), pp_layers.end(), 0);
    if (sum != layers)
      throw UserError("parallel.pp_layers sums to " + std::to_string(sum) +
                      " blocks but model.layers is " + std::to_string(layers));
    return pp_layers;
  }
  if (layers < total)
    throw UserError("pp x virtual_stages = " + std::to_string(total) +
                    " pipeline stages but the model has only " + std::to_string(layers) +
                    " layers (each stage needs at least one)");
  std::vector<int> out(total, layers / total);
  for (int v = 0; v < layers % total; ++v) ++out[v];
  return out;
}

std::vector<int> chunk_blocks(const std::vector<int>& per_virtual_stage, int stages, int stage,
                              int chunk) {
  const int v = chunk * stages + stage;
  LLMRUN_CHECK(v >= 0 && v < static_cast<int>(per_virtual_stage.size()),
               "virtual stage out of range");
  const int first = std::accumulate(per_virtual_stage.begin(), per_virtual_stage.begin() + v, 0);
  std::vector<int> out;
  for (int i = 0; i < per_virtual_stage[v]; ++i) out.push_back(first + i);
  return out;
}

}  // namespace llmrun
