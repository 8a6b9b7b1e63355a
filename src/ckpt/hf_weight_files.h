// The weight files of a Hugging Face model directory: one model.safetensors, or shards
// named by model.safetensors.index.json's weight_map. Files are mapped, not read.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace llmrun {

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

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index in files_
};

}  // namespace llmrun
