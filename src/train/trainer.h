#pragma once
#include <functional>

#include "comm/communicator.h"
#include "comm/launcher.h"
#include "recipe/recipe.h"
#include "train/progress.h"

namespace llmrun {

// What the run measured about the machine, for whoever turns step reports into figures.
struct TrainingRunInfo {
  Communicator& world;    // every rank of the run; collectives on it are allowed
  double peak_flops = 0;  // per-rank FLOP/s that MFU is measured against
  int threads = 0;        // backend threads per rank
};

// Lets a caller watch a run without a loop of its own (`llmrun bench train`). Both are
// called on every rank; on_finish after the last step while all ranks are still connected
// (not when a signal stopped the run early).
// on_step returning false ends the run after that step (one rank only: ranks do not agree on
// it; --fp8-check collects a loss curve this way).
struct TrainingObserver {
  std::function<bool(const StepReport&)> on_step;
  std::function<void(const TrainingRunInfo&)> on_finish;
};

// Runs this rank's part of a training job described by a validated recipe: ranks and groups,
// data, model, optimizer, progress line and metrics (rank 0), and the final model directory.
void run_training(const Recipe& recipe, const LaunchEnvironment& env,
                  const TrainingObserver& observer = {});

}  // namespace llmrun
