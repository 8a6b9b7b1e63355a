#pragma once
#include <functional>

#include "comm/launcher.h"
#include "recipe/recipe.h"
#include "train/progress.h"

namespace llmrun {

// Sees every step's report as soon as the step is done (e.g. to collect a loss curve);
// returning false ends the run after that step (one rank only: ranks do not agree on it).
using StepObserver = std::function<bool(const StepReport&)>;

// Runs this rank's part of a training job described by a validated recipe: ranks and groups,
// data, model, optimizer, progress line and metrics (rank 0), and the final model directory.
void run_training(const Recipe& recipe, const LaunchEnvironment& env, const StepObserver& observe = {});

}  // namespace llmrun
