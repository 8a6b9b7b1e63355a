#pragma once
// A Hugging Face BPE tokenizer: added and special tokens split out first, then normalizer +
// pre-tokenizer (data/pre_tokenizer.h), then rank-ordered merges within each word. Two
// vocabularies:
//  - byte-level (GPT-2, Llama 3, Qwen 2, Mistral-Nemo): words start as bytes;
//  - text, converted from SentencePiece (Llama 1/2, Mistral 7B, TinyLlama): words start as
//    characters, "▁" stands for a space, a character missing from the vocabulary becomes its
//    "<0xAB>" byte tokens (byte_fallback) or the unknown token; data/text_decoder.h decodes.
// encode() gives the ids of tokenizers' encode(text, add_special_tokens=False); the
// post-processor's leading special tokens (Llama's <s>) are bos_ids(), for callers to place.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/pre_tokenizer.h"
#include "data/text_decoder.h"
#include "data/tokenizer.h"

namespace llmrun {

// What tokenizer_config.json beside a tokenizer.json says about its special tokens.
struct SpecialTokenConfig {
  std::string eos_token, bos_token;  // "" if unknown
  // transformers' Llama-family tokenizers rebuild the post-processor from these: false drops
  // the template's <s>, true puts bos_token first. Unset: the template decides.
  std::optional<bool> add_bos_token;
};

// A tokenizer from tokenizer.json text (`where` names it in errors): the 256-token byte-level
// one gives a ByteLevelTokenizer, any other BPE a BpeTokenizer. load_tokenizer reads the file
// and tokenizer_config.json; GGUF files carry the text in tokenizer.huggingface.json.
std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& where,
                                               const SpecialTokenConfig& special = {});

class BpeTokenizer final : public Tokenizer {
 public:
  // `text` is the tokenizer.json file content (kept to save it back unchanged), `where`
  // names it in errors.
  BpeTokenizer(const std::string& text, const std::string& where,
               const SpecialTokenConfig& special = {});
  ~BpeTokenizer() override;

  // UserError if `text` is not valid UTF-8 (it names the byte offset).
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_bytes(int32_t id) const override;
  std::vector<int32_t> bos_ids() const override { return bos_ids_; }
  int32_t vocab_size() const override { return static_cast<int32_t>(id_bytes_.size()); }
  int32_t eos_id() const override { return eos_id_; }
  nlohmann::ordered_json tokenizer_json() const override;
  std::string tokenizer_json_text() const override { return source_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip = false, rstrip = false;  // also take in the white space before / after it
  };
  void check_token_ids(const nlohmann::json& doc, const std::string& where);
  void load_model(const nlohmann::json& model, const std::string& where);
  void load_text_symbols(const nlohmann::json& model, const std::string& where);
  void load_added_tokens(const nlohmann::json& added, const std::string& where);
  void load_bos(const nlohmann::json& post_processor, const std::string& where);
  void encode_span(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view word, std::vector<int32_t>& out) const;
  std::vector<int32_t> text_symbols(std::string_view word) const;
  const std::string& checked(int32_t id) const;
  void merge_word(std::vector<int32_t>& ids) const;
  const Merge* find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::string source_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<TextDecoder> text_decoder_;  // set: a text vocabulary
  std::unordered_map<std::string, int32_t>
      vocab_;  // raw bytes (byte-level) or text -> id (model vocab only)
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
  int32_t byte_id_[256];  // byte-level: each byte's token; text: its "<0xAB>" token or -1
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool split_before_space_ = false;  // text vocabulary: see encode_word
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;  // longest first, for leftmost-longest matching
  bool added_first_byte_[256] = {};
  std::vector<std::string> id_bytes_;  // the bytes each id adds to a text
  std::vector<std::string> id_text_;   // text vocabulary: each id's token string
  std::vector<int32_t> bos_ids_;
  int32_t eos_id_ = -1;
  uint64_t instance_;  // keys the per-thread word cache
};

}  // namespace llmrun
