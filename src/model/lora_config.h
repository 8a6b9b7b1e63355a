#pragma once
// The recipe's `finetune` section (LoRA, Hu et al. 2021, in Hugging Face PEFT's terms): which
// linears get low-rank adapters, their rank and scale, and how the frozen base is held. The
// target names are Hugging Face module names, checked per architecture (lora_target_names).
#include <string>
#include <vector>

#include "model/config.h"

namespace llmrun {

struct LoraSection {
  bool enabled = false;  // finetune.method: lora
  int rank = 8;
  double alpha = 16;                 // y = W x + (alpha / rank) B A dropout(x)
  double dropout = 0;                // on the adapter's input only (PEFT's lora_dropout)
  std::vector<std::string> targets;  // Hugging Face module names (q_proj, c_attn, ...)
  std::string base_dtype = "fp32";   // fp32 | bf16: how the frozen base weights are held
  std::string init_adapter;          // a PEFT adapter dir whose weights start training
  float scale() const { return float(alpha / rank); }
};

// The module names finetune.targets may list for this architecture, in block order.
std::vector<std::string> lora_target_names(const ModelConfig& cfg);

}  // namespace llmrun
