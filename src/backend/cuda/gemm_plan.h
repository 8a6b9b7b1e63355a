// How a row-major Backend::matmul becomes a column-major cuBLASLt call, and the key its
// algorithm is cached under. Plain C++ (no CUDA headers): unit-tested without a GPU.
//
// Row-major out[M,N] = op(a)[M,K] op(b)[K,N] is, read column-major, out^T[N,M] = op(b)^T op(a)^T:
// cuBLAS's A is our b and its B is our a, with the same transpose flags, m = N, n = M.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace llmrun::cuda {

// The column-major problem handed to cuBLASLt. Stored (pre-op) shapes of its A and B.
struct LtProblem {
  uint64_t m = 0, n = 0, k = 0;  // D is m x n
  bool trans_a = false, trans_b = false;
  uint64_t a_rows = 0, a_cols = 0;
  int64_t lda = 0;
  uint64_t b_rows = 0, b_cols = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;  // C and D
};

// a is stored [K,M] when trans_a else [M,K]; b stored [N,K] when trans_b else [K,N].
LtProblem map_row_major(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b);

// Largest power of two dividing the address, capped at 256 (cuBLASLt's largest alignment
// class); 256 for a null pointer. cuBLASLt's heuristic must be told the real alignment of
// operands that are views into larger buffers, or it may pick a kernel that needs more.
uint32_t pointer_alignment(uintptr_t p);

// Operand types: f32, bf16, or FP8 (first letter: our a, second: our b; cuBLAS sees them
// swapped, gemm_plan's mapping).
enum class GemmOperands : uint8_t { f32, bf16, fp8_e4m3_e4m3, fp8_e5m2_e4m3, fp8_e4m3_e5m2 };

// The fused epilogue (bias alone is `bias` with none; the GELU forms take the bias too when
// `bias` is set).
enum class GemmEpilogue : uint8_t { none, gelu_aux, dgelu };

// Everything the heuristic's choice depends on. Two calls with equal keys can share an algorithm.
struct GemmKey {
  LtProblem p;
  GemmOperands operands = GemmOperands::f32;
  bool bias = false;
  bool out_bf16 = false;  // C and D in bf16 (FP8 GEMMs); f32 otherwise
  GemmEpilogue epilogue = GemmEpilogue::none;
  uint32_t align_aux = 0;  // the GELU forms' auxiliary matrix
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  bool operator==(const GemmKey& o) const;
  std::string str() const;  // for error messages
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

}  // namespace llmrun::cuda
