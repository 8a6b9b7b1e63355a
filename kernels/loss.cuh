// Launchers of softmax cross-entropy (loss.cu), semantics of src/backend/cpu/cpu_loss.cpp:
// losses[n] = -log softmax(logits[n])[target], logits overwritten in place with
// grad_scale * (softmax - onehot). softmax_xent ignores targets < 0 (loss 0, gradient 0).
// The vocab-parallel form runs in three passes around the tensor-parallel group's reductions:
// xent_row_max, xent_partials (sums [2, n]: sum of exp(logit - max), and the target's logit
// when this rank holds it), xent_finish; there a target of -1 is ignored and -2 is held by
// another rank. A target at or beyond the row (which the host cannot check without a copy)
// yields a NaN loss and a zero gradient row, so it cannot pass unnoticed.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

void softmax_xent(float* losses, float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                  float grad_scale, cudaStream_t stream);
void xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t vocab,
                  cudaStream_t stream);
void xent_partials(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                   int64_t rows, int64_t vocab, cudaStream_t stream);
void xent_finish(float* losses, float* logits, const float* row_max, const float* sums,
                 const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                 cudaStream_t stream);

}  // namespace llmrun::kernels
