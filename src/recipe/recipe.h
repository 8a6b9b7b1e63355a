// src/recipe owns the training recipe: strict YAML loading with file:line:col errors, --set
// overrides and the resolved (derived) view printed by --dry-run. Each section's struct lives
// with the folder that runs it (data/, fp8/, parallel/, model/); this file aggregates them and
// holds the sections of the folders above recipe (train, checkpoint, logging, launch).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_config.h"
#include "fp8/fp8_config.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "parallel/memory_config.h"
#include "parallel/parallel_config.h"
#include "recipe/train_section.h"

namespace llmrun {

struct PrecisionSection {
  std::string compute = "fp32";  // fp32 | bf16 (GEMM operands rounded to bf16, fp32 accumulation)
  Fp8Section fp8;
};

struct CheckpointSection {
  // Training checkpoints go to DIR/step-NNNNNNN/ (+ DIR/latest), the final model to
  // DIR/model (empty: nothing is saved).
  std::string dir;
  int64_t every = 0;  // steps between checkpoints; 0: only at the end and on SIGTERM/SIGINT
  int keep = 3;       // newest step dirs kept; 0 keeps all
  std::string resume = "never";  // auto | never | a step dir or checkpoint dir (absolute)
  // Write in the background: each rank copies what it writes to host memory and training goes
  // on; the checkpoint is published (`latest`) once every rank has written its files.
  bool async = false;
};

struct LoggingSection {
  int every = 1;
  std::string metrics;      // JSONL path, empty: none
  std::string tensorboard;  // event file directory (`true`: checkpoint.dir/tb), empty: none
};

struct LaunchSection {
  int nproc = 1;  // ranks; under mpirun/srun, the world size it was given
  std::vector<std::string> mpirun_args;
  double timeout_s = 300;        // a collective waiting longer aborts every rank
  std::string backend = "auto";  // auto (CUDA when built and a device is visible) | cpu | cuda
};

struct Recipe {
  std::string source;  // file the recipe came from, for messages
  ModelConfig model;
  std::string model_from;  // model.from: Hugging Face model dir whose weights start training
  DataSection data;
  TrainSection train;
  PrecisionSection precision;
  CheckpointSection checkpoint;
  LoggingSection logging;
  ParallelSection parallel;
  LaunchSection launch;
  MemorySection memory;
  LoraSection finetune;  // finetune: LoRA adapters over a frozen model.from

  // Micro-batches each data-parallel rank runs per optimizer step.
  int grad_accum_steps() const { return train.global_batch / (train.micro_batch * parallel.dp); }
  int64_t tokens_per_step() const { return int64_t(train.global_batch) * model.seq_len; }
};

// Reads and validates a recipe. `overrides` are "a.b=value" strings applied on top of the
// file with the same type and range checks. Relative paths in the recipe are resolved
// against the recipe file's directory (in --set values, against the working directory).
// Throws UserError("file:line:col: key.path: ...") or ("--set a.b=value: key.path: ...").
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});

// The fully resolved recipe plus derived values, as YAML-looking text, for --dry-run.
// `llmrun train --dry-run` prints it followed by plan/from_recipe.h's memory_per_rank lines.
std::string describe_recipe(const Recipe& r);
// describe_recipe's number formats, for the lines other folders append: 3e-05, "1.2 GB".
std::string describe_number(double v);
std::string describe_bytes(double bytes);

}  // namespace llmrun
