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

int plan_proposal(SpecState& st, const SpeculativeConfig& c, const std::vector<int32_t>& tokens,
                  int k_cap, int base_rows, const StepCostModel& cost, SpecDecodeMetrics& m) {
  if (st.shadow_at >= 0 && static_cast<int>(tokens.size()) > st.shadow_at)
    observe_acceptance(st, 1, tokens[size_t(st.shadow_at)] == st.shadow ? 1 : 0);
  st.shadow_at = -1;
  if (k_cap <= 0) return 0;
  if (!c.adaptive) return k_cap;
  const bool draft = c.method == SpecMethod::draft;
  int k =
      std::min(k_cap, choose_length(acceptance_estimate(st), c.num_tokens, base_rows, cost, draft));
  if (k == 0 && acceptance_estimate(st) >= 0.7 && ++st.cost_skips >= 16) {
    // Well accepted but held back by the measured cost: the row cost is only measured on
    // speculative steps, so one slow outlier could keep it off for good. Re-measure.
    k = k_cap;
  }
  if (k > 0) {
    st.pauses = 0;
    st.cost_skips = 0;
  } else if (draft) {
    if (st.speculating) {
      st.backoff = c.backoff_steps << std::min(st.pauses, 6);
      ++st.pauses;
    } else if (st.backoff > 0) {
      --st.backoff;
    } else {
      k = k_cap;  // the probe (also a fresh sequence's first decode step)
    }
  } else {
    // The lookup is nearly free; scored at the next step, it tells when to switch back on.
    const std::vector<int32_t> g = propose_ngram(tokens, c.ngram, 1);
    if (!g.empty()) {
      st.shadow = g[0];
      st.shadow_at = static_cast<int>(tokens.size());
    }
  }
  if (k == 0) m.record_skip(st.speculating);
  st.speculating = k > 0;
  return k;
}

void record_verification(SpecState& st, int proposed, int accepted, bool rejected) {
  if (proposed <= 0) return;
  observe_acceptance(st, accepted + (rejected ? 1 : 0), accepted);
}

}  // namespace llmrun
