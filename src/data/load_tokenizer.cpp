#include <optional>

#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_io.h"
#include "util/json_file.h"

namespace llmrun {

namespace {

using json = nlohmann::json;

bool is_type(const json& doc, const char* key, const char* type) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_object() && it->value("type", "") == type;
}

bool null_or_absent(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it == doc.end() || it->is_null();
}

// Why `doc` is not exactly the byte-level tokenizer ByteLevelTokenizer implements,
// or nothing when it is. Anything that would change which ids a text gets
// (normalizer, prefix space, merges, extra tokens) disqualifies it.
std::optional<std::string> byte_level_mismatch(const json& doc) {
  if (!doc.is_object() || !is_type(doc, "model", "BPE")) return "its model is not BPE";
  const json& model = doc["model"];
  const json vocab = model.value("vocab", json());
  const json merges = model.value("merges", json::array());
  if (!vocab.is_object()) return "its model has no vocab";
  if (!merges.is_array() || !merges.empty() || vocab.size() != 256)
    return "it has " + std::to_string(vocab.size()) + " vocab entries and " +
           std::to_string(merges.size()) + " merges";
  if (doc.contains("added_tokens") && !doc["added_tokens"].empty()) return "it has added tokens";
  if (!null_or_absent(doc, "normalizer")) return "it has a normalizer";
  if (!is_type(doc, "pre_tokenizer", "ByteLevel") ||
      doc["pre_tokenizer"].value("add_prefix_space", false))
    return "its pre-tokenizer is not ByteLevel without add_prefix_space";
  if (!is_type(doc, "decoder", "ByteLevel")) return "its decoder is not ByteLevel";
  for (int b = 0; b < 256; ++b) {
    const std::string key = byte_to_unicode(static_cast<uint8_t>(b));
    auto it = vocab.find(key);
    if (it == vocab.end() || !it->is_number_integer() || it->get<int64_t>() != b)
      return "its vocab does not map \"" + key + "\" to byte id " + std::to_string(b);
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir_or_file) {
  std::filesystem::path path = dir_or_file;
  if (std::filesystem::is_directory(path)) {
    path /= "tokenizer.json";
    // Older Llama/Mistral repos may carry only SentencePiece's binary model.
    if (!std::filesystem::exists(path) && std::filesystem::exists(dir_or_file / "tokenizer.model"))
      throw UserError(
          path.string() +
          " is missing; the directory has only tokenizer.model (SentencePiece), "
          "which llmrun does not read: save the fast tokenizer once with transformers "
          "(AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)) to write tokenizer.json");
  }
  const std::string text = read_file(path);
  // transformers keeps the special tokens' names (and Llama's add_bos_token) in
  // tokenizer_config.json beside it.
  SpecialTokenConfig special;
  const auto config = path.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config)) {
    const json c = read_json_file(config);
    special.eos_token = special_token_text(c, "eos_token");
    special.bos_token = special_token_text(c, "bos_token");
    if (c.is_object() && c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      special.add_bos_token = c["add_bos_token"].get<bool>();
  }
  return tokenizer_from_json(text, path.string(), special);
}

std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& where,
                                               const SpecialTokenConfig& special) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError(where + ": not valid JSON: " + e.what());
  }
  bool byte_level = false;
  try {
    byte_level = !byte_level_mismatch(doc);
  } catch (
      const json::exception&) {  // not even shaped like a byte-level BPE: let BPE loading say why
  }
  if (byte_level) return std::make_unique<ByteLevelTokenizer>();
  return std::make_unique<BpeTokenizer>(text, where, special);
}

}  // namespace llmrun
