// One cuBLASLt call, shared by every GEMM of the CUDA backend (cuda_gemm.cpp's matmul and its
// GELU epilogues, cuda_fp8.cpp's FP8 GEMM): the descriptors (held for the call), the
// transposes from the key, an optional epilogue (bias, GELU with its auxiliary pre-activation,
// DGELU), any extra descriptor attributes (FP8 scale pointers), and the heuristic's algorithm
// cached per GemmKey in the device context.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/gemm_plan.h"

namespace llmrun::cuda {

struct LtTypes {
  cudaDataType_t a = CUDA_R_32F, b = CUDA_R_32F;  // cuBLAS's A and B (our b and a)
  cudaDataType_t c = CUDA_R_32F;                  // C and D
};

struct LtEpilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;  // f32 [m] (column-major rows: our output's columns)
  void* aux = nullptr;          // GELU_AUX*: pre-activation out; DGELU: pre-activation in
  int64_t aux_ld = 0;           // leading dimension of aux (column-major, like D's)
};

// Extra descriptor attributes (set after the transposes and the epilogue).
using LtConfigure = std::function<void(cublasLtMatmulDesc_t desc, const std::string& what)>;

// D = alpha op(A) op(B) + beta C, C and D the same matrix, on `stream`, with the epilogue. The
// key must describe the call (types, shape, alignments, epilogue). Returns false, without
// running anything, when the heuristic finds no algorithm and `required` is false (the caller
// falls back); throws when required. Both answers are cached per key.
bool lt_matmul(DeviceContext& ctx, cudaStream_t stream, const GemmKey& key, const LtTypes& types,
               const LtEpilogue& epilogue, const LtConfigure& configure, const float* alpha,
               const void* A, const void* B, const float* beta, void* D, const std::string& what,
               bool required = true);

// The heuristic's preferences for `key`: at most `workspace` bytes of workspace, and the
// alignments of A, B and C/D the key records (what the cached algorithm may assume).
void set_lt_preferences(cublasLtMatmulPreference_t pref, const GemmKey& key, uint64_t workspace,
                        const std::string& what);

}  // namespace llmrun::cuda
