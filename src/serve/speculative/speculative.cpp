// The --speculative values and the per-sequence back-off (see speculative.h).
#include "serve/speculative/speculative.h"

#include <algorithm>
#include <cmath>

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
  if (2 * accepted >= proposed) st.pauses = 0;
  if (st.acceptance < c.min_acceptance) {
    st.backoff = c.backoff_steps << std::min(st.pauses, 6);
    ++st.pauses;
    // Come back undecided: one good verification keeps it on, one bad one backs off again.
    st.acceptance = c.min_acceptance + 0.1;
  }
}

int proposal_length(const SpecState& st, int k) {
  // The expected run of accepted tokens is about a / (1 - a) for acceptance a; one more so a
  // good run is not cut short.
  const double a = std::min(st.acceptance, 0.95);
  return std::max(1, std::min(k, static_cast<int>(std::floor(a / (1 - a))) + 1));
}

}  // namespace llmrun
