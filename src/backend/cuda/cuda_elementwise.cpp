// Elementwise ops of the CUDA backend (kernels/elementwise.cuh), including the pool scatter.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/elementwise.cuh"

namespace llmrun {

using cuda::check_launch;
using cuda::check_same_numel;
using cuda::dev_f32;

void CudaBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  check_same_numel(out, a, "add");
  check_same_numel(out, b, "add");
  kernels::add(dev_f32(out, "add out"), dev_f32(a, "add a"), dev_f32(b, "add b"), out.numel(),
               stream_);
  check_launch("add");
}

void CudaBackend::scale(Tensor x, float a) {
  kernels::scale(dev_f32(x, "scale x"), a, x.numel(), stream_);
  check_launch("scale");
}

void CudaBackend::gelu_fwd(Tensor out, const Tensor& x) {
  check_same_numel(out, x, "gelu_fwd");
  kernels::gelu_fwd(dev_f32(out, "gelu out"), dev_f32(x, "gelu x"), x.numel(), stream_);
  check_launch("gelu_fwd");
}

void CudaBackend::gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) {
  check_same_numel(dx, x, "gelu_bwd");
  check_same_numel(dy, x, "gelu_bwd");
  kernels::gelu_bwd(dev_f32(dx, "gelu dx"), dev_f32(dy, "gelu dy"), dev_f32(x, "gelu x"), x.numel(),
                    stream_);
  check_launch("gelu_bwd");
}

void CudaBackend::swiglu_fwd(Tensor out, const Tensor& gate_up) {
  const int64_t rows = gate_up.rows(), f = gate_up.cols() / 2;
  LLMRUN_CHECK(gate_up.cols() % 2 == 0 && out.rows() == rows && out.cols() == f,
               "swiglu_fwd: out " + out.shape_str() + " for gate_up " + gate_up.shape_str());
  kernels::swiglu_fwd(dev_f32(out, "swiglu out"), dev_f32(gate_up, "swiglu gate_up"), rows, f,
                      stream_);
  check_launch("swiglu_fwd");
}

void CudaBackend::swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) {
  const int64_t rows = gate_up.rows(), f = gate_up.cols() / 2;
  LLMRUN_CHECK(gate_up.cols() % 2 == 0 && dout.rows() == rows && dout.cols() == f,
               "swiglu_bwd: dout " + dout.shape_str() + " for gate_up " + gate_up.shape_str());
  check_same_numel(dgate_up, gate_up, "swiglu_bwd");
  kernels::swiglu_bwd(dev_f32(dgate_up, "swiglu dgate_up"), dev_f32(dout, "swiglu dout"),
                      dev_f32(gate_up, "swiglu gate_up"), rows, f, stream_);
  check_launch("swiglu_bwd");
}

void CudaBackend::scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots,
                               int64_t col_begin) {
  float* d = dev_f32(dst, "scatter_rows dst");
  const float* s = dev_f32(src, "scatter_rows src");
  const int32_t* sp = cuda::dev_i32(slots, "scatter_rows slots");
  const int64_t n = src.rows(), w = dst.cols();
  LLMRUN_CHECK(slots.numel() == n && col_begin >= 0 && col_begin + w <= src.cols(),
               "scatter_rows: src " + src.shape_str() + " slots " + slots.shape_str() + " dst " +
                   dst.shape_str());
  kernels::scatter_rows(d, s, sp, n, w, src.cols(), col_begin, dst.rows(), stream_);
  check_launch("scatter_rows");
}

}  // namespace llmrun
