#pragma once
// Turns a sequence's generated tokens into the text a client sees, holding back what might
// still turn into a stop string (stops may span tokens and are never emitted) and any
// incomplete UTF-8 character at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace llmrun {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stops);
  // Adds one token; returns the text that is now safe to emit. Sets `stopped` when a stop
  // string completed: the text before it has then been returned, and nothing more will be.
  std::string push(int32_t token, bool& stopped);
  // At the end (no stop string): everything still held back.
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string text_;    // all generated text
  size_t emitted_ = 0;  // bytes of text_ already returned
};

}  // namespace llmrun
