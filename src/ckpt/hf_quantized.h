#pragma once
// Hugging Face model dirs quantized by GPTQ (AutoGPTQ / transformers, checkpoint format
// "gptq") or AWQ (AutoAWQ, version "gemm"): config.json's `quantization_config` names the
// method, and each quantized linear is stored as `qweight`, `qzeros`, `scales` (and GPTQ's
// `g_idx`) in place of `weight` (layouts: quant/packed_int_weights.h).
//
// `generate/serve/eval/bench DIR` run such dirs on the CPU backend: every packed linear is
// requantized into Q4_0 (symmetric 4-bit GPTQ, exactly), Q4_1 (AWQ, asymmetric 4-bit GPTQ; the
// f16 min rounds, see packed_int_weights.h) or Q8_0 / F32 (8-bit GPTQ, exactly) blocks and
// runs through quant::QuantizedLinear; linears left unquantized (lm_head,
// modules_to_not_convert) keep their fp32 weights. `convert DIR --to hf OUT` writes the
// dequantized model in fp32.
//
// Accepted: Llama-family models (Llama, Mistral, Qwen 2, Phi-3) without experts; GPTQ bits 4
// or 8, any group_size whose groups are whole blocks of 32 inputs (or -1), with or without
// desc_act (act-order: a linear whose g_idx splits a block of 32 inputs is stored with its
// inputs sorted by group and gathers x through that order, see quant/quantized_linear.h);
// AWQ bits 4 with zero points. Anything else is refused, naming the key.
#include <filesystem>
#include <string>

#include "ckpt/model_dir.h"
#include "model/config.h"

namespace llmrun {

// True for a directory whose config.json has a quantization_config object.
bool is_hf_quantized_dir(const std::filesystem::path& dir);
// Such a dir's method, "GPTQ" or "AWQ" (UserError for a quantization_config llmrun does not
// read, naming the key).
std::string hf_quantized_method(const std::filesystem::path& dir);

// The model of `cfg` with its weights from `dir` (tokenizer and eos ids are load_model_dir's
// part). dequantize = true fills fp32 parameters instead (any backend; for --to hf).
LoadedModel load_hf_quantized_weights(const std::filesystem::path& dir, const ModelConfig& cfg,
                                      Backend& backend, bool dequantize);

// A GPTQ/AWQ dir -> a Hugging Face model dir in fp32.
void hf_quantized_to_hf(const std::filesystem::path& dir, const std::filesystem::path& out);

}  // namespace llmrun
