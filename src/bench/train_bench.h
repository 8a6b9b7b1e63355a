#pragma once
// `llmrun bench train`: runs a recipe through the real trainer (run_training with an
// observer, no loop of its own) for warmup + measured steps with checkpoints, validation,
// metrics and the final model switched off, and turns the step reports into throughput,
// MFU/HFU, a step-time breakdown and per-rank memory, gathered to rank 0.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/launcher.h"
#include "recipe/recipe.h"

namespace llmrun {

struct TrainBenchOptions {
  int64_t steps = 10;  // measured steps
  int64_t warmup = 2;  // steps run first and left out of every figure
};

// Runs the benchmark on this rank; the recipe's checkpoint section, metrics file and
// validation data are switched off here, whatever it says.
// Returns the results object on world rank 0 and null on the other ranks.
nlohmann::json run_train_bench(Recipe r, const LaunchEnvironment& env, const TrainBenchOptions& o);

// The human-readable table of a results object.
std::string format_train_bench(const nlohmann::json& r);

}  // namespace llmrun
