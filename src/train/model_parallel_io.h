#pragma once
// The exported model dir holds full tensors (Hugging Face names and shapes): under tensor and
// pipeline parallelism rank 0 assembles them from every part. (Training checkpoints are written
// by every rank, see ckpt/training_checkpoint.h.)
#include "comm/topology.h"
#include "model/bucket_store.h"
#include "recipe/recipe.h"

namespace llmrun {

// Collective over the world: the ranks of data-parallel rank 0 send their `local` store (the
// model as that rank holds it, whole over dp) to world rank 0, which assembles `full` (laid
// out by model_layout(cfg); null on other ranks).
void gather_full_model(const Recipe& r, const Topology& topo, Backend& be, const BucketStore& local,
                       BucketStore* full);

}  // namespace llmrun
