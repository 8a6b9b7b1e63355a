#pragma once
// When speculation pays, per sequence and step. A verification step of k + 1 rows costs more
// than a plain decode row (how much depends on the machine: nearly nothing where a step is
// memory-bound, 1.5-3x on a CPU running a cache-resident model), and it yields 1 + a + a^2 +
// ... + a^k tokens on average for a per-token acceptance a. StepCostModel measures the step
// time by query rows as the engine runs; choose_length picks the k with the most tokens per
// second, 0 (plain decoding) when no k beats it. The acceptance estimate comes from the
// sequence's verifications and, while it is not proposing, from "shadow" n-gram proposals:
// the lookup is still made (it costs microseconds) and scored against the token the target
// then produces, so a sequence turns speculation back on as soon as its text starts to
// repeat, without paying a verification to find out.
#include <cstdint>
#include <vector>

namespace llmrun {

struct SpecState;

class StepCostModel {
 public:
  // A step whose chunks were all decode rows: `base` sequences, `rows` rows in all (base plus
  // their proposals). Plain steps (rows == base) measure the plain step time at that batch
  // size; speculative ones the marginal cost of a proposal row, one slope for every k, so
  // that each verification refines the estimate for all proposal lengths.
  void record_step(int base, int rows, double seconds);
  // A drafting pass (draft model) that produced `tokens` proposal tokens.
  void record_draft(int tokens, double seconds);
  // Estimated seconds of a decode step of `base` sequences plus `extra` proposal rows.
  double step_seconds(int base, int extra) const;
  // Seconds per drafted token (0 until a drafting pass was measured).
  double draft_seconds() const { return draft_s_; }
  // Fixed plain step seconds by batch size ([0] unused), seconds per proposal row and per
  // draft token, never updated: tests that must not depend on this machine's timing.
  void fix(const std::vector<double>& plain_seconds, double row_seconds, double draft_seconds);

 private:
  double plain(int base) const;
  std::vector<double> plain_;  // [base]: EMA of a plain step's time, 0 = not measured
  double row_s_ = 0;           // EMA of a proposal row's marginal time, 0 = not measured
  double draft_s_ = 0;
  bool fixed_ = false;
};

// Adds verification (or shadow) outcomes to the sequence's decaying acceptance counts.
void observe_acceptance(SpecState& st, int trials, int hits);
// The sequence's per-token acceptance estimate (0.5 before any outcome).
double acceptance_estimate(const SpecState& st);
// Expected tokens a verification of k proposals yields at per-token acceptance a.
double expected_tokens(double a, int k);
// The proposal length (0..k_max) with the most tokens per second for one sequence in a step
// of `base_rows` decode rows (the other sequences' rows plus this one's own).
int choose_length(double a, int k_max, int base_rows, const StepCostModel& cost, bool draft_model);

}  // namespace llmrun
