// Construction, memory, GEMM and whole-tensor reductions of the CPU backend.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_math.h"
#include "backend/op_shapes.h"

namespace llmrun {

using cpu::check_f32;
using cpu::check_same_numel;
using cpu::kParallelMin;

// threads <= 0: OpenMP's default, which honours OMP_NUM_THREADS and is otherwise every core.
CpuBackend::CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_max_threads()) {
  // One pool for both: OpenBLAS's OpenMP build runs its GEMMs on the process's OpenMP
  // threads, and runs single-threaded when called from inside one of our parallel regions.
  omp_set_num_threads(threads_);
  openblas_set_num_threads(threads_);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

Buffer CpuBackend::allocate(size_t bytes) { return Buffer::host(bytes); }

void CpuBackend::copy(Tensor dst, const Tensor& src) {
  LLMRUN_CHECK(dst.dtype == src.dtype, "copy: dtypes differ");
  check_same_numel(dst, src, "copy");
  if (dst.data == src.data || dst.numel() == 0) return;
  std::memmove(dst.data, src.data, dst.bytes());
}

void CpuBackend::copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) {
  LLMRUN_CHECK(dst.dtype == src.dtype && dst.rows() == src.rows(), "copy_cols: shapes differ");
  LLMRUN_CHECK(col_begin >= 0 && col_begin + dst.cols() <= src.cols(),
               "copy_cols: columns out of range");
  const int64_t rows = dst.rows(), width = dst.cols() * int64_t(dtype_size(dst.dtype));
  const int64_t src_stride = src.cols() * int64_t(dtype_size(src.dtype));
  const char* from =
      static_cast<const char*>(src.data) + col_begin * int64_t(dtype_size(src.dtype));
  char* to = static_cast<char*>(dst.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(to + r * width, from + r * src_stride, size_t(width));
}

void CpuBackend::copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) {
  LLMRUN_CHECK(dst.dtype == src.dtype && dst.rows() == src.rows(), "copy_into_cols: shapes differ");
  LLMRUN_CHECK(col_begin >= 0 && col_begin + src.cols() <= dst.cols(),
               "copy_into_cols: columns out of range");
  const int64_t rows = src.rows(), width = src.cols() * int64_t(dtype_size(src.dtype));
  const int64_t dst_stride = dst.cols() * int64_t(dtype_size(dst.dtype));
  char* to = static_cast<char*>(dst.data) + col_begin * int64_t(dtype_size(dst.dtype));
  const char* from = static_cast<const char*>(src.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(to + r * dst_stride, from + r * width, size_t(width));
}

void CpuBackend::fill(Tensor x, float value) {
  const int64_t n = x.numel();
  switch (x.dtype) {
    case DType::f32: {
      float* p = x.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) p[i] = value;
      return;
    }
    case DType::i32: {
      int32_t* p = x.i32();
      const auto v = static_cast<int32_t>(value);
      std::fill(p, p + n, v);
      return;
    }
    case DType::bf16:
    case DType::f16: {
      const uint16_t v = x.dtype == DType::bf16 ? f32_to_bf16(value) : f32_to_f16(value);
      auto* p = static_cast<uint16_t*>(x.data);
      std::fill(p, p + n, v);
      return;
    }
    default:
      LLMRUN_CHECK(false, std::string("fill: unsupported dtype ") + dtype_name(x.dtype));
  }
}

void CpuBackend::cast(Tensor dst, const Tensor& src, float scale) {
  check_same_numel(dst, src, "cast");
  const int64_t n = dst.numel();
  auto is_half = [](DType t) { return t == DType::bf16 || t == DType::f16; };
  if (dst.dtype == DType::f32 && src.dtype == DType::f32) {
    const float* s = src.f32();
    float* d = dst.f32();
#pragma omp parallel for simd num_threads(threads_) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] * scale;
  } else if (is_half(dst.dtype) && src.dtype == DType::f32) {
    const float* s = src.f32();
    auto* d = static_cast<uint16_t*>(dst.data);
    const bool bf = dst.dtype == DType::bf16;
#pragma omp parallel for num_threads(threads_) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      d[i] = bf ? f32_to_bf16(s[i] * scale) : f32_to_f16(s[i] * scale);
  } else if (dst.dtype == DType::f32 && is_half(src.dtype)) {
    const auto* s = static_cast<const uint16_t*>(src.data);
    float* d = dst.f32();
    const bool bf = src.dtype == DType::bf16;
#pragma omp parallel for num_threads(threads_) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) d[i] = (bf ? bf16_to_f32(s[i]) : f16_to_f32(s[i])) * scale;
  } else {
    LLMRUN_CHECK(false, std::string("cast: unsupported ") + dtype_name(src.dtype) + " -> " +
                            dtype_name(dst.dtype));
  }
}

const float* cpu::gemm_operand(const Tensor& x, DType dt, std::vector<float>& scratch,
                               int threads) {
  const float* p = x.f32();
  if (dt == DType::f32) return p;
  const int64_t n = x.numel();
  scratch.resize(size_t(n));
  float* d = scratch.data();
#pragma omp parallel for simd num_threads(threads) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return d;
}

void CpuBackend::matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                        float alpha, float beta, const Tensor* bias) {
  check_f32(out, "matmul out");
  check_f32(a, "matmul a");
  check_f32(b, "matmul b");
  const int64_t m = out.rows(), n = out.cols();
  const int64_t k = check_matmul_shapes(out, a, b, trans_a, trans_b, bias);
  const float* bias_p = nullptr;
  if (bias) {
    check_f32(*bias, "matmul bias");
    bias_p = bias->f32();
  }
  if (m == 0 || n == 0) return;
  float* o = out.f32();
  thread_local std::vector<float> a_scratch, b_scratch;
  const float* a_p = k == 0 ? a.f32() : cpu::gemm_operand(a, gemm_dtype(), a_scratch, threads_);
  const float* b_p = k == 0 ? b.f32() : cpu::gemm_operand(b, gemm_dtype(), b_scratch, threads_);
  // With beta == 0 the bias rides along as the GEMM's C input; otherwise C already holds a
  // value to keep and the bias is added afterwards.
  const bool prefill = bias_p && beta == 0.0f;
  if (prefill) {
#pragma omp parallel for num_threads(threads_) if (m * n > kParallelMin)
    for (int64_t r = 0; r < m; ++r) std::memcpy(o + r * n, bias_p, n * sizeof(float));
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a_p, static_cast<blasint>(a.cols()), b_p,
              static_cast<blasint>(b.cols()), prefill ? 1.0f : beta, o, static_cast<blasint>(n));
  if (bias_p && !prefill) {
#pragma omp parallel for num_threads(threads_) if (m * n > kParallelMin)
    for (int64_t r = 0; r < m; ++r) {
      float* row = o + r * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) row[c] += bias_p[c];
    }
  }
}

void CpuBackend::sum_rows(Tensor out, const Tensor& x, bool accumulate) {
  check_f32(out, "sum_rows out");
  check_f32(x, "sum_rows x");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(out.numel() == cols, "sum_rows: out " + out.shape_str() + " for x " + x.shape_str());
  const float* xp = x.f32();
  float* op = out.f32();
  // Threads own disjoint column ranges, so the sum over rows has a fixed order whatever
  // the thread count.
  const int parts = static_cast<int>(std::clamp<int64_t>(cols / 64, 1, threads_));
#pragma omp parallel num_threads(parts) if (rows * cols > kParallelMin)
  {
    int64_t c0, c1;
    cpu::split_range(cols, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    std::vector<double> acc(c1 - c0, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = xp + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < c1 - c0; ++c) acc[c] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c)
      op[c] = static_cast<float>(accumulate ? op[c] + acc[c - c0] : acc[c - c0]);
  }
}

namespace {

// Whole-tensor reductions run over fixed-size chunks whose partial results are combined
// in chunk order: the result is bitwise identical for any thread count.
constexpr int64_t kReduceChunk = 1 << 15;

template <class ChunkFn>
double chunked_sum(int64_t n, int threads, ChunkFn fn) {
  const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  std::vector<double> part(chunks, 0.0);
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c)
    part[c] = fn(c * kReduceChunk, std::min(n, (c + 1) * kReduceChunk));
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

}  // namespace

double CpuBackend::sum_squares(const Tensor& x) {
  check_f32(x, "sum_squares x");
  const float* p = x.f32();
  return chunked_sum(x.numel(), threads_, [p](int64_t b, int64_t e) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += static_cast<double>(p[i]) * p[i];
    return s;
  });
}

double CpuBackend::sum(const Tensor& x) {
  check_f32(x, "sum x");
  const float* p = x.f32();
  return chunked_sum(x.numel(), threads_, [p](int64_t b, int64_t e) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += p[i];
    return s;
  });
}

float CpuBackend::amax(const Tensor& x) {
  check_f32(x, "amax x");
  const float* p = x.f32();
  const int64_t n = x.numel();
  float m = 0.0f;
  bool nan = false;
#pragma omp parallel for simd num_threads(threads_) reduction(max  \
                                                              : m) \
    reduction(||                                                   \
              : nan) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(p[i]);
    m = std::max(m, a);
    nan = nan || (a != a);
  }
  // A NaN must not hide behind max(): scaling decisions made from amax need to see it.
  return nan ? std::nanf("") : m;
}

void CpuBackend::sum_squares_into(Tensor out, const Tensor& x) {
  LLMRUN_CHECK(out.numel() == 1, "sum_squares_into: out must hold one value");
  check_f32(out, "sum_squares_into out");
  out.f32()[0] += static_cast<float>(sum_squares(x));
}

void CpuBackend::amax_into(Tensor out, const Tensor& x) {
  LLMRUN_CHECK(out.numel() == 1, "amax_into: out must hold one value");
  check_f32(out, "amax_into out");
  const float a = amax(x);
  float& o = out.f32()[0];
  o = (a != a || o != o) ? std::nanf("") : std::max(o, a);
}

void CpuBackend::argmax_rows(Tensor ids, const Tensor& x) {
  check_f32(x, "argmax_rows x");
  LLMRUN_CHECK(ids.numel() == x.rows(), "argmax_rows: ids must hold one id per row of x");
  const int64_t rows = x.rows(), cols = x.cols();
  const float* p = x.f32();
  int32_t* out = ids.i32();
#pragma omp parallel for num_threads(threads_) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    // The first column holding the row's maximum, as a scan keeping the first strictly larger
    // value finds it, in two vectorisable passes (a greedy decode step's whole-vocabulary
    // pick). NaNs never win; a NaN in column 0 does, as that scan never replaces it.
    const float* row = p + r * cols;
    float mx = row[0];
    if (mx == mx) {
#pragma omp simd reduction(max : mx)
      for (int64_t c = 1; c < cols; ++c) mx = row[c] > mx ? row[c] : mx;
    }
    int64_t best = 0;
    if (mx == mx)
      while (best < cols && !(row[best] == mx)) ++best;
    out[r] = static_cast<int32_t>(best < cols ? best : 0);  // cols: every value below -FLT_MAX
  }
}

}  // namespace llmrun
