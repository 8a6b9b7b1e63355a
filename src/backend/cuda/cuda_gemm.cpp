// GEMMs of the CUDA backend: matmul through cuBLASLt (f32 with TF32 off, or bf16 operands with
// f32 accumulation and output; bias through the BIAS epilogue; the heuristic's algorithm cached
// per shape key, gemm_plan.h), and the batch-invariant inference linear (kernels/linear_rows.cuh
// explains why it is not cuBLAS).
#include <memory>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_lt_matmul.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/op_shapes.h"
#include "kernels/elementwise.cuh"
#include "kernels/linear_rows.cuh"

namespace llmrun {

using cuda::check;
using cuda::check_launch;
using cuda::dev_f32;

namespace {

// Bias epilogue pointers must be aligned to the element size at least; cuBLASLt's bias kernels
// read vectors, so anything below 16 bytes falls back to a separate broadcast add.
constexpr uint32_t kBiasAlignment = 16;

}  // namespace

void CudaBackend::matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                         float alpha, float beta, const Tensor* bias) {
  Buffer a16, b16;
  const void* a_op = gemm_operand(a, a16, "matmul a");
  const void* b_op = gemm_operand(b, b16, "matmul b");
  gemm(out, a, b, a_op, b_op, trans_a, trans_b, alpha, beta, bias);
}

// dy rounded once for both GEMMs: in bf16 each rounding is a pass over the tensor (the LM
// head's dy is the whole vocabulary's logits gradient), and a backward has four per linear.
void CudaBackend::linear_grads(Tensor dx, Tensor dW, const Tensor& dy, const Tensor& x,
                               const Tensor& W) {
  Buffer dy16, x16, w16;
  const void* dy_op = gemm_operand(dy, dy16, "linear_grads dy");
  gemm(dW, dy, x, dy_op, gemm_operand(x, x16, "linear_grads x"), true, false, 1.0f, 1.0f, nullptr);
  gemm(dx, dy, W, dy_op, gemm_operand(W, w16, "linear_grads W"), false, false, 1.0f, 0.0f, nullptr);
}

const void* CudaBackend::gemm_operand(const Tensor& t, Buffer& rounded, const char* what) {
  const float* p = dev_f32(t, what);
  if (gemm_dtype() != DType::bf16 || t.numel() == 0) return p;
  rounded = to_bf16(t, what);
  return rounded.data();
}

void CudaBackend::gemm(Tensor out, const Tensor& a, const Tensor& b, const void* a_op,
                       const void* b_op, bool trans_a, bool trans_b, float alpha, float beta,
                       const Tensor* bias) {
  float* o = dev_f32(out, "matmul out");
  const int64_t m = out.rows(), n = out.cols();
  const int64_t k = check_matmul_shapes(out, a, b, trans_a, trans_b, bias);
  const float* bias_p = nullptr;
  if (bias) {
    bias_p = dev_f32(*bias, "matmul bias");
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: out = beta * out (+ bias); cuBLASLt rejects k = 0
    if (beta == 0.0f)
      kernels::fill_32(o, m * n, 0u, stream_);
    else
      kernels::scale(o, beta, m * n, stream_);
    if (bias_p) kernels::add_bias_rows(o, bias_p, m, n, stream_);
    check_launch("matmul (k = 0)");
    return;
  }

  const bool bf16 = gemm_dtype() == DType::bf16;
  cuda::GemmKey key;
  key.p = cuda::map_row_major(m, n, k, trans_a, trans_b);
  key.operands = bf16 ? cuda::GemmOperands::bf16 : cuda::GemmOperands::f32;
  const bool epilogue_bias = bias_p && cuda::pointer_alignment(uintptr_t(bias_p)) >= kBiasAlignment;
  key.bias = epilogue_bias;
  // cuBLAS's A is our b and its B our a (gemm_plan.h).
  key.align_a = cuda::pointer_alignment(uintptr_t(b_op));
  key.align_b = cuda::pointer_alignment(uintptr_t(a_op));
  key.align_c = cuda::pointer_alignment(uintptr_t(o));
  const std::string what = "matmul (" + key.str() + ")";

  const cudaDataType_t ab_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cuda::LtEpilogue epi;
  if (epilogue_bias) {
    epi.kind = CUBLASLT_EPILOGUE_BIAS;
    epi.bias = bias_p;
  }
  // cuBLAS's A is our b and its B our a (gemm_plan.h).
  cuda::lt_matmul(ctx_, stream_, key, {ab_type, ab_type, CUDA_R_32F}, epi, {}, &alpha, b_op, a_op,
                  &beta, o, what);
  if (bias_p && !epilogue_bias) {
    kernels::add_bias_rows(o, bias_p, m, n, stream_);
    check_launch("matmul bias");
  }
}

namespace {

// The GELU epilogues' auxiliary matrix is read and written in vectors: its pointer and leading
// dimension must be aligned (cuBLASLt: 16 bytes, ld a multiple of 8). Other shapes, and devices
// whose heuristic has no fp32 GELU kernel, take the unfused path.
bool aux_ok(const void* p, int64_t ld) {
  return cuda::pointer_alignment(uintptr_t(p)) >= 16 && ld % 8 == 0;
}

}  // namespace

void CudaBackend::matmul_bias_gelu(Tensor pre, Tensor act, const Tensor& x, const Tensor& W,
                                   const Tensor* bias) {
  float* pp = dev_f32(pre, "matmul_bias_gelu pre");
  float* ap = dev_f32(act, "matmul_bias_gelu act");
  const float* xp = dev_f32(x, "matmul_bias_gelu x");
  const float* wp = dev_f32(W, "matmul_bias_gelu W");
  const int64_t m = pre.rows(), n = pre.cols();
  const int64_t k = check_matmul_shapes(pre, x, W, false, true, bias);
  LLMRUN_CHECK(act.numel() == pre.numel(),
               "matmul_bias_gelu: act " + act.shape_str() + " for pre " + pre.shape_str());
  const float* bias_p = bias ? dev_f32(*bias, "matmul_bias_gelu bias") : nullptr;
  const bool bf16 = gemm_dtype() == DType::bf16;
  if (m > 0 && n > 0 && k > 0 && aux_ok(pp, n) &&
      (!bias_p || cuda::pointer_alignment(uintptr_t(bias_p)) >= kBiasAlignment)) {
    Buffer x16, w16;
    const void* x_op = xp;
    const void* w_op = wp;
    if (bf16) {
      x16 = to_bf16(x, "matmul_bias_gelu x");
      w16 = to_bf16(W, "matmul_bias_gelu W");
      x_op = x16.data();
      w_op = w16.data();
    }
    cuda::GemmKey key;
    key.p = cuda::map_row_major(m, n, k, false, true);
    key.operands = bf16 ? cuda::GemmOperands::bf16 : cuda::GemmOperands::f32;
    key.bias = bias_p != nullptr;
    key.epilogue = cuda::GemmEpilogue::gelu_aux;
    key.align_a = cuda::pointer_alignment(uintptr_t(w_op));
    key.align_b = cuda::pointer_alignment(uintptr_t(x_op));
    key.align_c = cuda::pointer_alignment(uintptr_t(ap));
    key.align_aux = cuda::pointer_alignment(uintptr_t(pp));
    // D = gelu(x W^T + bias) into act, the pre-activation into aux (pre), whose column-major
    // layout is D's: n rows, leading dimension n.
    cuda::LtEpilogue epi;
    epi.kind = bias_p ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    epi.bias = bias_p;
    epi.aux = pp;
    epi.aux_ld = n;
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const float one = 1.0f, zero = 0.0f;
    if (cuda::lt_matmul(ctx_, stream_, key, {t, t, CUDA_R_32F}, epi, {}, &one, w_op, x_op, &zero,
                        ap, "matmul_bias_gelu (" + key.str() + ")", /*required=*/false))
      return;
  }
  Backend::matmul_bias_gelu(pre, act, x, W, bias);
}

void CudaBackend::matmul_dgelu(Tensor dx, const Tensor& dy, const Tensor& W, const Tensor& pre) {
  float* dp = dev_f32(dx, "matmul_dgelu dx");
  const float* yp = dev_f32(dy, "matmul_dgelu dy");
  const float* wp = dev_f32(W, "matmul_dgelu W");
  const float* pp = dev_f32(pre, "matmul_dgelu pre");
  const int64_t m = dx.rows(), n = dx.cols();
  const int64_t k = check_matmul_shapes(dx, dy, W, false, false, nullptr);
  LLMRUN_CHECK(pre.numel() == dx.numel(),
               "matmul_dgelu: pre " + pre.shape_str() + " for dx " + dx.shape_str());
  const bool bf16 = gemm_dtype() == DType::bf16;
  if (m > 0 && n > 0 && k > 0 && aux_ok(pp, n)) {
    Buffer y16, w16;
    const void* y_op = yp;
    const void* w_op = wp;
    if (bf16) {
      y16 = to_bf16(dy, "matmul_dgelu dy");
      w16 = to_bf16(W, "matmul_dgelu W");
      y_op = y16.data();
      w_op = w16.data();
    }
    cuda::GemmKey key;
    key.p = cuda::map_row_major(m, n, k, false, false);
    key.operands = bf16 ? cuda::GemmOperands::bf16 : cuda::GemmOperands::f32;
    key.epilogue = cuda::GemmEpilogue::dgelu;
    key.align_a = cuda::pointer_alignment(uintptr_t(w_op));
    key.align_b = cuda::pointer_alignment(uintptr_t(y_op));
    key.align_c = cuda::pointer_alignment(uintptr_t(dp));
    key.align_aux = cuda::pointer_alignment(uintptr_t(pp));
    // D = (dy W) * gelu'(aux), aux the forward's pre-activation in D's layout.
    cuda::LtEpilogue epi;
    epi.kind = CUBLASLT_EPILOGUE_DGELU;
    epi.aux = const_cast<float*>(pp);
    epi.aux_ld = n;
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const float one = 1.0f, zero = 0.0f;
    if (cuda::lt_matmul(ctx_, stream_, key, {t, t, CUDA_R_32F}, epi, {}, &one, w_op, y_op, &zero,
                        dp, "matmul_dgelu (" + key.str() + ")", /*required=*/false))
      return;
  }
  Backend::matmul_dgelu(dx, dy, W, pre);
}

void CudaBackend::linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                              bool accumulate) {
  float* yp = dev_f32(y, "linear_rows y");
  const float* xp = dev_f32(x, "linear_rows x");
  const float* wp = dev_f32(W, "linear_rows W");
  const int64_t m = x.rows(), k = x.cols(), n = W.rows();
  LLMRUN_CHECK(W.cols() == k && y.rows() == m && y.cols() == n,
               "linear_rows: x " + x.shape_str() + " W " + W.shape_str() + " y " + y.shape_str());
  const float* bp = nullptr;
  if (bias) {
    bp = dev_f32(*bias, "linear_rows bias");
    LLMRUN_CHECK(bias->numel() == n,
                 "linear_rows: bias " + bias->shape_str() + " for W " + W.shape_str());
  }
  kernels::linear_rows(yp, xp, wp, bp, m, n, k, accumulate, gemm_dtype() == DType::bf16, stream_);
  check_launch("linear_rows");
}

}  // namespace llmrun
