// Rotary position embedding, Hugging Face "rotate_half" pairing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace llmrun {

namespace {

// cos/sin of every frequency at one position, rounded the way Hugging Face's float32
// code rounds them: inv_freq and pos * inv_freq are float32 values, and only their cos/sin
// are evaluated in double (then rounded) so our error stays below PyTorch's own.
void angles(int32_t pos, const std::vector<float>& inv_freq, float sign, float* c, float* s) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const float a = static_cast<float>(pos) * inv_freq[i];
    c[i] = static_cast<float>(std::cos(static_cast<double>(a)));
    s[i] = sign * static_cast<float>(std::sin(static_cast<double>(a)));
  }
}

}  // namespace

void CpuBackend::rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim,
                      float theta, const RopeScaling& scaling, bool inverse) {
  cpu::check_f32(x, "rope x");
  cpu::check_i32(positions, "rope positions");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even");
  LLMRUN_CHECK(rotated_heads >= 0 && rotated_heads * static_cast<int64_t>(head_dim) <= cols,
               "rope: rotated heads exceed the row of x " + x.shape_str());
  LLMRUN_CHECK(positions.numel() == rows, "rope: one position per row of x");
  if (rows == 0 || rotated_heads == 0) return;
  const int half = head_dim / 2;
  const std::vector<float> inv_freq = rope_inv_freq(theta, head_dim, scaling);
  const float sign = inverse ? -1.0f : 1.0f;
  const int32_t* pos = positions.i32();
  const auto [pmin_it, pmax_it] = std::minmax_element(pos, pos + rows);
  const int64_t pmin = *pmin_it, span = static_cast<int64_t>(*pmax_it) - pmin + 1;
  // Training batches repeat the same positions in every sequence: one table row per
  // distinct position saves the trig calls. Sparse positions (decode) compute per row.
  const bool use_table = span <= rows;
  std::vector<float> table(use_table ? span * 2 * half : 0);
  if (use_table) {
#pragma omp parallel for num_threads(threads_) if (span * half > 4096)
    for (int64_t p = 0; p < span; ++p) {
      float* t = table.data() + p * 2 * half;
      angles(static_cast<int32_t>(pmin + p), inv_freq, sign, t, t + half);
    }
  }
  float* xp = x.f32();
#pragma omp parallel num_threads(threads_) if (rows * rotated_heads * head_dim > cpu::kParallelMin)
  {
    std::vector<float> local(use_table ? 0 : 2 * half);
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const float* c;
      if (use_table) {
        c = table.data() + (pos[r] - pmin) * 2 * half;
      } else {
        angles(pos[r], inv_freq, sign, local.data(), local.data() + half);
        c = local.data();
      }
      const float* s = c + half;
      for (int h = 0; h < rotated_heads; ++h) {
        float* x1 = xp + r * cols + static_cast<int64_t>(h) * head_dim;
        float* x2 = x1 + half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * c[i] - b * s[i];
          x2[i] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

}  // namespace llmrun
