#include "parallel/model_partition.h"

#include "parallel/stage_layers.h"

namespace llmrun {

PipelinePartition pipeline_partition(const ParallelSection& par, int layers) {
  PipelinePartition p;
  p.stages = par.pp;
  p.chunks = par.virtual_stages;
  p.first_block.push_back(0);
  for (int count : virtual_stage_layers(layers, p.stages, p.chunks, par.pp_layers))
    p.first_block.push_back(p.first_block.back() + count);
  return p;
}

ModelShard model_shard(const ParallelSection& par, int layers, int tp_rank, int pp_rank) {
  ModelShard s;
  s.tp = par.tp;
  s.tp_rank = tp_rank;
  s.sequence_parallel = par.sequence_parallel && par.tp > 1;
  if (par.pp == 1) return s;
  const PipelinePartition p = pipeline_partition(par, layers);
  s.layers.assign(size_t(layers), false);
  for (int c = 0; c < p.chunks; ++c)
    for (int l = p.begin(pp_rank, c); l < p.end(pp_rank, c); ++l) s.layers[size_t(l)] = true;
  s.embedding = pp_rank == 0;
  s.head = pp_rank == p.stages - 1;
  return s;
}

}  // namespace llmrun
