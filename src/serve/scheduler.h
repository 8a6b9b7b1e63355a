#pragma once
// Continuous batching: every step, the running sequences advance first (one decode token,
// or the next chunk of an unfinished prefill), then waiting ones are admitted with (chunked)
// prefills while the step's token budget and the sequence limit allow. When the KV pool
// runs dry the most recently admitted running sequence is preempted: its blocks go back and
// it re-queues at the front to be recomputed later (its full blocks usually survive in the
// prefix cache).
//
// Multi-LoRA (--max-loras N, vLLM's meaning): the running sequences use at most N distinct
// adapters (the base model counts as none), so no step holds more. A waiting sequence whose
// adapter would be the N+1st waits at the head of the queue until a running adapter's last
// sequence finishes; admission is first come first served, so nothing behind it overtakes
// it and no adapter starves (vLLM instead admits later requests of running adapters past it).
#include <deque>
#include <vector>

#include "serve/kv_block_manager.h"
#include "serve/sequence.h"

namespace llmrun {

struct SchedulerLimits {
  int max_num_seqs = 64;
  int max_batched_tokens = 512;
  int max_loras = 0;  // distinct LoRA adapters in the running batch at most; 0: no limit
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
  // The most distinct adapters any step has scheduled, and the steps whose admission stopped
  // at a sequence because its adapter would exceed max_loras.
  int max_step_loras() const { return max_step_loras_; }
  int64_t lora_waits() const { return lora_waits_; }

 private:
  void preempt(Sequence* s);
  // Whether admitting s keeps the running batch within max_loras adapters.
  bool adapter_fits(const Sequence* s) const;

  KvBlockManager& kv_;
  SchedulerLimits limits_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  int64_t preemptions_ = 0;
  int max_step_loras_ = 0;
  int64_t lora_waits_ = 0;
};

// The distinct adapters (non-null GenerationParams::lora) of these sequences.
int distinct_adapters(const std::vector<Sequence*>& seqs);

}  // namespace llmrun
