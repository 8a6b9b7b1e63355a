// `llmrun convert`: training checkpoints <-> Hugging Face model directories. Both
// directions stream: inputs are mapped, outputs written tensor by tensor, so converting
// never holds the model twice in memory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "tensor/tensor.h"
#include "util/byte_size.h"  // --max-shard-size

namespace llmrun {

// A step dir (or a checkpoint dir's latest) -> a Hugging Face model dir: config.json,
// generation_config.json, weights as `dtype` (f32/bf16/f16) in model.safetensors or, past
// `max_shard_bytes`, model-0000i-of-0000n.safetensors + model.safetensors.index.json, and
// the tokenizer files. Written atomically.
void checkpoint_to_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                      DType dtype, uint64_t max_shard_bytes);

// A Hugging Face model dir -> OUT/step-0000000 (+ OUT/latest): its weights, a fresh optimizer
// (zero moments, step 0) and no data position, ready for checkpoint.resume.
void hf_to_checkpoint(const std::filesystem::path& model_dir, const std::filesystem::path& out);

}  // namespace llmrun
