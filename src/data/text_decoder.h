#pragma once
// The decoder of a tokenizer.json whose vocabulary is text rather than bytes: the BPE
// tokenizers converted from SentencePiece (Llama 1/2, Mistral 7B, TinyLlama, CodeLlama),
// where "▁" stands for a space and "<0x0A>"-style tokens carry raw bytes. It runs the
// Hugging Face decoder chain — a Sequence of Replace, ByteFallback, Fuse and Strip, or
// Metaspace — with the semantics of the Rust `tokenizers` crate.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmrun {

class TextDecoder {
 public:
  // UserError naming `where` for a decoder step this class does not implement.
  TextDecoder(const nlohmann::json& decoder, const std::string& where);

  // tokenizers' decode of these token strings (vocabulary text, added tokens as they are):
  // byte tokens that are not valid UTF-8 become one U+FFFD each, and a leading space is
  // stripped where the chain says so.
  std::string decode(std::vector<std::string> tokens) const;

  // The bytes `token` adds inside a longer text, for streaming: replacements applied and a
  // byte token as its byte, but nothing stripped (a stream's first token follows a prompt).
  std::string piece(const std::string& token) const;

 private:
  enum class Kind { replace, byte_fallback, fuse, strip, metaspace };
  struct Step {
    Kind kind;
    std::string from, to;      // replace; metaspace: from = the replacement character
    int start = 0, stop = 0;   // strip: characters `to` cut from each end
    bool strip_first = false;  // metaspace: drop the replacement in the first token
  };
  void add(const nlohmann::json& step, const std::string& where);

  std::vector<Step> steps_;
};

// The byte a "<0xAB>" token stands for, or -1 when `token` is not one.
int byte_token_value(const std::string& token);

}  // namespace llmrun
