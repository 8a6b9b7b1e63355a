// SpecDecodeMetrics: counting verifications and rendering them (see the header).
#include "serve/speculative/spec_metrics.h"

#include <sstream>

namespace llmrun {

void SpecDecodeMetrics::record(int proposed, int accepted) {
  if (proposed <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++drafts_;
  draft_tokens_ += proposed;
  accepted_ += accepted;
  if (accepted_per_pos_.size() < size_t(proposed)) {
    accepted_per_pos_.resize(size_t(proposed), 0);
    drafts_per_pos_.resize(size_t(proposed), 0);
  }
  for (int i = 0; i < proposed; ++i) {
    ++drafts_per_pos_[size_t(i)];
    if (i < accepted) ++accepted_per_pos_[size_t(i)];
  }
}

void SpecDecodeMetrics::record_skip(bool backoff) {
  std::lock_guard<std::mutex> lock(mu_);
  ++skipped_;
  if (backoff) ++backoffs_;
}

int64_t SpecDecodeMetrics::skipped_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}
int64_t SpecDecodeMetrics::backoffs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backoffs_;
}
int64_t SpecDecodeMetrics::drafts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return drafts_;
}
int64_t SpecDecodeMetrics::draft_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draft_tokens_;
}
int64_t SpecDecodeMetrics::accepted_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

std::string SpecDecodeMetrics::render(const std::string& prefix, int num_spec_tokens) const {
  if (num_spec_tokens <= 0) return "";
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  auto head = [&](const std::string& name, const char* type, const char* help) {
    o << "# HELP " << prefix << name << " " << help << "\n# TYPE " << prefix << name << " " << type
      << "\n";
  };
  head("spec_decode_num_drafts_total", "counter", "Verification steps with a proposal.");
  o << prefix << "spec_decode_num_drafts_total " << drafts_ << "\n";
  head("spec_decode_num_draft_tokens_total", "counter", "Proposed tokens verified.");
  o << prefix << "spec_decode_num_draft_tokens_total " << draft_tokens_ << "\n";
  head("spec_decode_num_accepted_tokens_total", "counter", "Proposed tokens accepted.");
  o << prefix << "spec_decode_num_accepted_tokens_total " << accepted_ << "\n";
  head("spec_decode_num_accepted_tokens_per_pos_total", "counter",
       "Proposed tokens accepted, by position in the proposal (0 = first).");
  for (int i = 0; i < num_spec_tokens; ++i)
    o << prefix << "spec_decode_num_accepted_tokens_per_pos_total{position=\"" << i << "\"} "
      << (size_t(i) < accepted_per_pos_.size() ? accepted_per_pos_[size_t(i)] : 0) << "\n";
  head("spec_decode_draft_acceptance_rate", "gauge", "Accepted / proposed tokens.");
  o << prefix << "spec_decode_draft_acceptance_rate "
    << (draft_tokens_ ? double(accepted_) / double(draft_tokens_) : 0.0) << "\n";
  head("spec_decode_mean_acceptance_length", "gauge",
       "Tokens one verification step yields on average: 1 + accepted / drafts.");
  o << prefix << "spec_decode_mean_acceptance_length "
    << (drafts_ ? 1.0 + double(accepted_) / double(drafts_) : 0.0) << "\n";
  head("spec_decode_num_skipped_steps_total", "counter",
       "Decode steps of a sequence at which the back-off proposed nothing.");
  o << prefix << "spec_decode_num_skipped_steps_total " << skipped_ << "\n";
  head("spec_decode_num_backoffs_total", "counter",
       "Times the back-off stopped a proposing sequence's proposals.");
  o << prefix << "spec_decode_num_backoffs_total " << backoffs_ << "\n";
  head("spec_decode_per_position_acceptance_rate", "gauge",
       "Accepted / proposed tokens at each position of the proposal.");
  for (int i = 0; i < num_spec_tokens; ++i) {
    const bool any = size_t(i) < drafts_per_pos_.size() && drafts_per_pos_[size_t(i)] > 0;
    o << prefix << "spec_decode_per_position_acceptance_rate{position=\"" << i << "\"} "
      << (any ? double(accepted_per_pos_[size_t(i)]) / double(drafts_per_pos_[size_t(i)]) : 0.0)
      << "\n";
  }
  return o.str();
}

}  // namespace llmrun
