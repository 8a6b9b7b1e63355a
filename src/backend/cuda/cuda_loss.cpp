// Softmax cross-entropy of the CUDA backend, single and vocab-parallel (kernels/loss.cuh).
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/loss.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::dev_f32;
using cuda::dev_i32;

void CudaBackend::softmax_xent(Tensor losses, Tensor logits, const Tensor& targets,
                               float grad_scale) {
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(losses.numel() == n && targets.numel() == n,
               "softmax_xent: losses/targets do not match logits " + logits.shape_str());
  kernels::softmax_xent(dev_f32(losses, "softmax_xent losses"),
                        dev_f32(logits, "softmax_xent logits"),
                        dev_i32(targets, "softmax_xent targets"), n, v, grad_scale, stream_);
  check_launch("softmax_xent");
}

void CudaBackend::xent_row_max(Tensor row_max, const Tensor& logits) {
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(row_max.numel() == n,
               "xent_row_max: row_max does not match logits " + logits.shape_str());
  kernels::xent_row_max(dev_f32(row_max, "xent_row_max"), dev_f32(logits, "xent_row_max logits"), n,
                        v, stream_);
  check_launch("xent_row_max");
}

void CudaBackend::xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets) {
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(sums.numel() == 2 * n && row_max.numel() == n && targets.numel() == n,
               "xent_partials: sums/row_max/targets do not match logits " + logits.shape_str());
  kernels::xent_partials(dev_f32(sums, "xent_partials sums"),
                         dev_f32(logits, "xent_partials logits"),
                         dev_f32(row_max, "xent_partials row_max"),
                         dev_i32(targets, "xent_partials targets"), n, v, stream_);
  check_launch("xent_partials");
}

void CudaBackend::xent_finish(Tensor losses, Tensor logits, const Tensor& row_max,
                              const Tensor& sums, const Tensor& targets, float grad_scale) {
  const int64_t n = logits.rows(), v = logits.cols();
  LLMRUN_CHECK(
      losses.numel() == n && sums.numel() == 2 * n && row_max.numel() == n && targets.numel() == n,
      "xent_finish: losses/sums/row_max/targets do not match logits " + logits.shape_str());
  kernels::xent_finish(dev_f32(losses, "xent_finish losses"), dev_f32(logits, "xent_finish logits"),
                       dev_f32(row_max, "xent_finish row_max"), dev_f32(sums, "xent_finish sums"),
                       dev_i32(targets, "xent_finish targets"), n, v, grad_scale, stream_);
  check_launch("xent_finish");
}

}  // namespace llmrun
