#pragma once
// `llmrun plan` under finetune: lora: per pipeline stage, the frozen base (whole on every
// data-parallel rank, no gradients or optimizer state) and the adapters' parameters,
// gradients and AdamW moments under the recipe's ZeRO stage, from the same layouts the trainer
// builds (model_layout, lora_layout).
#include <string>

#include "recipe/recipe.h"

namespace llmrun {

// The "LoRA memory per rank" section; empty without finetune.
std::string lora_memory_text(const Recipe& r);

}  // namespace llmrun
