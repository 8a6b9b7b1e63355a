#pragma once
// Speculative decoding's configuration and per-sequence state. A proposer (n-gram lookup or
// a draft model) guesses up to k next tokens of a decoding sequence; the target model runs
// the sequence's last token and the k guesses in one step (k + 1 query rows of paged
// attention) and keeps the longest prefix its own sampling accepts, plus one token of its own
// (serve/speculative/rejection.h). Back-off: a sequence whose guesses keep failing stops
// proposing for a while, and nothing is proposed while the batch is large (the step is then
// compute-bound and verification rows cost as much as they save).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "serve/kv_block_manager.h"
#include "serve/speculative/ngram_proposer.h"

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
  // Per-sequence back-off: below this running acceptance rate (an exponential average over
  // its verified proposals) the sequence proposes nothing for `backoff_steps` decode steps,
  // doubled at each further back-off until a proposal does well again.
  double min_acceptance = 0.35;
  int backoff_steps = 24;
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
  double acceptance = 1.0;  // running acceptance rate of its proposals
  int backoff = 0;          // decode steps left without proposals
  int pauses = 0;           // back-offs since its last well-accepted proposal (each one longer)
  // The draft model's KV of this sequence (method draft): its blocks, and the tokens whose k/v
  // they hold (positions 0 .. size-1), compared with the sequence's tokens at each proposal.
  SeqBlocks draft_kv;
  std::vector<int32_t> draft_history;
};

// Updates the back-off state after `accepted` of `proposed` tokens were accepted.
void record_acceptance(SpecState& st, const SpeculativeConfig& c, int proposed, int accepted);
// Tokens to propose now, at most `k`: fewer while the sequence's acceptance is middling (a
// rejected row still costs its compute).
int proposal_length(const SpecState& st, int k);

}  // namespace llmrun
