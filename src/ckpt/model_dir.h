// src/ckpt owns what goes to disk: safetensors I/O and Hugging Face model directories.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "model/transformer.h"

namespace llmrun {

// Writes a Hugging Face model directory (config.json, generation_config.json,
// model.safetensors in fp32 with Hugging Face names and layouts, tokenizer.json) atomically:
// into a temporary sibling first, fsynced, then renamed over `dir`.
void save_model_dir(const std::string& dir, Transformer& model, const Tokenizer& tokenizer);

struct LoadedModel {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Tokenizer> tokenizer;
  // generation_config.json's eos_token_id (one id or a list; Llama 3 Instruct lists
  // <|eot_id|> beside <|end_of_text|>): tokens that end generation, as transformers and
  // vLLM stop on them. Empty when the file or the key is absent.
  std::vector<int32_t> eos_token_ids;
  // What the model's tensors point into and its linear runner, when they are not the model's
  // own (a GGUF file's quantized weights: ckpt/gguf_model.h).
  std::shared_ptr<void> keep_alive;
};

// Reads a Hugging Face model directory (GPT-2, Llama, Mistral or Qwen 2 config;
// F32/F16/BF16 weights, or GPTQ/AWQ: ckpt/hf_quantized.h), or a GGUF file (load_gguf_model).
// dequantize: quantized weights are expanded into fp32 parameters (convert --to hf).
LoadedModel load_model_dir(const std::string& dir, Backend& backend, bool dequantize = false);

// "GGUF", "GPTQ" or "AWQ" for a model whose weights run on the CPU backend only (llmrun has
// no CUDA kernels for their quantized formats), else "" (it runs on any backend).
std::string cpu_only_model_format(const std::string& dir);

}  // namespace llmrun
