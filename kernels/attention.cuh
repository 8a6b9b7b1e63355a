// Launchers of the attention kernel family (attention_fwd.cu, attention_bwd.cu,
// attention_decode.cu): raw device pointers, shapes and a stream, as fixed by the CUDA seam
// (issue 16). Semantics are exactly those of the CPU backend's ops of the same names
// (src/backend/cpu/cpu_attention.cpp, cpu_paged_attention.cpp). The launchers only enqueue
// work; the caller checks cudaGetLastError() after them. The namespace block below is the
// seam's text verbatim, so the glue may declare it identically.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace llmrun::kernels {
// Causal attention, semantics exactly as Backend::attention_fwd/bwd (backend.h): qkv row =
// [q: heads*hd | k: kv_heads*hd | v: kv_heads*hd], rows = batch*seq, out [rows, heads*hd],
// lse [batch, heads, seq] (natural log), scale 1/sqrt(hd), GQA: head h uses kv head
// h/(heads/kv_heads).
void attention_fwd(float* out, float* lse, const float* qkv, int batch, int seq, int heads,
                   int kv_heads, int head_dim, cudaStream_t stream);
// dqkv is OVERWRITTEN (same layout as qkv). `workspace` has attention_bwd_workspace_bytes(...)
// bytes.
size_t attention_bwd_workspace_bytes(int batch, int seq, int heads, int kv_heads, int head_dim);
void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int batch, int seq, int heads, int kv_heads, int head_dim,
                   void* workspace, cudaStream_t stream);
// Backend::attention_cached: q [n_q, heads*hd]; k_cache, v_cache rows of kv_heads*hd, query i at
// position start_pos + i attends to 0..start_pos+i.
void attention_cached(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int n_q, int start_pos, int heads, int kv_heads, int head_dim,
                      cudaStream_t stream);
// Backend::paged_attention (see backend.h): num_seqs sequences, total_q query rows,
// block_tables [num_seqs, max_blocks], query_starts [num_seqs+1], context_lens [num_seqs] (device
// i32). Every row of out must be bitwise independent of which other sequences are in the batch.
void paged_attention(float* out, const float* q, const float* k_pool, const float* v_pool,
                     const int* block_tables, const int* query_starts, const int* context_lens,
                     int num_seqs, int max_blocks, int total_q, int max_query_len, int block_size,
                     int heads, int kv_heads, int head_dim, cudaStream_t stream);
}  // namespace llmrun::kernels
