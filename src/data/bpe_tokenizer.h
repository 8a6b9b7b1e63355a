#pragma once
// A Hugging Face byte-level BPE tokenizer (GPT-2, Llama 3, Qwen 2, Mistral-Nemo): added and
// special tokens split out first, then normalizer + pre-tokenizer (data/pre_tokenizer.h),
// then rank-ordered merges within each word. encode() gives the ids of
// tokenizers' encode(text, add_special_tokens=False); post-processor templates (BOS) are
// not applied, so callers decide where document boundaries go.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/pre_tokenizer.h"
#include "data/tokenizer.h"

namespace llmrun {

class BpeTokenizer final : public Tokenizer {
 public:
  // `text` is the tokenizer.json file content (kept to save it back unchanged), `where`
  // names it in errors, `eos_token` is tokenizer_config.json's eos_token ("" if unknown).
  BpeTokenizer(const std::string& text, const std::string& where, const std::string& eos_token = "");
  ~BpeTokenizer() override;

  // UserError if `text` is not valid UTF-8 (it names the byte offset).
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
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
  };
  void load_model(const nlohmann::json& model, const std::string& where);
  void load_added_tokens(const nlohmann::json& added, const std::string& where);
  void encode_span(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::vector<int32_t>& ids) const;
  const Merge* find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::string source_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unordered_map<std::string, int32_t> vocab_;  // raw bytes -> id (model vocab only)
  std::unordered_map<uint64_t, Merge> merges_;      // (left id, right id) -> rank, result
  int32_t byte_id_[256];
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;   // longest first, for leftmost-longest matching
  bool added_first_byte_[256] = {};
  std::vector<std::string> id_bytes_;  // what each id decodes to
  int32_t eos_id_ = -1;
  uint64_t instance_;  // keys the per-thread word cache
};

}  // namespace llmrun
