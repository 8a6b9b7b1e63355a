#include "data/tokenizer.h"

#include <algorithm>

#include "util/atomic_dir.h"

namespace llmrun {

std::string special_token_text(const nlohmann::json& config, const char* key) {
  const nlohmann::json t =
      config.is_object() ? config.value(key, nlohmann::json()) : nlohmann::json();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return t.is_string() ? t.get<std::string>() : std::string();
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  const std::vector<int32_t> bos = bos_ids();
  if (!bos.empty() &&
      !(ids.size() >= bos.size() && std::equal(bos.begin(), bos.end(), ids.begin())))
    ids.insert(ids.begin(), bos.begin(), bos.end());
  return ids;
}

void Tokenizer::save(const std::filesystem::path& dir, int64_t model_max_length) const {
  write_file_atomic(dir / "tokenizer.json", tokenizer_json_text());
  nlohmann::ordered_json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      // transformers would otherwise "clean up" spaces before punctuation when
      // decoding, and decode(encode(s)) would no longer give back s.
      {"clean_up_tokenization_spaces", false},
  };
  if (model_max_length > 0) config["model_max_length"] = model_max_length;
  write_file_atomic(dir / "tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace llmrun
