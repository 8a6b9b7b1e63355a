#pragma once
// A training run's side of checkpoints: which checkpoint to resume from (checkpoint.resume),
// restoring weights, optimizer and data position from it, and saving on the recipe's cadence.
#include <cstdint>

#include "data/tokenizer.h"
#include "data/training_data.h"
#include "model/transformer.h"
#include "recipe/recipe.h"
#include "train/adamw_optimizer.h"

namespace llmrun {

class RunCheckpoints {
 public:
  RunCheckpoints(const Recipe& r, Transformer& model, AdamWOptimizer& opt, TrainingData& data, const Tokenizer& tok);

  // Restores the state checkpoint.resume selects (auto: DIR/latest if any; never: none;
  // else that path) and returns the optimizer steps already taken (0 for a fresh start).
  int64_t resume();
  // Whether step `step` ends on the checkpoint.every cadence.
  bool due(int64_t step) const;
  void save(int64_t step);
  bool enabled() const { return !r_.checkpoint.dir.empty(); }

 private:
  const Recipe& r_;
  Transformer& model_;
  AdamWOptimizer& opt_;
  TrainingData& data_;
  const Tokenizer& tok_;
};

}  // namespace llmrun
