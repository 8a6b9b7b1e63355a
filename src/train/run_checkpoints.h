#pragma once
// A training run's side of checkpoints: which checkpoint to resume from (checkpoint.resume),
// restoring weights, optimizer and data position from it, and saving on the recipe's cadence.
// Every rank writes the part of the state it holds (its ZeRO partition of its tensor/pipeline
// part) to its own files, and on resume reads the pieces that overlap what it holds, so a run
// may resume under any other tp x pp x dp layout and ZeRO stage.
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>

#include "ckpt/training_checkpoint.h"
#include "comm/topology.h"
#include "data/tokenizer.h"
#include "data/training_data.h"
#include "fp8/fp8_linears.h"
#include "model/transformer.h"
#include "recipe/recipe.h"
#include "train/zero_optimizer.h"
#include "util/terminal_progress.h"

namespace llmrun {

class RunCheckpoints {
 public:
  // `model` is what the optimizer trains (the Transformer, or LoRA's adapters), `cfg` the model's.
  RunCheckpoints(const Recipe& r, TrainableParams& model, const ModelConfig& cfg,
                 ZeroOptimizer& opt, TrainingData& data, const Tokenizer& tok,
                 const Topology& topo);

  // Restores the state checkpoint.resume selects (auto: DIR/latest if any; never: none;
  // else that path) and returns the optimizer steps already taken (0 for a fresh start).
  int64_t resume();
  // Whether step `step` ends on the checkpoint.every cadence.
  bool due(int64_t step) const;
  // A collective. With checkpoint.async the rank copies what it writes to host memory and
  // writes it on another thread; poll() publishes it once every rank is done. A save that is
  // due while another is being written waits for that one first.
  void save(int64_t step);
  // A collective, after every step: publishes a background save once every rank has written
  // its files (one scalar all-reduce while one is under way, nothing otherwise).
  void poll();
  // A collective: waits for a background save and publishes it (end of run, stop signal).
  void finish_pending();
  // The step dir holding the model's current state: the last one saved, or the one resumed
  // from while nothing was trained since; empty before either.
  const std::filesystem::path& last_dir() const { return last_dir_; }
  bool enabled() const { return !r_.checkpoint.dir.empty(); }
  // Saves and restores the FP8 scaling state with the rest (call before resume()).
  void attach_fp8(Fp8Linears* fp8) { fp8_ = fp8; }

 private:
  using State = ZeroOptimizer::State;
  void read_state(const CheckpointReader& ckpt, State state, const char* group,
                  TerminalProgress& progress);
  RangeSource state_source(State state) const;
  std::vector<CheckpointShard::Range> written_ranges() const;
  CheckpointState state_at(int64_t step) const;
  // A save being written in the background from snapshot_.
  struct Background {
    std::unique_ptr<CheckpointInProgress> checkpoint;
    CheckpointShard shard;
    std::future<void> writing;  // last: destroyed (waited for) before what the writer uses
    std::chrono::steady_clock::time_point started;
  };
  void save_in_background(int64_t step, std::vector<CheckpointShard::Range> ranges);
  const Recipe& r_;
  TrainableParams& model_;
  ModelConfig cfg_;
  ZeroOptimizer& opt_;
  TrainingData& data_;
  const Tokenizer& tok_;
  const Topology& topo_;
  Fp8Linears* fp8_ = nullptr;
  std::filesystem::path last_dir_;
  // What a background save writes: params, exp_avg, exp_avg_sq, this rank's ranges back to back.
  // Kept between saves: fresh pages cost more to fault in than the copy itself. Declared before
  // background_, so a writer still running at destruction finishes before it goes away.
  std::vector<float> snapshot_[3];
  std::unique_ptr<Background> background_;
};

}  // namespace llmrun
