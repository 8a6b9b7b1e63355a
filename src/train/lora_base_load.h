#pragma once
// Loads a LoRA run's frozen base held in bf16 (finetune.base_dtype: bf16) from model.from one
// bucket at a time, so that loading never holds more than one bucket in fp32.
#include "backend/backend.h"
#include "ckpt/hf_weight_files.h"
#include "model/lora_frozen_base.h"

namespace llmrun {

void load_bf16_base(Backend& be, const std::vector<BucketLayout>& layout, Bf16FrozenBase& base,
                    const HfWeightFiles& files);

}  // namespace llmrun
