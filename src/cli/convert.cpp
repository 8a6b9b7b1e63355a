#include "ckpt/convert.h"

#include <memory>
#include <string>

#include "ckpt/gguf_model.h"
#include "ckpt/hf_quantized.h"
#include "ckpt/lora_merge.h"
#include "cli/commands.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct ConvertArgs {
  std::string input, to, output;
  std::string dtype = "fp32";
  std::string max_shard_size = "2GB";
  std::string quantize = "f16";
  std::string merge_lora, base;  // --merge-lora ADAPTER --base HF_DIR --to hf OUT
};

int convert(const ConvertArgs& a) {
  if (!a.merge_lora.empty() || !a.base.empty()) {
    // One positional: the output dir.
    if (a.merge_lora.empty() || a.base.empty() || a.to != "hf" || a.input.empty() ||
        !a.output.empty())
      throw UserError("convert: --merge-lora ADAPTER --base HF_DIR --to hf OUT (all four)");
    const DType dtype = a.dtype == "bf16"   ? DType::bf16
                        : a.dtype == "fp16" ? DType::f16
                                            : DType::f32;
    merge_lora_adapter(a.merge_lora, a.base, a.input, dtype);
    return 0;
  }
  if (a.input.empty() || a.output.empty())
    throw UserError("convert: INPUT and OUTPUT are required");
  if (a.to == "gguf") {
    hf_to_gguf(a.input, a.output, parse_gguf_quant(a.quantize));
  } else if (a.to == "hf" && is_gguf_file(a.input)) {
    gguf_to_hf(a.input, a.output);
  } else if (a.to == "hf" && is_hf_quantized_dir(a.input)) {
    hf_quantized_to_hf(a.input, a.output);
  } else if (a.to == "hf") {
    const DType dtype = a.dtype == "bf16"   ? DType::bf16
                        : a.dtype == "fp16" ? DType::f16
                                            : DType::f32;
    checkpoint_to_hf(a.input, a.output, dtype,
                     parse_byte_size(a.max_shard_size, "--max-shard-size"));
  } else {
    hf_to_checkpoint(a.input, a.output);
  }
  return 0;
}
}  // namespace

Command add_convert_command(CLI::App& root) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* app =
      root.add_subcommand("convert",
                          "Convert a training checkpoint to a Hugging Face model dir "
                          "(--to hf) or back (--to checkpoint); a Hugging Face model "
                          "dir to a GGUF file (--to gguf) or a GGUF file back (--to hf)");
  app->add_option(
      "input", args->input,
      "Checkpoint dir or step dir, or a GGUF file or GPTQ/AWQ dir (--to hf, dequantizing); "
      "Hugging Face model dir "
      "(--to checkpoint, --to gguf); with --merge-lora the output dir");
  app->add_option("--to", args->to, "Output kind")
      ->required()
      ->check(CLI::IsMember({"hf", "checkpoint", "gguf"}));
  app->add_option("output", args->output,
                  "Directory (or .gguf file) to write (replaced atomically)");
  app->add_option("--merge-lora", args->merge_lora,
                  "PEFT LoRA adapter dir to merge into --base (writes a Hugging Face model dir)");
  app->add_option("--base", args->base, "Hugging Face model dir the adapter was trained on");
  app->add_option("--dtype", args->dtype, "Weight dtype of a Hugging Face export")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app->add_option("--quantize", args->quantize,
                  "Weight type of a GGUF export: f32, f16, q8_0, q5_1, q5_0, q4_1, q4_0, "
                  "q5_k_m or q4_k_m (llama.cpp's mixes: Q5_K/Q4_K, Q6_K for the head and half "
                  "the attn_v/ffn_down)")
      ->check(CLI::IsMember(
          {"f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "q5_k_m", "q4_k_m"}));
  app->add_option("--max-shard-size", args->max_shard_size,
                  "Largest safetensors file of an export, e.g. 2GB, 500MB");
  return {app, [args]() { return convert(*args); }};
}

}  // namespace llmrun::cli
