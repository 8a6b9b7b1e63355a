#pragma once
// Training windows over an indexed dataset, Megatron-style: the documents form one token
// stream (document order, each already ending in EOS when prepared with --append-eos), cut
// into consecutive windows of seq_len + 1 tokens that overlap by one (the last target of a
// window is the first input of the next), so one epoch trains on every token once. Each epoch
// visits the windows in a seeded shuffled order; data-parallel rank r of n takes every n-th
// window of that order, so ranks see disjoint windows that together cover the epoch.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/indexed_dataset.h"

namespace llmrun {

// One source of training windows with a resumable position (windows drawn so far).
class WindowSource {
 public:
  virtual ~WindowSource() = default;
  virtual void next(int32_t* dst) = 0;  // copies window() tokens
  virtual uint64_t position() const = 0;
  virtual void seek(uint64_t position) = 0;  // as if `position` windows had been drawn
  virtual int64_t tokens() const = 0;
};

class PackedWindowSampler final : public WindowSource {
 public:
  // UserError if the dataset holds fewer than window tokens, or too few windows for dp_size ranks.
  PackedWindowSampler(std::shared_ptr<const IndexedDataset> ds, int64_t window, uint64_t seed,
                      int dp_rank = 0, int dp_size = 1);

  void next(int32_t* dst) override;
  uint64_t position() const override { return drawn_; }
  void seek(uint64_t position) override;
  int64_t tokens() const override { return ds_->tokens(); }

  int64_t windows_per_epoch() const { return windows_; }            // over all ranks
  int64_t windows_per_rank() const { return windows_ / dp_size_; }  // per epoch
  // The window index (into the epoch's unshuffled stream) that draw `k` of this rank reads.
  int64_t window_index(uint64_t k);

 private:
  void shuffle_for(uint64_t epoch);
  void read_tokens(int64_t start, int64_t n, int32_t* dst) const;

  std::shared_ptr<const IndexedDataset> ds_;
  int64_t window_;
  uint64_t seed_;
  int dp_rank_, dp_size_;
  int64_t windows_ = 0;
  std::vector<int64_t> doc_start_;  // token offset of each document in the stream, plus the end
  uint64_t order_epoch_ = UINT64_MAX;
  std::vector<int64_t> order_;  // this epoch's shuffled window order
  uint64_t drawn_ = 0;
};

}  // namespace llmrun
