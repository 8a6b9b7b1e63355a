// src/data owns the training data path: tokenizers (Hugging Face tokenizer.json),
// text corpora, indexed datasets, samplers and dataset blending.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace llmrun {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // UserError for an id outside the vocabulary (ids can come from API requests).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The bytes token `id` adds inside a longer text, for streaming (no leading space is
  // stripped, unlike decode of a text-vocabulary tokenizer); UserError like decode.
  virtual std::string token_bytes(int32_t id) const { return decode({id}); }
  // Special tokens the tokenizer's post-processor puts before a text (Llama's <s>): what
  // transformers' encode(text) adds with add_special_tokens=True. Empty for most.
  virtual std::vector<int32_t> bos_ids() const { return {}; }
  // A prompt's ids as transformers and vLLM tokenize it: bos_ids() + encode(text), unless
  // the text already starts with them (a chat template that writes <s> itself).
  std::vector<int32_t> encode_prompt(std::string_view text) const;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when the tokenizer has none
  // The Hugging Face tokenizer.json document describing this tokenizer (ordered, so
  // the saved file keeps the usual field order and the vocabulary in id order).
  virtual nlohmann::ordered_json tokenizer_json() const = 0;
  // The tokenizer.json file text save() writes. A tokenizer loaded from a file gives that
  // file back unchanged, so a saved model carries exactly the tokenizer it was trained with.
  virtual std::string tokenizer_json_text() const { return tokenizer_json().dump(2) + "\n"; }

  // Write tokenizer.json and tokenizer_config.json into `dir` (which must exist), so
  // that transformers' AutoTokenizer loads the directory. model_max_length <= 0
  // leaves that field out.
  void save(const std::filesystem::path& dir, int64_t model_max_length = 0) const;
};

// GPT-2's byte-level BPE with no merges: token id b is byte b, 256 tokens, no
// special tokens. Any byte string encodes, and decoding is the exact inverse.
class ByteLevelTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return 256; }
  int32_t eos_id() const override { return -1; }
  nlohmann::ordered_json tokenizer_json() const override;
};

// A special token's text in tokenizer_config.json: `key` holds a string or {"content": ...};
// "" when it is absent.
std::string special_token_text(const nlohmann::json& tokenizer_config, const char* key);

// GPT-2's bytes_to_unicode: the UTF-8 text of the character that stands for byte b
// in byte-level BPE vocabularies (printable bytes stand for themselves, the others
// for U+0100 + n, e.g. ' ' -> "Ġ").
std::string byte_to_unicode(uint8_t b);

// Load a tokenizer from a tokenizer.json file or a directory holding one: the 256-token
// byte-level one gives a ByteLevelTokenizer, any other byte-level BPE a BpeTokenizer
// (data/bpe_tokenizer.h); other tokenizer types are a UserError.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir_or_file);

}  // namespace llmrun
