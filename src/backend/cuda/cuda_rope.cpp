// Rotary embedding of the CUDA backend (kernels/rope.cuh): frequencies computed on the host by
// rope_inv_freq (every scaling variant), uploaded once per configuration and kept.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/rope.cuh"

namespace llmrun {

using cuda::check;
using cuda::check_launch;

const float* CudaBackend::rope_frequencies(float theta, int head_dim, const RopeScaling& s) {
  const auto key = std::make_tuple(theta, head_dim, int(s.type), s.factor, s.low_freq_factor,
                                   s.high_freq_factor, s.original_max_positions);
  auto it = rope_tables_.find(key);
  if (it != rope_tables_.end()) return static_cast<const float*>(it->second.data());
  const std::vector<float> inv_freq = rope_inv_freq(theta, head_dim, s);
  Buffer b = allocate_raw(inv_freq.size() * sizeof(float), "rope frequencies");
  check(cudaMemcpyAsync(b.data(), inv_freq.data(), inv_freq.size() * sizeof(float),
                        cudaMemcpyHostToDevice, stream_),
        "rope (frequencies)");
  check(cudaStreamSynchronize(stream_), "rope (frequencies)");  // inv_freq dies here
  const float* p = static_cast<const float*>(b.data());
  rope_tables_.emplace(key, std::move(b));
  return p;
}

void CudaBackend::rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim,
                       float theta, const RopeScaling& scaling, bool inverse) {
  float* xp = cuda::dev_f32(x, "rope x");
  const int32_t* pos = cuda::dev_i32(positions, "rope positions");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even");
  LLMRUN_CHECK(rotated_heads >= 0 && rotated_heads * static_cast<int64_t>(head_dim) <= cols,
               "rope: rotated heads exceed the row of x " + x.shape_str());
  LLMRUN_CHECK(positions.numel() == rows, "rope: one position per row of x");
  if (rows == 0 || rotated_heads == 0) return;
  const float* inv_freq = rope_frequencies(theta, head_dim, scaling);
  kernels::rope(xp, pos, inv_freq, rows, cols, rotated_heads, head_dim, inverse, stream_);
  check_launch("rope");
}

}  // namespace llmrun
