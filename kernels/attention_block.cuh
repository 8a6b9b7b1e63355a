// Launchers of the context-parallel (ring attention) block kernels (attention_block.cu): one
// (query chunk, key chunk) block of attention, the log-sum-exp merge of partial results, and
// the block backward. Semantics are exactly those of the CPU backend's ops of the same names
// (src/backend/cpu/cpu_attention.cpp; the contract is in src/backend/backend.h); the per-element
// math is in attention_block_math.cuh. Raw device pointers, shapes and a stream; the launchers
// only enqueue work, the caller checks cudaGetLastError() after them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace llmrun::kernels {
// q, out [batch*seq, heads*hd]; k, v [batch*nk, kv_heads*hd]; lse [batch, heads, seq] (natural
// log); scale 1/sqrt(hd); GQA: head h uses kv head h/(heads/kv_heads). causal (nk == seq): query
// i sees keys 0..i; else every query sees all nk keys. out and lse are OVERWRITTEN.
void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int nk, int heads, int kv_heads, int head_dim,
                         bool causal, cudaStream_t stream);
// (out, lse) becomes the attention over the union of its keys and those of (block_out,
// block_lse); same shapes as attention_block_fwd's out and lse. lse = -inf: no keys yet.
void attention_lse_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                         int batch, int seq, int heads, int head_dim, cudaStream_t stream);
// The block's share of the gradients given the final (merged) out and lse: ACCUMULATES into
// dq [batch*seq, heads*hd] and dk, dv [batch*nk, kv_heads*hd]. `workspace` has
// attention_block_bwd_workspace_bytes(...) bytes.
size_t attention_block_bwd_workspace_bytes(int batch, int seq, int heads);
void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int nk, int heads, int kv_heads, int head_dim,
                         bool causal, void* workspace, cudaStream_t stream);
}  // namespace llmrun::kernels
