#include "train/model_partition.h"

#include "parallel/stage_layers.h"

namespace llmrun {

PipelinePartition pipeline_partition(const Recipe& r) {
  PipelinePartition p;
  p.stages = r.parallel.pp;
  p.chunks = r.parallel.virtual_stages;
  p.first_block.push_back(0);
  for (int count : virtual_stage_layers(r.model.layers, p.stages, p.chunks, r.parallel.pp_layers))
    p.first_block.push_back(p.first_block.back() + count);
  return p;
}

ModelShard model_shard(const Recipe& r, int tp_rank, int pp_rank) {
  ModelShard s;
  s.tp = r.parallel.tp;
  s.tp_rank = tp_rank;
  s.sequence_parallel = r.parallel.sequence_parallel && r.parallel.tp > 1;
  if (r.parallel.pp == 1) return s;
  const PipelinePartition p = pipeline_partition(r);
  s.layers.assign(size_t(r.model.layers), false);
  for (int c = 0; c < p.chunks; ++c)
    for (int l = p.begin(pp_rank, c); l < p.end(pp_rank, c); ++l) s.layers[size_t(l)] = true;
  s.embedding = pp_rank == 0;
  s.head = pp_rank == p.stages - 1;
  return s;
}

}  // namespace llmrun
