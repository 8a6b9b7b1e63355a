#pragma once
// The layout rules: which tp x pp x dp layouts (with ZeRO, sequence parallelism, a pipeline
// schedule) can train which model and batch. Recipe validation and the planner (`llmrun plan
// --search`) both ask here, so they agree on what is valid.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "parallel/cp_chunks.h"
#include "parallel/memory_config.h"
#include "parallel/schedule.h"

namespace llmrun {

// How the ranks split the work.
struct TrainingLayout {
  int tp = 1, pp = 1, dp = 1;
  int zero = 0;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  std::vector<int> pp_layers;  // blocks per virtual stage; empty: even split
  Recompute recompute = Recompute::none;
  int cp = 1;  // context parallel ranks per sequence
  CpComm cp_comm = CpComm::p2p;
  int ep = 1;  // expert parallel ranks, carved out of dp (parallel/expert_layout.h)
  int world() const { return tp * pp * dp * cp; }
  std::string describe() const;  // "tp2 pp2 dp1 zero1 1f1b recompute none"
};

// Everything about a run the planner needs besides the layout.
struct TrainingShape {
  ModelConfig model;
  int micro_batch = 1;   // sequences per micro-batch
  int global_batch = 1;  // sequences per optimizer step
  std::string compute = "fp32";
  Offload offload_optimizer = Offload::none;
  Offload offload_params = Offload::none;   // ZeRO-3 parameter shards
  int64_t offload_buffer_bytes = 64 << 20;  // nvme staging memory
};

// Micro-batches each data-parallel rank (and so the pipeline) runs per step.
int micro_batches_per_step(const TrainingShape& s, const TrainingLayout& l);

struct LayoutProblem {
  std::string key;     // the recipe key to change, e.g. "parallel.tp"
  std::string reason;  // why this layout cannot train this model
};

// Why `l` cannot train `s`, or nothing: tp must divide heads and ffn and divide (or be a
// multiple of) kv_heads; stages x virtual_stages <= layers (or pp_layers fits); ZeRO 2/3 only
// with pp = 1; sequence parallelism needs tp > 1 and tokens per micro-batch divisible by tp;
// the global batch must split into micro_batch x dp; the pipeline schedule must accept the
// shape (interleaved: V >= 2, micro-batches a multiple of pp); seq_len must split into 2 x cp
// equal chunks; cp_comm a2a needs the heads and kv heads per tp rank divisible by cp.
std::optional<LayoutProblem> layout_problem(const TrainingShape& s, const TrainingLayout& l);

}  // namespace llmrun
