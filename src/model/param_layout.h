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
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace llmrun {

enum class ParamInit { normal, residual_normal, ones, zeros };

struct ParamSpec {
  std::string hf_name;          // Hugging Face tensor name
  std::vector<int64_t> shape;   // llmrun layout
  int64_t offset = 0;           // in elements from the bucket start
  ParamInit init = ParamInit::normal;
  bool decay = true;            // weight decay applies (matrices and embeddings only)
  bool hf_transposed = false;   // Hugging Face stores the transpose (GPT-2 Conv1D)
  int64_t numel() const;
};

struct BucketLayout {
  std::string name;  // "embedding", "block.3", "head"
  std::vector<ParamSpec> params;
  int64_t numel = 0;
};

std::vector<BucketLayout> model_layout(const ModelConfig& cfg);

}  // namespace llmrun
