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

}  // namespace llmrun::quant
