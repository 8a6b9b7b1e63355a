// The one cuBLASLt call path (see cuda_lt_matmul.h).
#include "backend/cuda/cuda_lt_matmul.h"

#include <stdexcept>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace llmrun::cuda {

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

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v,
         const std::string& what) {
  check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v), what);
}

}  // namespace

void set_lt_preferences(cublasLtMatmulPreference_t pref, const GemmKey& key, uint64_t workspace,
                        const std::string& what) {
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof workspace),
        what);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attr, v] : aligns)
    check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v), what);
}

bool lt_matmul(DeviceContext& ctx, cudaStream_t stream, const GemmKey& key, const LtTypes& types,
               const LtEpilogue& epilogue, const LtConfigure& configure, const float* alpha,
               const void* A, const void* B, const float* beta, void* D, const std::string& what,
               bool required) {
  OpDesc desc;
  // CUBLAS_COMPUTE_32F without FAST_TF32: full fp32 products (the parity mode), and fp32
  // accumulation for bf16 and FP8 operands.
  check(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  set(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, key.p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, what);
  set(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, key.p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, what);
  if (epilogue.kind != CUBLASLT_EPILOGUE_DEFAULT) {
    set(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue.kind, what);
    if (epilogue.bias) {
      set(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, epilogue.bias, what);
      set(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F, what);
    }
    if (epilogue.aux) {
      set(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, epilogue.aux, what);
      set(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, epilogue.aux_ld, what);
      set(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_32F, what);
    }
  }
  if (configure) configure(desc.d, what);
  Layout la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la.l, types.a, key.p.a_rows, key.p.a_cols, key.p.lda), what);
  check(cublasLtMatrixLayoutCreate(&lb.l, types.b, key.p.b_rows, key.p.b_cols, key.p.ldb), what);
  check(cublasLtMatrixLayoutCreate(&lc.l, types.c, key.p.m, key.p.n, key.p.ldc), what);

  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(ctx.algo_mu);
    if (ctx.no_algo.count(key)) {
      if (required) throw std::runtime_error("cuBLASLt has no algorithm for " + what);
      return false;
    }
    auto it = ctx.algos.find(key);
    if (it != ctx.algos.end()) {
      algo = it->second;
    } else {
      Pref pref;
      check(cublasLtMatmulPreferenceCreate(&pref.p), what);
      set_lt_preferences(pref.p, key, ctx.gemm_workspace_bytes, what);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc.d, la.l, lb.l, lc.l,
                                                              lc.l, pref.p, 1, &result, &found);
      // NOT_SUPPORTED: no kernel takes this epilogue, type or alignment combination.
      if (s != CUBLAS_STATUS_NOT_SUPPORTED) check(s, what);
      if (s == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
        ctx.no_algo.insert(key);
        if (required) throw std::runtime_error("cuBLASLt has no algorithm for " + what);
        return false;
      }
      algo = result.algo;
      ctx.algos.emplace(key, algo);
    }
  }
  check(cublasLtMatmul(ctx.lt, desc.d, alpha, A, la.l, B, lb.l, beta, D, lc.l, D, lc.l, &algo,
                       ctx.gemm_workspace, ctx.gemm_workspace_bytes, stream),
        what);
  return true;
}

}  // namespace llmrun::cuda
