// Token embedding of the CUDA backend (kernels/embedding.cuh).
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/embedding.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::dev_f32;

void CudaBackend::embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table,
                                bool accumulate) {
  const int64_t n = ids.numel(), d = table.cols();
  LLMRUN_CHECK(out.rows() == n && out.cols() == d,
               "embedding_fwd: out " + out.shape_str() + " for table " + table.shape_str());
  kernels::embedding_fwd(dev_f32(out, "embedding out"), cuda::dev_i32(ids, "embedding ids"),
                         dev_f32(table, "embedding table"), n, d, table.rows(), accumulate,
                         stream_);
  check_launch("embedding_fwd");
}

void CudaBackend::embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t n = ids.numel(), d = dtable.cols();
  LLMRUN_CHECK(dout.rows() == n && dout.cols() == d,
               "embedding_bwd: dout " + dout.shape_str() + " for table " + dtable.shape_str());
  kernels::embedding_bwd(dev_f32(dtable, "embedding dtable"), dev_f32(dout, "embedding dout"),
                         cuda::dev_i32(ids, "embedding ids"), n, d, dtable.rows(), stream_);
  check_launch("embedding_bwd");
}

}  // namespace llmrun
