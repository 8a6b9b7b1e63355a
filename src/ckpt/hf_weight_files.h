// The weight files of a Hugging Face model directory: one model.safetensors, or shards
// named by model.safetensors.index.json's weight_map. Files are mapped, not read.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace llmrun {

struct ModelConfig;

class HfWeightFiles {
 public:
  // UserError naming the directory when it has neither layout, or when the index is
  // malformed or names a shard that is missing.
  explicit HfWeightFiles(const std::filesystem::path& dir);
  explicit HfWeightFiles(SafetensorsFile single);

  // The file holding `name`, or nullptr.
  const SafetensorsFile* find(const std::string& name) const;
  // For messages: "DIR/model.safetensors" or "DIR/model.safetensors.index.json".
  const std::string& source() const { return source_; }
  // Every tensor name in the files, sorted.
  std::vector<std::string> names() const;

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index in files_
};

// Tensors in the files that the config does not explain are refused: a config.json with fewer
// layers (or a narrower shape family) than the weights would otherwise run silently as part
// of the model. UserError naming the first such tensor and, for layers, how many the weights
// hold. Buffers that transformers used to save (rotary inv_freq, GPT-2's causal-mask
// "attn.bias"/"attn.masked_bias") and a separate lm_head.weight beside tied embeddings are
// not weights of the model and pass. set_ignore_extra_weights(true) (the CLI's
// --ignore-extra-weights) turns the refusal into a warning.
void check_weights_explained(const HfWeightFiles& files, const ModelConfig& cfg);
void set_ignore_extra_weights(bool ignore);

}  // namespace llmrun
