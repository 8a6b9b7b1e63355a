// AdamW, in the operation order of torch.optim.AdamW's single-tensor path so that a run
// can be compared step for step against PyTorch.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

void CpuBackend::adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                       const AdamWParams& hp) {
  cpu::check_f32({&params, &grads, &m, &v}, "adamw operand");
  cpu::check_same_numel(params, grads, "adamw grads");
  cpu::check_same_numel(params, m, "adamw m");
  cpu::check_same_numel(params, v, "adamw v");
  LLMRUN_CHECK(hp.step >= 1, "adamw: step is 1-based");
  // PyTorch computes these scalars in Python (double) and hands them to float kernels.
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(hp.step));
  const auto decay = static_cast<float>(1.0 - lr * hp.weight_decay);
  const auto w1 = static_cast<float>(1.0 - b1);  // lerp weight of exp_avg toward grad
  const auto b2f = static_cast<float>(b2);
  const auto w2 = static_cast<float>(1.0 - b2);
  const auto neg_step = static_cast<float>(-(lr / bc1));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = hp.eps;
  const bool lerp_low = w1 < 0.5f;
  const int64_t n = params.numel();
  float *p = params.f32(), *mp = m.f32(), *vp = v.f32();
  const float* g = grads.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i] * decay;                               // param.mul_(1 - lr * wd)
    const float mi = lerp_low ? mp[i] + w1 * (gi - mp[i])  // exp_avg.lerp_(grad, 1 - b1)
                              : gi - (gi - mp[i]) * (1.0f - w1);
    const float vi = vp[i] * b2f + w2 * gi * gi;  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    pi = pi + neg_step * mi / denom;  // param.addcdiv_(exp_avg, denom, -step_size)
    p[i] = pi;
    mp[i] = mi;
    vp[i] = vi;
  }
}

}  // namespace llmrun
