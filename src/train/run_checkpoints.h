#pragma once
// A training run's side of checkpoints: which checkpoint to resume from (checkpoint.resume),
// restoring weights, optimizer and data position from it, and saving on the recipe's cadence.
// Checkpoints hold unsharded tensors: every rank takes part in gathering (ZeRO shards) and
// rank 0 writes; on resume every rank reads and keeps its own shard, so a run may resume
// under another data-parallel size or ZeRO stage.
#include <cstdint>

#include "comm/topology.h"
#include "data/tokenizer.h"
#include "data/training_data.h"
#include "fp8/fp8_linears.h"
#include "model/transformer.h"
#include "recipe/recipe.h"
#include "train/zero_optimizer.h"

namespace llmrun {

class RunCheckpoints {
 public:
  RunCheckpoints(const Recipe& r, Transformer& model, ZeroOptimizer& opt, TrainingData& data, const Tokenizer& tok,
                 const Topology& topo);

  // Restores the state checkpoint.resume selects (auto: DIR/latest if any; never: none;
  // else that path) and returns the optimizer steps already taken (0 for a fresh start).
  int64_t resume();
  // Whether step `step` ends on the checkpoint.every cadence.
  bool due(int64_t step) const;
  void save(int64_t step);  // a collective
  bool enabled() const { return !r_.checkpoint.dir.empty(); }
  // Saves and restores the FP8 scaling state with the rest (call before resume()).
  void attach_fp8(Fp8Linears* fp8) { fp8_ = fp8; }

 private:
  bool model_parallel() const { return r_.parallel.tp * r_.parallel.pp > 1; }
  const Recipe& r_;
  Transformer& model_;
  ZeroOptimizer& opt_;
  TrainingData& data_;
  const Tokenizer& tok_;
  const Topology& topo_;
  Fp8Linears* fp8_ = nullptr;
};

}  // namespace llmrun
