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

// Prints both loss curves side by side on stdout with, per step, the relative difference
// |loss_fp8 - loss_fp32| / loss_fp32 and the same for the two curves' trailing means over
// `window` steps (fewer at the start). The curves are compared by the latter: once the two
// runs' weights differ, single-batch losses scatter by a few percent either way (on the small
// Llama: up to 5.8% at one step while the 10-step means stay within 1.4%), which is noise, not
// divergence; window 1 compares single steps. Returns 0 when the largest windowed difference
// is <= tolerance, else prints an error line and returns kFp8CheckFailed. UserError for a
// multi-rank recipe (both trainings run in this one process) or fewer than `steps` steps left.
int run_fp8_check(const Recipe& recipe, const LaunchEnvironment& env, int64_t steps,
                  double tolerance, int64_t window);

}  // namespace llmrun
