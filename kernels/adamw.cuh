// Launcher of AdamW over a flat buffer (adamw.cu), in the operation order of the CPU backend
// (src/backend/cpu/cpu_adamw.cpp, itself torch.optim.AdamW's single-tensor path). The host
// computes the step's scalars (bias corrections in double, as PyTorch does) into AdamWScalars.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // tests/kernels/ runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstdint>

namespace llmrun::kernels {

struct AdamWScalars {
  float decay;  // 1 - lr * weight_decay
  float w1;     // 1 - beta1: lerp weight of exp_avg toward grad
  float beta2;
  float w2;        // 1 - beta2
  float neg_step;  // -(lr / bias_correction1)
  float bc2_sqrt;  // sqrt(bias_correction2)
  float eps;
  bool lerp_low;  // w1 < 0.5: torch's lerp formula choice
};

void adamw(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWScalars& s,
           cudaStream_t stream);

}  // namespace llmrun::kernels
