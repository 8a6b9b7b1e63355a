#pragma once
// How a model of `layers` blocks splits over the tensor x pipeline ranks of a parallel section:
// which blocks each pipeline stage (and model chunk) runs, and the ModelShard of every rank. A
// pure function of the two, so any rank can compute any other rank's layout.
#include <vector>

#include "model/param_layout.h"
#include "parallel/parallel_config.h"

namespace llmrun {

struct PipelinePartition {
  int stages = 1, chunks = 1;  // pp, virtual stages per rank
  std::vector<int>
      first_block;  // per virtual stage v (= chunk * stages + stage), size stages*chunks + 1
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int begin(int stage, int chunk) const { return first_block[size_t(virtual_stage(stage, chunk))]; }
  int end(int stage, int chunk) const {
    return first_block[size_t(virtual_stage(stage, chunk)) + 1];
  }
};

PipelinePartition pipeline_partition(const ParallelSection& p, int layers);
// The part of the model held by tensor rank tp_rank of pipeline stage pp_rank.
ModelShard model_shard(const ParallelSection& p, int layers, int tp_rank, int pp_rank);

}  // namespace llmrun
