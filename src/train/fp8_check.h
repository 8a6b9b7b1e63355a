#pragma once
// `llmrun train RECIPE --fp8-check N`: does FP8 track full precision on this recipe? Trains N
// steps with precision.fp8 enabled and N steps without, from the same initial state (the
// recipe's initialisation, or the checkpoint checkpoint.resume names), writing nothing.
#include <cstdint>

#include "comm/launcher.h"
#include "recipe/recipe.h"

namespace llmrun {

// Exit status of a check whose loss difference exceeds the tolerance.
inline constexpr int kFp8CheckFailed = 3;

// Prints both loss curves side by side and the largest relative difference
// |loss_fp8 - loss_fp32| / loss_fp32 on stdout. Returns 0 when it is <= tolerance, else
// prints an error line and returns kFp8CheckFailed. UserError for a multi-rank recipe (both
// trainings run in this one process) or fewer than `steps` steps left in the recipe.
int run_fp8_check(const Recipe& recipe, const LaunchEnvironment& env, int64_t steps, double tolerance);

}  // namespace llmrun
