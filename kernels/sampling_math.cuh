// Temperature / top-k / min-p / top-p sampling of one row whose logits are already sorted
// (highest first, ties by lower token id), as llmrun's host TokenSampler (serve/sampler.cpp)
// draws: the same double-precision steps in the same order, then std::discrete_distribution's
// rule as libstdc++ implements it (weights normalised by their sum, partial sums with the last
// forced to 1, the first partial sum >= u). Host and device code: kernels/sampling.cu runs it
// on the GPU, and the unit tests compile this header on the CPU against TokenSampler.
#pragma once
#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define LLMRUN_HOST_DEVICE __host__ __device__
#else
#define LLMRUN_HOST_DEVICE
#endif

namespace llmrun::kernels {

struct RowSampling {
  float temperature = 1.0f;  // > 0 (greedy decoding uses argmax_rows)
  int top_k = 0;             // 0: every token
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0;  // the uniform in [0, 1) the host's generator drew for this row
};

// Index into the sorted row (0 .. n-1) of the sampled token. `w`: n doubles of scratch. When
// fewer than two tokens survive the cuts the answer is 0 and `u` is not looked at (the host
// sampler draws no number then); `drew`, when given, says whether `u` was used, so that a
// caller that drew it from a copy of the host generator knows whether to advance the original.
LLMRUN_HOST_DEVICE inline int sample_sorted(const float* sorted, int n, const RowSampling& p,
                                            double* w, bool* drew = nullptr) {
  if (drew) *drew = false;
  int keep = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  const double top = sorted[0];
  double total = 0;
  for (int i = 0; i < keep; ++i) total += w[i] = exp((double(sorted[i]) - top) / p.temperature);
  if (p.min_p > 0.0f) {
    int cut = 1;
    while (cut < keep && w[cut] >= p.min_p * w[0]) ++cut;
    keep = cut;
    total = 0;
    for (int i = 0; i < keep; ++i) total += w[i];
  }
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int i = 0; i < keep; ++i) {
      mass += w[i] / total;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (keep < 2) return 0;
  if (drew) *drew = true;
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += w[i];
  double cp = 0;
  for (int i = 0; i < keep - 1; ++i) {
    cp += w[i] / sum;
    if (!(cp < p.u)) return i;  // lower_bound: the first partial sum not below u
  }
  return keep - 1;  // the last partial sum is 1
}

}  // namespace llmrun::kernels
