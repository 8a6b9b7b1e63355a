#pragma once
// Speculative decoding's configuration and per-sequence state. A proposer (n-gram lookup or
// a draft model) guesses up to k next tokens of a decoding sequence; the target model runs
// the sequence's last token and the k guesses in one step (k + 1 query rows of paged
// attention) and keeps the longest prefix its own sampling accepts, plus one token of its own
// (serve/speculative/rejection.h). Back-off: each step, each sequence proposes the number of
// tokens that maximises its expected tokens per second given its measured acceptance and the
// engine's measured step cost (serve/speculative/spec_policy.h), none when plain decoding is
// faster, and nothing is proposed while the batch is large (the step is then compute-bound
// and verification rows cost as much as they save).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "serve/kv_block_manager.h"
#include "serve/speculative/ngram_proposer.h"
#include "serve/speculative/spec_metrics.h"
#include "serve/speculative/spec_policy.h"

namespace llmrun {

class Transformer;
class Tokenizer;

enum class SpecMethod { none, ngram, draft };

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::none;
  int num_tokens = 4;  // k: tokens proposed per step at most
  NgramOptions ngram;
  // vLLM's speculative_disable_by_batch_size: no proposals while this many sequences run.
  int disable_by_batch_size = 8;
  // Per-sequence back-off (spec_policy.h): propose only as many tokens as pay for their
  // verification, given the sequence's acceptance and the measured step cost. false: always
  // propose num_tokens (the exactness tests, which must verify at every step).
  bool adaptive = true;
  // A draft-model sequence that stopped proposing has no free signal of when its drafts
  // would be accepted again: it probes once after this many plain steps, doubled after each
  // probe that does not turn it back on (n-gram sequences score shadow proposals instead).
  int backoff_steps = 16;
  // Tests only: the back-off's cost model fixed instead of measured on this machine: plain
  // step seconds by batch size ([0] unused), seconds per proposal row and per draft token.
  std::vector<double> fixed_step_seconds;
  double fixed_row_seconds = 0, fixed_draft_seconds = 0;
  // The draft model (method draft): same tokenizer as the target, its own KV pool.
  Transformer* draft_model = nullptr;
  // The acceptance test of a proposal: accept when u * q < p (u uniform in [0,1), p and q the
  // target's and the proposer's probability of the token; q = 1 for an n-gram guess). Only the
  // statistical test replaces it, to prove it can tell a wrong rule from the right one.
  std::function<bool(double p, double q, double u)> accept;
  bool enabled() const { return method != SpecMethod::none && num_tokens > 0; }
};

// "ngram" / "draft" / "none" (the --speculative values).
SpecMethod parse_spec_method(const std::string& s);

// One sequence's speculation state (in Sequence, engine thread only).
struct SpecState {
  std::vector<int32_t> draft;  // proposed tokens waiting for this step's verification
  // The draft model's distribution at each proposed position (method draft), [k][vocab].
  std::vector<std::vector<double>> draft_probs;
  // Decaying counts of proposal outcomes (verified, or shadow n-gram guesses scored against
  // the target's token): the acceptance estimate of spec_policy.h.
  double hits = 0, trials = 0;
  int32_t shadow = -1;  // the n-gram guess for position shadow_at, made while not proposing
  int shadow_at = -1;
  bool speculating = false;  // it proposed at its last decode step
  int backoff = 0;           // draft model: plain steps left before the next probe
  int pauses = 0;            // draft model: probes since it last stayed on (each pause longer)
  int cost_skips = 0;        // plain steps though well accepted (the cost estimate said no)
  // The draft model's KV of this sequence (method draft): its blocks, and the tokens whose k/v
  // they hold (positions 0 .. size-1), compared with the sequence's tokens at each proposal.
  SeqBlocks draft_kv;
  std::vector<int32_t> draft_history;
};

// The number of tokens a decoding sequence proposes this step, at most k_cap (0: a plain
// step). Scores the sequence's last shadow guess against `tokens`, asks choose_length, and
// keeps the back-off state and its counters (`m`). base_rows: the step's decoding sequences.
int plan_proposal(SpecState& st, const SpeculativeConfig& c, const std::vector<int32_t>& tokens,
                  int k_cap, int base_rows, const StepCostModel& cost, SpecDecodeMetrics& m);
// Outcome of a verification of `proposed` tokens, `accepted` of them kept; `rejected`: the
// target refused token `accepted` (false when the sequence finished first).
void record_verification(SpecState& st, int proposed, int accepted, bool rejected);

}  // namespace llmrun
