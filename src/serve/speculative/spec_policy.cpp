// StepCostModel and the proposal-length choice (see spec_policy.h).
#include "serve/speculative/spec_policy.h"

#include <algorithm>
#include <cmath>

#include "serve/speculative/speculative.h"

namespace llmrun {

namespace {
constexpr int kMaxBatch = 1024;
// Before a proposal row is measured: it costs half a plain step (between a GPU's near-zero
// and a CPU's compute-bound cost), so an unknown machine speculates only on clearly
// repetitive text until it has measured its own verification steps.
constexpr double kPriorRow = 0.5;
// A plain step must be beaten by this margin: at break-even, noise in the estimates would
// switch speculation on and off for nothing.
constexpr double kMargin = 1.03;
constexpr double kDecay = 0.85;
// Below this acceptance no proposal is made whatever the measured costs: a loaded machine can
// measure a proposal row as free (its plain and speculative steps timed under different
// load), and a near-hopeless proposal would then be verified at every step.
constexpr double kMinAcceptance = 0.25;  // per outcome: the estimate follows the last ~7 outcomes

// An EMA with outliers clipped: one step delayed by another process must not decide alone.
void update(double& ema, double x) { ema = ema == 0 ? x : 0.8 * ema + 0.2 * std::min(x, 2 * ema); }
}  // namespace

void StepCostModel::fix(const std::vector<double>& plain_seconds, double row_seconds,
                        double draft_seconds) {
  plain_ = plain_seconds;
  if (!plain_.empty()) plain_[0] = 0;
  row_s_ = row_seconds;
  draft_s_ = draft_seconds;
  fixed_ = true;
}

void StepCostModel::record_step(int base, int rows, double seconds) {
  if (fixed_ || base < 1 || base >= kMaxBatch || rows < base || !(seconds > 0)) return;
  if (plain_.size() <= size_t(base)) plain_.resize(size_t(base) + 1, 0.0);
  if (rows == base) {
    update(plain_[size_t(base)], seconds);
  } else if (plain_[size_t(base)] > 0) {
    // Starting from the prior, so the first sample (perhaps slowed by another process) is
    // one vote of five, not the estimate.
    if (row_s_ == 0) row_s_ = kPriorRow * plain_[size_t(base)];
    update(row_s_, std::max(0.0, seconds - plain_[size_t(base)]) / (rows - base) + 1e-9);
  }
}

void StepCostModel::record_draft(int tokens, double seconds) {
  if (fixed_ || tokens <= 0 || !(seconds > 0)) return;
  update(draft_s_, seconds / tokens);
}

double StepCostModel::plain(int base) const {
  const int n = static_cast<int>(plain_.size());
  if (base < n && plain_[size_t(base)] > 0) return plain_[size_t(base)];
  // Unmeasured batch size: the nearest measured one, scaled by the batch (an upper bound:
  // a plain step grows less than linearly with its batch).
  for (int d = 1; d < n + base; ++d) {
    if (base - d >= 1 && base - d < n && plain_[size_t(base - d)] > 0)
      return plain_[size_t(base - d)] * base / (base - d);
    if (base + d < n && plain_[size_t(base + d)] > 0) return plain_[size_t(base + d)];
  }
  return 1.0;  // nothing measured: in units of one plain step
}

double StepCostModel::step_seconds(int base, int extra) const {
  base = std::max(1, std::min(base, kMaxBatch - 1));
  const double p = plain(base);
  return p + extra * (row_s_ > 0 ? row_s_ : kPriorRow * plain(1));
}

void observe_acceptance(SpecState& st, int trials, int hits) {
  if (trials <= 0) return;
  const double d = std::pow(kDecay, trials);
  st.hits = st.hits * d + hits;
  st.trials = st.trials * d + trials;
}

double acceptance_estimate(const SpecState& st) {
  return (st.hits + 0.5) / (st.trials + 1.0);  // one pseudo-outcome of 0.5: no history, 0.5
}

double expected_tokens(double a, int k) {
  double e = 0, p = 1;
  for (int i = 0; i <= k; ++i, p *= a) e += p;
  return e;
}

int choose_length(double a, int k_max, int base_rows, const StepCostModel& cost, bool draft_model) {
  base_rows = std::max(1, base_rows);
  // base_rows already counts earlier sequences' proposals: the plain step is the sequences'.
  const int base = base_rows;
  // Tokens per second of the step for everyone: the others' rows yield one token each.
  const double plain = base / cost.step_seconds(base, 0);
  // Drafting costs its passes too; unmeasured, a draft token costs a fifth of a plain step.
  const double draft_s = !draft_model               ? 0.0
                         : cost.draft_seconds() > 0 ? cost.draft_seconds()
                                                    : 0.2 * cost.step_seconds(1, 0);
  if (a < kMinAcceptance) return 0;
  int best_k = 0;
  double best = plain * kMargin;
  for (int k = 1; k <= k_max; ++k) {
    const double rate =
        (base - 1 + expected_tokens(a, k)) / (cost.step_seconds(base, k) + k * draft_s);
    if (rate > best) {
      best = rate;
      best_k = k;
    }
  }
  return best_k;
}

}  // namespace llmrun
