// Q4_1, Q5_0, Q5_1 and Q5_K: quantize (round to the nearest level of the scale and min as
// stored, so their f16 rounding is not compounded; Q5_0 keeps ggml's rule, the largest
// magnitude on level -16 like Q4_0's; Q5_K's sub-block scales and mins come from
// pack_k_scales' search, as Q4_K's) and dequantize (bit-exact to ggml's formulas).
#include "quant/block_formats_q5.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/block_formats.h"
#include "quant/k_quant_scales.h"

namespace llmrun::quant::detail {

namespace {

int nearest_int(float v) { return static_cast<int>(std::lrintf(v)); }

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return from_f16(h);
}

// Stores v as f16 at p and returns the value stored.
float put_f16(uint8_t* p, float v) {
  const uint16_t h = to_f16(v);
  std::memcpy(p, &h, 2);
  return from_f16(h);
}

// Levels L[32] (0..levels-1) of a block with a min: x ~ d * L + m, d and m as stored at out.
void quantize_min_block(const float* x, uint8_t* out, int levels, uint8_t* L) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = put_f16(out, (hi - lo) / float(levels - 1));
  const float m = put_f16(out + 2, lo);
  for (int j = 0; j < 32; ++j)
    L[j] = uint8_t(d > 0 ? std::clamp(nearest_int((x[j] - m) / d), 0, levels - 1) : 0);
}

// Low nibbles of L into qs (element j low nibble of qs[j], j + 16 high), fifth bits into qh.
void pack_32(const uint8_t* L, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
    h |= uint32_t(L[j] >> 4) << j;
    h |= uint32_t(L[j + 16] >> 4) << (j + 16);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

// The 5-bit levels of a Q5_0/Q5_1 block.
void unpack_32(const uint8_t* qs, const uint8_t* qh, int* q) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = int(qs[j] & 0x0F) | int(((h >> j) & 1) << 4);
    q[j + 16] = int(qs[j] >> 4) | int(((h >> (j + 16)) & 1) << 4);
  }
}

}  // namespace

void quantize_q4_1(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 20) {
    uint8_t L[32];
    quantize_min_block(x, out, 16, L);
    pack_32(L, out + 4, nullptr);
  }
}

void dequantize_q4_1(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 20, y += 32) {
    const float d = f16_at(in), m = f16_at(in + 2);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(in[4 + j] & 0x0F) + m;
      y[j + 16] = d * float(in[4 + j] >> 4) + m;
    }
  }
}

void quantize_q5_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 22) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -16.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(out, d);
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = uint8_t(std::min(31, int(int8_t(x[j] * id + 16.5f))));
    pack_32(L, out + 6, out + 2);
  }
}

void dequantize_q5_0(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 22, y += 32) {
    const float d = f16_at(in);
    int q[32];
    unpack_32(in + 6, in + 2, q);
    for (int j = 0; j < 32; ++j) y[j] = float(q[j] - 16) * d;
  }
}

void quantize_q5_1(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 24) {
    uint8_t L[32];
    quantize_min_block(x, out, 32, L);
    pack_32(L, out + 8, out + 4);
  }
}

void dequantize_q5_1(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 24, y += 32) {
    const float d = f16_at(in), m = f16_at(in + 2);
    int q[32];
    unpack_32(in + 8, in + 4, q);
    for (int j = 0; j < 32; ++j) y[j] = d * float(q[j]) + m;
  }
}

// Q5_K block: d (f16) @0, dmin (f16) @2, scales[12] @4 (Q4_K's packing), qh[32] @16,
// qs[128] @48.
void quantize_q5_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 176) {
    const KScales k = pack_k_scales(x, 31, kQ5KSearch, out);
    const float d = k.d, dmin = k.dmin;
    const uint8_t *ls = k.ls, *lm = k.lm;
    uint8_t* qh = out + 16;
    uint8_t* qs = out + 48;
    std::memset(qh, 0, 32);
    for (int j = 0; j < 8; ++j) {
      const float s = d * ls[j], m = dmin * lm[j];
      for (int l = 0; l < 32; ++l) {
        const int q = s > 0 ? std::clamp(nearest_int((x[32 * j + l] + m) / s), 0, 31) : 0;
        // sub-blocks 2c and 2c + 1 share qs[32c .. 32c + 31] (low, high nibbles)
        uint8_t& byte = qs[32 * (j / 2) + l];
        byte = uint8_t(j % 2 ? (byte & 0x0F) | ((q & 0x0F) << 4) : (byte & 0xF0) | (q & 0x0F));
        qh[l] = uint8_t(qh[l] | ((q >> 4) << j));
      }
    }
  }
}

void dequantize_q5_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, in += 176) {
    const float d = f16_at(in), dmin = f16_at(in + 2);
    const uint8_t* sc = in + 4;
    const uint8_t* qh = in + 16;
    const uint8_t* qs = in + 48;
    for (int j = 0; j < 8; ++j) {
      int s, m;
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = (sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      const float d1 = d * float(s), m1 = dmin * float(m);
      const uint8_t* q = qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * float(((q[l] >> shift) & 0x0F) + (((qh[l] >> j) & 1) << 4)) - m1;
    }
  }
}

}  // namespace llmrun::quant::detail
