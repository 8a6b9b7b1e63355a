#pragma once
// The planner's view of a recipe.
#include "plan/layout.h"
#include "recipe/recipe.h"

namespace llmrun {

TrainingShape training_shape(const Recipe& r);
TrainingLayout training_layout(const Recipe& r);

// `llmrun train`'s check before launch: throws UserError (the same message `llmrun plan`
// prints) when memory.budget_bytes > 0 and a rank is predicted not to fit it.
void check_recipe_memory_budget(const Recipe& r);

}  // namespace llmrun
