// LayerNorm and RMSNorm of the CUDA backend (kernels/norms.cuh).
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/geometry.cuh"
#include "kernels/norms.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::dev_f32;

void CudaBackend::layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x,
                                const Tensor& w, const Tensor& b, float eps) {
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(out.rows() == rows && out.cols() == cols && mean.numel() == rows &&
                   rstd.numel() == rows && w.numel() == cols && b.numel() == cols,
               "layernorm_fwd: shapes do not match x " + x.shape_str());
  kernels::layernorm_fwd(dev_f32(out, "layernorm out"), dev_f32(mean, "layernorm mean"),
                         dev_f32(rstd, "layernorm rstd"), dev_f32(x, "layernorm x"),
                         dev_f32(w, "layernorm w"), dev_f32(b, "layernorm b"), rows, cols, eps,
                         stream_);
  check_launch("layernorm_fwd");
}

void CudaBackend::layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                                const Tensor& w, const Tensor& mean, const Tensor& rstd,
                                bool accumulate_dx) {
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(dx.numel() == rows * cols && dy.numel() == rows * cols && dw.numel() == cols &&
                   db.numel() == cols && w.numel() == cols && mean.numel() == rows &&
                   rstd.numel() == rows,
               "layernorm_bwd: shapes do not match x " + x.shape_str());
  Buffer ws = scratch(kernels::column_reduce_workspace_bytes(rows, cols, 2), "layernorm_bwd");
  kernels::layernorm_bwd(dev_f32(dx, "layernorm dx"), dev_f32(dw, "layernorm dw"),
                         dev_f32(db, "layernorm db"), dev_f32(dy, "layernorm dy"),
                         dev_f32(x, "layernorm x"), dev_f32(w, "layernorm w"),
                         dev_f32(mean, "layernorm mean"), dev_f32(rstd, "layernorm rstd"), rows,
                         cols, accumulate_dx, ws.data(), stream_);
  check_launch("layernorm_bwd");
}

void CudaBackend::rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                              float eps) {
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(
      out.rows() == rows && out.cols() == cols && rstd.numel() == rows && w.numel() == cols,
      "rmsnorm_fwd: shapes do not match x " + x.shape_str());
  kernels::rmsnorm_fwd(dev_f32(out, "rmsnorm out"), dev_f32(rstd, "rmsnorm rstd"),
                       dev_f32(x, "rmsnorm x"), dev_f32(w, "rmsnorm w"), rows, cols, eps, stream_);
  check_launch("rmsnorm_fwd");
}

void CudaBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x,
                              const Tensor& w, const Tensor& rstd, bool accumulate_dx) {
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(dx.numel() == rows * cols && dy.numel() == rows * cols && dw.numel() == cols &&
                   w.numel() == cols && rstd.numel() == rows,
               "rmsnorm_bwd: shapes do not match x " + x.shape_str());
  Buffer ws = scratch(kernels::column_reduce_workspace_bytes(rows, cols, 1), "rmsnorm_bwd");
  kernels::rmsnorm_bwd(dev_f32(dx, "rmsnorm dx"), dev_f32(dw, "rmsnorm dw"),
                       dev_f32(dy, "rmsnorm dy"), dev_f32(x, "rmsnorm x"), dev_f32(w, "rmsnorm w"),
                       dev_f32(rstd, "rmsnorm rstd"), rows, cols, accumulate_dx, ws.data(),
                       stream_);
  check_launch("rmsnorm_bwd");
}

}  // namespace llmrun
