// An emulated libcublasLt.so.<major> for tests without a GPU: the twelve cuBLASLt entry points
// llmrun's CUDA backend calls (src/backend/cuda/cuda_cublaslt_loader.cpp) and cublasLtDestroy,
// computed on the CPU with the documented semantics, and refusing what real cuBLASLt refuses,
// so the backend's glue (descriptor attributes, layouts, heuristic preferences, pointer
// alignment bookkeeping) is exercised for real. Emulated device memory is host memory, so
// operands are read directly; the product is queued on the call's stream through the emulated
// runtime (llmrun_emu_submit), so it reads what the kernels queued before it wrote.
//
// D = epilogue(alpha * scaleA * scaleB * op(A) op(B) + beta * C [+ bias]), column-major. Each dot
// product accumulates in double; the result is rounded once to float (and then to bf16 for a
// bf16 D). Supported: A/B f32 x f32, bf16 x bf16, FP8 (E4M3/E5M2, not E5M2 x E5M2) in the "TN"
// form; C = D in f32 or bf16; CUBLAS_COMPUTE_32F with CUDA_R_32F scale; host alpha/beta;
// epilogues DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU with f32 bias/aux.
#include <cublasLt.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace {

constexpr uint64_t kAlgoMagic = 0x6c6c6d72756e4c54ull;  // "llmrunLT"

struct Handle {
  uint64_t magic = kAlgoMagic;
};

struct Desc {
  int32_t compute = 0, scale = 0;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t aux_type = -1;  // -1: D's type
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int8_t fast_accum = 0;  // accepted and ignored: the emulation always accumulates in double
};

struct Layout {
  int32_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct Pref {
  uint64_t max_workspace = 0;
  uint32_t search_mode = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D (the documented defaults)
};

template <class T, class H>
T* get(H h) {
  return reinterpret_cast<T*>(h);
}

// One line on stderr saying why a call is refused.
__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "emulated cuBLASLt: ");
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
}

// Copies an attribute value after checking its size, as the real setters do.
template <class T>
cublasStatus_t take(T& dst, const void* buf, size_t bytes) {
  if (!buf || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&dst, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool is_fp8(int32_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t elem_bytes(int32_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    default:
      return 0;
  }
}

uint32_t alignment(const void* p) {  // largest power of two dividing p, capped at 256
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && (v & (uintptr_t(a) * 2 - 1)) == 0) a *= 2;
  return v == 0 ? 256 : a;
}

bool has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool has_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// Bias and aux pointers are read in vectors of at most 16 bytes; the heuristic's choice holds
// for pointers at least as aligned as (this much of) the ones it saw in the descriptor.
uint32_t vector_alignment(const void* p) {
  const uint32_t a = alignment(p);
  return a < 16 ? a : 16;
}

// What an algorithm is tied to: types, transposes, epilogue.
uint64_t signature(const Desc& d, const Layout& a, const Layout& b, const Layout& c) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v :
       {uint64_t(uint32_t(a.type)), uint64_t(uint32_t(b.type)), uint64_t(uint32_t(c.type)),
        uint64_t(uint32_t(d.transa)), uint64_t(uint32_t(d.transb)), uint64_t(d.epilogue)})
    h = (h ^ v) * 1099511628211ull;
  return h;
}

// The checks shared by the heuristic and the matmul. They follow the cuBLASLt
// documentation's requirements (FP8: "TN" form and 16-byte multiples for leading dimensions,
// the Tensor Core usage rules; GELU aux: ld divisible by 8 and >= D's rows).
cublasStatus_t check_problem(cublasLtHandle_t handle, const Desc* d, const Layout* a,
                             const Layout* b, const Layout* c, const Layout* dd) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
    say("compute type %d / scale type %d not emulated (CUBLAS_COMPUTE_32F, CUDA_R_32F only)",
        d->compute, d->scale);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST || d->transc != CUBLAS_OP_N)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  for (const Layout* l : {a, b, c, dd})
    if (l->ld < 1 || uint64_t(l->ld) < l->rows) {
      say("leading dimension %lld smaller than the rows", static_cast<long long>(l->ld));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  const bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
  const uint64_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
  const uint64_t kb = tb ? b->cols : b->rows, n = tb ? b->rows : b->cols;
  if (k != kb || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n) {
    say("inner or outer dimensions do not match");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0 || k == 0) {
    say("empty problem (m %llu, n %llu, k %llu)", (unsigned long long)m, (unsigned long long)n,
        (unsigned long long)k);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // Type combinations with a kernel (the CUBLAS_COMPUTE_32F rows of cublasLtMatmul's table
  // that llmrun uses): f32 x f32 -> f32, bf16 x bf16 -> bf16 or f32, FP8 x FP8 (not
  // E5M2 x E5M2) -> bf16 or f32; C's type is D's.
  const bool fp8 = is_fp8(a->type) && is_fp8(b->type);
  const bool types_ok =
      c->type == dd->type && (dd->type == CUDA_R_32F || dd->type == CUDA_R_16BF) &&
      ((a->type == CUDA_R_32F && b->type == CUDA_R_32F && dd->type == CUDA_R_32F) ||
       (a->type == CUDA_R_16BF && b->type == CUDA_R_16BF) ||
       (fp8 && !(a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2)));
  if (!types_ok) {
    say("no kernel for types A %d, B %d, C %d, D %d", a->type, b->type, c->type, dd->type);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Scale pointers with non-FP8 operands: documented as INVALID_VALUE.
  if (!fp8 && (d->a_scale || d->b_scale)) {
    say("A/B scale pointers set for non-FP8 operands");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (fp8) {
    if (!ta || tb) {
      say("FP8 needs the TN form (TRANSA = T, TRANSB = N)");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const size_t cb = elem_bytes(dd->type);
    if (a->ld % 16 || b->ld % 16 || k % 16 || (c->ld * cb) % 16 || (m * cb) % 16) {
      say("FP8 needs leading dimensions and k, m in multiples of 16 bytes");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  const uint32_t e = d->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && !has_gelu(e) &&
      e != CUBLASLT_EPILOGUE_DGELU) {
    say("epilogue %lld not emulated", static_cast<long long>(e));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // FP8 epilogues have their own type rules (bf16 bias for an f32 D, ...); not emulated.
  if (fp8 && e != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_bias(e) && (d->bias_type == -1 ? dd->type : d->bias_type) != CUDA_R_32F) {
    say("bias type must be CUDA_R_32F");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (has_aux(e)) {
    if ((d->aux_type == -1 ? dd->type : d->aux_type) != CUDA_R_32F) {
      say("aux type must be CUDA_R_32F");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->aux_ld < int64_t(m)) {
      say("aux ld %lld below D's rows", static_cast<long long>(d->aux_ld));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->aux_ld % 8) {
      say("aux ld %lld not a multiple of 8", static_cast<long long>(d->aux_ld));
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- element conversions ----

double decode_e4m3(uint8_t v) {  // bias 7, no infinities, S.1111.111 is NaN, max 448
  const int e = (v >> 3) & 0xF, f = v & 7;
  if (e == 15 && f == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(f / 8.0, -6) : std::ldexp(1 + f / 8.0, e - 7);
  return v & 0x80 ? -mag : mag;
}

double decode_e5m2(uint8_t v) {  // bias 15, IEEE-like
  const int e = (v >> 2) & 0x1F, f = v & 3;
  double mag;
  if (e == 31)
    mag = f == 0 ? INFINITY : NAN;
  else
    mag = e == 0 ? std::ldexp(f / 4.0, -14) : std::ldexp(1 + f / 4.0, e - 15);
  return v & 0x80 ? -mag : mag;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

double load(const void* p, int32_t type, size_t i) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_16BF:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_8F_E4M3:
      return decode_e4m3(static_cast<const uint8_t*>(p)[i]);
    default:
      return decode_e5m2(static_cast<const uint8_t*>(p)[i]);
  }
}

void store(void* p, int32_t type, size_t i, float v) {
  if (type == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
}

// GELU, tanh approximation (the form cuBLASLt's GELU epilogues use), and its derivative.
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
double gelu(double x) { return 0.5 * x * (1 + std::tanh(kGeluC * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double t = std::tanh(kGeluC * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kGeluC * (1 + 3 * 0.044715 * x * x);
}

// ---- the emulated runtime's device-memory query ----

using MemoryKindFn = int (*)(const void*, size_t);
MemoryKindFn memory_kind() {
  static const MemoryKindFn f =
      reinterpret_cast<MemoryKindFn>(dlsym(RTLD_DEFAULT, "llmrun_emu_memory_kind"));
  return f;
}

// Bytes a column-major rows x cols matrix with leading dimension ld spans.
size_t span(uint64_t rows, uint64_t cols, int64_t ld, size_t elem) {
  return ((cols - 1) * uint64_t(ld) + rows) * elem;
}

// Queues `work` on `stream` through the emulated CUDA runtime (llmrun_emu_submit, exported by
// the binary that links it), so that it runs after the kernels queued before it; without that
// runtime (this library's own tests) it runs at once.
using SubmitFn = void (*)(void* stream, void (*run)(void*), void* context);
void run_on_stream(cudaStream_t stream, std::function<void()> work) {
  static const SubmitFn submit =
      reinterpret_cast<SubmitFn>(dlsym(RTLD_DEFAULT, "llmrun_emu_submit"));
  if (!submit) return work();
  submit(
      stream,
      [](void* c) {
        auto* w = static_cast<std::function<void()>*>(c);
        (*w)();
        delete w;
      },
      new std::function<void()>(std::move(work)));
}

bool on_device(const char* what, const void* p, size_t bytes) {
  const MemoryKindFn f = memory_kind();
  if (!f || f(p, bytes) == 1) return true;
  std::fprintf(stderr, "emulated cuBLASLt: %s (%p, %zu bytes) is not device memory\n", what, p,
               bytes);
  return false;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete get<Handle>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { return CUBLAS_VERSION; }

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  Desc* d = new Desc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete get<Desc>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  Desc* d = get<Desc>(desc);
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t s;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return take(d->compute, buf, bytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return take(d->scale, buf, bytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return take(d->pointer_mode, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_TRANSC: {
      int32_t op;
      if ((s = take(op, buf, bytes)) != CUBLAS_STATUS_SUCCESS) return s;
      if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
        return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA   ? d->transa
       : attr == CUBLASLT_MATMUL_DESC_TRANSB ? d->transb
                                             : d->transc) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(d->epilogue, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(d->bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take(d->bias_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return take(d->aux, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return take(d->aux_ld, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return take(d->aux_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return take(d->a_scale, buf, bytes);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return take(d->b_scale, buf, bytes);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return take(d->fast_accum, buf, bytes);
    default:
      say("matmul descriptor attribute %lld not emulated", static_cast<long long>(attr));
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete get<Layout>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete get<Pref>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  Pref* p = get<Pref>(pref);
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return take(p->search_mode, buf, bytes);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return take(p->max_workspace, buf, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return take(p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
    default:
      say("preference attribute %lld not emulated", static_cast<long long>(attr));
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// The algorithm records what the choice assumed: data[0] magic, [1] the problem signature,
// [2..5] the alignments of A, B, C, D, [6] bias alignment << 32 | aux alignment. cublasLtMatmul
// refuses pointers less aligned than that (a real kernel would fault or misread).
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  const Desc* d = get<Desc>(desc);
  const Layout *a = get<Layout>(Adesc), *b = get<Layout>(Bdesc), *c = get<Layout>(Cdesc),
               *dd = get<Layout>(Ddesc);
  const Pref* p = get<Pref>(preference);
  if (!p || requested <= 0 || !results || !returned)
    return handle ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
  *returned = 0;
  const cublasStatus_t s = check_problem(handle, d, a, b, c, dd);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  // No kernel reads an operand in pieces smaller than its element; FP8 kernels need 16 bytes.
  const Layout* ls[4] = {a, b, c, dd};
  for (int i = 0; i < 4; ++i) {
    const uint32_t need = is_fp8(a->type) ? 16 : uint32_t(elem_bytes(ls[i]->type));
    if (p->align[i] < need) {
      say("preferred alignment %lld below what any kernel takes",
          static_cast<long long>(p->align[i]));
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  // The heuristic reads the bias and aux pointers' values for their alignment (cublasLt.h).
  if (has_bias(d->epilogue) && alignment(d->bias) < 4) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_aux(d->epilogue) && alignment(d->aux) < 16) {
    say("aux pointer not 16-byte aligned");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = signature(*d, *a, *b, *c);
  for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = p->align[i];
  r.algo.data[6] = (uint64_t(has_bias(d->epilogue) ? vector_alignment(d->bias) : 1) << 32) |
                   (has_aux(d->epilogue) ? vector_alignment(d->aux) : 1);
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  (void)workspace;  // no algorithm here needs one
  (void)workspace_bytes;
  const Desc* d = get<Desc>(desc);
  const Layout *la = get<Layout>(Adesc), *lb = get<Layout>(Bdesc), *lc = get<Layout>(Cdesc),
               *ld = get<Layout>(Ddesc);
  cublasStatus_t s = check_problem(handle, d, la, lb, lc, ld);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (!alpha || !beta || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if (be != 0.0f && !C) return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) requires the same layout for both.
  if (C == D && (lc->type != ld->type || lc->ld != ld->ld)) {
    say("C == D with different layouts");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const uint32_t e = d->epilogue;
  if ((has_bias(e) && !d->bias) || (has_aux(e) && !d->aux)) {
    say("epilogue %lld without its bias or aux pointer", static_cast<long long>(e));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const void* ptrs[4] = {A, B, C, D};
  if (algo) {
    if (algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->data[1] != signature(*d, *la, *lb, *lc)) {
      say("algorithm chosen for another type/transpose/epilogue combination");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    static const char* const names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i)
      if (!(i == 2 && be == 0.0f) && alignment(ptrs[i]) < algo->data[2 + i]) {
        std::fprintf(stderr,
                     "emulated cuBLASLt: %s (%p) is less aligned than the heuristic was told "
                     "(%llu bytes)\n",
                     names[i], ptrs[i], static_cast<unsigned long long>(algo->data[2 + i]));
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    if ((has_bias(e) && vector_alignment(d->bias) < (algo->data[6] >> 32)) ||
        (has_aux(e) && vector_alignment(d->aux) < (algo->data[6] & 0xFFFFFFFFu))) {
      say("bias or aux pointer less aligned than at the heuristic");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  } else if (is_fp8(la->type)) {
    for (const void* q : ptrs)
      if (q && alignment(q) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (has_aux(e) && alignment(d->aux) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;

  const bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
  const uint64_t m = ld->rows, n = ld->cols, k = ta ? la->rows : la->cols;
  // Every byte the call touches must be emulated device memory.
  const bool fp8 = is_fp8(la->type);
  if (!on_device("A", A, span(la->rows, la->cols, la->ld, elem_bytes(la->type))) ||
      !on_device("B", B, span(lb->rows, lb->cols, lb->ld, elem_bytes(lb->type))) ||
      (be != 0.0f && !on_device("C", C, span(m, n, lc->ld, elem_bytes(lc->type)))) ||
      !on_device("D", D, span(m, n, ld->ld, elem_bytes(ld->type))) ||
      (has_bias(e) && !on_device("bias", d->bias, m * 4)) ||
      (has_aux(e) && !on_device("aux", d->aux, span(m, n, d->aux_ld, 4))) ||
      (d->a_scale && !on_device("A scale", d->a_scale, 4)) ||
      (d->b_scale && !on_device("B scale", d->b_scale, 4)))
    return CUBLAS_STATUS_INVALID_VALUE;

  // The product runs in stream order, when the emulated runtime reaches it: the operands (and
  // the FP8 scales) are what the kernels queued before it write.
  run_on_stream(stream, [=, la = *la, lb = *lb, lc = *lc, ld = *ld, d = *d] {
    // Unset scale pointers mean 1 (cublasLt.h).
    const double scale = double(al) *
                         (fp8 && d.a_scale ? *static_cast<const float*>(d.a_scale) : 1.0) *
                         (fp8 && d.b_scale ? *static_cast<const float*>(d.b_scale) : 1.0);
    const float* bias = static_cast<const float*>(d.bias);
    float* aux = static_cast<float*>(d.aux);
    // op(A) by rows and op(B) by columns, decoded once: each dot product then runs over two
    // contiguous rows of k doubles.
    std::vector<double> a_rows(m * k), b_cols(n * k);
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t p = 0; p < k; ++p)
        a_rows[i * k + p] = load(A, la.type, ta ? p + i * la.ld : i + p * la.ld);
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t p = 0; p < k; ++p)
        b_cols[j * k + p] = load(B, lb.type, tb ? j + p * lb.ld : p + j * lb.ld);
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        const double* x = &a_rows[i * k];
        const double* y = &b_cols[j * k];
        // Eight partial sums in double (then added in a fixed order): still exact to far below
        // float's precision, and no longer one dependent add per product, which made the
        // emulated GPU's training runs spend most of their time here.
        double part[8] = {};
        uint64_t p = 0;
        for (; p + 8 <= k; p += 8)
          for (int u = 0; u < 8; ++u) part[u] += x[p + u] * y[p + u];
        for (; p < k; ++p) part[p % 8] += x[p] * y[p];
        const double sum = ((part[0] + part[1]) + (part[2] + part[3])) +
                           ((part[4] + part[5]) + (part[6] + part[7]));
        double v = scale * double(float(sum));
        // beta == 0: C is not read (NaNs in it do not propagate), as documented for cuBLAS.
        if (be != 0.0f) v += double(be) * load(C, lc.type, i + j * lc.ld);
        if (has_bias(e)) v += bias[i];
        float out = float(v);
        if (e == CUBLASLT_EPILOGUE_DGELU) {
          out = float(double(out) * gelu_grad(aux[i + j * d.aux_ld]));
        } else if (has_gelu(e)) {
          if (has_aux(e)) aux[i + j * d.aux_ld] = out;  // the pre-activation
          out = float(gelu(out));
        }
        store(D, ld.type, i + j * ld.ld, out);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
