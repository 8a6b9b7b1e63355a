// Hugging Face config.json <-> ModelConfig, for model export, import and serving.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace llmrun {

// The config.json transformers needs to load this model (GPT2LMHeadModel or
// LlamaForCausalLM). eos_token_id < 0 writes null: the tokenizer has no end token,
// and leaving the key out would let transformers' defaults (50256, 2) stop generation
// at an ordinary token.
nlohmann::json hf_config_json(const ModelConfig& c, int eos_token_id = -1);

// Read a config.json document; `source_path` names the file in errors. Missing
// optional keys take transformers' defaults; missing required keys, an unknown
// model_type, or a feature llmrun does not implement (yarn rope scaling, biases in a
// Llama, an untied GPT-2 head, ...) are UserErrors.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& source_path);

// config.json's "rope_scaling" object for `s` (null for none), and back: `where` names the
// file in errors; a type other than linear and llama3 is a UserError.
nlohmann::json rope_scaling_json(const RopeScaling& s);
RopeScaling rope_scaling_from_json(const nlohmann::json& j, const std::string& where);

// model_config_from_hf of dir/config.json (or of the file itself if given one).
ModelConfig load_model_config(const std::filesystem::path& dir);

}  // namespace llmrun
