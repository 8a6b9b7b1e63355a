// Attention whose keys and values are spread over several ranks (context parallelism: each
// rank holds some chunks of every sequence; src/parallel/context_parallel.h implements it).
// Set on a Transformer, it replaces the one-rank causal attention in training, and gives
// every local token its real position in the sequence (RoPE, GPT-2's position table).
#pragma once
#include "backend/backend.h"
#include "comm/communicator.h"

namespace llmrun {

class DistributedAttention {
 public:
  virtual ~DistributedAttention() = default;
  // Position in the full sequence of local token j of a sequence.
  virtual int position(int local_token) const = 0;
  // The ranks holding the other tokens of the local sequences (whatever is taken over a whole
  // sequence, such as an MoE router's losses, is reduced over them).
  virtual Communicator& token_group() = 0;
  // qkv [batch*seq, qkv_cols] after RoPE, local tokens only; lse [batch*heads*seq] in the
  // implementation's own order (only its backward reads it).
  virtual void forward(Tensor attn, Tensor lse, const Tensor& qkv, const AttentionShape& local) = 0;
  // dqkv is overwritten.
  virtual void backward(Tensor dqkv, const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                        const Tensor& lse, const AttentionShape& local) = 0;
};

}  // namespace llmrun
