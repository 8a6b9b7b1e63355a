// `llmrun bench gemm`'s cuBLASLt timings (cuda_gemm_bench.h).
#include "backend/cuda/cuda_gemm_bench.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_lt_matmul.h"
#include "backend/cuda/fp8_support.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/device_streams.h"
#include "backend/fp8_gemm.h"
#include "util/error.h"

namespace llmrun::cuda {

namespace {

enum class Fill { f32, bf16, e4m3 };

// Seeded random operands in [-1, 1) (E4M3: finite patterns of magnitude below 2^-1 or so),
// copied to the device.
Buffer random_buffer(Backend& be, int64_t count, Fill kind, uint64_t seed) {
  const size_t elem = kind == Fill::f32 ? 4 : kind == Fill::bf16 ? 2 : 1;
  Buffer buf = be.allocate(size_t(count) * elem);
  std::vector<uint8_t> host(size_t(count) * elem);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = uint32_t(s >> 33);
    const float f = float(r) / float(1u << 31) * 2.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (kind == Fill::f32)
      std::memcpy(&host[size_t(i) * 4], &f, 4);
    else if (kind == Fill::bf16) {
      const uint16_t h = uint16_t(bits >> 16);
      std::memcpy(&host[size_t(i) * 2], &h, 2);
    } else {
      host[size_t(i)] = uint8_t((r & 0x80u) | (r % 0x38u));  // sign, exponent < 7: finite
    }
  }
  check(cudaMemcpy(buf.data(), host.data(), host.size(), cudaMemcpyHostToDevice),
        "bench gemm operand upload");
  return buf;
}

// A zeroed f32 output (C and D; bf16 outputs use the first half).
Buffer zero_output(Backend& be, int64_t count) {
  Buffer buf = be.allocate(size_t(count) * 4);
  be.fill(buf.as(DType::f32, {count}), 0.0f);
  return buf;
}

// Mean milliseconds of `repeat` back-to-back calls on `stream`, after two untimed calls.
double time_ms(cudaStream_t stream, int repeat, const std::function<void()>& call) {
  call();
  call();
  cudaEvent_t e0, e1;
  check(cudaEventCreateWithFlags(&e0, cudaEventDefault), "bench gemm event");
  check(cudaEventCreateWithFlags(&e1, cudaEventDefault), "bench gemm event");
  check(cudaEventRecord(e0, stream), "bench gemm event");
  for (int i = 0; i < repeat; ++i) call();
  check(cudaEventRecord(e1, stream), "bench gemm event");
  check(cudaEventSynchronize(e1), "bench gemm event");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, e0, e1), "bench gemm event");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return double(ms) / std::max(1, repeat);
}

// One cuBLASLt problem with its descriptors held, as cuda_lt_matmul builds them (same compute
// type, transposes, alignments and workspace limit), for timing the heuristic's algorithms.
struct LtProblemDescs {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtProblemDescs(const GemmKey& key, const LtTypes& t, uint64_t workspace, const float* a_scale,
                 const float* b_scale, bool fast_accum) {
    const std::string what = "bench gemm descriptors";
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    const cublasOperation_t ta = key.p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            tb = key.p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
    if (a_scale)
      check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                           sizeof a_scale),
            what);
    if (b_scale)
      check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                           sizeof b_scale),
            what);
    if (a_scale || b_scale) {
      const int8_t fast = fast_accum ? 1 : 0;
      check(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
          what);
    }
    check(cublasLtMatrixLayoutCreate(&la, t.a, key.p.a_rows, key.p.a_cols, key.p.lda), what);
    check(cublasLtMatrixLayoutCreate(&lb, t.b, key.p.b_rows, key.p.b_cols, key.p.ldb), what);
    check(cublasLtMatrixLayoutCreate(&lc, t.c, key.p.m, key.p.n, key.p.ldc), what);
    check(cublasLtMatmulPreferenceCreate(&pref), what);
    set_lt_preferences(pref, key, workspace, what);
  }
  ~LtProblemDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
  LtProblemDescs(const LtProblemDescs&) = delete;
  LtProblemDescs& operator=(const LtProblemDescs&) = delete;
};

// The heuristic's first `top` answers for the problem, each timed on A, B, D. Returns
// {"algos": [{ms, workspace_bytes}...], "best_ms", "best_index"} and, when `chosen` is one of
// them, "chosen_index" (-1 otherwise).
nlohmann::json time_algorithms(DeviceContext& ctx, const GemmKey& key, const LtTypes& types,
                               const void* A, const void* B, void* D, float beta, int top,
                               int repeat, const cublasLtMatmulAlgo_t* chosen,
                               const float* a_scale = nullptr, const float* b_scale = nullptr,
                               bool fast_accum = false) {
  LtProblemDescs p(key, types, ctx.gemm_workspace_bytes, a_scale, b_scale, fast_accum);
  std::vector<cublasLtMatmulHeuristicResult_t> results(size_t(std::max(1, top)));
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, p.desc, p.la, p.lb, p.lc, p.lc, p.pref, int(results.size()), results.data(), &found);
  nlohmann::json algos = nlohmann::json::array();
  double best = std::numeric_limits<double>::infinity();
  int best_index = -1, chosen_index = -1;
  if (s == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i) {
      const cublasLtMatmulAlgo_t algo = results[size_t(i)].algo;
      if (chosen && std::memcmp(&algo, chosen, sizeof algo) == 0 && chosen_index < 0)
        chosen_index = i;
      const float alpha = 1.0f;
      double ms = std::numeric_limits<double>::quiet_NaN();
      // An algorithm the heuristic offered may still refuse to run: recorded, not fatal.
      const cublasStatus_t first =
          cublasLtMatmul(ctx.lt, p.desc, &alpha, A, p.la, B, p.lb, &beta, D, p.lc, D, p.lc, &algo,
                         ctx.gemm_workspace, ctx.gemm_workspace_bytes, ctx.stream);
      if (first == CUBLAS_STATUS_SUCCESS) {
        ms = time_ms(ctx.stream, repeat, [&] {
          check(cublasLtMatmul(ctx.lt, p.desc, &alpha, A, p.la, B, p.lb, &beta, D, p.lc, D, p.lc,
                               &algo, ctx.gemm_workspace, ctx.gemm_workspace_bytes, ctx.stream),
                "bench gemm candidate");
        });
        if (ms < best) best = ms, best_index = i;
      }
      algos.push_back({{"index", i},
                       {"ms", first == CUBLAS_STATUS_SUCCESS ? nlohmann::json(ms) : nullptr},
                       {"workspace_bytes", results[size_t(i)].workspaceSize}});
    }
  return {{"algos", algos},
          {"heuristic_status", int(s)},
          {"best_ms", best_index >= 0 ? nlohmann::json(best) : nullptr},
          {"best_index", best_index},
          {"chosen_index", chosen_index}};
}

// The algorithm cuda_lt_matmul cached for `key` (it has run once), or null.
bool cached_algo(DeviceContext& ctx, const GemmKey& key, cublasLtMatmulAlgo_t& out) {
  std::lock_guard<std::mutex> lock(ctx.algo_mu);
  auto it = ctx.algos.find(key);
  if (it == ctx.algos.end()) return false;
  out = it->second;
  return true;
}

DeviceContext& context_of(Backend& be) {
  DeviceStreams* ds = device_streams(&be);
  if (!ds || be.device() != Device::cuda)
    throw UserError("bench gemm: needs the CUDA backend (--backend cuda), not " + be.name());
  return device_context(ds->device_ordinal());
}

double tflops(int64_t m, int64_t n, int64_t k, double ms) {
  return 2.0 * double(m) * double(n) * double(k) / (ms * 1e-3) / 1e12;
}

// The key cuda_gemm.cpp's gemm() builds for this call (no bias).
GemmKey key_for(const GemmBenchShape& s, bool bf16, const void* a, const void* b, const void* d) {
  GemmKey key;
  key.p = map_row_major(s.m, s.n, s.k, s.trans_a, s.trans_b);
  key.operands = bf16 ? GemmOperands::bf16 : GemmOperands::f32;
  key.align_a = pointer_alignment(uintptr_t(b));  // cuBLAS's A is our b
  key.align_b = pointer_alignment(uintptr_t(a));
  key.align_c = pointer_alignment(uintptr_t(d));
  return key;
}

}  // namespace

nlohmann::json gemm_algo_bench(Backend& be, const std::vector<GemmBenchShape>& shapes,
                               const GemmBenchOptions& o) {
  DeviceContext& ctx = context_of(be);
  const bool bf16 = be.gemm_dtype() == DType::bf16;
  const Fill op_fill = bf16 ? Fill::bf16 : Fill::f32;
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  Fp8GemmOps* fp8 = o.fp8 ? fp8_gemm_ops(be) : nullptr;
  std::string fp8_why = o.fp8 ? (fp8 ? fp8->fp8_unsupported() : "not an FP8 backend") : "";
  nlohmann::json rows = nlohmann::json::array();
  uint64_t seed = 1;
  for (const GemmBenchShape& s : shapes) {
    const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
    const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
    Buffer a = random_buffer(be, a_rows * a_cols, op_fill, seed++);
    Buffer b = random_buffer(be, b_rows * b_cols, op_fill, seed++);
    Buffer d = zero_output(be, s.m * s.n);
    const GemmKey key = key_for(s, bf16, a.data(), b.data(), d.data());
    const std::string what = "bench gemm " + s.name + " (" + key.str() + ")";
    const float alpha = 1.0f, beta = s.beta;
    // The backend's own call path: descriptors per call, the cached heuristic choice.
    auto backend_call = [&] {
      lt_matmul(ctx, ctx.stream, key, {t, t, CUDA_R_32F}, {}, {}, &alpha, b.data(), a.data(), &beta,
                d.data(), what);
    };
    const double backend_ms = time_ms(ctx.stream, o.repeat, backend_call);
    cublasLtMatmulAlgo_t chosen;
    const bool have_chosen = cached_algo(ctx, key, chosen);
    nlohmann::json cand =
        time_algorithms(ctx, key, {t, t, CUDA_R_32F}, b.data(), a.data(), d.data(), beta, o.top,
                        o.repeat, have_chosen ? &chosen : nullptr);
    nlohmann::json row = {{"name", s.name},
                          {"m", s.m},
                          {"n", s.n},
                          {"k", s.k},
                          {"trans_a", s.trans_a},
                          {"trans_b", s.trans_b},
                          {"beta", s.beta},
                          {"operands", bf16 ? "bf16" : "f32"},
                          {"llmrun_ms", backend_ms},
                          {"llmrun_tflops", tflops(s.m, s.n, s.k, backend_ms)},
                          {"candidates", cand["algos"].size()},
                          {"best_ms", cand["best_ms"]},
                          {"best_index", cand["best_index"]},
                          {"chosen_index", cand["chosen_index"]},
                          {"algos", cand["algos"]}};
    if (cand["best_ms"].is_number()) {
      const double best = cand["best_ms"].get<double>();
      row["best_tflops"] = tflops(s.m, s.n, s.k, best);
      row["llmrun_over_best"] = backend_ms / best;
    }
    a = Buffer();
    b = Buffer();
    // Backend::matmul as training calls it: f32 tensors, each operand rounded per call in bf16.
    {
      Buffer af = random_buffer(be, a_rows * a_cols, Fill::f32, seed++);
      Buffer bf = random_buffer(be, b_rows * b_cols, Fill::f32, seed++);
      const Tensor ta = af.as(DType::f32, {a_rows, a_cols}),
                   tb = bf.as(DType::f32, {b_rows, b_cols});
      const Tensor td = d.as(DType::f32, {s.m, s.n});
      const double ms = time_ms(ctx.stream, o.repeat,
                                [&] { be.matmul(td, ta, tb, s.trans_a, s.trans_b, 1.0f, s.beta); });
      row["matmul_with_rounding_ms"] = ms;
      // FP8 at the forward shapes: out = x w^T with x [m, k], w [n, k].
      if (fp8 && fp8_why.empty() && !s.trans_a && s.trans_b && s.beta == 0.0f &&
          fp8->fp8_shape_supported(s.m, s.n, s.k)) {
        Buffer xq = random_buffer(be, s.m * s.k, Fill::e4m3, seed++);
        Buffer wq = random_buffer(be, s.n * s.k, Fill::e4m3, seed++);
        Buffer one = be.allocate(4);
        const Tensor tone = one.as(DType::f32, {1});
        be.fill(tone, 1.0f);
        const Tensor txq = xq.as(DType::fp8_e4m3, {s.m, s.k}),
                     twq = wq.as(DType::fp8_e4m3, {s.n, s.k});
        const double gemm_ms = time_ms(ctx.stream, o.repeat, [&] {
          fp8->fp8_matmul(td, txq, twq, tone, tone, 0.0f, nullptr);
        });
        const double with_cast_ms = time_ms(ctx.stream, o.repeat, [&] {
          fp8->fp8_cast_transpose(txq, Tensor(), Tensor(), Tensor(), ta, tone, DType::fp8_e4m3);
          fp8->fp8_cast_transpose(twq, Tensor(), Tensor(), Tensor(), tb, tone, DType::fp8_e4m3);
          fp8->fp8_matmul(td, txq, twq, tone, tone, 0.0f, nullptr);
        });
        row["fp8_ms"] = gemm_ms;
        row["fp8_tflops"] = tflops(s.m, s.n, s.k, gemm_ms);
        row["fp8_with_casts_ms"] = with_cast_ms;
      }
    }
    rows.push_back(row);
  }
  nlohmann::json out = {{"operands", bf16 ? "bf16" : "f32"},
                        {"top", o.top},
                        {"repeat", o.repeat},
                        {"workspace_bytes", ctx.gemm_workspace_bytes},
                        {"shapes", rows}};
  if (o.fp8) out["fp8"] = fp8_why.empty() ? "measured" : fp8_why;
  return out;
}

nlohmann::json gemm_peaks(Backend& be, int64_t n, int top, int repeat) {
  DeviceContext& ctx = context_of(be);
  nlohmann::json out = {{"n", n}, {"repeat", repeat}, {"top", top}};
  GemmBenchShape s{"peak", n, n, n, false, true, 0.0f};
  {
    Buffer a = random_buffer(be, n * n, Fill::bf16, 101),
           b = random_buffer(be, n * n, Fill::bf16, 102);
    Buffer d = zero_output(be, n * n);
    const GemmKey key = key_for(s, true, a.data(), b.data(), d.data());
    const float alpha = 1.0f, beta = 0.0f;
    const LtTypes f32_out{CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F};
    const double backend_ms = time_ms(ctx.stream, repeat, [&] {
      lt_matmul(ctx, ctx.stream, key, f32_out, {}, {}, &alpha, b.data(), a.data(), &beta, d.data(),
                "bench gemm peak");
    });
    cublasLtMatmulAlgo_t chosen;
    const bool have = cached_algo(ctx, key, chosen);
    nlohmann::json c = time_algorithms(ctx, key, f32_out, b.data(), a.data(), d.data(), 0.0f, top,
                                       repeat, have ? &chosen : nullptr);
    out["bf16_f32_out"] = {
        {"llmrun_tflops", tflops(n, n, n, backend_ms)},
        {"best_tflops", c["best_ms"].is_number()
                            ? nlohmann::json(tflops(n, n, n, c["best_ms"].get<double>()))
                            : nullptr},
        {"chosen_index", c["chosen_index"]},
        {"best_index", c["best_index"]}};
    GemmKey key16 = key;
    key16.out_bf16 = true;
    nlohmann::json c16 = time_algorithms(ctx, key16, {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF},
                                         b.data(), a.data(), d.data(), 0.0f, top, repeat, nullptr);
    out["bf16_bf16_out"] = {
        {"best_tflops", c16["best_ms"].is_number()
                            ? nlohmann::json(tflops(n, n, n, c16["best_ms"].get<double>()))
                            : nullptr},
        {"best_index", c16["best_index"]}};
    double peak = 0;
    for (const auto* j : {&out["bf16_f32_out"], &out["bf16_bf16_out"]})
      if ((*j)["best_tflops"].is_number()) peak = std::max(peak, (*j)["best_tflops"].get<double>());
    out["bf16_peak_tflops"] = peak;
  }
  Fp8GemmOps* fp8 = fp8_gemm_ops(be);
  const std::string why = fp8 ? fp8->fp8_unsupported() : "not an FP8 backend";
  if (!why.empty() || !fp8_shape_ok(n, n, n)) {
    out["fp8"] = why.empty() ? "n must be a multiple of 16" : why;
    return out;
  }
  out["fp8"] = "measured";
  Buffer a = random_buffer(be, n * n, Fill::e4m3, 111),
         b = random_buffer(be, n * n, Fill::e4m3, 112);
  Buffer d = zero_output(be, n * n);
  Buffer one = be.allocate(4);
  const Tensor tone = one.as(DType::f32, {1});
  be.fill(tone, 1.0f);
  // The backend's FP8 GEMM (f32 output, fast accumulation off), as training runs it.
  const Tensor ta = a.as(DType::fp8_e4m3, {n, n}), tb = b.as(DType::fp8_e4m3, {n, n});
  const Tensor td = d.as(DType::f32, {n, n});
  const double backend_ms =
      time_ms(ctx.stream, repeat, [&] { fp8->fp8_matmul(td, ta, tb, tone, tone, 0.0f, nullptr); });
  out["fp8_llmrun"] = {
      {"tflops", tflops(n, n, n, backend_ms)},
      {"what", "the backend's fp8_matmul: E4M3 x E4M3, f32 out, fast accumulation off"}};
  // The card's best: bf16 output, fast accumulation on (Transformer Engine's forward GEMMs).
  GemmKey key;
  key.p = map_row_major(n, n, n, false, true);
  key.operands = GemmOperands::fp8_e4m3_e4m3;
  key.out_bf16 = true;
  key.align_a = pointer_alignment(uintptr_t(b.data()));
  key.align_b = pointer_alignment(uintptr_t(a.data()));
  key.align_c = pointer_alignment(uintptr_t(d.data()));
  const float* sp = static_cast<const float*>(one.data());
  nlohmann::json c =
      time_algorithms(ctx, key, {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF}, b.data(), a.data(),
                      d.data(), 0.0f, top, repeat, nullptr, sp, sp, /*fast_accum=*/true);
  const double best_fast =
      c["best_ms"].is_number() ? tflops(n, n, n, c["best_ms"].get<double>()) : 0.0;
  out["fp8_bf16_out_fast_accum"] = {{"best_tflops", best_fast}, {"best_index", c["best_index"]}};
  out["fp8_peak_tflops"] = std::max(best_fast, out["fp8_llmrun"]["tflops"].get<double>());
  return out;
}

}  // namespace llmrun::cuda
