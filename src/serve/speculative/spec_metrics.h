#pragma once
// Speculative decoding counters for /metrics, under vLLM's names (v1 engine:
// spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens and
// _num_accepted_tokens_per_pos{position}) plus the two ratios vLLM's log derives from them:
// the draft acceptance rate (accepted / draft tokens) and the mean acceptance length
// (1 + accepted / drafts: tokens a verification step yields on average). llmrun's own: the
// back-off's decode steps without a proposal and its switches from proposing to not.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace llmrun {

class SpecDecodeMetrics {
 public:
  // One verification: `proposed` tokens of which the first `accepted` were kept.
  void record(int proposed, int accepted);
  // Prometheus text with this prefix ("llmrun:"); nothing before the first draft when
  // speculation is off (num_spec_tokens 0).
  std::string render(const std::string& prefix, int num_spec_tokens) const;

  // A decoding step at which the back-off proposed nothing; `backoff`: the sequence proposed
  // at its previous step (speculation was switched off for it).
  void record_skip(bool backoff);

  int64_t drafts() const;
  int64_t skipped_steps() const;
  int64_t backoffs() const;
  int64_t draft_tokens() const;
  int64_t accepted_tokens() const;

 private:
  mutable std::mutex mu_;
  int64_t drafts_ = 0, draft_tokens_ = 0, accepted_ = 0, skipped_ = 0, backoffs_ = 0;
  std::vector<int64_t> accepted_per_pos_, drafts_per_pos_;
};

}  // namespace llmrun
