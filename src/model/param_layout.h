#pragma once
// The flat parameter layout. Parameters live in one contiguous buffer per *bucket*:
// bucket 0 = embeddings (token table, plus GPT-2's position table), buckets 1..L = the
// transformer blocks, bucket L+1 = the final norm plus, when untied, the LM head (when
// tied, the head reads bucket 0's token table). Gradients and optimizer moments use the
// same layout, so ZeRO shards, collectives and checkpoint files are ranges of a bucket.
//
// Inside a block the tensors that one matmul consumes together are adjacent: Llama's
// q/k/v projections form one [(heads + 2 kv_heads) * head_dim, d] matrix and gate/up one
// [2 ffn, d] matrix, so each runs as a single GEMM. Every linear weight is stored
// [out, in] (torch.nn.Linear); GPT-2's Hugging Face Conv1D tensors are [in, out] and are
// transposed at the Hugging Face boundary (hf_transposed).
//
// Model parallelism changes only what a rank's layout holds (ModelShard): under tensor
// parallelism each tensor is this rank's part of the full one (TensorShard says which
// ranges), and under pipeline parallelism the buckets of other stages are empty. Bucket
// indices stay global, so every rank and every layout agree on what bucket b is.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace llmrun {

enum class ParamInit { normal, residual_normal, ones, zeros };

// Where this rank's tensor sits in the full (Hugging Face) tensor: the concatenation, along
// `axis` of the llmrun layout, of `ranges` of the full tensor's extent on that axis.
struct TensorShard {
  int axis = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end)
  int replicas = 1;           // tensor-parallel ranks that hold these same values
  bool grad_partial = false;  // each holder computes part of the gradient: summed over tp
};

struct ParamSpec {
  std::string hf_name;              // Hugging Face tensor name
  std::vector<int64_t> shape;       // this rank's tensor, llmrun layout
  std::vector<int64_t> full_shape;  // the whole tensor (== shape without tensor parallelism)
  TensorShard shard;
  int64_t offset = 0;  // in elements from the bucket start
  ParamInit init = ParamInit::normal;
  bool decay = true;           // weight decay applies (matrices and embeddings only)
  bool hf_transposed = false;  // Hugging Face stores the transpose (GPT-2 Conv1D)
  // The last pipeline stage's copy of a tied token table (the head): kept equal to the first
  // stage's table by summing their gradients; not a tensor of its own in checkpoints.
  bool tied_copy = false;
  // A routed expert's tensor: under expert parallelism only its ep rank holds it, and its
  // gradient reduces over the expert-data-parallel group (comm/topology.h), not all of dp.
  bool expert = false;
  int64_t numel() const;
  int64_t full_numel() const;
};

struct BucketLayout {
  std::string name;  // "embedding", "block.3", "head"
  std::vector<ParamSpec> params;
  int64_t numel = 0;
};

// Which part of the model one rank holds.
struct ModelShard {
  int tp = 1, tp_rank = 0;
  // Expert parallelism: an MoE layer holds experts [ep_rank E / ep, (ep_rank + 1) E / ep) only.
  int ep = 1, ep_rank = 0;
  bool sequence_parallel = false;  // norms' and position table's gradients become partial
  // Pipeline: the blocks this rank runs (empty: all), and whether it holds the embedding and
  // the final norm + head.
  std::vector<bool> layers;
  bool embedding = true, head = true;
  bool holds_layer(int l) const { return layers.empty() || layers[size_t(l)]; }
};

// The model as this rank holds it (default: everything).
std::vector<BucketLayout> model_layout(const ModelConfig& cfg, const ModelShard& shard = {});

// The block shape of one tensor-parallel rank: heads / tp query heads, max(kv_heads / tp, 1)
// key/value heads, ffn / tp hidden units, the same head_dim and d_model.
ModelConfig tp_block_config(const ModelConfig& cfg, int tp);
// Rows [begin, end) of the token table that tensor-parallel rank `rank` of `tp` holds.
std::pair<int64_t, int64_t> vocab_range(int64_t vocab, int tp, int rank);

}  // namespace llmrun
