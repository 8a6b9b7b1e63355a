// The recipe's parallel section: how the ranks split the model and the batch. Owned by
// src/parallel (layout rules, partition, pipeline); src/recipe reads it from YAML.
#pragma once
#include <vector>

#include "parallel/cp_chunks.h"
#include "parallel/schedule.h"

namespace llmrun {

struct ParallelSection {
  int tp = 1, pp = 1;
  int dp = 1;    // resolved: `auto` (the default) fills launch.nproc / (tp * pp)
  int zero = 0;  // ZeRO stage 0..3 (ordered: each shards more); 0 all-reduces gradients
  bool sequence_parallel = false;  // tp > 1: shard the residual stream and norms over tokens
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  int virtual_stages = 1;        // model chunks per pipeline rank (interleaved)
  std::vector<int> pp_layers;    // blocks per stage (empty: as even as possible)
  int cp = 1;                    // context parallel: each sequence split over cp ranks
  CpComm cp_comm = CpComm::p2p;  // how attention reaches the other ranks' keys and values
  int ep = 1;  // expert parallel: MoE experts split over ep of the dp ranks (comm/topology.h)
};

}  // namespace llmrun
