#pragma once
// The pre-tokenization half of a Hugging Face byte-level BPE tokenizer: the normalizer
// (none or NFC) and the pre-tokenizer chain (ByteLevel with its GPT-2 regex, Split with a
// Regex or String pattern, Sequence of those) that cut text into the words BPE merges
// within. Regexes run on PCRE2 in UTF + Unicode-property mode with JIT, which reads the
// Oniguruma patterns found in tokenizer.json files (\p{L}, \p{N}, (?i:...), \s+(?!\S)).
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace llmrun {

// One compiled regex; thread-safe to use from several threads at once.
class Regex {
 public:
  // UserError naming `where` if PCRE2 cannot compile the pattern.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each successive non-overlapping match in `text`
  // (byte offsets). Text must be valid UTF-8.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const;

 private:
  bool match_at(std::string_view text, size_t start, size_t* begin, size_t* end) const;
  void* code_;  // pcre2_code_8*
};

template <typename F>
void Regex::for_each_match(std::string_view text, F&& on_match) const {
  size_t pos = 0, b = 0, e = 0;
  while (pos <= text.size() && match_at(text, pos, &b, &e)) {
    if (e == b) {  // an empty match: step one code point on so the scan always advances
      if (b >= text.size()) break;
      size_t n = 1;
      while (b + n < text.size() && (static_cast<unsigned char>(text[b + n]) & 0xC0) == 0x80) ++n;
      pos = b + n;
      continue;
    }
    on_match(b, e);
    pos = e;
  }
}

// The normalizer + pre-tokenizer of a tokenizer.json, as one callable step.
class PreTokenizer {
 public:
  // `doc` is the whole tokenizer.json; UserError naming `where` for anything that is not
  // a byte-level pre-tokenizer this class implements exactly.
  PreTokenizer(const nlohmann::json& doc, const std::string& where);
  ~PreTokenizer();

  // Normalize `text` (NFC when the tokenizer asks for it); UserError on invalid UTF-8 then.
  std::string normalize(std::string_view text) const;
  // Cut normalized `text` (one span between added tokens) into words, calling
  // on_word(word) for each; words are raw UTF-8 bytes (the byte-to-unicode mapping of
  // ByteLevel is applied by the caller's vocabulary, which is stored as raw bytes).
  void split(std::string_view text, const std::function<void(std::string_view)>& on_word) const;

 private:
  struct Step {
    bool remove_matches;  // Split behavior "Removed" (else "Isolated": matches and gaps are words)
    std::shared_ptr<Regex> regex;
  };
  void add(const nlohmann::json& pt, const std::string& where);
  void apply(size_t step, std::string_view text, const std::function<void(std::string_view)>& out) const;

  bool nfc_ = false;
  bool byte_level_ = false;        // a ByteLevel step was seen (required)
  bool add_prefix_space_ = false;  // ByteLevel add_prefix_space, applied before the first step
  std::vector<Step> steps_;
};

}  // namespace llmrun
