// propose_ngram: a backwards scan for the latest earlier occurrence of the sequence's tail.
#include "serve/speculative/ngram_proposer.h"

#include <algorithm>

namespace llmrun {

std::vector<int32_t> propose_ngram(const std::vector<int32_t>& tokens, const NgramOptions& o,
                                   int max_tokens) {
  const int L = static_cast<int>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(o.ngram_max, L - 1); n >= std::max(o.ngram_min, 1); --n) {
    const int32_t* tail = tokens.data() + (L - n);
    // An occurrence ending at e - 1 (e < L) is followed by tokens[e .. L): the latest one has
    // the most recent context, which is what repetitive output usually continues.
    for (int e = L - 1; e >= n; --e) {
      if (!std::equal(tail, tail + n, tokens.data() + (e - n))) continue;
      // Copy what followed, continuing into the proposal itself once it reaches the end: a
      // period shorter than max_tokens (a repeated line, a loop) still yields a full proposal.
      std::vector<int32_t> out;
      for (int i = 0; i < max_tokens; ++i)
        out.push_back(e + i < L ? tokens[size_t(e + i)] : out[size_t(e + i - L)]);
      return out;
    }
  }
  return {};
}

}  // namespace llmrun
