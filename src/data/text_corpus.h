// Small corpora held in memory as one token stream: plain files tokenized at start-up,
// and random windows over them. Large corpora go through the indexed dataset instead.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace llmrun {

// Tokenize every file named in `paths` (a directory contributes all regular files
// below it, in path order, so the stream is the same on every machine) and join the
// documents with the tokenizer's end token, or with "\n\n" when it has none.
// UserError if a path does not exist, or if the stream is shorter than min_tokens;
// `what` names the setting in messages, e.g. "data.train".
std::vector<int32_t> load_token_corpus(const std::vector<std::string>& paths, const Tokenizer& tok,
                                       int64_t min_tokens, const std::string& what = "data.train");

// Draws windows of `window` tokens (seq_len + 1: inputs plus shifted targets) at
// seeded uniform offsets. The sequence of offsets depends only on (corpus size,
// window, seed), and position()/seek() let a resumed run continue it exactly.
class WindowSampler {
 public:
  // The corpus must outlive the sampler and hold at least `window` tokens.
  WindowSampler(std::span<const int32_t> corpus, int64_t window, uint64_t seed);

  void next(int32_t* dst);  // copy the next window (window() tokens) into dst
  int64_t window() const { return window_; }
  uint64_t position() const { return drawn_; }  // windows drawn so far
  void seek(uint64_t position);                 // as if `position` windows had been drawn

 private:
  uint64_t next_offset();

  std::span<const int32_t> corpus_;
  int64_t window_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  uint64_t drawn_ = 0;
};

}  // namespace llmrun
