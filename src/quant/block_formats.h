// src/quant owns quantized weights: ggml's block formats (the byte layouts GGUF files hold),
// their quantize/dequantize functions, SIMD dot products over them, and the quantized linear
// runner that inference uses instead of fp32 GEMMs.
//
// Layouts, per block (little-endian, packed, as ggml documents them):
//   Q8_0 (32 values, 34 bytes): f16 d; int8 qs[32];                x = d * q
//   Q4_0 (32 values, 18 bytes): f16 d; uint8 qs[16];               x = d * (nibble - 8),
//        element j in the low nibble of qs[j], element j + 16 in its high nibble
//   Q4_K (256 values, 144 bytes): f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128];
//        8 sub-blocks of 32 with 6-bit scale sc and min m packed in scales[12];
//        x = d * sc * nibble - dmin * m; each 64 values share 32 bytes of qs (low nibbles
//        first 32 values, high nibbles the next 32)
//   Q6_K (256 values, 210 bytes): uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d;
//        16 sub-blocks of 16; x = d * scale * (q6 - 32), q6 = 4 low bits from ql, 2 high
//        bits from qh
//   Q8_K (256 values, 292 bytes): f32 d; int8 qs[256]; int16 bsums[16] (activations only)
//   Q4_1, Q5_0, Q5_1, Q5_K: see block_formats_q5.h
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace llmrun::quant {

// ggml's type ids (the numbers GGUF tensor infos carry).
enum class QType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
};

// True for the ids above; a GGUF tensor of any other type is refused by name.
bool is_known_type(uint32_t id);
const char* type_name(QType t);  // "F32", "Q4_K", ...

// Values per block and bytes per block.
int64_t block_values(QType t);
size_t block_bytes(QType t);
// Bytes of a row of n values (n a multiple of block_values(t)).
size_t row_bytes(QType t, int64_t n);
// Whether a row of n values can be stored as t.
inline bool fits(QType t, int64_t n) { return n % block_values(t) == 0; }

// x[n] -> blocks. n must be a multiple of block_values(t).
void quantize_row(QType t, const float* x, void* out, int64_t n);
// blocks -> y[n].
void dequantize_row(QType t, const void* in, float* y, int64_t n);

// The largest error quantize_row + dequantize_row may make on one value of a block whose
// values lie in [lo, hi] (amax = max |x|), from the block format's step sizes: the tests'
// tolerance.
double max_block_error(QType t, double amax);

// A block's f16 scale, exactly as ggml stores it.
uint16_t to_f16(float f);
float from_f16(uint16_t h);

}  // namespace llmrun::quant
