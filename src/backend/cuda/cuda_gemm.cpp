// GEMMs of the CUDA backend: matmul through cuBLASLt (f32 with TF32 off, or bf16 operands with
// f32 accumulation and output; bias through the BIAS epilogue; the heuristic's algorithm cached
// per shape key, gemm_plan.h), and the batch-invariant inference linear (kernels/linear_rows.cuh
// explains why it is not cuBLAS).
#include <memory>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/op_shapes.h"
#include "kernels/elementwise.cuh"
#include "kernels/linear_rows.cuh"

namespace llmrun {

using cuda::check;
using cuda::check_launch;
using cuda::dev_f32;

namespace {

// RAII holders of the cuBLASLt descriptors of one call.
struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~OpDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

// Bias epilogue pointers must be aligned to the element size at least; cuBLASLt's bias kernels
// read vectors, so anything below 16 bytes falls back to a separate broadcast add.
constexpr uint32_t kBiasAlignment = 16;

}  // namespace

void CudaBackend::matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                         float alpha, float beta, const Tensor* bias) {
  float* o = dev_f32(out, "matmul out");
  const float* ap = dev_f32(a, "matmul a");
  const float* bp = dev_f32(b, "matmul b");
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
  Buffer a16, b16;
  const void* a_op = ap;
  const void* b_op = bp;
  if (bf16) {
    a16 = to_bf16(a, "matmul a");
    b16 = to_bf16(b, "matmul b");
    a_op = a16.data();
    b_op = b16.data();
  }
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
  OpDesc desc;
  // CUBLAS_COMPUTE_32F without FAST_TF32: full fp32 products, the parity mode.
  check(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  const cublasOperation_t ta = key.p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
  check(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
  if (epilogue_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
          what);
    check(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p,
                                         sizeof bias_p),
          what);
    const cudaDataType_t bias_type = CUDA_R_32F;
    check(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof bias_type),
          what);
  }
  Layout la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la.l, ab_type, key.p.a_rows, key.p.a_cols, key.p.lda), what);
  check(cublasLtMatrixLayoutCreate(&lb.l, ab_type, key.p.b_rows, key.p.b_cols, key.p.ldb), what);
  check(cublasLtMatrixLayoutCreate(&lc.l, CUDA_R_32F, key.p.m, key.p.n, key.p.ldc), what);

  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(ctx_.algo_mu);
    auto it = ctx_.algos.find(key);
    if (it != ctx_.algos.end()) {
      algo = it->second;
    } else {
      Pref pref;
      check(cublasLtMatmulPreferenceCreate(&pref.p), what);
      const uint64_t ws = ctx_.gemm_workspace_bytes;
      check(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws),
            what);
      const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
      for (const auto& [attr, v] : aligns)
        check(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &v, sizeof v), what);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(ctx_.lt, desc.d, la.l, lb.l, lc.l, lc.l, pref.p, 1,
                                           &result, &found),
            what);
      if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for " + what);
      algo = result.algo;
      ctx_.algos.emplace(key, algo);
    }
  }
  check(cublasLtMatmul(ctx_.lt, desc.d, &alpha, b_op, la.l, a_op, lb.l, &beta, o, lc.l, o, lc.l,
                       &algo, ctx_.gemm_workspace, ctx_.gemm_workspace_bytes, stream_),
        what);
  if (bias_p && !epilogue_bias) {
    kernels::add_bias_rows(o, bias_p, m, n, stream_);
    check_launch("matmul bias");
  }
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
