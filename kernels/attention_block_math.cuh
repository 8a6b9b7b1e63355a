// Per-element math of the context-parallel block attention (kernels/attention_block.cu):
// which keys a query of a block sees, the online softmax of the forward and how a row ends,
// the log-sum-exp merge of two partial results, and the backward's probabilities recomputed
// from the final lse. Host and device code: the kernels run it on the GPU, and
// tests/unit/test_attention_block_math.cpp compiles it on the CPU against the CPU backend's
// attention_block_fwd / attention_lse_merge / attention_block_bwd.
//
// lse = -inf means "no keys yet" (backend.h): a merge with such a side takes the other side
// whole, and a row whose final lse is -inf has no probabilities, so no gradient.
#pragma once
#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define LLMRUN_BLOCK_HD __host__ __device__
#else
#define LLMRUN_BLOCK_HD
#endif

namespace llmrun::kernels::attention_block_math {

// Key `key` (0-based in the block's key chunk of nk rows) is visible to query `query` (0-based
// in the query chunk): every key of a full block (the key chunk lies wholly before the query
// chunk); in the causal block on the diagonal (nk == seq, same positions) the keys up to the
// query itself.
LLMRUN_BLOCK_HD inline bool key_visible(bool causal, int64_t query, int64_t key, int64_t nk) {
  return key >= 0 && key < nk && (!causal || key <= query);
}

// Keys a query row range [q0, q0 + nq) of a block may see: [0, key_end).
LLMRUN_BLOCK_HD inline int64_t key_end(bool causal, int64_t q0, int nq, int64_t nk) {
  return causal ? q0 + nq : nk;
}

// exp(x - m) for a score of the online softmax: 0 for a masked score (x = -inf), and no NaN
// while the running maximum m is still -inf (a row that has seen no visible key yet).
LLMRUN_BLOCK_HD inline float exp_masked(float x, float m) {
  return x == -INFINITY ? 0.0f : expf(x - m);
}

// The end of a row of the online softmax with running maximum m and denominator l: the
// factor its accumulated values are multiplied by, and its log-sum-exp. A row that saw no key
// (l == 0) ends as out 0 and lse -inf, which every merge treats as "no keys".
struct RowEnd {
  float inv_l;
  float lse;
};
LLMRUN_BLOCK_HD inline RowEnd finish_row(float m, float l) {
  if (!(l > 0.0f)) return {0.0f, -INFINITY};
  return {1.0f / l, m + logf(l)};
}

// The merge of a row's running (out, lse) with a block's (block_out, block_lse), as
// CpuBackend::attention_lse_merge computes it: each side's softmax denominator relative to
// the larger lse (so exp(l - m) <= 1), normalised. `skip`: neither side has keys; out and
// lse stay as they are.
struct LseMerge {
  float keep;  // weight of the running out
  float take;  // weight of the block's out
  float lse;   // the merged lse
  bool skip;
};
LLMRUN_BLOCK_HD inline LseMerge lse_merge(float lse, float block_lse) {
  const float m = lse > block_lse ? lse : block_lse;
  if (m == -INFINITY) return {1.0f, 0.0f, lse, true};
  const float w1 = expf(lse - m), w2 = expf(block_lse - m), sum = w1 + w2;
  return {w1 / sum, w2 / sum, m + logf(sum), false};
}
// One merged element. A side of weight 0 (lse -inf: no keys) is left out entirely rather than
// multiplied by 0, so whatever its out holds (the zeros a running out starts from, or a
// never-written block row) cannot turn the result into NaN.
LLMRUN_BLOCK_HD inline float merge_value(const LseMerge& w, float out, float block_out) {
  if (w.skip || w.take == 0.0f) return out;
  if (w.keep == 0.0f) return block_out;
  return w.keep * out + w.take * block_out;
}

// The backward's probability of a visible (query, key) pair from its scaled score and the
// query's FINAL log-sum-exp (over every block's keys); 0 for a row with no keys (lse -inf).
LLMRUN_BLOCK_HD inline float block_prob(float scaled_score, float lse) {
  return lse == -INFINITY ? 0.0f : expf(scaled_score - lse);
}
// dS = P * (dP - D) where dP = dout . v and D = dout . out of the final output.
LLMRUN_BLOCK_HD inline float block_dscore(float p, float dp, float delta) {
  return p * (dp - delta);
}

}  // namespace llmrun::kernels::attention_block_math
