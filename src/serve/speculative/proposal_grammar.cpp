// ProposalGrammar: a constrained sequence's grammar walked through its proposal (see header).
#include "serve/speculative/proposal_grammar.h"

#include <algorithm>

namespace llmrun {

bool ProposalGrammar::take(int32_t token) {
  if (ended_) return false;
  if (std::find(ends_.begin(), ends_.end(), token) != ends_.end()) {
    // The engine ends the sequence on it (the matcher never takes end tokens). Allowed where
    // the mask allows it: once the output is complete, or where its bytes fit the grammar
    // (a stop_token_ids entry that is an ordinary token).
    if (!m_.accepting() && !structured::ConstraintMatcher(m_).accept(token)) return false;
    ended_ = true;
    return true;
  }
  if (!m_.accept(token)) return false;
  if (budget_ > 0) --budget_;  // (a negative budget would mean no limit)
  ended_ = m_.complete();
  return true;
}

void cut_to_grammar(std::vector<int32_t>& draft, ProposalGrammar g) {
  size_t keep = 0;
  while (keep < draft.size() && g.take(draft[keep])) ++keep;
  draft.resize(keep);
}

}  // namespace llmrun
