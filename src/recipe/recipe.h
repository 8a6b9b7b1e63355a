// src/recipe owns the training recipe: its structs, strict YAML loading with file:line:col
// errors, --set overrides and the resolved (derived) view printed by --dry-run.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace llmrun {

struct DataSource {
  // A text file, a directory of text files (read recursively), or the prefix of an indexed
  // dataset written by `llmrun data prepare` (PREFIX.bin + PREFIX.idx).
  std::string path;
  double weight = 1.0;
};

struct DataSection {
  // "byte" (the built-in 256-token byte-level BPE) or a path to a Hugging Face tokenizer.json.
  std::string tokenizer = "byte";
  std::vector<DataSource> train;
  std::vector<DataSource> valid;  // validation sources (same forms); empty: no validation
};

struct TrainSection {
  int64_t steps = 100;
  int micro_batch = 4;
  int global_batch = 4;  // sequences per optimizer step; multiple of micro_batch
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup = 0;
  std::string schedule = "cosine";  // cosine | linear | constant
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double clip = 1.0;  // global-norm clipping; 0 disables
  uint64_t seed = 1;
  int64_t eval_every = 0;  // validation every N steps (and at the last step); 0: only at the last
  int eval_batches = 4;    // micro-batches of data.valid per evaluation
};

// precision.fp8: Transformer Engine's delayed-scaling FP8 recipe for the linear layers
// (src/fp8; on the CPU backend an exact emulation).
struct Fp8Section {
  bool enabled = false;
  std::string format = "hybrid";       // hybrid: E4M3 forward, E5M2 gradients | e4m3: E4M3 everywhere
  int amax_history = 16;               // steps of amax kept per tensor
  std::string amax_compute = "max";    // max (over the history) | most_recent
  int margin = 0;                      // scale = fp8_max / amax / 2^margin
  // Layers kept in fp32: any of qkv, out, up, down, lm_head; embedding (a table lookup, never
  // an FP8 GEMM) must be listed.
  std::vector<std::string> skip = {"lm_head", "embedding"};
};

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
  std::string metrics;  // JSONL path, empty: none
  std::string tensorboard;  // event file directory (`true`: checkpoint.dir/tb), empty: none
};

struct ParallelSection {
  int tp = 1, pp = 1;
  int dp = 1;    // resolved: `auto` (the default) fills launch.nproc / (tp * pp)
  int zero = 0;  // 0: all-reduce gradients; 1: shard optimizer state; 2: + gradients; 3: + parameters
  bool sequence_parallel = false;  // tp > 1: shard the residual stream and norms over tokens
  std::string pp_schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int virtual_stages = 1;            // model chunks per pipeline rank (interleaved)
  std::vector<int> pp_layers;        // blocks per stage (empty: as even as possible)
};

struct MemorySection {
  std::string recompute = "none";  // none | selective (attention) | full (whole blocks)
  int64_t budget_bytes = 0;        // per-rank device memory; > 0: refuse layouts predicted not to fit
  std::string offload_optimizer = "none";  // none | cpu | nvme
  std::string offload_params = "none";     // none | cpu | nvme; needs parallel.zero: 3
  std::string nvme_path;                   // directory for nvme offload files
  int64_t offload_buffer_mb = 64;          // nvme: staging memory for streaming the state (shared when both stream)
};

struct LaunchSection {
  int nproc = 1;  // ranks; under mpirun/srun, the world size it was given
  std::vector<std::string> mpirun_args;
  double timeout_s = 300;  // a collective waiting longer aborts every rank
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
std::string describe_recipe(const Recipe& r);

}  // namespace llmrun
