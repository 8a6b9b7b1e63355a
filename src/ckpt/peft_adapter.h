#pragma once
// Hugging Face PEFT's LoRA adapter directory: adapter_config.json (peft_type LORA, r,
// lora_alpha, lora_dropout, target_modules, ...) and adapter_model.safetensors, whose tensors
// are named base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r].
// Written at the end of a LoRA run, read by finetune.init_adapter, `serve --lora` and
// `convert --merge-lora`.
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/hf_weights.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace llmrun {

// Writes DIR atomically from the adapters' tensors (PEFT names, full shapes).
void write_peft_adapter(const std::filesystem::path& dir, const std::vector<HfTensor>& tensors,
                        const LoraSection& sec, const ModelConfig& cfg,
                        const std::string& base_model);

// adapter_config.json as llmrun uses it: rank, alpha, dropout and targets. UserError naming
// the file and the field for anything else than a plain LoRA adapter llmrun can apply
// (DoRA, rsLoRA, per-module ranks, bias training, modules_to_save).
LoraSection read_peft_config(const std::filesystem::path& dir);

// The adapter of DIR into `store` (laid out by lora_layout for `sec`): its config must agree
// with sec's rank, alpha and targets, and every tensor must be there with the full shape.
void load_peft_adapter(Backend& be, BucketStore& store, const std::filesystem::path& dir,
                       const LoraSection& sec);

}  // namespace llmrun
