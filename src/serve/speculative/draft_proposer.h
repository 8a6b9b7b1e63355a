#pragma once
// Draft-model proposals for speculative decoding: a smaller model with the target's
// tokenizer runs in the same engine, with its own paged KV pool and model runner, and drafts
// k tokens per decoding sequence autoregressively (k batched steps over every proposing
// sequence). Each draft token is drawn with the sequence's own sampling parameters from the
// draft's distribution q, which is kept for the target's rejection test; greedy sequences
// draft the draft model's argmax.
#include <memory>
#include <vector>

#include "model/transformer.h"
#include "serve/kv_block_manager.h"
#include "serve/model_runner.h"
#include "serve/sequence.h"
#include "serve/speculative/proposal_grammar.h"

namespace llmrun {

struct DraftLimits {
  int max_num_seqs = 64, max_batched_tokens = 512, max_model_len = 0, block_size = 16;
  int sample_vocab = 0;  // the tokenizer's vocabulary: columns a draft token may be
};

class DraftProposer {
 public:
  DraftProposer(Transformer& draft, const DraftLimits& limits);

  // Proposes up to want[i] tokens for seqs[i] into its spec.draft (and spec.draft_probs for a
  // sampled sequence). A sequence whose draft KV cannot be grown proposes nothing.
  // grammars[i] (empty, or null for an unconstrained sequence): the sequence's structured-
  // output grammar, which masks every draft row and takes every drafted token; drafting stops
  // where it allows nothing or the sequence would end.
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int>& want,
               const std::vector<ProposalGrammar*>& grammars = {});
  // Gives back a finished or preempted sequence's draft KV blocks.
  void release(Sequence& s);
  int blocks_in_use() const { return kv_.num_referenced(); }

 private:
  Transformer& model_;
  DraftLimits lim_;
  KvBlockManager kv_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace llmrun
