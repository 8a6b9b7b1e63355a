// A recipe as the layout rules and the planner see it: the shape of the run (model, batch,
// precision, offload) and how its ranks split the work.
#pragma once
#include "parallel/layout_rules.h"
#include "recipe/recipe.h"

namespace llmrun {

TrainingShape training_shape(const Recipe& r);
TrainingLayout training_layout(const Recipe& r);

}  // namespace llmrun
