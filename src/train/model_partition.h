#pragma once
// How a recipe's model splits over the tensor x pipeline ranks: which blocks each pipeline
// stage (and model chunk) runs, and the ModelShard of every rank. A pure function of the
// recipe, so any rank can compute any other rank's layout (checkpoint assembly does).
#include <vector>

#include "model/param_layout.h"
#include "recipe/recipe.h"

namespace llmrun {

struct PipelinePartition {
  int stages = 1, chunks = 1;      // pp, virtual stages per rank
  std::vector<int> first_block;    // per virtual stage v (= chunk * stages + stage), size stages*chunks + 1
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int begin(int stage, int chunk) const { return first_block[size_t(virtual_stage(stage, chunk))]; }
  int end(int stage, int chunk) const { return first_block[size_t(virtual_stage(stage, chunk)) + 1]; }
};

PipelinePartition pipeline_partition(const Recipe& r);
// The part of the model held by tensor rank tp_rank of pipeline stage pp_rank.
ModelShard model_shard(const Recipe& r, int tp_rank, int pp_rank);

}  // namespace llmrun
