// AdamW of the CUDA backend (kernels/adamw.cuh); the step's scalars are computed here exactly
// as the CPU backend computes them (cpu_adamw.cpp), so both run the same float arithmetic.
#include <cmath>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/adamw.cuh"

namespace llmrun {

using cuda::dev_f32;

void CudaBackend::adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                        const AdamWParams& hp) {
  cuda::check_same_numel(params, grads, "adamw grads");
  cuda::check_same_numel(params, m, "adamw m");
  cuda::check_same_numel(params, v, "adamw v");
  LLMRUN_CHECK(hp.step >= 1, "adamw: step is 1-based");
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(hp.step));
  kernels::AdamWScalars s{};
  s.decay = static_cast<float>(1.0 - lr * hp.weight_decay);
  s.w1 = static_cast<float>(1.0 - b1);
  s.beta2 = static_cast<float>(b2);
  s.w2 = static_cast<float>(1.0 - b2);
  s.neg_step = static_cast<float>(-(lr / bc1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = hp.eps;
  s.lerp_low = s.w1 < 0.5f;
  kernels::adamw(dev_f32(params, "adamw params"), dev_f32(grads, "adamw grads"),
                 dev_f32(m, "adamw m"), dev_f32(v, "adamw v"), params.numel(), s, stream_);
  cuda::check_launch("adamw");
}

}  // namespace llmrun
