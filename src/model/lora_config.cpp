#include "model/lora_config.h"

namespace llmrun {

std::vector<std::string> lora_target_names(const ModelConfig& cfg) {
  // PEFT matches a target against the end of the module path, so GPT-2's c_proj names both
  // projections (attn.c_proj, mlp.c_proj) unless qualified.
  if (cfg.arch == Arch::gpt2) return {"c_attn", "c_proj", "c_fc", "attn.c_proj", "mlp.c_proj"};
  if (cfg.phi3) return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

}  // namespace llmrun
