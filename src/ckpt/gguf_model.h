#pragma once
// Models as GGUF files, with llama.cpp's tensor names and metadata keys:
//   `convert MODEL_DIR --to gguf OUT.gguf --quantize
//   f32|f16|q8_0|q5_1|q5_0|q4_1|q4_0|q5_k_m|q4_k_m` (hf_to_gguf), `generate/serve/eval/bench
//   FILE.gguf` (load_model_dir hands GGUF files to load_gguf_model), `convert FILE.gguf --to hf
//   OUT_DIR` (gguf_to_hf, dequantizing).
// Architectures: llama (Llama 2/3, Mistral; q/k rows in llama.cpp's interleaved RoPE order,
// permuted on the way in and out), qwen2 (NeoX RoPE, q/k/v biases) and gpt2.
#include <filesystem>
#include <string>

#include "ckpt/model_dir.h"

namespace llmrun {

enum class GgufQuant { f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q5_k_m };
GgufQuant parse_gguf_quant(const std::string& text);  // UserError on other text

// True for a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

// A Hugging Face model dir -> one GGUF file (written atomically). Tensors whose rows are not
// whole blocks of the chosen type fall back as llama.cpp's quantizer does (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, then F16); 1-D tensors (norms, biases) and GPT-2's position table
// stay F32.
void hf_to_gguf(const std::filesystem::path& model_dir, const std::filesystem::path& out,
                GgufQuant quant);

// Loads a GGUF model. The linear layers (and the LM head) keep their quantized blocks and run
// through quant::QuantizedLinear; norms, biases and embedding tables are dequantized to fp32.
// dequantize = true expands every tensor to fp32 instead (for --to hf). CPU backend only.
LoadedModel load_gguf_model(const std::filesystem::path& file, Backend& backend,
                            bool dequantize = false);

// A GGUF file -> a Hugging Face model dir in fp32.
void gguf_to_hf(const std::filesystem::path& file, const std::filesystem::path& out);

}  // namespace llmrun
