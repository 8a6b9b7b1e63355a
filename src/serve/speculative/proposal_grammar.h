#pragma once
// Structured outputs under speculation (as vLLM combines them): a constrained sequence's
// proposal must stay inside its grammar. ProposalGrammar is a copy of the sequence's matcher
// advanced through the proposal as it is made, so the sequence's own matcher moves only over
// the tokens verification keeps. An n-gram guess is cut before the first token the grammar
// refuses (the guess is a function of the context alone, so the cut leaves the rejection test
// exact); a draft model draws each token from its distribution masked the way the target's
// row will be masked there, and that masked q is what the rejection test divides by
// (a token dropped after it was drawn would bias the output).
#include <cstdint>
#include <vector>

#include "serve/structured/token_mask.h"

namespace llmrun {

class ProposalGrammar {
 public:
  // `ends`: the tokens that end the sequence (allowed once the output is a whole sentence);
  // `budget`: tokens the sequence may still generate before the first proposed one.
  ProposalGrammar(const structured::ConstraintMatcher& m, std::vector<int32_t> ends, int64_t budget)
      : m_(m), ends_(std::move(ends)), budget_(budget) {}
  // Masks a proposer's logits row for the next proposed token as the engine masks the
  // target's row at that position; false when no token is allowed (stop proposing).
  bool mask(float* logits, int vocab) { return m_.mask_logits(logits, vocab, budget_, ends_); }
  // Advances over a proposed token; false (nothing changed) when the grammar refuses it.
  bool take(int32_t token);
  // The last token taken ends the sequence (an end token, or a complete sentence): nothing
  // may be proposed after it.
  bool ended() const { return ended_; }

 private:
  structured::ConstraintMatcher m_;
  std::vector<int32_t> ends_;
  int64_t budget_;
  bool ended_ = false;
};

// Keeps the longest prefix of `draft` the grammar accepts, up to and including a token that
// ends the sequence.
void cut_to_grammar(std::vector<int32_t>& draft, ProposalGrammar g);

}  // namespace llmrun
