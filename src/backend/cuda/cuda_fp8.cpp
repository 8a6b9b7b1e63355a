// FP8 on the CUDA backend (backend/fp8_gemm.h): the fused cast + transpose + amax kernel
// (kernels/fp8_cast.cuh) and cuBLASLt's FP8 GEMM: E4M3/E5M2 operands in the "TN" form the FP8
// tensor cores take, per-tensor scale pointers (delayed scaling's scale_inv, on the device),
// fp32 accumulation (fast accumulation off) and an f32 or bf16 output. Algorithms are cached
// per shape key like every other GEMM (gemm_plan.h).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_lt_matmul.h"
#include "backend/cuda/fp8_support.h"
#include "backend/cuda/gemm_plan.h"
#include "kernels/elementwise.cuh"
#include "kernels/fp8_cast.cuh"

namespace llmrun {

using cuda::check;
using cuda::check_launch;

namespace {

bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

cudaDataType_t lt_fp8(DType t) { return t == DType::fp8_e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

void check_device(const Tensor& t, const char* what) {
  LLMRUN_CHECK(t.data != nullptr && t.device == Device::cuda,
               std::string(what) + " must be a CUDA tensor");
}

}  // namespace

std::string CudaBackend::fp8_unsupported() const {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ctx_.ordinal), "cudaGetDeviceProperties");
  return cuda::fp8_refusal(prop.major, prop.minor, prop.name, ctx_.ordinal);
}

bool CudaBackend::fp8_shape_supported(int64_t m, int64_t n, int64_t k) const {
  return cuda::fp8_shape_ok(m, n, k);
}

void CudaBackend::fp8_cast_transpose(Tensor q, Tensor qt, Tensor amax, Tensor counts,
                                     const Tensor& x, const Tensor& scale, DType format) {
  const float* xp = cuda::dev_f32(x, "fp8_cast_transpose x");
  const float* sp = cuda::dev_f32(scale, "fp8_cast_transpose scale");
  LLMRUN_CHECK(is_fp8(format), "fp8_cast_transpose: format must be fp8_e4m3 or fp8_e5m2");
  const int64_t rows = x.rows(), cols = x.cols();
  for (const Tensor* t : {&q, &qt})
    if (!t->empty()) {
      check_device(*t, "fp8_cast_transpose output");
      LLMRUN_CHECK(t->dtype == format && t->numel() == x.numel(),
                   "fp8_cast_transpose: output " + t->shape_str() + " for x " + x.shape_str());
    }
  float* ap = amax.empty() ? nullptr : cuda::dev_f32(amax, "fp8_cast_transpose amax");
  int32_t* cp = counts.empty() ? nullptr : cuda::dev_i32(counts, "fp8_cast_transpose counts");
  LLMRUN_CHECK(counts.empty() || counts.numel() == 2, "fp8_cast_transpose: counts must be i32 [2]");
  kernels::fp8_cast_transpose(
      q.empty() ? nullptr : static_cast<uint8_t*>(q.data),
      qt.empty() ? nullptr : static_cast<uint8_t*>(qt.data), ap, cp, xp, rows, cols, sp,
      format == DType::fp8_e4m3 ? kernels::Fp8Kind::e4m3 : kernels::Fp8Kind::e5m2, stream_);
  check_launch("fp8_cast_transpose");
}

void CudaBackend::fp8_matmul(Tensor out, const Tensor& a, const Tensor& b,
                             const Tensor& a_scale_inv, const Tensor& b_scale_inv, float beta,
                             const Tensor* bias) {
  check_device(out, "fp8_matmul out");
  check_device(a, "fp8_matmul a");
  check_device(b, "fp8_matmul b");
  const float* sa = cuda::dev_f32(a_scale_inv, "fp8_matmul a_scale_inv");
  const float* sb = cuda::dev_f32(b_scale_inv, "fp8_matmul b_scale_inv");
  LLMRUN_CHECK(is_fp8(a.dtype) && is_fp8(b.dtype), "fp8_matmul: operands must be FP8");
  LLMRUN_CHECK(!(a.dtype == DType::fp8_e5m2 && b.dtype == DType::fp8_e5m2),
               "fp8_matmul: cuBLASLt has no E5M2 x E5M2 GEMM");
  LLMRUN_CHECK(out.dtype == DType::f32 || out.dtype == DType::bf16,
               "fp8_matmul: out must be f32 or bf16");
  const int64_t m = out.rows(), n = out.cols(), k = a.cols();
  LLMRUN_CHECK(
      a.rows() == m && b.rows() == n && b.cols() == k,
      "fp8_matmul: a " + a.shape_str() + " b " + b.shape_str() + " out " + out.shape_str());
  const float* bias_p = nullptr;
  if (bias) {
    bias_p = cuda::dev_f32(*bias, "fp8_matmul bias");
    LLMRUN_CHECK(bias->numel() == n && out.dtype == DType::f32,
                 "fp8_matmul: bias [N] with an f32 output");
  }
  LLMRUN_CHECK(cuda::fp8_shape_ok(m, n, k), "fp8_matmul: m, n, k must be multiples of 16 (" +
                                                out.shape_str() + ", k " + std::to_string(k) + ")");
  const bool out_bf16 = out.dtype == DType::bf16;

  cuda::GemmKey key;
  key.p = cuda::map_row_major(m, n, k, false, true);  // out = a b^T: cuBLAS A = b (T), B = a (N)
  key.operands = a.dtype == DType::fp8_e5m2   ? cuda::GemmOperands::fp8_e5m2_e4m3
                 : b.dtype == DType::fp8_e5m2 ? cuda::GemmOperands::fp8_e4m3_e5m2
                                              : cuda::GemmOperands::fp8_e4m3_e4m3;
  key.out_bf16 = out_bf16;
  key.align_a = cuda::pointer_alignment(uintptr_t(b.data));
  key.align_b = cuda::pointer_alignment(uintptr_t(a.data));
  key.align_c = cuda::pointer_alignment(uintptr_t(out.data));
  const std::string what = "fp8_matmul (" + key.str() + ")";

  // cuBLAS's A is our b: its dequantisation scale is b's scale_inv, and B's is a's. Full fp32
  // accumulation (fast accumulation sums partial products at lower precision).
  const auto configure = [sa, sb](cublasLtMatmulDesc_t d, const std::string& w) {
    check(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb),
          w);
    check(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa),
          w);
    const int8_t fast_accum = 0;
    check(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                         sizeof fast_accum),
          w);
  };
  const float alpha = 1.0f;  // the scales come through the scale pointers
  cuda::lt_matmul(ctx_, stream_, key,
                  {lt_fp8(b.dtype), lt_fp8(a.dtype), out_bf16 ? CUDA_R_16BF : CUDA_R_32F}, {},
                  configure, &alpha, b.data, a.data, &beta, out.data, what);
  if (bias_p) {
    kernels::add_bias_rows(static_cast<float*>(out.data), bias_p, m, n, stream_);
    check_launch("fp8_matmul bias");
  }
}

}  // namespace llmrun
