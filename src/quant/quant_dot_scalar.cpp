// Scalar dot products over ggml blocks: the reference the SIMD kernels are tested against.
#include <algorithm>
#include <cstring>

#include "quant/k_quant_scales.h"
#include "quant/quant_dot.h"
#include "quant/quant_dot_q5.h"
#include "tensor/tensor.h"

namespace llmrun::quant {

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return from_f16(h);
}

float dot_q8_0(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 34, a += 34) {
    int s = 0;
    for (int j = 0; j < 32; ++j) s += int(int8_t(w[2 + j])) * int(int8_t(a[2 + j]));
    sum += float(s) * (f16_at(w) * f16_at(a));
  }
  return sum;
}

float dot_q4_0(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 32; ++b, w += 18, a += 34) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += (int(w[2 + j] & 0x0F) - 8) * int(int8_t(a[2 + j]));
      s += (int(w[2 + j] >> 4) - 8) * int(int8_t(a[2 + j + 16]));
    }
    sum += float(s) * (f16_at(w) * f16_at(a));
  }
  return sum;
}

float dot_q4_k(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 256; ++b, w += 144, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    const auto* q8 = reinterpret_cast<const int8_t*>(a + 4);
    const auto* bsums = reinterpret_cast<const int16_t*>(a + 260);
    const uint8_t* q4 = w + 16;
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(j, w + 4, sc, m);
      const uint8_t* q = q4 + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) s += int((q[l] >> shift) & 0x0F) * int(q8[32 * j + l]);
      sumi += sc * s;
      summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    sum += da * f16_at(w) * float(sumi) - da * f16_at(w + 2) * float(summ);
  }
  return sum;
}

float dot_q6_k(int64_t n, const uint8_t* w, const uint8_t* a) {
  float sum = 0;
  for (int64_t b = 0; b < n / 256; ++b, w += 210, a += 292) {
    float da;
    std::memcpy(&da, a, 4);
    const auto* q8 = reinterpret_cast<const int8_t*>(a + 4);
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    int sumi = 0;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32, sc += 8, q8 += 128) {
      int s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        s[is] += (int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32) * q8[l];
        s[is + 2] += (int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32) * q8[l + 32];
        s[is + 4] += (int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * q8[l + 64];
        s[is + 6] += (int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * q8[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += sc[k] * s[k];
    }
    sum += da * f16_at(w + 208) * float(sumi);
  }
  return sum;
}

float dot_float(QType t, int64_t n, const uint8_t* w, const float* a) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (t == QType::f32) {
      std::memcpy(&v, w + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, w + 2 * i, 2);
      v = t == QType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    sum += v * a[i];
  }
  return sum;
}

}  // namespace

QType activation_type(QType t) {
  switch (t) {
    case QType::q8_0:
    case QType::q4_0:
    case QType::q4_1:
    case QType::q5_0:
    case QType::q5_1:
      return QType::q8_0;
    case QType::q4_k:
    case QType::q5_k:
    case QType::q6_k:
      return QType::q8_k;
    default:
      return QType::f32;
  }
}

int activation_slot(std::vector<QType>& types, QType t) {
  const QType at = activation_type(t);
  const auto it = std::find(types.begin(), types.end(), at);
  if (it != types.end()) return int(it - types.begin());
  types.push_back(at);
  return int(types.size()) - 1;
}

size_t activation_row_bytes(QType t, int64_t n) { return row_bytes(activation_type(t), n); }

void prepare_activation(QType t, const float* x, void* out, int64_t n) {
  quantize_row(activation_type(t), x, out, n);
}

float vec_dot_scalar(QType t, int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  switch (t) {
    case QType::q8_0:
      return dot_q8_0(n, w, a);
    case QType::q4_0:
      return dot_q4_0(n, w, a);
    case QType::q4_k:
      return dot_q4_k(n, w, a);
    case QType::q6_k:
      return dot_q6_k(n, w, a);
    case QType::q4_1:
    case QType::q5_0:
    case QType::q5_1:
    case QType::q5_k:
      return vec_dot_q5_family_scalar(t, n, w, a);
    default:
      return dot_float(t, n, w, static_cast<const float*>(av));
  }
}

}  // namespace llmrun::quant
