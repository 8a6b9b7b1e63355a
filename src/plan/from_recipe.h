#pragma once
// The planner's view of a recipe: the memory-budget check `llmrun train` runs before launch and
// the predicted memory per rank that `--dry-run` prints after the resolved recipe.
#include <string>

#include "recipe/recipe.h"
#include "recipe/recipe_layout.h"

namespace llmrun {

// `llmrun train`'s check before launch: throws UserError (the same message `llmrun plan`
// prints) when memory.budget_bytes > 0 and a rank is predicted not to fit it.
void check_recipe_memory_budget(const Recipe& r);

// The "  memory_per_rank:" lines that end describe_recipe's `derived:` section: the largest
// pipeline stage's parameters, gradients, optimizer state, activations and peak.
std::string describe_memory_per_rank(const Recipe& r);

}  // namespace llmrun
