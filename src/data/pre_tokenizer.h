#pragma once
// The pre-tokenization half of a Hugging Face BPE tokenizer: the normalizer (NFC, Prepend,
// string Replace, or a Sequence of those) and the pre-tokenizer that cuts text into the
// words BPE merges within: for byte-level vocabularies a chain of ByteLevel (with its GPT-2
// regex) and Split (Regex or String pattern); for text vocabularies converted from
// SentencePiece none (the whole span is one word) or Metaspace. Regexes run on PCRE2 in UTF +
// Unicode-property mode with JIT, which reads the Oniguruma patterns found in tokenizer.json files
// (\p{L}, \p{N}, (?i:...), \s+(?!\S)).
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

// Where Metaspace (pre-tokenizer or decoder) puts its "▁": `prepend_scheme` (tokenizers
// >= 0.19), else the older `add_prefix_space`. UserError naming `where` for another value.
enum class PrependScheme { always, first, never };
PrependScheme metaspace_prepend_scheme(const nlohmann::json& step, const std::string& where);

// The normalizer + pre-tokenizer of a tokenizer.json, as one callable step.
class PreTokenizer {
 public:
  // `doc` is the whole tokenizer.json; UserError naming `where` for anything this class
  // does not implement exactly.
  PreTokenizer(const nlohmann::json& doc, const std::string& where);
  ~PreTokenizer();

  // Whether the chain has a ByteLevel step (the vocabulary is then byte-level).
  bool byte_level() const { return byte_level_; }

  // Apply the normalizer to `text` (one span between added tokens).
  std::string normalize(std::string_view text) const;
  // Cut normalized `text` (one span between added tokens; `at_start` when it begins the
  // input, which Metaspace's prepend_scheme "first" asks) into words, calling on_word(word)
  // for each. Byte-level words are raw UTF-8 bytes (the caller's vocabulary is stored as
  // raw bytes); text-vocabulary words are text with spaces already replaced.
  void split(std::string_view text, bool at_start,
             const std::function<void(std::string_view)>& on_word) const;

 private:
  struct Step {
    bool remove_matches;  // Split behavior "Removed" (else "Isolated": matches and gaps are words)
    std::shared_ptr<Regex> regex;
  };
  struct NormStep {
    enum class Kind { nfc, prepend, replace } kind;
    std::string a, b;  // prepend: a; replace: a -> b
  };
  // Metaspace: spaces become `replacement`, which is prepended to the span (always, or
  // only to the span at the start of the input) unless it starts with one; `split` cuts
  // the span before every replacement.
  struct Metaspace {
    std::string replacement;
    PrependScheme prepend = PrependScheme::always;
    bool split = true;
  };
  void add(const nlohmann::json& pt, const std::string& where);
  void add_normalizer(const nlohmann::json& n, const std::string& where);
  void apply(size_t step, std::string_view text,
             const std::function<void(std::string_view)>& out) const;
  void metaspace_split(std::string_view text, bool at_start,
                       const std::function<void(std::string_view)>& out) const;

  std::vector<NormStep> norm_;
  bool byte_level_ = false;        // a ByteLevel step was seen
  bool add_prefix_space_ = false;  // ByteLevel add_prefix_space, applied before the first step
  std::vector<Step> steps_;
  std::unique_ptr<Metaspace> metaspace_;  // set: the only pre-tokenizer
};

}  // namespace llmrun
