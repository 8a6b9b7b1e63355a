#include "ckpt/convert.h"

#include <memory>
#include <string>

#include "cli/commands.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct ConvertArgs {
  std::string input, to, output;
  std::string dtype = "fp32";
  std::string max_shard_size = "2GB";
};

int convert(const ConvertArgs& a) {
  if (a.to == "hf") {
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
  CLI::App* app = root.add_subcommand("convert",
                                      "Convert a training checkpoint to a Hugging Face model dir "
                                      "(--to hf) or back (--to checkpoint)");
  app->add_option("input", args->input,
                  "Checkpoint dir or step dir (--to hf); Hugging Face model dir (--to checkpoint)")
      ->required();
  app->add_option("--to", args->to, "Output kind")
      ->required()
      ->check(CLI::IsMember({"hf", "checkpoint"}));
  app->add_option("output", args->output, "Directory to write (replaced atomically)")->required();
  app->add_option("--dtype", args->dtype, "Weight dtype of a Hugging Face export")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app->add_option("--max-shard-size", args->max_shard_size,
                  "Largest safetensors file of an export, e.g. 2GB, 500MB");
  return {app, [args]() { return convert(*args); }};
}

}  // namespace llmrun::cli
