// Launchers of the tensor-core (bf16 mma.sync, sm_80+) training attention, attention_mma.cu:
// the same arguments and layouts as attention_fwd/attention_bwd (attention.cuh), with the
// precision of Backend::attention_fwd under attention_bf16_operands (backend.h): every matmul
// operand (Q, K, V, P, dout, dS) rounded to bf16, fp32 accumulation, softmax, lse and delta in
// fp32. For head_dim a multiple of 16 up to 128 (attention_mma_supported); the glue runs the
// fp32 kernels otherwise. The launchers only enqueue work; the caller checks cudaGetLastError().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace llmrun::kernels {
inline bool attention_mma_supported(int head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && head_dim <= 128;
}
// The most dynamic shared memory one of the kernels takes at this head_dim (the backward's
// dK/dV kernel: about 107 KB at 128). GPUs that allow less per block (sm_86 and sm_89: 99 KB)
// run the fp32 kernels there instead.
size_t attention_mma_smem_bytes(int head_dim);
void attention_fwd_bf16(float* out, float* lse, const float* qkv, int batch, int seq, int heads,
                        int kv_heads, int head_dim, cudaStream_t stream);
// dqkv is OVERWRITTEN. `workspace` has attention_bwd_bf16_workspace_bytes(...) bytes.
size_t attention_bwd_bf16_workspace_bytes(int batch, int seq, int heads, int kv_heads,
                                          int head_dim);
void attention_bwd_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int batch, int seq, int heads, int kv_heads, int head_dim,
                        void* workspace, cudaStream_t stream);
}  // namespace llmrun::kernels
