// Attention of a few query rows over a contiguous KV cache: the decode step's case, where the
// tiled flash kernel's two sgemm calls per head (a 1 x keys and a 1 x head_dim product) cost
// more in call overhead and strided reads than the arithmetic. One pass per query row covers
// every head: keys and values stream once, front to back, each cache row read whole.
#pragma once
#include <cstdint>

namespace llmrun::cpu {

// out row r = softmax(q_r K^T / sqrt(d)) V over keys [0, pos0 + r] for each head, GQA heads
// h reading kv head h / (heads / kv_heads). q and out: nq rows of heads * d values (strides ldq,
// ldo); k and v: rows of kv_heads * d values (stride ldkv). Heads are split over up to
// `threads` threads when the work pays for waking them.
// One query row q (heads * d values) over n keys and values given by row addresses (rows of
// kv_heads * d values, anywhere: a contiguous cache or a paged pool): writes the output values
// of heads [h0, h1) to out (heads * d values). A head's result depends only on its query and
// rows, not on the head range it ran in, so callers may split heads over threads freely.
void attend_query(const float* q, const float* const* k_rows, const float* const* v_rows, int64_t n,
                  float* out, int heads, int kv_heads, int d, int h0, int h1);

void decode_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                      float* out, int64_t ldo, int nq, int64_t pos0, int heads, int kv_heads, int d,
                      int threads);

}  // namespace llmrun::cpu
