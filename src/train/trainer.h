#pragma once
#include "recipe/recipe.h"

namespace llmrun {

// Runs a whole single-rank training job described by a validated recipe: data, model,
// optimizer, progress line and metrics, and the final model directory.
void run_training(const Recipe& recipe);

}  // namespace llmrun
