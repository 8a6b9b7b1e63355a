// The recipe's data section, owned by src/data (which reads the sources it names); src/recipe
// reads it from YAML.
#pragma once
#include <string>
#include <vector>

namespace llmrun {

struct DataSource {
  // A text file, a directory of text files (read recursively), or the prefix of an indexed
  // dataset written by `llmrun data prepare` (PREFIX.bin + PREFIX.idx).
  std::string path;
  double weight = 1.0;
};

struct DataSection {
  // "byte" (the built-in 256-token byte-level BPE) or a path to a Hugging Face tokenizer.json.
  std::string tokenizer = "byte";
  std::vector<DataSource> train;
  std::vector<DataSource> valid;  // validation sources (same forms); empty: no validation
};

}  // namespace llmrun
