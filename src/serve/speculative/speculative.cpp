// The --speculative values and the per-sequence back-off (see speculative.h).
#include "serve/speculative/speculative.h"

#include "util/error.h"

namespace llmrun {

SpecMethod parse_spec_method(const std::string& s) {
  if (s == "none" || s.empty()) return SpecMethod::none;
  if (s == "ngram") return SpecMethod::ngram;
  if (s == "draft") return SpecMethod::draft;
  throw UserError("--speculative must be ngram, draft or none, got '" + s + "'");
}

void record_acceptance(SpecState& st, const SpeculativeConfig& c, int proposed, int accepted) {
  if (proposed <= 0) return;
  st.acceptance = 0.7 * st.acceptance + 0.3 * double(accepted) / proposed;
  if (st.acceptance < c.min_acceptance) {
    st.backoff = c.backoff_steps;
    // Come back undecided: one good verification keeps it on, one bad one backs off again.
    st.acceptance = c.min_acceptance + 0.1;
  }
}

}  // namespace llmrun
