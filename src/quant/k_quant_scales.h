#pragma once
// K-quants' (Q4_K, Q5_K) packed sub-block scales: 8 six-bit scales and 8 six-bit mins in 12
// bytes, as ggml packs them. Shared by the block codecs and every dot-product level.
#include <cstdint>

namespace llmrun::quant {

// The scale sc and min m of sub-block j (0..7) from the 12 packed bytes q.
inline void k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// A K-quant block's scales as stored: the super-block's d and dmin (f16-rounded) and each
// sub-block's 6-bit scale ls and min lm; value = d * ls * level - dmin * lm.
struct KScales {
  float d, dmin;
  uint8_t ls[8], lm[8];
};

// Chooses the scales of the 8 sub-blocks of 32 in x[256] for levels 0..max_level (15 for Q4_K,
// 31 for Q5_K; each range includes 0, as ggml's does), writes d and dmin (f16) at head[0..3]
// and the 12 packed scale bytes at head[4..15], and returns them as stored.
KScales pack_k_scales(const float* x, int max_level, uint8_t* head);

}  // namespace llmrun::quant
