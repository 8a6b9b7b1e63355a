// The ggml block formats: quantize (round to the nearest level of a per-block scale, as
// ggml's reference quantizers do; Q5_K searches each sub-block's scale and min for the least
// weighted squared error, as ggml's does) and dequantize (bit-exact to ggml's formulas).
#include "quant/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/block_formats_q5.h"
#include "quant/k_quant_scales.h"
#include "quant/quant_dot.h"
#include "quant/quant_dot_kernels.h"
#include "tensor/half_convert.h"
#include "tensor/tensor.h"
#include "util/error.h"

namespace llmrun::quant {

namespace {

int nearest_int(float v) { return static_cast<int>(std::lrintf(v)); }

// Q8_0 and Q4_0 keep one f16 scale per 32 values.
void quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

void dequantize_q8_0(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 34, y += 32) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = from_f16(dh);
    for (int j = 0; j < 32; ++j) y[j] = float(int8_t(in[2 + j])) * d;
  }
}

void quantize_q4_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 18) {
    // The value of largest magnitude maps to -8 exactly (its sign kept in d).
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 16; ++j) {
      const uint8_t lo = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
      const uint8_t hi = uint8_t(std::min(15, int(int8_t(x[j + 16] * id + 8.5f))));
      out[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_q4_0(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 18, y += 32) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = from_f16(dh);
    for (int j = 0; j < 16; ++j) {
      y[j] = float(int(in[2 + j] & 0x0F) - 8) * d;
      y[j + 16] = float(int(in[2 + j] >> 4) - 8) * d;
    }
  }
}

}  // namespace

namespace {

// One sub-block's fit x ~ scale * L - min (L in 0..max_level, min >= 0), by KScaleSearch.
struct SubBlockFit {
  float scale = 0, min = 0;
};

SubBlockFit fit_sub_block(const float* x, int max_level, const KScaleSearch& search) {
  constexpr int n = 32;
  float w[n], sum_x2 = 0;
  for (int l = 0; l < n; ++l) sum_x2 += x[l] * x[l];
  const float rms = std::sqrt(sum_x2 / n);
  float lo = x[0], hi = x[0], sum_w = 0, sum_x = 0;
  for (int l = 0; l < n; ++l) {
    w[l] = rms + std::fabs(x[l]);
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
    sum_w += w[l];
    sum_x += w[l] * x[l];
  }
  lo = std::min(lo, 0.0f);  // the range always includes 0, as ggml's does
  if (hi <= lo) return {0, -lo};
  auto levels = [&](float iscale, int* L) {
    for (int l = 0; l < n; ++l) L[l] = std::clamp(nearest_int(iscale * (x[l] - lo)), 0, max_level);
  };
  // The weighted squared error of a fit, and its largest single error in `worst`.
  auto error = [&](float scale, float offset, const int* L, float& worst) {
    float e = 0;
    worst = 0;
    for (int l = 0; l < n; ++l) {
      const float diff = scale * float(L[l]) + offset - x[l];
      e += w[l] * diff * diff;
      worst = std::max(worst, std::fabs(diff));
    }
    return e;
  };
  int L[n];
  const float step = (hi - lo) / float(max_level);  // the min/max fit's
  float best_scale = step, best_offset = lo, worst = 0;
  levels(float(max_level) / (hi - lo), L);
  float best = error(best_scale, best_offset, L, worst);
  for (int i = 0; i <= search.steps && search.steps > 0; ++i) {
    levels((float(max_level) + search.rmin + search.rdelta * float(i)) / (hi - lo), L);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int l = 0; l < n; ++l) {
      sum_l += w[l] * float(L[l]);
      sum_l2 += w[l] * float(L[l]) * float(L[l]);
      sum_xl += w[l] * float(L[l]) * x[l];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (offset > 0) {  // the min stays <= 0 (stored as a non-negative dmin multiple)
      offset = 0;
      scale = sum_xl / sum_l2;
    }
    const float e = error(scale, offset, L, worst);
    // Kept only within one min/max step everywhere (max_block_error's derivation).
    const bool bounded = scale > 0 && worst <= step && offset >= lo - step &&
                         offset + float(max_level) * scale <= hi + step;
    if (e < best && bounded) {
      best = e;
      best_scale = scale;
      best_offset = offset;
    }
  }
  return {std::max(best_scale, 0.0f), -best_offset};
}

}  // namespace

KScales pack_k_scales(const float* x, int max_level, const KScaleSearch& search, uint8_t* head) {
  float step[8], lowest[8];  // per sub-block: step size and -min (>= 0)
  float max_step = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const SubBlockFit f = fit_sub_block(x + 32 * j, max_level, search);
    step[j] = f.scale;
    lowest[j] = f.min;
    max_step = std::max(max_step, step[j]);
    max_min = std::max(max_min, lowest[j]);
  }
  KScales k;
  const uint16_t dh = to_f16(max_step / 63.0f), mh = to_f16(max_min / 63.0f);
  std::memcpy(head, &dh, 2);
  std::memcpy(head + 2, &mh, 2);
  k.d = from_f16(dh);
  k.dmin = from_f16(mh);
  for (int j = 0; j < 8; ++j) {
    k.ls[j] = uint8_t(std::clamp(k.d > 0 ? nearest_int(step[j] / k.d) : 0, 0, 63));
    k.lm[j] = uint8_t(std::clamp(k.dmin > 0 ? nearest_int(lowest[j] / k.dmin) : 0, 0, 63));
  }
  uint8_t* scales = head + 4;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = k.ls[j];
      scales[j + 4] = k.lm[j];
    } else {  // low 4 bits in bytes 8..11, the top 2 in the top bits of bytes 0..7
      scales[j + 4] = uint8_t((k.ls[j] & 0x0F) | ((k.lm[j] & 0x0F) << 4));
      scales[j - 4] |= uint8_t((k.ls[j] >> 4) << 6);
      scales[j] |= uint8_t((k.lm[j] >> 4) << 6);
    }
  }
  return k;
}

namespace {

// Q4_K block: d (f16) @0, dmin (f16) @2, scales[12] @4, qs[128] @16.
void quantize_q4_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 144) {
    const KScales k = pack_k_scales(x, 15, KScaleSearch{}, out);  // min/max (k_quant_scales.h)
    const float d = k.d, dmin = k.dmin;
    const uint8_t *ls = k.ls, *lm = k.lm;
    // Levels against the scales as stored, so rounding of the scales is not compounded.
    uint8_t L[256];
    for (int j = 0; j < 8; ++j) {
      const float s = d * ls[j], m = dmin * lm[j];
      for (int l = 0; l < 32; ++l)
        L[32 * j + l] =
            uint8_t(s > 0 ? std::clamp(nearest_int((x[32 * j + l] + m) / s), 0, 15) : 0);
    }
    uint8_t* qs = out + 16;
    for (int j = 0; j < 256; j += 64, qs += 32)
      for (int l = 0; l < 32; ++l) qs[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void dequantize_q4_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, in += 144) {
    uint16_t dh, mh;
    std::memcpy(&dh, in, 2);
    std::memcpy(&mh, in + 2, 2);
    const float d = from_f16(dh), dmin = from_f16(mh);
    const uint8_t* scales = in + 4;
    const uint8_t* q = in + 16;
    for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
      int sc, m;
      k_scale_min(is, scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(is + 1, scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// Q6_K block: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d (f16) @208.
void quantize_q6_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 210) {
    float scale[16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      float amax = 0, max = 0;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(x[16 * ib + l]) > amax) {
          amax = std::fabs(x[16 * ib + l]);
          max = x[16 * ib + l];
        }
      scale[ib] = max / -32.0f;  // the largest magnitude maps to level -32
      if (std::fabs(scale[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scale[ib]);
        max_scale = scale[ib];
      }
    }
    const float iscale = max_scale != 0 ? -128.0f / max_scale : 0.0f;
    const float d = from_f16(to_f16(iscale != 0 ? 1.0f / iscale : 0.0f));
    int8_t* scales = reinterpret_cast<int8_t*>(out + 192);
    uint8_t L[256];
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = int8_t(std::min(127, nearest_int(iscale * scale[ib])));
      const float s = d * scales[ib];
      for (int l = 0; l < 16; ++l)
        L[16 * ib + l] =
            uint8_t(s != 0 ? std::clamp(nearest_int(x[16 * ib + l] / s), -32, 31) + 32 : 32);
    }
    const uint16_t dh = to_f16(iscale != 0 ? 1.0f / iscale : 0.0f);
    std::memcpy(out + 208, &dh, 2);
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((L[j + l] & 0x0F) | ((L[j + l + 64] & 0x0F) << 4));
        ql[l + 32] = uint8_t((L[j + l + 32] & 0x0F) | ((L[j + l + 96] & 0x0F) << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                        ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
  }
}

void dequantize_q6_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, in += 210) {
    uint16_t dh;
    std::memcpy(&dh, in + 208, 2);
    const float d = from_f16(dh);
    const uint8_t* ql = in;
    const uint8_t* qh = in + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(in + 192);
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32, sc += 8, y += 128)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * float(q1);
        y[l + 32] = d * sc[is + 2] * float(q2);
        y[l + 64] = d * sc[is + 4] * float(q3);
        y[l + 96] = d * sc[is + 6] * float(q4);
      }
  }
}

// Q8_K (activations of K-quant dot products): f32 d @0, int8 qs[256] @4, int16 bsums[16] @260.
void quantize_q8_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, out += 292) {
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float iscale = amax != 0 ? 127.0f / amax : 0.0f;
    const float d = amax != 0 ? 1.0f / iscale : 0.0f;
    std::memcpy(out, &d, 4);
    int8_t* qs = reinterpret_cast<int8_t*>(out + 4);
    for (int j = 0; j < 256; ++j) qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < 16; ++g) {
      int16_t s = 0;
      for (int l = 0; l < 16; ++l) s = int16_t(s + qs[16 * g + l]);
      std::memcpy(out + 260 + 2 * g, &s, 2);
    }
  }
}

void dequantize_q8_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, in += 292, y += 256) {
    float d;
    std::memcpy(&d, in, 4);
    for (int j = 0; j < 256; ++j) y[j] = d * float(int8_t(in[4 + j]));
  }
}

}  // namespace

uint16_t to_f16(float f) { return f32_to_f16(f); }
float from_f16(uint16_t h) { return f16_to_f32(h); }

bool is_known_type(uint32_t id) {
  switch (static_cast<QType>(id)) {
    case QType::f32:
    case QType::f16:
    case QType::bf16:
    case QType::q4_0:
    case QType::q8_0:
    case QType::q4_k:
    case QType::q6_k:
    case QType::q8_k:
    case QType::q4_1:
    case QType::q5_0:
    case QType::q5_1:
    case QType::q5_k:
      return true;
  }
  return false;
}

const char* type_name(QType t) {
  switch (t) {
    case QType::f32:
      return "F32";
    case QType::f16:
      return "F16";
    case QType::bf16:
      return "BF16";
    case QType::q4_0:
      return "Q4_0";
    case QType::q8_0:
      return "Q8_0";
    case QType::q4_k:
      return "Q4_K";
    case QType::q6_k:
      return "Q6_K";
    case QType::q8_k:
      return "Q8_K";
    case QType::q4_1:
      return "Q4_1";
    case QType::q5_0:
      return "Q5_0";
    case QType::q5_1:
      return "Q5_1";
    case QType::q5_k:
      return "Q5_K";
  }
  return "?";
}

int64_t block_values(QType t) {
  switch (t) {
    case QType::q4_0:
    case QType::q4_1:
    case QType::q5_0:
    case QType::q5_1:
    case QType::q8_0:
      return 32;
    case QType::q5_k:
    case QType::q4_k:
    case QType::q6_k:
    case QType::q8_k:
      return 256;
    default:
      return 1;
  }
}

size_t block_bytes(QType t) {
  switch (t) {
    case QType::f32:
      return 4;
    case QType::f16:
    case QType::bf16:
      return 2;
    case QType::q4_0:
      return 18;
    case QType::q8_0:
      return 34;
    case QType::q4_k:
      return 144;
    case QType::q6_k:
      return 210;
    case QType::q8_k:
      return 292;
    case QType::q4_1:
      return 20;
    case QType::q5_0:
      return 22;
    case QType::q5_1:
      return 24;
    case QType::q5_k:
      return 176;
  }
  return 0;
}

size_t row_bytes(QType t, int64_t n) {
  LLMRUN_CHECK(fits(t, n), std::string("a row of ") + std::to_string(n) + " values is not whole " +
                               type_name(t) + " blocks");
  return size_t(n / block_values(t)) * block_bytes(t);
}

void quantize_row(QType t, const float* x, void* out, int64_t n) {
  row_bytes(t, n);  // checks the row holds whole blocks
  auto* o = static_cast<uint8_t*>(out);
  switch (t) {
    case QType::f32:
      std::memcpy(o, x, size_t(n) * 4);
      return;
    case QType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      return;
    case QType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      return;
    case QType::q8_0:
      // activation rows (once per GEMM row): the vectorized quantizer writes the same bytes
      if (active_simd_level() >= SimdLevel::avx512 && detail::quantize_q8_0_avx512(x, o, n)) return;
      if (active_simd_level() >= SimdLevel::avx2 && detail::quantize_q8_0_avx2(x, o, n)) return;
      return quantize_q8_0(x, o, n);
    case QType::q4_0:
      return quantize_q4_0(x, o, n);
    case QType::q4_k:
      return quantize_q4_k(x, o, n);
    case QType::q6_k:
      return quantize_q6_k(x, o, n);
    case QType::q8_k:
      if (active_simd_level() >= SimdLevel::avx512 && detail::quantize_q8_k_avx512(x, o, n)) return;
      if (active_simd_level() >= SimdLevel::avx2 && detail::quantize_q8_k_avx2(x, o, n)) return;
      return quantize_q8_k(x, o, n);
    case QType::q4_1:
      return detail::quantize_q4_1(x, o, n);
    case QType::q5_0:
      return detail::quantize_q5_0(x, o, n);
    case QType::q5_1:
      return detail::quantize_q5_1(x, o, n);
    case QType::q5_k:
      return detail::quantize_q5_k(x, o, n);
  }
}

void dequantize_row(QType t, const void* in, float* y, int64_t n) {
  row_bytes(t, n);
  const auto* p = static_cast<const uint8_t*>(in);
  switch (t) {
    case QType::f32:
      std::memcpy(y, p, size_t(n) * 4);
      return;
    case QType::f16:  // rows of 2-byte values start 2-byte aligned in every pool and file
      return half::f16_row_to_f32(reinterpret_cast<const uint16_t*>(p), y, n);
    case QType::bf16:
      return half::bf16_row_to_f32(reinterpret_cast<const uint16_t*>(p), y, n);
    case QType::q8_0:
      return dequantize_q8_0(p, y, n);
    case QType::q4_0:
      return dequantize_q4_0(p, y, n);
    case QType::q4_k:
      return dequantize_q4_k(p, y, n);
    case QType::q6_k:
      return dequantize_q6_k(p, y, n);
    case QType::q8_k:
      return dequantize_q8_k(p, y, n);
    case QType::q4_1:
      return detail::dequantize_q4_1(p, y, n);
    case QType::q5_0:
      return detail::dequantize_q5_0(p, y, n);
    case QType::q5_1:
      return detail::dequantize_q5_1(p, y, n);
    case QType::q5_k:
      return detail::dequantize_q5_k(p, y, n);
  }
}

namespace {

// Q4_K / Q5_K (levels 0..N): each sub-block's fit (pack_k_scales, searched or not) keeps every
// value within one min/max step D = (hi - lo) / N <= 2 amax / N, its scale s* <= (hi - lo + 2 D) /
// N and its min m* <= -lo + D <= amax (1 + 2 / N). Storing s* and m* as 6-bit multiples of d = max
// s* / 63 and dmin = max m* / 63 moves each by half of that, so a value's fit level lands at most N
// d / 2 + dmin / 2 <= 3 amax (1 + 2 / N) / 126 further off; the stored nearest level is no worse.
// Plus f16 and float rounding.
double k_quant_error(int levels, double amax) {
  const double n = levels;
  return amax * (2.0 / n + 3.0 * (1.0 + 2.0 / n) / 126 + std::ldexp(1.0, -8));
}

}  // namespace

double max_block_error(QType t, double amax) {
  // Half a step of the block's scale, plus the f16 rounding of the scale (relative 2^-11)
  // times the largest level, plus where ggml's rules clamp the far end of the range by one
  // step. The sub-block scales of K-quants are themselves quantized (6 bits relative to the
  // block's largest for Q4_K, 8 bits for Q6_K), which adds their rounding times the level;
  // Q5_K's searched scales may trade up to a whole step (k_quant_error, Q4_K's too).
  switch (t) {
    case QType::f32:
      return 0;
    case QType::f16:
      return amax * std::ldexp(1.0, -11) + 6e-8;
    case QType::bf16:
      return amax * std::ldexp(1.0, -8);
    case QType::q8_0:
    case QType::q8_k:
      return amax * (0.5 / 127 + std::ldexp(1.0, -10));
    case QType::q4_0:
      return amax * (1.0 / 8 + std::ldexp(1.0, -9));
    case QType::q4_k:
      return k_quant_error(15, amax);
    case QType::q6_k:
      return amax * (1.0 / 32 + 32.0 / (32 * 254) + std::ldexp(1.0, -8));
    case QType::q5_0:  // as Q4_0 with steps of amax / 16
      return amax * (1.0 / 16 + std::ldexp(1.0, -9));
    // With a min: half a step of (max - min) / levels <= amax / levels, plus the f16
    // rounding of d and m moving the ends of the covered range (3 amax 2^-11 at most).
    case QType::q4_1:
      return amax * (1.0 / 15 + std::ldexp(1.0, -8));
    case QType::q5_1:
      return amax * (1.0 / 31 + std::ldexp(1.0, -8));
    case QType::q5_k:
      return k_quant_error(31, amax);
  }
  return 0;
}

}  // namespace llmrun::quant
