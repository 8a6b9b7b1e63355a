// libcublasLt opened with dlopen on first use instead of being linked. Merely loading the
// library costs about 140 MiB of resident memory (its static initialisers fill an 84 MiB .bss
// and dirty ~60 MiB of its data pages), which every CPU-only run (generate, serve of a GGUF
// file) would pay. These definitions stand in for the twelve entry points llmrun calls; each
// resolves the library's own symbol once and forwards to it. The executable does not export
// them, so the library's internal calls still bind to itself.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "util/error.h"

namespace {

// The library, opened once; UserError naming it when it cannot be.
void* cublaslt_library() {
  static void* const lib = [] {
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      throw llmrun::UserError(
          name + " cannot be loaded (the CUDA backend needs it): " + (e ? e : "unknown error"));
    }
    return h;
  }();
  return lib;
}

void* cublaslt_symbol(const char* name) {
  void* f = dlsym(cublaslt_library(), name);
  if (!f)
    throw llmrun::UserError("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR) + " lacks " +
                            name);
  return f;
}

}  // namespace

// The library's function `name`, resolved on the first call (thread-safe static init).
#define LLMRUN_LT(name) \
  static const auto real = reinterpret_cast<decltype(&::name)>(cublaslt_symbol(#name));

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  LLMRUN_LT(cublasLtCreate)
  return real(handle);
}

size_t CUBLASWINAPI cublasLtGetVersion(void) {
  LLMRUN_LT(cublasLtGetVersion)
  return real();
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  LLMRUN_LT(cublasLtMatmul)
  return real(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
              workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  LLMRUN_LT(cublasLtMatmulAlgoGetHeuristic)
  return real(handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  LLMRUN_LT(cublasLtMatmulDescCreate)
  return real(desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  LLMRUN_LT(cublasLtMatmulDescDestroy)
  return real(desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  LLMRUN_LT(cublasLtMatmulDescSetAttribute)
  return real(desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  LLMRUN_LT(cublasLtMatmulPreferenceCreate)
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  LLMRUN_LT(cublasLtMatmulPreferenceDestroy)
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  LLMRUN_LT(cublasLtMatmulPreferenceSetAttribute)
  return real(pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  LLMRUN_LT(cublasLtMatrixLayoutCreate)
  return real(layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  LLMRUN_LT(cublasLtMatrixLayoutDestroy)
  return real(layout);
}

}  // extern "C"
