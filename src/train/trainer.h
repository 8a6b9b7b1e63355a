#pragma once
#include "comm/launcher.h"
#include "recipe/recipe.h"

namespace llmrun {

// Runs this rank's part of a training job described by a validated recipe: ranks and groups,
// data, model, optimizer, progress line and metrics (rank 0), and the final model directory.
void run_training(const Recipe& recipe, const LaunchEnvironment& env);

}  // namespace llmrun
