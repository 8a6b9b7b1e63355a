#pragma once
// Continuous batching: every step, the running sequences advance first (one decode token,
// or the next chunk of an unfinished prefill), then waiting ones are admitted with (chunked)
// prefills while the step's token budget and the sequence limit allow. When the KV pool
// runs dry the most recently admitted running sequence is preempted: its blocks go back and
// it re-queues at the front to be recomputed later (its full blocks usually survive in the
// prefix cache).
#include <deque>
#include <vector>

#include "serve/kv_block_manager.h"
#include "serve/sequence.h"

namespace llmrun {

struct SchedulerLimits {
  int max_num_seqs = 64;
  int max_batched_tokens = 512;
};

// Tokens [start, start + n) of seq run this step; `samples` when they reach its end, so the
// last row's logits pick its next token. `draft`: the last `draft` of them are speculative
// proposals (seq->spec.draft) past its real tokens, verified by their rows' logits.
struct ScheduledChunk {
  Sequence* seq;
  int start, n;
  bool samples;
  int draft = 0;
};

class Scheduler {
 public:
  Scheduler(KvBlockManager& kv, SchedulerLimits limits) : kv_(kv), limits_(limits) {}

  void add(Sequence* s) { waiting_.push_back(s); }
  std::vector<ScheduledChunk> schedule();
  // Removes s from the queues and returns its blocks.
  void remove(Sequence* s);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* s);

  KvBlockManager& kv_;
  SchedulerLimits limits_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  int64_t preemptions_ = 0;
};

}  // namespace llmrun
