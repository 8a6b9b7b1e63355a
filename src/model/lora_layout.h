#pragma once
// Where LoRA adapters live: their own buckets, parallel to the model's (bucket b of the
// adapters belongs to the model's bucket b, so the model's acquire/release of a block is also
// its adapters'; the embedding and head buckets stay empty), so that ZeRO, the gradient
// reductions and checkpoints see only adapters. Tensors carry PEFT's names
// (base_model.model.<module>.lora_A.weight, [rank, in]; lora_B.weight, [out, rank]).
//
// A and B split the way their base linear does under tensor parallelism: for a
// column-parallel linear (q/k/v, gate/up, c_attn, c_fc) B takes the base's output rows and A is
// whole on every rank (its gradient summed over the group); for a row-parallel one (o_proj,
// down_proj, c_proj) A takes the base's input columns and B is whole (gradient summed).
#include <array>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/lora_config.h"
#include "model/param_layout.h"

namespace llmrun {

// One adapted linear inside a fused GEMM: its A and B (parameter indices in the layer's
// adapter bucket) and the columns of the GEMM's output (this rank's) that it adds to.
struct LoraTarget {
  int a = 0, b = 0;
  int64_t col_begin = 0, cols = 0;
};

// The adapters of one of a block's four GEMMs: targets' A tensors are adjacent (one GEMM
// computes every target's x A^T), then their B tensors.
struct LoraSite {
  std::vector<LoraTarget> targets;
  int64_t out_cols = 0;  // the GEMM's output width on this rank
  // The input's columns this rank holds, [begin, end) in the whole input: a row-parallel
  // linear's slice under tensor parallelism, else all of them (dropout masks by these).
  std::vector<std::pair<int64_t, int64_t>> in_ranges;
  bool empty() const { return targets.empty(); }
};

struct LoraLayout {
  std::vector<BucketLayout> buckets;           // the model's bucket count
  std::vector<std::array<LoraSite, 4>> sites;  // [layer][qkv, out, up, down]
  const LoraSite* site(LinearSite s) const;    // null: no adapter there
};

// The adapters of `sec.targets` for the part of the model `shard` holds. UserError naming the
// valid module names when a target matches no linear of the architecture.
LoraLayout lora_layout(const ModelConfig& cfg, const ModelShard& shard, const LoraSection& sec);

// "base_model.model.model.layers.0.self_attn.q_proj" for a base weight's Hugging Face name.
std::string peft_module_name(const std::string& base_weight_name);

}  // namespace llmrun
