#include "serve/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace llmrun {

void Scheduler::preempt(Sequence* s) {
  s->spec.draft.clear();
  kv_.release(s->kv);
  s->computed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), s));
  waiting_.push_front(s);
  ++preemptions_;
}

void Scheduler::remove(Sequence* s) {
  auto r = std::find(running_.begin(), running_.end(), s);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), s);
  if (w != waiting_.end()) waiting_.erase(w);
  kv_.release(s->kv);
}

int distinct_adapters(const std::vector<Sequence*>& seqs) {
  std::vector<const ServedLora*> seen;
  for (const Sequence* s : seqs) {
    const ServedLora* a = s->params.lora.get();
    if (a != nullptr && std::find(seen.begin(), seen.end(), a) == seen.end()) seen.push_back(a);
  }
  return static_cast<int>(seen.size());
}

bool Scheduler::adapter_fits(const Sequence* s) const {
  const ServedLora* a = s->params.lora.get();
  if (limits_.max_loras <= 0 || a == nullptr) return true;
  for (const Sequence* r : running_)
    if (r->params.lora.get() == a) return true;
  return distinct_adapters(running_) < limits_.max_loras;
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> out;
  int budget = limits_.max_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    // A speculative proposal runs whole or not at all: it is dropped (the sequence decodes
    // one token) rather than cut by the token budget or paid for with a preemption.
    std::vector<int32_t>& draft = s->spec.draft;
    if (!draft.empty() &&
        (static_cast<int>(s->tokens.size() + draft.size()) - s->computed > budget ||
         !kv_.ensure(s->kv, static_cast<int>(s->tokens.size() + draft.size()))))
      draft.clear();
    const int len = static_cast<int>(s->tokens.size() + draft.size());
    const int remaining = len - s->computed;
    const int n = std::min(remaining, budget);
    if (n <= 0) continue;
    bool fits = kv_.ensure(s->kv, s->computed + n);
    while (!fits) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == s) break;
      fits = kv_.ensure(s->kv, s->computed + n);
    }
    if (!fits) break;  // s itself went back to waiting; everything after it too
    out.push_back({s, s->computed, n, s->computed + n == len, static_cast<int>(draft.size())});
    budget -= n;
  }
  // Admitting while preempting would only thrash: the freed blocks belong to the preempted.
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    Sequence* s = waiting_.front();
    if (!adapter_fits(s)) {  // first come first served: it waits, and so does everyone after it
      ++lora_waits_;
      break;
    }
    const int len = static_cast<int>(s->tokens.size());
    // At least the last token is always computed: its logits pick the next one.
    s->computed = kv_.acquire_prefix(s->kv, s->tokens, len - 1, s->prefix_seed);
    const int n = std::min(len - s->computed, budget);
    if (!kv_.ensure(s->kv, s->computed + n)) {
      kv_.release(s->kv);
      s->computed = 0;
      break;
    }
    if (!s->admitted_once) {
      s->cached_prompt_tokens = std::min(s->computed, s->prompt_len);
      s->admitted_once = true;
    }
    waiting_.pop_front();
    running_.push_back(s);
    out.push_back({s, s->computed, n, s->computed + n == len});
    budget -= n;
  }
  std::vector<Sequence*> stepped;
  for (const ScheduledChunk& c : out) stepped.push_back(c.seq);
  max_step_loras_ = std::max(max_step_loras_, distinct_adapters(stepped));
  return out;
}

}  // namespace llmrun
