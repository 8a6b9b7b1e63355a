#pragma once
// `llmrun convert --merge-lora ADAPTER --base HF_DIR --to hf OUT`: a Hugging Face model dir
// whose targeted weights are W + (lora_alpha / r) B A (transposed for GPT-2's Conv1D, as
// PEFT's fan_in_fan_out merge does), every other file of the base copied. Streams one tensor
// at a time.
#include <filesystem>

#include "tensor/tensor.h"

namespace llmrun {

void merge_lora_adapter(const std::filesystem::path& adapter, const std::filesystem::path& base,
                        const std::filesystem::path& out, DType dtype);

}  // namespace llmrun
