#pragma once
// The ggml block formats with a min or a fifth bit (Q4_1, Q5_0, Q5_1, Q5_K): their quantizers
// and dequantizers, which block_formats.cpp's quantize_row/dequantize_row dispatch to.
//
// Layouts, per block (little-endian, packed, as ggml's ggml-common.h has them):
//   Q4_1 (32 values, 20 bytes): f16 d; f16 m; uint8 qs[16];        x = d * nibble + m,
//        element j in the low nibble of qs[j], element j + 16 in its high nibble
//   Q5_0 (32 values, 22 bytes): f16 d; uint8 qh[4]; uint8 qs[16];  x = d * (q5 - 16)
//   Q5_1 (32 values, 24 bytes): f16 d; f16 m; uint8 qh[4]; uint8 qs[16]; x = d * q5 + m
//        q5 = nibble (as Q4_1) | bit j of the little-endian uint32 qh << 4 (element j)
//   Q5_K (256 values, 176 bytes): f16 d; f16 dmin; uint8 scales[12] (as Q4_K); uint8 qh[32];
//        uint8 qs[128] (as Q4_K); x = d * sc * q5 - dmin * m, the fifth bit of element l of
//        sub-block j (32 values each) is bit j of qh[l]
#include <cstdint>

namespace llmrun::quant::detail {

void quantize_q4_1(const float* x, uint8_t* out, int64_t n);
void dequantize_q4_1(const uint8_t* in, float* y, int64_t n);
void quantize_q5_0(const float* x, uint8_t* out, int64_t n);
void dequantize_q5_0(const uint8_t* in, float* y, int64_t n);
void quantize_q5_1(const float* x, uint8_t* out, int64_t n);
void dequantize_q5_1(const uint8_t* in, float* y, int64_t n);
void quantize_q5_k(const float* x, uint8_t* out, int64_t n);
void dequantize_q5_k(const uint8_t* in, float* y, int64_t n);

}  // namespace llmrun::quant::detail
