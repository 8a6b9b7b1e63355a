// The run-time choice of dot-product kernels: the CPU is asked once (cpuid) which levels it
// can run, LLMRUN_QUANT_SIMD may lower the choice, and each call goes to the best level that
// has a kernel for the type.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "quant/quant_dot.h"
#include "quant/quant_dot_kernels.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

SimdLevel best_supported() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512vnni");
  return avx512 ? SimdLevel::avx512 : avx2 ? SimdLevel::avx2 : SimdLevel::scalar;
#else
  return SimdLevel::scalar;
#endif
}

SimdLevel initial_level() {
  SimdLevel l = best_supported();
  if (const char* force = std::getenv("LLMRUN_QUANT_SIMD")) {
    const std::string f = force;
    if (f == "scalar") l = SimdLevel::scalar;
    if (f == "avx2" && l > SimdLevel::avx2) l = SimdLevel::avx2;
  }
  return l;
}

std::atomic<int>& level_slot() {
  static std::atomic<int> slot{int(initial_level())};
  return slot;
}

}  // namespace

SimdLevel active_simd_level() { return SimdLevel(level_slot().load(std::memory_order_relaxed)); }

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::avx512:
      return "avx512";
    case SimdLevel::avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

const char* simd_level() { return simd_level_name(active_simd_level()); }

bool simd_level_supported(SimdLevel l) { return l <= best_supported(); }

void set_simd_level(SimdLevel l) {
  LLMRUN_CHECK(simd_level_supported(l),
               std::string("quant: this CPU cannot run the ") + simd_level_name(l) + " kernels");
  level_slot().store(int(l), std::memory_order_relaxed);
}

float vec_dot(QType t, int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  const SimdLevel l = active_simd_level();
  float v;
  // AVX-512 has float kernels only here (its block types run in the x16 layout, x16_layout.h)
  if (l >= SimdLevel::avx512 && detail::dot_tile_float_avx512(t, n, &w, 1, a, 0, 1, &v)) return v;
  if (l >= SimdLevel::avx2 && (detail::dot_tile_float_avx2(t, n, &w, 1, a, 0, 1, &v) ||
                               detail::vec_dot_avx2(t, n, w, a, &v)))
    return v;
  return vec_dot_scalar(t, n, w, a);
}

void dot_tile(QType t, int64_t n, const uint8_t* const* w, int R, const uint8_t* a, size_t a_stride,
              int C, float* out) {
  const SimdLevel l = active_simd_level();
  // The tile kernels take up to kTileMax activation rows, so C goes in chunks; a kernel refuses
  // a type it has no code for on the first chunk, and the next candidate is tried.
  using TileKernel =
      bool (*)(QType, int64_t, const uint8_t* const*, int, const uint8_t*, size_t, int, float*);
  auto in_chunks = [&](TileKernel tile) {
    float part[detail::kTileMax * detail::kTileMax];
    for (int c0 = 0; c0 < C; c0 += detail::kTileMax) {
      const int cn = std::min(detail::kTileMax, C - c0);
      if (!tile(t, n, w, R, a + size_t(c0) * a_stride, a_stride, cn, part)) return false;
      std::copy(part, part + cn * R, out + c0 * R);
    }
    return true;
  };
  if (l >= SimdLevel::avx512 && in_chunks(detail::dot_tile_float_avx512)) return;
  if (l >= SimdLevel::avx2 &&
      (in_chunks(detail::dot_tile_float_avx2) || in_chunks(detail::dot_tile_avx2)))
    return;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[c * R + r] = vec_dot(t, n, w[r], a + size_t(c) * a_stride);
}

}  // namespace llmrun::quant
