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

// How each sub-block's scale and min are searched (ggml's make_qkx2_quants): starting from the
// range's own fit (min/max, the range including 0), `steps` + 1 more candidates round the
// values with inverse scales (max_level + rmin + rdelta * i) / (max - min), each refitted by
// weighted least squares (scale, min; the min kept <= 0); the fit with the least weighted
// squared error wins, weights |x| + rms(x) of the sub-block (large values count more).
// Q5_K uses ggml's settings (rmin -0.5, rdelta 0.1, 15 steps; rmin >= -1 is assumed). Unlike
// ggml, a candidate must keep every value within one min/max step and its range within a step
// of the values' (rarely binding), so max_block_error stays a proven bound. Q4_K keeps the
// min/max fit: with ggml's Q4_K settings (-1, 0.1, 20) its RMS error fell 8% but a trained
// model's perplexity rose (bench/RESULTS.md, "Q5_K scale search").
struct KScaleSearch {
  float rmin = 0, rdelta = 0;
  int steps = 0;  // 0: the min/max fit alone
};
inline constexpr KScaleSearch kQ5KSearch{-0.5f, 0.1f, 15};

// Chooses the scales of the 8 sub-blocks of 32 in x[256] for levels 0..max_level (15 for Q4_K,
// 31 for Q5_K) by `search`, writes d and dmin (f16) at head[0..3] and the 12 packed scale
// bytes at head[4..15], and returns them as stored.
KScales pack_k_scales(const float* x, int max_level, const KScaleSearch& search, uint8_t* head);

}  // namespace llmrun::quant
