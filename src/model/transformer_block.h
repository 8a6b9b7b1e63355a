#pragma once
// One transformer block, forward and backward written out explicitly:
//   mid = x + out_proj(attention(rope(qkv_proj(norm1(x)))))
//   y   = mid + down_proj(act(up_proj(norm2(mid))))
// GPT-2: LayerNorm, biases, GELU(tanh). Llama: RMSNorm, RoPE, SwiGLU (act over [gate|up]).
// Training and generation share this code; they differ only in the attention core.
#include <functional>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/bucket_store.h"
#include "model/distributed_attention.h"
#include "model/linear.h"

namespace llmrun {

// What the forward keeps for the backward, for N = batch * seq tokens. Under tensor
// parallelism the qkv/attn/up/act columns are this rank's heads and hidden units; under
// sequence parallelism the residual stream and norms hold only this rank's N / tp rows.
struct BlockActivations {
  Tensor input;                          // [N, d] residual stream into the block
  Tensor norm1, norm1_mean, norm1_rstd;  // [N, d], [N], [N]
  Tensor qkv;                            // [N, qkv_cols], after RoPE
  Tensor attn, lse;                      // [N, heads*head_dim], [batch, heads, seq]
  Tensor mid;                            // [N, d] residual after attention
  Tensor norm2, norm2_mean, norm2_rstd;
  Tensor up;           // [N, ffn] (GPT-2) or [N, 2 ffn] (Llama)
  Tensor act;          // [N, ffn]
  Tensor output;       // [N, d] residual stream out of the block
  MoeActivations moe;  // an MoE model's routed-MLP state (src/model/moe.h)
  // OLMoE's q/k norms (ModelConfig::qk_norm): the q and k projection outputs before the norm
  // [N, heads*head_dim], [N, kv_heads*head_dim], their rstd [N], and a scratch for the normed
  // rows [N, heads*head_dim] on their way back into qkv. Empty without q/k norms.
  Tensor q_raw, k_raw, q_rstd, k_rstd, qk_normed;
};

// Backward temporaries, shared by all blocks.
struct BlockScratch {
  Tensor d_norm;  // [N, d]
  Tensor d_attn;  // [N, heads*head_dim]
  Tensor d_qkv;   // [N, qkv_cols]
  Tensor d_act;   // [N, ffn]
  Tensor d_up;    // [N, ffn] or [N, 2 ffn]
  MoeScratch moe;
  Tensor d_qk;  // [N, heads*head_dim]: a q or k norm's input gradient (qk_norm only)
};

// Tensor parallelism inside a block (Megatron): qkv and up are column-parallel, out and down
// row-parallel; each row-parallel output is summed across the group (all-reduce), or with
// sequence parallelism reduce-scattered over the token rows, whose norm outputs are then
// all-gathered before the next column-parallel GEMM. A null comm is one rank.
struct BlockComm {
  Communicator* tp = nullptr;
  bool sequence_parallel = false;
  Tensor gathered;  // [N, d] scratch: all-gathered rows (sequence parallel)
  Tensor partial;   // [N, d] scratch: a row-parallel GEMM's partial sums
  // Context parallelism: attention over the chunks every cp rank holds (null: one rank's).
  DistributedAttention* attention = nullptr;
  // Expert parallelism: the group an MoE layer's experts are split over (null: one rank's).
  Communicator* ep = nullptr;
  bool active() const { return tp != nullptr && tp->size() > 1; }
};

// Allocates a tensor of the given type and shape (an arena owned by the caller).
using TensorAllocator = std::function<Tensor(DType, std::initializer_list<int64_t>)>;
// One block's activation buffers for n tokens (n_rows of them in the residual stream and
// norms: n / tp under sequence parallelism, else n), except input/output (the residual
// stream, owned by the caller) and lse (training only: its shape depends on batch and seq).
// with_attention = false leaves attn empty (selective recompute shares one across layers).
BlockActivations allocate_block_activations(const ModelConfig& cfg, int64_t n,
                                            const TensorAllocator& alloc, int64_t n_rows = -1,
                                            bool with_attention = true);
// The first n rows of every activation of `a` (buffers planned for more tokens).
BlockActivations first_rows(const BlockActivations& a, int64_t n);

// Fills qkv-derived `attn` given `qkv` (after RoPE): training attention or a KV-cache lookup.
using AttentionCore = std::function<void(const Tensor& qkv, Tensor attn)>;

// The block's four GEMMs go through `linear` (null: plain fp32), told they belong to `layer`.
void block_forward(Backend& be, const ModelConfig& cfg, const BlockTensors& w, BlockActivations& a,
                   const Tensor& positions, const AttentionCore& core, const BlockComm& comm = {},
                   LinearRunner* linear = nullptr, int layer = 0);

// d_resid holds dL/d(output) on entry and dL/d(input) on return. Parameter gradients are
// accumulated into g.
void block_backward(Backend& be, const ModelConfig& cfg, const BlockTensors& w,
                    const BlockTensors& g, const BlockActivations& a, const BlockScratch& s,
                    Tensor d_resid, const Tensor& positions, const AttentionShape& shape,
                    const BlockComm& comm = {}, LinearRunner* linear = nullptr, int layer = 0);

}  // namespace llmrun
