// The resolved recipe as stored in a checkpoint's index.json, and the check that decides
// whether a run may resume from a checkpoint written under another recipe.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "recipe/recipe.h"

namespace llmrun {

nlohmann::json model_config_json(const ModelConfig& c);
// UserError "WHERE: model.KEY ..." for a missing or mistyped field.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

nlohmann::json recipe_json(const Recipe& r);

// Throws UserError naming every field that makes the checkpoint unusable for `now` (model
// shape, architecture, vocabulary, tokenizer); logs every other difference (lr, steps,
// batch, cadence...) as a warning, since those are legitimate changes on resume.
void check_resume_compatible(const nlohmann::json& saved_recipe, const Recipe& now,
                             const std::string& checkpoint);

}  // namespace llmrun
