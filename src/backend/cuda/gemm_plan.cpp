// Row-major -> column-major GEMM mapping and the algorithm-cache key (see gemm_plan.h).
#include "backend/cuda/gemm_plan.h"

#include <functional>

namespace llmrun::cuda {

LtProblem map_row_major(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  LtProblem p;
  p.m = uint64_t(N);
  p.n = uint64_t(M);
  p.k = uint64_t(K);
  // cuBLAS A = our b. Row-major [K,N] (no trans) is column-major N x K with ld N; row-major
  // [N,K] (trans) is column-major K x N with ld K, transposed by the op.
  p.trans_a = trans_b;
  p.a_rows = trans_b ? uint64_t(K) : uint64_t(N);
  p.a_cols = trans_b ? uint64_t(N) : uint64_t(K);
  p.lda = int64_t(p.a_rows);
  // cuBLAS B = our a: row-major [M,K] is column-major K x M (ld K); [K,M] (trans) is M x K.
  p.trans_b = trans_a;
  p.b_rows = trans_a ? uint64_t(M) : uint64_t(K);
  p.b_cols = trans_a ? uint64_t(K) : uint64_t(M);
  p.ldb = int64_t(p.b_rows);
  p.ldc = N;
  // A zero leading dimension is invalid even for an empty matrix.
  if (p.lda == 0) p.lda = 1;
  if (p.ldb == 0) p.ldb = 1;
  if (p.ldc == 0) p.ldc = 1;
  return p;
}

uint32_t pointer_alignment(uintptr_t p) {
  uint32_t a = 1;
  while (a < 256 && (p & (uintptr_t(a) * 2 - 1)) == 0) a *= 2;
  return p == 0 ? 256 : a;
}

namespace {

const char* operands_name(GemmOperands o) {
  switch (o) {
    case GemmOperands::f32:
      return " f32";
    case GemmOperands::bf16:
      return " bf16";
    case GemmOperands::fp8_e4m3_e4m3:
      return " e4m3 x e4m3";
    case GemmOperands::fp8_e5m2_e4m3:
      return " e5m2 x e4m3";
    case GemmOperands::fp8_e4m3_e5m2:
      return " e4m3 x e5m2";
  }
  return " ?";
}

}  // namespace

bool GemmKey::operator==(const GemmKey& o) const {
  return p.m == o.p.m && p.n == o.p.n && p.k == o.p.k && p.trans_a == o.p.trans_a &&
         p.trans_b == o.p.trans_b && p.lda == o.p.lda && p.ldb == o.p.ldb && p.ldc == o.p.ldc &&
         operands == o.operands && bias == o.bias && out_bf16 == o.out_bf16 &&
         epilogue == o.epilogue && align_aux == o.align_aux && align_a == o.align_a &&
         align_b == o.align_b && align_c == o.align_c;
}

std::string GemmKey::str() const {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         (p.trans_a ? " transA" : "") + (p.trans_b ? " transB" : "") + operands_name(operands) +
         (out_bf16 ? " ->bf16" : "") + (bias ? " +bias" : "") +
         (epilogue == GemmEpilogue::gelu_aux ? " +gelu(aux)"
          : epilogue == GemmEpilogue::dgelu  ? " *dgelu(aux)"
                                             : "") +
         " align=" + std::to_string(align_a) + "/" + std::to_string(align_b) + "/" +
         std::to_string(align_c);
}

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  size_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ std::hash<uint64_t>{}(v)) * 1099511628211ull; };
  mix(k.p.m);
  mix(k.p.n);
  mix(k.p.k);
  mix(uint64_t(k.p.lda));
  mix(uint64_t(k.p.ldb));
  mix(uint64_t(k.p.ldc));
  mix((uint64_t(k.p.trans_a) << 0) | (uint64_t(k.p.trans_b) << 1) | (uint64_t(k.bias) << 2) |
      (uint64_t(k.operands) << 3) | (uint64_t(k.out_bf16) << 8));
  mix((uint64_t(k.align_a) << 32) | (uint64_t(k.align_b) << 16) | k.align_c);
  mix((uint64_t(k.epilogue) << 32) | k.align_aux);
  return h;
}

}  // namespace llmrun::cuda
