#pragma once
// Prompt-lookup (n-gram) proposals for speculative decoding: the sequence's last n tokens
// (n from ngram_max down to ngram_min) are looked up earlier in its own prompt and output, and
// the tokens that followed the most recent earlier occurrence are proposed as the next ones.
// Pays on text that repeats its context (code edits, summaries quoting the prompt); proposes
// nothing when no n-gram recurs, so plain text costs no verification.
#include <cstdint>
#include <vector>

namespace llmrun {

struct NgramOptions {
  int ngram_min = 1, ngram_max = 4;
};

// Up to max_tokens proposed continuations of `tokens` (empty when no n-gram of the allowed
// lengths recurs). The longest matching n-gram wins; among its occurrences the most recent.
std::vector<int32_t> propose_ngram(const std::vector<int32_t>& tokens, const NgramOptions& o,
                                   int max_tokens);

}  // namespace llmrun
