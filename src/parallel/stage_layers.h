#pragma once
// Which transformer blocks each pipeline stage runs: `pp_layers` when given (one count per
// virtual stage, in virtual-stage order, summing to the model's layers), otherwise an even
// split over stages * V virtual stages whose first (layers mod stages*V) virtual stages run
// one block more. Stage p runs the blocks of virtual stages p, P + p, 2P + p, ...
#include <vector>

namespace llmrun {

// Block count of every virtual stage (size stages * virtual_stages). Throws UserError when
// pp_layers has the wrong length, a count below 1 or the wrong sum, or when there are fewer
// layers than virtual stages.
std::vector<int> virtual_stage_layers(int layers, int stages, int virtual_stages,
                                      const std::vector<int>& pp_layers = {});

// Global block indices of chunk `chunk` of `stage`, in order.
std::vector<int> chunk_blocks(const std::vector<int>& per_virtual_stage, int stages, int stage,
                              int chunk);

}  // namespace llmrun
