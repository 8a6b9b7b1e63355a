#pragma once
// The HTTP side of multi-LoRA serving, as vLLM has it: the adapters' entries in /v1/models,
// and POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
// {"lora_name"}. Errors are ApiErrors: 400 for a bad body or an adapter that cannot be loaded
// (the server keeps serving), 404 for unloading a name not loaded.
#include <nlohmann/json.hpp>
#include <string>

#include "serve/lora_registry.h"

namespace llmrun {

// True for the two adapter routes.
bool is_lora_admin_route(const std::string& target);
// Runs the route on `loras` (null: the server was started without LoRA support: 400) and
// returns vLLM's plain-text success line.
std::string lora_admin(const std::string& target, const std::string& body, LoraRegistry* loras);
// /v1/models entries of the loaded adapters (parent: the base model).
nlohmann::json lora_model_cards(const LoraRegistry& loras, int max_model_len);

}  // namespace llmrun
