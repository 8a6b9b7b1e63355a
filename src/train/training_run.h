// One rank's training run, split by role: trainer_build.cpp builds everything a run holds
// (ranks and groups, data, model, optimizer, checkpoints, the step), trainer_loop.cpp runs the
// steps, trainer_export.cpp writes the final model. trainer.cpp strings the three together.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "backend/backend.h"
#include "comm/device_staging.h"
#include "comm/launcher.h"
#include "comm/mpi_communicator.h"
#include "comm/timed_communicator.h"
#include "comm/topology.h"
#include "data/tokenizer.h"
#include "data/training_data.h"
#include "fp8/fp8_linears.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline_runner.h"
#include "recipe/recipe.h"
#include "train/peak_flops.h"
#include "train/progress.h"
#include "train/rank_batches.h"
#include "train/run_checkpoints.h"
#include "train/tensorboard_writer.h"
#include "train/train_step.h"
#include "train/trainer.h"
#include "train/validation.h"
#include "train/zero_optimizer.h"

namespace llmrun {

// Members refer to each other (the model to the tp group, the step to the model), so a run is
// built in place and never moved. Declaration order is construction order; MPI ends last.
struct TrainingRun {
  TrainingRun(const Recipe& r, const LaunchEnvironment& env);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  const Recipe& recipe;
  std::optional<MpiRuntime> mpi;
  Topology topo = Topology::single();
  std::unique_ptr<Backend> backend;
  std::optional<CommBackendScope> comm_staging;  // collectives on device tensors stage through it
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TrainingData> data;
  std::unique_ptr<RankBatches> batches;
  std::unique_ptr<Validator> validator;  // null without data.valid
  std::unique_ptr<TimedCommunicator> tp_timed;
  std::unique_ptr<TimedCommunicator> ep_timed;        // the expert-parallel group (MoE all-to-alls)
  std::unique_ptr<ContextParallel> context_parallel;  // null at cp = 1
  std::unique_ptr<Transformer> model;
  std::unique_ptr<LoraAdapters> lora;  // finetune: lora; what the optimizer trains then
  std::unique_ptr<ZeroOptimizer> opt;
  std::unique_ptr<RunCheckpoints> checkpoints;
  std::unique_ptr<Fp8Linears> fp8;               // null unless precision.fp8.enabled
  int64_t first_step = 1;                        // after a resumed checkpoint's step
  std::optional<MetricsWriter> metrics;          // the logger rank's
  std::optional<TensorBoardWriter> tensorboard;  // the logger rank's, with logging.tensorboard
  std::unique_ptr<PipelineRunner> pipeline;      // null at pp = 1
  std::unique_ptr<TrainStep> step;
  PeakFlops peak;  // mfu() raises it when a step measures faster

 private:
  void build_world(const LaunchEnvironment& env);
  void build_data();
  void build_model();
  void build_adapters(const StoreOptions& stores);
  void build_optimizer();
  void build_step();
  void log_start() const;
};

// Runs steps first_step..train.steps (or until the observer or a signal ends them). False when
// a signal stopped the run: the checkpoint is written, nothing else is to be done.
bool run_training_loop(TrainingRun& run, const TrainingObserver& observer);

// checkpoint.dir/model: a Hugging Face model directory of the trained weights (no-op without
// checkpoint.dir); under finetune: lora, checkpoint.dir/adapter, a PEFT adapter dir instead.
void export_trained_model(TrainingRun& run);

}  // namespace llmrun
