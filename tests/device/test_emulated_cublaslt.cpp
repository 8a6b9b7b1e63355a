// The emulated cuBLASLt (emulated_cublaslt.cpp) against hand-computed values and a naive
// row-major reference written here. The library is dlopened by path and called through
// dlsym'd pointers, as llmrun's loader does. This executable exports llmrun_emu_memory_kind
// (ENABLE_EXPORTS), so the library's device-memory check is on: every operand lives in a Dev
// buffer, registered as "device memory" for exactly its bytes.
#include <cublasLt.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#ifndef LLMRUN_EMULATED_CUBLASLT
#error "LLMRUN_EMULATED_CUBLASLT must name the emulated libcublasLt.so.<major>"
#endif

// ---- emulated device memory ----

namespace {
std::mutex g_mu;
std::vector<std::pair<uintptr_t, size_t>> g_device;  // [begin, begin + bytes)
}  // namespace

extern "C" __attribute__((visibility("default"))) int llmrun_emu_memory_kind(const void* p,
                                                                             size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  for (const auto& [begin, size] : g_device)
    if (b >= begin && b + bytes <= begin + size) return 1;
  return 0;
}

namespace {

// n elements of T in "device memory", `offset` bytes past a 256-byte boundary.
template <class T>
struct Dev {
  void* base;
  T* p;
  size_t n;
  explicit Dev(size_t count, size_t offset = 0) : n(count) {
    base = std::aligned_alloc(256, (count * sizeof(T) + offset + 255) / 256 * 256 + 256);
    p = reinterpret_cast<T*>(static_cast<char*>(base) + offset);
    std::lock_guard<std::mutex> lock(g_mu);
    g_device.push_back({reinterpret_cast<uintptr_t>(p), count * sizeof(T)});
  }
  Dev(const std::vector<T>& v, size_t offset = 0) : Dev(v.size(), offset) {
    std::memcpy(p, v.data(), v.size() * sizeof(T));
  }
  ~Dev() {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      std::erase(g_device, std::pair{reinterpret_cast<uintptr_t>(p), n * sizeof(T)});
    }
    std::free(base);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const { return std::vector<T>(p, p + n); }
};

// ---- the library, through dlsym ----

struct Lt {
  void* lib = nullptr;
#define LT_FN(name) decltype(&::name) name = nullptr;
  LT_FN(cublasLtCreate)
  LT_FN(cublasLtDestroy)
  LT_FN(cublasLtGetVersion)
  LT_FN(cublasLtMatmul)
  LT_FN(cublasLtMatmulAlgoGetHeuristic)
  LT_FN(cublasLtMatmulDescCreate)
  LT_FN(cublasLtMatmulDescDestroy)
  LT_FN(cublasLtMatmulDescSetAttribute)
  LT_FN(cublasLtMatmulPreferenceCreate)
  LT_FN(cublasLtMatmulPreferenceDestroy)
  LT_FN(cublasLtMatmulPreferenceSetAttribute)
  LT_FN(cublasLtMatrixLayoutCreate)
  LT_FN(cublasLtMatrixLayoutDestroy)
#undef LT_FN
  cublasLtHandle_t handle = nullptr;
};

const Lt& lt() {
  static const Lt l = [] {
    Lt r;
    r.lib = dlopen(LLMRUN_EMULATED_CUBLASLT, RTLD_NOW | RTLD_LOCAL);
    if (!r.lib) {
      ADD_FAILURE() << "dlopen " << LLMRUN_EMULATED_CUBLASLT << ": " << dlerror();
      std::abort();
    }
#define LT_SYM(name)                                                 \
  r.name = reinterpret_cast<decltype(&::name)>(dlsym(r.lib, #name)); \
  if (!r.name) std::abort();
    LT_SYM(cublasLtCreate)
    LT_SYM(cublasLtDestroy)
    LT_SYM(cublasLtGetVersion)
    LT_SYM(cublasLtMatmul)
    LT_SYM(cublasLtMatmulAlgoGetHeuristic)
    LT_SYM(cublasLtMatmulDescCreate)
    LT_SYM(cublasLtMatmulDescDestroy)
    LT_SYM(cublasLtMatmulDescSetAttribute)
    LT_SYM(cublasLtMatmulPreferenceCreate)
    LT_SYM(cublasLtMatmulPreferenceDestroy)
    LT_SYM(cublasLtMatmulPreferenceSetAttribute)
    LT_SYM(cublasLtMatrixLayoutCreate)
    LT_SYM(cublasLtMatrixLayoutDestroy)
#undef LT_SYM
    if (r.cublasLtCreate(&r.handle) != CUBLAS_STATUS_SUCCESS) std::abort();
    return r;
  }();
  return l;
}

constexpr cublasStatus_t kNotRun = cublasStatus_t(-1);

// One cuBLASLt GEMM, set up the way llmrun's lt_matmul does: descriptor, layouts, preference
// (workspace and alignments), heuristic, matmul with C == D unless told otherwise.
struct Call {
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, c_type = CUDA_R_32F;
  bool ta = false, tb = false;
  uint64_t m = 1, n = 1, k = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;  // 0: the stored rows
  int64_t ldd = 0;                    // 0: ldc
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  uint32_t align[4] = {256, 256, 256, 256};
  float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t heuristic = kNotRun, matmul = kNotRun;

  uint64_t a_rows() const { return ta ? k : m; }
  uint64_t a_cols() const { return ta ? m : k; }
  uint64_t b_rows() const { return tb ? n : k; }
  uint64_t b_cols() const { return tb ? k : n; }
  int64_t lda_() const { return lda ? lda : int64_t(a_rows()); }
  int64_t ldb_() const { return ldb ? ldb : int64_t(b_rows()); }
  int64_t ldc_() const { return ldc ? ldc : int64_t(m); }

  // D defaults to C (in place).
  void run(const void* A, const void* B, const void* C, void* D = nullptr) {
    const Lt& L = lt();
    if (!D) D = const_cast<void*>(C);
    cublasLtMatmulDesc_t desc;
    ASSERT_EQ(L.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& v) {
      ASSERT_EQ(L.cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v), 0) << attr;
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(ta ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(tb ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epi));
    if (bias) {
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F));
    }
    if (aux) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t(CUDA_R_32F));
    }
    if (a_scale) set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    if (b_scale) set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    cublasLtMatrixLayout_t la, lb, lc, ld;
    ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&la, a_type, a_rows(), a_cols(), lda_()), 0);
    ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&lb, b_type, b_rows(), b_cols(), ldb_()), 0);
    ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&lc, c_type, m, n, ldc_()), 0);
    ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&ld, c_type, m, n, ldd ? ldd : ldc_()), 0);
    cublasLtMatmulPreference_t pref;
    ASSERT_EQ(L.cublasLtMatmulPreferenceCreate(&pref), 0);
    const uint64_t ws = 1 << 20;
    ASSERT_EQ(L.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof ws),
              0);
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(
          L.cublasLtMatmulPreferenceSetAttribute(
              pref,
              cublasLtMatmulPreferenceAttributes_t(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
              &align[i], sizeof align[i]),
          0);
    cublasLtMatmulHeuristicResult_t result{};
    int found = -1;
    heuristic =
        L.cublasLtMatmulAlgoGetHeuristic(L.handle, desc, la, lb, lc, ld, pref, 1, &result, &found);
    if (heuristic == CUBLAS_STATUS_SUCCESS && found == 0) heuristic = CUBLAS_STATUS_NOT_SUPPORTED;
    if (heuristic == CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(found, 1);
      EXPECT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(result.workspaceSize, 0u);
      matmul = L.cublasLtMatmul(L.handle, desc, &alpha, A, la, B, lb, &beta, C, lc, D, ld,
                                &result.algo, nullptr, 0, nullptr);
    }
    L.cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, lc, ld}) L.cublasLtMatrixLayoutDestroy(l);
    L.cublasLtMatmulDescDestroy(desc);
  }
};

// ---- the reference ----

// Column-major stored matrix -> row-major logical op(X) (rows x cols after the op).
std::vector<double> op_rows(const std::vector<double>& x, int64_t ld, bool trans, uint64_t rows,
                            uint64_t cols) {
  std::vector<double> r(rows * cols);
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < cols; ++j)
      r[i * cols + j] = trans ? x[j + i * uint64_t(ld)] : x[i + j * uint64_t(ld)];
  return r;
}

// Row-major m x n product of row-major a (m x k) and b (k x n).
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, uint64_t m,
                            uint64_t n, uint64_t k) {
  std::vector<double> c(m * n, 0.0);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double gelu_ref(double x) {
  const double inner = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

uint16_t bf16_bits(float f) {  // exact for the values the tests use
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xFFFF, 0u) << f << " is not a bf16 value";
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr float kPad = 12345.0f;  // D's padding rows (ld > m): must survive untouched

// ---- tests ----

TEST(EmulatedCublasLt, VersionAndHandles) {
  EXPECT_EQ(lt().cublasLtGetVersion(), size_t(CUBLAS_VERSION));
  EXPECT_EQ(lt().cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  cublasLtHandle_t h = nullptr;
  ASSERT_EQ(lt().cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(h, nullptr);
  EXPECT_EQ(lt().cublasLtDestroy(h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(nullptr, CUBLASLT_MATMUL_DESC_TRANSA, &h, 4),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST(EmulatedCublasLt, AttributeSizeMustMatch) {
  cublasLtMatmulDesc_t d;
  ASSERT_EQ(lt().cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
  const int64_t op64 = CUBLAS_OP_T;  // TRANSA is an int32_t
  EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op64, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t ld32 = 8;  // AUX_LD is an int64_t
  EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld32, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t op = CUBLAS_OP_T;
  EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op, 4),
            CUBLAS_STATUS_SUCCESS);
  lt().cublasLtMatmulDescDestroy(d);
}

// Every transpose combination, leading dimensions above the rows (the padding holds NaN in A
// and B, so reading it shows; D's padding must stay), alpha and beta with C == D.
TEST(EmulatedCublasLt, F32AllTransposesWithPaddedLd) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "T" : "N") + (tb ? "T" : "N"));
      Call c;
      c.ta = ta, c.tb = tb, c.m = 5, c.n = 4, c.k = 3;
      c.lda = int64_t(c.a_rows()) + 3, c.ldb = int64_t(c.b_rows()) + 2, c.ldc = 7;
      c.alpha = 2.0f, c.beta = 0.5f;
      std::vector<float> a = random_floats(c.a_cols() * c.lda_(), 1);
      std::vector<float> b = random_floats(c.b_cols() * c.ldb_(), 2);
      std::vector<float> d0 = random_floats(c.n * c.ldc_(), 3);
      for (uint64_t j = 0; j < c.a_cols(); ++j)
        for (int64_t i = int64_t(c.a_rows()); i < c.lda_(); ++i) a[j * c.lda_() + i] = NAN;
      for (uint64_t j = 0; j < c.b_cols(); ++j)
        for (int64_t i = int64_t(c.b_rows()); i < c.ldb_(); ++i) b[j * c.ldb_() + i] = NAN;
      for (uint64_t j = 0; j < c.n; ++j)
        for (int64_t i = int64_t(c.m); i < c.ldc_(); ++i) d0[j * c.ldc_() + i] = kPad;
      Dev<float> A(a), B(b), D(d0);
      c.run(A.p, B.p, D.p);
      ASSERT_EQ(c.heuristic, CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
      const auto ref = product(op_rows(widen(a), c.lda_(), ta, c.m, c.k),
                               op_rows(widen(b), c.ldb_(), tb, c.k, c.n), c.m, c.n, c.k);
      const std::vector<float> d = D.get();
      for (uint64_t i = 0; i < c.m; ++i)
        for (uint64_t j = 0; j < c.n; ++j)
          EXPECT_NEAR(d[j * 7 + i], 2.0 * ref[i * c.n + j] + 0.5 * d0[j * 7 + i], 1e-5)
              << i << "," << j;
      for (uint64_t j = 0; j < c.n; ++j)
        for (uint64_t i = c.m; i < 7; ++i) EXPECT_EQ(d[j * 7 + i], kPad);
    }
}

// A hand-computed case: [1 2; 3 4] [5 6; 7 8] = [19 22; 43 50] (column-major storage).
TEST(EmulatedCublasLt, HandComputed2x2) {
  Call c;
  c.m = c.n = c.k = 2;
  Dev<float> A(std::vector<float>{1, 3, 2, 4}), B(std::vector<float>{5, 7, 6, 8}), D(4);
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(D.get(), (std::vector<float>{19, 43, 22, 50}));
}

// beta = 0: C is not read, so NaN in it does not reach D.
TEST(EmulatedCublasLt, BetaZeroIgnoresC) {
  Call c;
  c.m = c.n = c.k = 2;
  Dev<float> A(std::vector<float>{1, 0, 0, 1}), B(std::vector<float>{1, 2, 3, 4});
  Dev<float> D(std::vector<float>{NAN, NAN, NAN, NAN});
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(D.get(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(EmulatedCublasLt, BiasAddsPerRowOfD) {
  Call c;
  c.m = 3, c.n = 2, c.k = 1, c.epi = CUBLASLT_EPILOGUE_BIAS;
  Dev<float> A(std::vector<float>{1, 2, 3}), B(std::vector<float>{10, 100}), D(6);
  Dev<float> bias(std::vector<float>{0.5f, -1.0f, 2.0f});
  c.bias = bias.p;
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(D.get(), (std::vector<float>{10.5f, 19, 32, 100.5f, 199, 302}));
}

// GELU (tanh form) at 1: 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.841191990607...
TEST(EmulatedCublasLt, GeluAuxHandValue) {
  Call c;
  c.epi = CUBLASLT_EPILOGUE_GELU_AUX;
  Dev<float> A(std::vector<float>{1}), B(std::vector<float>{1}), D(1), aux(8);
  c.aux = aux.p, c.aux_ld = 8;
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_NEAR(D.get()[0], 0.8411919906, 1e-7);
  EXPECT_EQ(aux.get()[0], 1.0f);
  Call plain;  // GELU without aux: the same value; with a bias of 1, gelu(2) = 1.954597694...
  plain.epi = CUBLASLT_EPILOGUE_GELU;
  Dev<float> D2(1), one(std::vector<float>{1.0f});
  plain.run(A.p, B.p, D2.p);
  ASSERT_EQ(plain.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_NEAR(D2.get()[0], 0.8411919906, 1e-7);
  plain.epi = CUBLASLT_EPILOGUE_GELU_BIAS, plain.bias = one.p;
  plain.run(A.p, B.p, D2.p);
  ASSERT_EQ(plain.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_NEAR(D2.get()[0], 1.9545976940, 1e-6);
}

// GELU_AUX(+BIAS): aux gets the pre-activation (after the bias) in D's layout with its own
// ld, D gets gelu of it; aux's padding rows stay.
TEST(EmulatedCublasLt, GeluAuxWritesAuxAndD) {
  for (bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "GELU_AUX_BIAS" : "GELU_AUX");
    Call c;
    c.m = 5, c.n = 3, c.k = 4, c.tb = true;
    c.epi = with_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    std::vector<float> a = random_floats(c.m * c.k, 4), b = random_floats(c.n * c.k, 5);
    for (float& x : a) x *= 2;
    Dev<float> A(a), B(b), D(c.m * c.n);
    Dev<float> bias(std::vector<float>{0.25f, -0.5f, 1.0f, -2.0f, 0.0f});
    Dev<float> aux(std::vector<float>(8 * c.n, kPad));
    if (with_bias) c.bias = bias.p;
    c.aux = aux.p, c.aux_ld = 8;
    c.run(A.p, B.p, D.p);
    ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
    const auto ref =
        product(op_rows(widen(a), 5, false, 5, 4), op_rows(widen(b), 3, true, 4, 3), 5, 3, 4);
    const std::vector<float> d = D.get(), x = aux.get(), bv = bias.get();
    for (uint64_t i = 0; i < 5; ++i)
      for (uint64_t j = 0; j < 3; ++j) {
        const double pre = ref[i * 3 + j] + (with_bias ? bv[i] : 0.0);
        EXPECT_NEAR(x[j * 8 + i], pre, 1e-5) << i << "," << j;
        EXPECT_NEAR(d[j * 5 + i], gelu_ref(pre), 1e-5) << i << "," << j;
      }
    for (uint64_t j = 0; j < 3; ++j)
      for (uint64_t i = 5; i < 8; ++i) EXPECT_EQ(x[j * 8 + i], kPad);
  }
}

// DGELU: D = (A B) * gelu'(aux), the derivative checked against a central difference of the
// tanh-form GELU.
TEST(EmulatedCublasLt, DgeluScalesByGeluDerivative) {
  Call c;
  c.m = 6, c.n = 2, c.k = 3, c.epi = CUBLASLT_EPILOGUE_DGELU;
  std::vector<float> a = random_floats(c.m * c.k, 6), b = random_floats(c.k * c.n, 7);
  std::vector<float> pre = {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f,  2.5f, 0, 0,
                            1.0f,  -2.0f, 0.1f,   3.0f, -0.7f, 0.3f, 0, 0};
  Dev<float> A(a), B(b), D(c.m * c.n), aux(pre);
  c.aux = aux.p, c.aux_ld = 8;
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  const auto ref =
      product(op_rows(widen(a), 6, false, 6, 3), op_rows(widen(b), 3, false, 3, 2), 6, 2, 3);
  const std::vector<float> d = D.get();
  for (uint64_t i = 0; i < 6; ++i)
    for (uint64_t j = 0; j < 2; ++j) {
      const double x = pre[j * 8 + i], h = 1e-5;
      const double grad = (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
      EXPECT_NEAR(d[j * 6 + i], ref[i * 2 + j] * grad, 1e-5) << i << "," << j;
    }
  EXPECT_NEAR(d[3], ref[3 * 2] * 0.5, 1e-6);  // gelu'(0) = 1/2
}

// bf16 operands, f32 output: products of bf16 values (exact here) summed exactly.
TEST(EmulatedCublasLt, Bf16InputsF32Output) {
  Call c;
  c.a_type = c.b_type = CUDA_R_16BF;
  c.m = 2, c.n = 2, c.k = 2, c.ta = true;
  // A stored k x m (transposed): op(A) = [1.5 -2; 0.375 4], B = [3 0.5; -1 0.125].
  Dev<uint16_t> A(
      std::vector<uint16_t>{bf16_bits(1.5f), bf16_bits(-2.0f), bf16_bits(0.375f), bf16_bits(4.0f)});
  Dev<uint16_t> B(
      std::vector<uint16_t>{bf16_bits(3.0f), bf16_bits(-1.0f), bf16_bits(0.5f), bf16_bits(0.125f)});
  Dev<float> D(4);
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  // Row 0: 1.5*3 + -2*-1 = 6.5, 1.5*0.5 + -2*0.125 = 0.5; row 1: 1.125 - 4 = -2.875,
  // 0.1875 + 0.5 = 0.6875.
  EXPECT_EQ(D.get(), (std::vector<float>{6.5f, -2.875f, 0.5f, 0.6875f}));
}

// bf16 output: round to nearest, ties to even (bf16 has 7 fraction bits: ulp(1) = 2^-7).
TEST(EmulatedCublasLt, Bf16OutputRoundsToNearestEven) {
  Call c;
  c.a_type = c.b_type = c.c_type = CUDA_R_16BF;
  c.m = 4, c.n = 1, c.k = 2;
  const float e8 = std::ldexp(1.0f, -8), e12 = std::ldexp(1.0f, -12);
  // D(i) = 1 + x_i, A's columns (1, x_i), B = (1, 1).
  const float x[4] = {e8, 3 * e8, e8 + e12, -e8 / 2};
  std::vector<uint16_t> a(8);
  for (int i = 0; i < 4; ++i) a[i] = bf16_bits(1.0f), a[4 + i] = bf16_bits(x[i]);
  Dev<uint16_t> A(a), B(std::vector<uint16_t>{bf16_bits(1.0f), bf16_bits(1.0f)}), D(4);
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  const std::vector<uint16_t> d = D.get();
  EXPECT_EQ(from_bf16(d[0]), 1.0f);                         // tie -> even (1.0)
  EXPECT_EQ(from_bf16(d[1]), 1.0f + std::ldexp(1.0f, -6));  // tie -> even (up)
  EXPECT_EQ(from_bf16(d[2]), 1.0f + std::ldexp(1.0f, -7));  // above the tie -> up
  EXPECT_EQ(from_bf16(d[3]), 1.0f);                         // 1 - 2^-9 -> 1
}

// FP8 data: D(i, j) = alpha sa sb sum_p A(p, i) B(p, j) with op(A) = A^T; A's column i holds
// one byte of interest at p = 0 and zeros elsewhere, B is 1 at p = 0: D(i, j) = value(byte_i).
struct Fp8Case {
  cudaDataType_t type;
  uint8_t byte;
  double value;
};

void run_fp8_decode(cudaDataType_t a_type, const std::vector<Fp8Case>& cases) {
  Call c;
  c.a_type = a_type, c.b_type = CUDA_R_8F_E4M3;
  c.ta = true, c.m = 16, c.n = 16, c.k = 16;
  std::vector<uint8_t> a(16 * 16, 0), b(16 * 16, 0);
  for (size_t i = 0; i < cases.size(); ++i) a[i * 16] = cases[i].byte;
  for (int j = 0; j < 16; ++j) b[j * 16] = 0x38;  // E4M3 1.0
  Dev<uint8_t> A(a), B(b);
  Dev<float> D(256), sa(std::vector<float>{0.5f}), sb(std::vector<float>{8.0f});
  c.a_scale = sa.p, c.b_scale = sb.p, c.alpha = 0.75f;
  c.run(A.p, B.p, D.p);
  ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = D.get();
  for (size_t i = 0; i < cases.size(); ++i)
    for (int j = 0; j < 16; j += 5) {
      const double want = cases[i].value * 0.75 * 0.5 * 8.0;
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(d[j * 16 + i])) << int(cases[i].byte);
      else
        EXPECT_EQ(d[j * 16 + i], float(want)) << "byte 0x" << std::hex << int(cases[i].byte);
    }
}

TEST(EmulatedCublasLt, Fp8E4M3Decoding) {
  run_fp8_decode(CUDA_R_8F_E4M3, {{CUDA_R_8F_E4M3, 0x38, 1.0},
                                  {CUDA_R_8F_E4M3, 0x7E, 448.0},  // max
                                  {CUDA_R_8F_E4M3, 0xFE, -448.0},
                                  {CUDA_R_8F_E4M3, 0x01, std::ldexp(1.0, -9)},  // min subnormal
                                  {CUDA_R_8F_E4M3, 0x08, std::ldexp(1.0, -6)},  // min normal
                                  {CUDA_R_8F_E4M3, 0x07, 7 * std::ldexp(1.0, -9)},
                                  {CUDA_R_8F_E4M3, 0x3D, 1.625},
                                  {CUDA_R_8F_E4M3, 0x78, 256.0},  // e = 15 is a normal exponent
                                  {CUDA_R_8F_E4M3, 0x7F, NAN}});
}

TEST(EmulatedCublasLt, Fp8E5M2Decoding) {
  run_fp8_decode(CUDA_R_8F_E5M2, {{CUDA_R_8F_E5M2, 0x3C, 1.0},
                                  {CUDA_R_8F_E5M2, 0x7B, 57344.0},  // max
                                  {CUDA_R_8F_E5M2, 0x01, std::ldexp(1.0, -16)},
                                  {CUDA_R_8F_E5M2, 0x04, std::ldexp(1.0, -14)},
                                  {CUDA_R_8F_E5M2, 0xBE, -1.5},
                                  {CUDA_R_8F_E5M2, 0x7C, INFINITY},
                                  {CUDA_R_8F_E5M2, 0xFC, -INFINITY},
                                  {CUDA_R_8F_E5M2, 0x7D, NAN}});
}

// An independent decoder for the random FP8 products: enumerate the format's values by
// walking exponent and fraction fields.
double fp8_value(uint8_t v, int exp_bits, int bias) {
  const int frac_bits = 7 - exp_bits;
  const int e = (v >> frac_bits) & ((1 << exp_bits) - 1), f = v & ((1 << frac_bits) - 1);
  const double frac = double(f) / (1 << frac_bits);
  const double mag = e == 0 ? frac * std::pow(2.0, 1 - bias) : (1 + frac) * std::pow(2.0, e - bias);
  return (v & 0x80) ? -mag : mag;
}

// E4M3 x E4M3 and E5M2 x E4M3 with random finite bytes, scales, beta and a bf16 output.
TEST(EmulatedCublasLt, Fp8RandomProductsWithScales) {
  for (cudaDataType_t a_type : {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2})
    for (cudaDataType_t out : {CUDA_R_32F, CUDA_R_16BF}) {
      SCOPED_TRACE(std::to_string(int(a_type)) + " -> " + std::to_string(int(out)));
      const bool e5 = a_type == CUDA_R_8F_E5M2;
      Call c;
      c.a_type = a_type, c.b_type = CUDA_R_8F_E4M3, c.c_type = out;
      c.ta = true, c.m = 16, c.n = 32, c.k = 48;
      std::mt19937 g(11);
      // Finite bytes with exponent field 4..10 (moderate magnitudes).
      auto byte = [&g](bool e5m2) {
        const unsigned s = g() & 1, f = g() & (e5m2 ? 3 : 7), e = 4 + g() % 7;
        return uint8_t(s << 7 | (e5m2 ? e << 2 : e << 3) | f);
      };
      std::vector<uint8_t> a(c.k * c.m), b(c.k * c.n);
      for (auto& x : a) x = byte(e5);
      for (auto& x : b) x = byte(false);
      std::vector<double> av(a.size()), bv(b.size());
      for (size_t i = 0; i < a.size(); ++i)
        av[i] = e5 ? fp8_value(a[i], 5, 15) : fp8_value(a[i], 4, 7);
      for (size_t i = 0; i < b.size(); ++i) bv[i] = fp8_value(b[i], 4, 7);
      const auto ref =
          product(op_rows(av, 48, true, 16, 48), op_rows(bv, 48, false, 48, 32), 16, 32, 48);
      Dev<uint8_t> A(a), B(b);
      Dev<float> sa(std::vector<float>{0.25f}), sb(std::vector<float>{3.0f});
      c.a_scale = sa.p, c.b_scale = sb.p, c.alpha = 0.5f, c.beta = 2.0f;
      const double scale = 0.25 * 3.0 * 0.5;
      if (out == CUDA_R_32F) {
        Dev<float> D(std::vector<float>(16 * 32, 1.0f));
        c.run(A.p, B.p, D.p);
        ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
        const std::vector<float> d = D.get();
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 32; ++j) {
            const double want = scale * ref[i * 32 + j] + 2.0;
            EXPECT_NEAR(d[j * 16 + i], want, 1e-6 * (1 + std::abs(want))) << i << "," << j;
          }
      } else {
        Dev<uint16_t> D(std::vector<uint16_t>(16 * 32, bf16_bits(1.0f)));
        c.run(A.p, B.p, D.p);
        ASSERT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
        const std::vector<uint16_t> d = D.get();
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 32; ++j) {
            const double want = scale * ref[i * 32 + j] + 2.0;
            EXPECT_NEAR(from_bf16(d[j * 16 + i]), want, std::abs(want) * 0x1p-8 + 1e-6)
                << i << "," << j;
          }
      }
    }
}

// FP8 only in the TN form: the heuristic has nothing for NN, NT, TT.
TEST(EmulatedCublasLt, HeuristicRefusesFp8NotTN) {
  Dev<uint8_t> A(256), B(256);
  Dev<float> D(256), s(std::vector<float>{1.0f});
  for (auto [ta, tb] : {std::pair{false, false}, {false, true}, {true, true}, {true, false}}) {
    Call c;
    c.a_type = c.b_type = CUDA_R_8F_E4M3;
    c.ta = ta, c.tb = tb, c.m = c.n = c.k = 16;
    c.a_scale = c.b_scale = s.p;
    c.run(A.p, B.p, D.p);
    if (ta && !tb) {
      EXPECT_EQ(c.matmul, CUBLAS_STATUS_SUCCESS);
    } else {
      EXPECT_EQ(c.heuristic, CUBLAS_STATUS_NOT_SUPPORTED) << ta << tb;
      EXPECT_EQ(c.matmul, kNotRun);
    }
  }
}

// FP8 with k not a multiple of 16 (so lda = k is not 16 bytes), or E5M2 x E5M2: no kernel.
TEST(EmulatedCublasLt, HeuristicRefusesFp8BadShapesAndE5M2Pairs) {
  Dev<uint8_t> A(512), B(512);
  Dev<float> D(512);
  Call c;
  c.a_type = c.b_type = CUDA_R_8F_E4M3;
  c.ta = true, c.m = 16, c.n = 16, c.k = 24;
  c.run(A.p, B.p, D.p);
  EXPECT_EQ(c.heuristic, CUBLAS_STATUS_NOT_SUPPORTED);
  Call e;
  e.a_type = e.b_type = CUDA_R_8F_E5M2;
  e.ta = true, e.m = e.n = e.k = 16;
  e.run(A.p, B.p, D.p);
  EXPECT_EQ(e.heuristic, CUBLAS_STATUS_NOT_SUPPORTED);
}

// Scale pointers on f32 operands: documented as an invalid combination.
TEST(EmulatedCublasLt, ScalePointerOnF32Refused) {
  Dev<float> A(1), B(1), D(1), s(std::vector<float>{2.0f});
  Call c;
  c.a_scale = s.p;
  c.run(A.p, B.p, D.p);
  EXPECT_EQ(c.heuristic, CUBLAS_STATUS_INVALID_VALUE);
}

// GELU aux: ld a multiple of 8, pointer 16-byte aligned; otherwise no kernel.
TEST(EmulatedCublasLt, HeuristicRefusesMisalignedAux) {
  Dev<float> A(5), B(1), D(5), aux(16), aux4(16, 4);
  Call ld10;
  ld10.m = 5, ld10.epi = CUBLASLT_EPILOGUE_GELU_AUX, ld10.aux = aux.p, ld10.aux_ld = 10;
  ld10.run(A.p, B.p, D.p);
  EXPECT_EQ(ld10.heuristic, CUBLAS_STATUS_NOT_SUPPORTED);
  Call off;
  off.m = 5, off.epi = CUBLASLT_EPILOGUE_DGELU, off.aux = aux4.p, off.aux_ld = 8;
  off.run(A.p, B.p, D.p);
  EXPECT_EQ(off.heuristic, CUBLAS_STATUS_NOT_SUPPORTED);
  Call ok;  // the control: the same call with ld 8 and an aligned pointer runs
  ok.m = 5, ok.epi = CUBLASLT_EPILOGUE_DGELU, ok.aux = aux.p, ok.aux_ld = 8;
  ok.run(A.p, B.p, D.p);
  EXPECT_EQ(ok.matmul, CUBLAS_STATUS_SUCCESS);
}

TEST(EmulatedCublasLt, LdBelowRowsRefused) {
  Dev<float> A(64), B(64), D(64);
  for (int which = 0; which < 3; ++which) {
    Call c;
    c.m = 4, c.n = 3, c.k = 2;
    (which == 0 ? c.lda : which == 1 ? c.ldb : c.ldc) = 1;
    c.run(A.p, B.p, D.p);
    EXPECT_EQ(c.heuristic, CUBLAS_STATUS_INVALID_VALUE) << which;
  }
}

TEST(EmulatedCublasLt, InnerDimensionMismatchRefused) {
  Dev<float> A(64), B(64), D(64);
  const Lt& L = lt();
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(L.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
  cublasLtMatrixLayout_t la, lb, lc;
  ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 3, 4), 0);  // k = 3
  ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 2, 5, 2), 0);  // k = 2
  ASSERT_EQ(L.cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 5, 4), 0);
  const float one = 1, zero = 0;
  EXPECT_EQ(L.cublasLtMatmul(L.handle, desc, &one, A.p, la, B.p, lb, &zero, D.p, lc, D.p, lc,
                             nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Null descriptors and handle.
  EXPECT_EQ(L.cublasLtMatmul(L.handle, nullptr, &one, A.p, la, B.p, lb, &zero, D.p, lc, D.p, lc,
                             nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(L.cublasLtMatmul(L.handle, desc, &one, A.p, nullptr, B.p, lb, &zero, D.p, lc, D.p, lc,
                             nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(L.cublasLtMatmul(nullptr, desc, &one, A.p, la, B.p, lb, &zero, D.p, lc, D.p, lc,
                             nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  for (auto l : {la, lb, lc}) L.cublasLtMatrixLayoutDestroy(l);
  L.cublasLtMatmulDescDestroy(desc);
}

// C == D passed with two different layouts.
TEST(EmulatedCublasLt, InPlaceWithDifferentLayoutsRefused) {
  Dev<float> A(64), B(64), D(64);
  Call c;
  c.m = 4, c.n = 2, c.k = 2, c.ldc = 4, c.ldd = 8;
  c.run(A.p, B.p, D.p);
  EXPECT_EQ(c.heuristic, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.matmul, CUBLAS_STATUS_INVALID_VALUE);
}

// The heuristic's algorithm holds for pointers at least as aligned as the preference said.
TEST(EmulatedCublasLt, PointerLessAlignedThanPreferenceRefused) {
  Dev<float> A(8, 4), B(8), D(8);  // A 4 bytes past a 256-byte boundary
  Call told256;
  told256.m = 2, told256.n = 2, told256.k = 2;
  told256.run(A.p, B.p, D.p);
  EXPECT_EQ(told256.matmul, CUBLAS_STATUS_INVALID_VALUE);
  Call told4 = told256;
  told4.align[0] = 4;
  told4.run(A.p, B.p, D.p);
  EXPECT_EQ(told4.matmul, CUBLAS_STATUS_SUCCESS);
}

TEST(EmulatedCublasLt, UnsupportedEpilogueRefused) {
  Dev<float> A(1), B(1), D(1);
  Call c;
  c.epi = CUBLASLT_EPILOGUE_RELU;
  c.run(A.p, B.p, D.p);
  EXPECT_EQ(c.heuristic, CUBLAS_STATUS_NOT_SUPPORTED);
}

// Each operand in turn on the host (or in a device buffer too short for its layout) is
// refused; the control run with everything on the device succeeds.
TEST(EmulatedCublasLt, NonDeviceMemoryRefused) {
  alignas(256) static float host[64] = {};
  Dev<float> A(16), B(16), C(16), D(16), short_b(15), bias(4), aux(32), scale(1);
  const char* const cases[] = {"none", "A", "B", "short B", "C", "D", "bias", "aux"};
  for (const char* host_one : cases) {
    SCOPED_TRACE(host_one);
    const std::string h = host_one;
    Call c;
    c.m = c.n = c.k = 4, c.beta = 1.0f;
    c.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    c.bias = h == "bias" ? host : bias.p;
    c.aux = h == "aux" ? host : aux.p, c.aux_ld = 8;
    c.run(h == "A" ? host : A.p,
          h == "B"         ? host
          : h == "short B" ? short_b.p
                           : B.p,
          h == "C" ? host : C.p, h == "D" ? host : D.p);
    EXPECT_EQ(c.matmul, h == "none" ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE);
  }
  // The FP8 scale pointers (FP8 operands in the TN form).
  Dev<uint8_t> A8(256), B8(256);
  Dev<float> D8(256);
  for (int on_host = 0; on_host < 3; ++on_host) {
    Call c;
    c.a_type = c.b_type = CUDA_R_8F_E4M3;
    c.ta = true, c.m = c.n = c.k = 16;
    c.a_scale = on_host == 1 ? host : scale.p;
    c.b_scale = on_host == 2 ? host : scale.p;
    c.run(A8.p, B8.p, D8.p);
    EXPECT_EQ(c.matmul, on_host ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS) << on_host;
  }
}

}  // namespace
