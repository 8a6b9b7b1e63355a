#include "fp8/fp8_cast.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace llmrun {

namespace {

// Below this many elements a cast runs on one thread: waking the pool costs more.
constexpr int64_t kParallelMin = 1 << 14;

struct Layout {
  int man;            // mantissa bits
  int bias;           // exponent bias
  uint32_t max_code;  // magnitude code of the largest finite value
  uint8_t nan_code;   // magnitude code written for NaN
};

constexpr Layout layout(Fp8Format f) {
  // E4M3: 0x7E = S.1111.110 = 448 (0x7F is NaN). E5M2: 0x7B = S.11110.11 = 57344 (0x7C is inf).
  return f == Fp8Format::e4m3 ? Layout{3, 7, 0x7E, 0x7F} : Layout{2, 15, 0x7B, 0x7E};
}

// v / 2^s rounded to the nearest integer, ties to even (v < 2^24, s >= 1).
uint32_t shift_round_even(uint32_t v, int s) {
  if (s > 25) return 0;  // v < 2^24 <= half of 2^s
  const uint32_t q = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

float decode_by_definition(uint8_t b, Fp8Format f) {
  const Layout l = layout(f);
  const int field = (b & 0x7F) >> l.man;
  const int m = b & ((1 << l.man) - 1);
  float v;
  if (f == Fp8Format::e4m3 && field == 15 && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (f == Fp8Format::e5m2 && field == 31)
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  else if (field == 0)
    v = std::ldexp(float(m), 1 - l.bias - l.man);  // subnormal: m * 2^(emin - man)
  else
    v = std::ldexp(float((1 << l.man) | m), field - l.bias - l.man);
  return (b & 0x80) ? -v : v;
}

using Table = std::array<float, 256>;

const Table& decode_table(Fp8Format f) {
  static const Table tables[2] = {[] {
                                    Table t{};
                                    for (int b = 0; b < 256; ++b)
                                      t[b] = decode_by_definition(uint8_t(b), Fp8Format::e4m3);
                                    return t;
                                  }(),
                                  [] {
                                    Table t{};
                                    for (int b = 0; b < 256; ++b)
                                      t[b] = decode_by_definition(uint8_t(b), Fp8Format::e5m2);
                                    return t;
                                  }()};
  return tables[f == Fp8Format::e4m3 ? 0 : 1];
}

// |v| rounded to the FP8 grid (M mantissa bits, smallest normal exponent EMIN) and clipped to
// max, with the sign of v. Branch-free so that GCC vectorises the loop around it: adding
// C = 2^(e - M + 23), where e is the exponent of |v| (at least EMIN), puts the sum in
// [C, 2C), whose fp32 spacing is exactly the FP8 spacing 2^(e - M) at that exponent, so
// fp32's own round-to-nearest-even rounds |v| to the FP8 grid; subtracting C is exact.
// Clipping before rounding is the same as saturating after it: max lies on the grid.
template <int M, int EMIN>
inline float round_to_grid(float v, float max) {
  float a = std::fabs(v);
  a = a > max ? max : a;  // NaN compares false and stays NaN
  const int32_t e_raw = int32_t(std::bit_cast<uint32_t>(a) >> 23) - 127;
  const int32_t e = e_raw < EMIN ? EMIN : e_raw;
  const float c = std::bit_cast<float>(uint32_t(e - M + 23 + 127) << 23);
  const float r = (a + c) - c;
  return std::copysign(r, v);
}

template <int M, int EMIN>
Fp8CastStats round_trip_impl(const float* x, float* y, int64_t n, float scale, float max) {
  float amax = 0;
  int64_t over = 0, under = 0;
  int nan = 0;
#pragma omp parallel for simd schedule(static) reduction(max : amax) reduction(+ : over, under) \
    reduction(| : nan) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float ax = std::fabs(xi);
    amax = ax > amax ? ax : amax;
    nan |= int(ax != ax);
    const float v = xi * scale;
    over += int64_t(std::fabs(v) > max);
    const float r = round_to_grid<M, EMIN>(v, max);
    under += int64_t((r == 0.0f) & (xi != 0.0f));
    y[i] = r;
  }
  return {nan ? std::numeric_limits<float>::quiet_NaN() : amax, over, under};
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

uint8_t fp8_encode(float x, Fp8Format f) {
  const Layout l = layout(f);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return sign | l.nan_code;
  if (mag == 0x7F800000u) return uint8_t(sign | l.max_code);  // saturating: infinity -> max
  const int exp_field = int(mag >> 23);
  // Zero, and fp32 subnormals (< 2^-126): far below half the smallest FP8 subnormal.
  if (exp_field == 0) return sign;
  const uint32_t sig = (mag & 0x7FFFFFu) | 0x800000u;  // |x| = sig * 2^(e - 23)
  const int e = exp_field - 127;
  const int emin = 1 - l.bias;
  uint32_t code;
  if (e >= emin) {
    uint32_t m = shift_round_even(sig, 23 - l.man);  // in [2^man, 2^(man+1)]
    int ee = e;
    if (m == (1u << (l.man + 1))) {  // rounded up into the next binade
      m >>= 1;
      ++ee;
    }
    code = (uint32_t(ee + l.bias) << l.man) | (m & ((1u << l.man) - 1));
  } else {
    // Subnormal: |x| / 2^(emin - man). A result of 2^man is the smallest normal, whose code
    // is exactly 1 << man.
    code = shift_round_even(sig, 23 - l.man + emin - e);
  }
  if (code > l.max_code) code = l.max_code;  // beyond the largest finite value: saturate
  return uint8_t(sign | code);
}

float fp8_decode(uint8_t bits, Fp8Format f) { return decode_table(f)[bits]; }

Fp8CastStats fp8_quantize(const float* x, uint8_t* q, int64_t n, float scale, Fp8Format f) {
  const float max = fp8_max(f);
  float amax = 0;
  int64_t over = 0, under = 0;
  int nan = 0;
#pragma omp parallel for schedule(static) reduction(max : amax) reduction(+ : over, under) reduction(| : nan) \
    if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    amax = ax > amax ? ax : amax;
    nan |= int(ax != ax);
    const float v = x[i] * scale;
    over += int64_t(std::fabs(v) > max);
    q[i] = fp8_encode(v, f);
    under += int64_t((q[i] & 0x7F) == 0 && x[i] != 0.0f);
  }
  return {nan ? std::numeric_limits<float>::quiet_NaN() : amax, over, under};
}

void fp8_dequantize(const uint8_t* q, float* y, int64_t n, float scale_inv, Fp8Format f) {
  const Table& t = decode_table(f);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = t[q[i]] * scale_inv;
}

Fp8CastStats fp8_round_trip(const float* x, float* y, int64_t n, float scale, Fp8Format f) {
  // E4M3: 3 mantissa bits, smallest normal 2^-6. E5M2: 2 bits, 2^-14.
  if (f == Fp8Format::e4m3) return round_trip_impl<3, -6>(x, y, n, scale, fp8_max(f));
  return round_trip_impl<2, -14>(x, y, n, scale, fp8_max(f));
}

}  // namespace llmrun
