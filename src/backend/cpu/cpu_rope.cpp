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

// The frequencies of the last parameters and the angles of the last single position, per
// thread. A decode step applies rope once per layer at one position with the same
// parameters: recomputing inv_freq (pow) and the cos/sin (double trig) on every layer was ~1%
// of a llama-small decode step. The cached values are those the computation gives.
struct RopeMemo {
  float theta = 0.0f, sign = 0.0f;
  int head_dim = 0;
  RopeScaling scaling;
  std::vector<float> inv_freq;
  int32_t pos = 0;
  bool have_angles = false;
  std::vector<float> cs;  // cos, then sin times `sign`, at `pos`

  const std::vector<float>& freqs(float t, int d, const RopeScaling& sc) {
    if (inv_freq.empty() || t != theta || d != head_dim || sc.type != scaling.type ||
        sc.factor != scaling.factor || sc.low_freq_factor != scaling.low_freq_factor ||
        sc.high_freq_factor != scaling.high_freq_factor ||
        sc.original_max_positions != scaling.original_max_positions) {
      inv_freq = rope_inv_freq(t, d, sc);
      theta = t;
      head_dim = d;
      scaling = sc;
      have_angles = false;
    }
    return inv_freq;
  }
  const float* angles_at(int32_t p, float sg) {
    if (!have_angles || p != pos || sg != sign) {
      cs.resize(2 * inv_freq.size());
      angles(p, inv_freq, sg, cs.data(), cs.data() + inv_freq.size());
      pos = p;
      sign = sg;
      have_angles = true;
    }
    return cs.data();
  }
};

// Rotates the first rotated_heads heads of one row by the angles' cosines c[0, half) and
// sines c[half, 2 half): one function for the decode step and the batched rows, so both give
// the same bits.
inline void rotate_row(float* row, const float* c, int rotated_heads, int head_dim) {
  const int half = head_dim / 2;
  const float* s = c + half;
  for (int h = 0; h < rotated_heads; ++h) {
    float* x1 = row + static_cast<int64_t>(h) * head_dim;
    float* x2 = x1 + half;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * c[i] - b * s[i];
      x2[i] = b * c[i] + a * s[i];
    }
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
  thread_local RopeMemo memo;
  const std::vector<float>& inv_freq = memo.freqs(theta, head_dim, scaling);
  const float sign = inverse ? -1.0f : 1.0f;
  const int32_t* pos = positions.i32();
  float* xp = x.f32();
  if (rows == 1) {  // a decode step: the memo's angles, on this thread
    rotate_row(xp, memo.angles_at(pos[0], sign), rotated_heads, head_dim);
    return;
  }
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
      rotate_row(xp + r * cols, c, rotated_heads, head_dim);
    }
  }
}

}  // namespace llmrun
