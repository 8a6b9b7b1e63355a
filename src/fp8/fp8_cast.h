// src/fp8 owns FP8 training on the reference backend: the two OCP FP8 formats (exact
// encode/decode, saturating round-to-nearest-even casts over buffers), Transformer Engine's
// delayed-scaling recipe (per-tensor amax histories and scales) and the FP8 linear runner
// that emulates FP8 GEMMs exactly on the CPU (model/linear.h is the seam it plugs into).
//
// The formats (OCP 8-bit floating point specification, as NVIDIA Hopper implements them):
//   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN,
//         so the largest finite value is S.1111.110 = 448. Subnormals down to 2^-9.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is infinity,
//         S.11111.{01,10,11} NaN, largest finite 57344. Subnormals down to 2^-16.
// Casts round to nearest, ties to even, and saturate: anything beyond the largest finite
// value (infinity included) becomes +-max, as cuda_fp8's __NV_SATFINITE conversion does and
// Transformer Engine casts. NaN stays NaN.
#pragma once
#include <cstdint>

namespace llmrun {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

const char* fp8_format_name(Fp8Format f);  // "e4m3", "e5m2"
float fp8_max(Fp8Format f);                // 448, 57344

// One value: the byte holding x rounded to the format (RNE, saturating; NaN keeps its sign
// and becomes S.1111.111 for E4M3, S.11111.10 for E5M2).
uint8_t fp8_encode(float x, Fp8Format f);
// The value a byte holds (exact in fp32).
float fp8_decode(uint8_t bits, Fp8Format f);

// What a cast saw, so that delayed scaling can record the amax and training can count
// values the format could not hold.
struct Fp8CastStats {
  float amax = 0;          // max |x| of the unscaled input; NaN when any input is NaN
  int64_t overflows = 0;   // |x * scale| > fp8_max (clipped to +-max; infinities included)
  int64_t underflows = 0;  // x != 0 whose cast is zero
};

// Buffers (OpenMP over the process's thread pool; every result is independent of the
// thread count). scale multiplies before the cast, as Transformer Engine's scale does.
// q[i] = encode(x[i] * scale)
Fp8CastStats fp8_quantize(const float* x, uint8_t* q, int64_t n, float scale, Fp8Format f);
// y[i] = decode(q[i]) * scale_inv
void fp8_dequantize(const uint8_t* q, float* y, int64_t n, float scale_inv, Fp8Format f);
// y[i] = decode(encode(x[i] * scale)): the FP8 value itself, held in fp32 (not unscaled).
// The vectorised path an emulated FP8 GEMM multiplies; bit-identical to encode + decode.
Fp8CastStats fp8_round_trip(const float* x, float* y, int64_t n, float scale, Fp8Format f);

}  // namespace llmrun
