// The slice of each step's global batch that one data-parallel rank trains on.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/training_data.h"

namespace llmrun {

// Every rank draws the whole global batch of a step in the single-rank order and keeps its
// own contiguous slice, so any data-parallel layout trains on exactly the same windows.
class RankBatches {
 public:
  RankBatches(TrainingData& data, int seq_len, int global_batch, int dp_size, int dp_rank)
      : data_(data),
        window_(seq_len + 1),
        global_(global_batch),
        first_(dp_rank * (global_batch / dp_size)),
        windows_(size_t(global_batch) * size_t(window_)) {}

  void start_step() {
    data_.fill(windows_.data(), global_);
    cursor_ = first_;
  }
  void next(int32_t* dst, int windows) {
    std::copy_n(windows_.begin() + int64_t(cursor_) * window_, int64_t(windows) * window_, dst);
    cursor_ += windows;
  }

 private:
  TrainingData& data_;
  int window_, global_, first_, cursor_ = 0;
  std::vector<int32_t> windows_;
};

}  // namespace llmrun
