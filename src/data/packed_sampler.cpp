#include "data/packed_sampler.h"

#include <algorithm>
#include <random>

#include "util/error.h"

namespace llmrun {

PackedWindowSampler::PackedWindowSampler(std::shared_ptr<const IndexedDataset> ds, int64_t window,
                                         uint64_t seed, int dp_rank, int dp_size)
    : ds_(std::move(ds)), window_(window), seed_(seed), dp_rank_(dp_rank), dp_size_(dp_size) {
  LLMRUN_CHECK(window >= 2 && dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size,
               "bad sampler shape");
  doc_start_.resize(static_cast<size_t>(ds_->documents()) + 1);
  for (int64_t d = 0; d < ds_->documents(); ++d) doc_start_[d + 1] = doc_start_[d] + ds_->length(d);
  // Windows overlap by one token: window i covers [i*(window-1), i*(window-1) + window).
  windows_ = ds_->tokens() >= window ? (ds_->tokens() - 1) / (window - 1) : 0;
  if (windows_ < dp_size)
    throw UserError(ds_->prefix() + ": " + std::to_string(ds_->tokens()) + " tokens make " +
                    std::to_string(windows_) + " windows of seq_len + 1 = " +
                    std::to_string(window) + " tokens, fewer than the " + std::to_string(dp_size) +
                    " data-parallel ranks; add data or lower model.seq_len");
}

void PackedWindowSampler::shuffle_for(uint64_t epoch) {
  if (order_epoch_ == epoch) return;
  order_.resize(static_cast<size_t>(windows_));
  for (int64_t i = 0; i < windows_; ++i) order_[i] = i;
  // Fisher-Yates with multiply-shift bounds on mt19937_64 (fully specified, unlike the standard
  // distributions), so the order is the same with every standard library.
  std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
  for (int64_t i = windows_ - 1; i > 0; --i) {
    const auto j =
        static_cast<int64_t>((static_cast<unsigned __int128>(rng()) * uint64_t(i + 1)) >> 64);
    std::swap(order_[i], order_[j]);
  }
  order_epoch_ = epoch;
}

int64_t PackedWindowSampler::window_index(uint64_t k) {
  const uint64_t per_rank = static_cast<uint64_t>(windows_per_rank());
  shuffle_for(k / per_rank);
  return order_[(k % per_rank) * dp_size_ + dp_rank_];
}

void PackedWindowSampler::read_tokens(int64_t start, int64_t n, int32_t* dst) const {
  // The document holding `start`, then on through as many documents as the window spans.
  auto it = std::upper_bound(doc_start_.begin(), doc_start_.end(), start);
  int64_t doc = (it - doc_start_.begin()) - 1;
  int64_t off = start - doc_start_[doc];
  while (n > 0) {
    const int64_t take = std::min(n, ds_->length(doc) - off);
    if (take > 0) ds_->read(doc, off, take, dst);
    dst += take;
    n -= take;
    ++doc;
    off = 0;
  }
}

void PackedWindowSampler::next(int32_t* dst) {
  const int64_t w = window_index(drawn_);
  read_tokens(w * (window_ - 1), window_, dst);
  ++drawn_;
}

void PackedWindowSampler::seek(uint64_t position) { drawn_ = position; }

}  // namespace llmrun
