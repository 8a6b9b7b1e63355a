#pragma once
// Full tensors <-> one rank's parts of them, under tensor and pipeline parallelism.
// Checkpoints and model dirs always hold full tensors (Hugging Face names and shapes), so
// they load under any layout: saving assembles the parts, loading cuts its own part out.
#include "comm/topology.h"
#include "model/bucket_store.h"
#include "recipe/recipe.h"

namespace llmrun {

// Collective over the world: the ranks of data-parallel rank 0 send their `local` store (the
// model as that rank holds it, whole over dp) to world rank 0, which assembles `full` (laid
// out by model_layout(cfg); null on other ranks).
void gather_full_model(const Recipe& r, const Topology& topo, Backend& be, const BucketStore& local,
                       BucketStore* full);

// local = this rank's parts of the tensors of `full`.
void extract_local_model(Backend& be, const BucketStore& full, BucketStore& local);

}  // namespace llmrun
