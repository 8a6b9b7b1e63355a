// src/backend owns the op interface every model computation goes through, and its
// implementations (cpu/ is the reference). Nothing above this folder touches device APIs.
//
// Conventions shared by all ops:
//  - Tensors are contiguous row-major views; 2-D ops read them as rows() x cols().
//  - Gradients of *parameters* (dw, db, dtable) are ACCUMULATED (+=): gradient buffers are
//    zeroed once per optimizer step and micro-batches add into them.
//  - Gradients of *activations* (dx) are overwritten unless the op takes `accumulate_dx`,
//    which lets a norm's backward add straight into the residual-stream gradient.
//  - Attention reads a fused qkv activation: each row (one token) is
//    [q: heads*head_dim | k: kv_heads*head_dim | v: kv_heads*head_dim].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/rope_frequencies.h"
#include "tensor/tensor.h"

namespace llmrun {

struct AttentionShape {
  int batch = 1;     // sequences
  int seq = 1;       // tokens per sequence
  int heads = 1;     // query heads
  int kv_heads = 1;  // key/value heads (heads % kv_heads == 0; GQA when smaller)
  int head_dim = 1;
  int qkv_cols() const { return (heads + 2 * kv_heads) * head_dim; }
};

// Whether attention_fwd/attention_bwd round their matmul operands to bf16 (see
// Backend::attention_fwd): under `precision.compute: bf16` (gemm dtype bf16) for the head dims
// the CUDA backend's tensor-core kernels take, multiples of 16 up to 128.
inline bool attention_bf16_operands(DType gemm_dtype, int head_dim) {
  return gemm_dtype == DType::bf16 && head_dim % 16 == 0 && head_dim > 0 && head_dim <= 128;
}

struct AdamWParams {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0;  // decoupled: p -= lr * wd * p
  int64_t step = 1;        // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual int threads() const = 0;

  // --- memory -------------------------------------------------------------
  virtual Buffer allocate(size_t bytes) = 0;             // zero-initialised
  virtual void copy(Tensor dst, const Tensor& src) = 0;  // same dtype and numel
  virtual void fill(Tensor x, float value) = 0;
  // dst[r, :] = src[r, col_begin : col_begin + dst.cols()]: gathers a column range (e.g. the
  // k or v part of a fused qkv activation) into a contiguous tensor with as many rows.
  virtual void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) = 0;
  // Element conversion f32 <-> bf16/f16 (dst = src * scale).
  virtual void cast(Tensor dst, const Tensor& src, float scale = 1.0f) = 0;

  // --- dense ----------------------------------------------------------------
  // out[M,N] = alpha * op(a) @ op(b) + beta * out (+ bias[N] broadcast over rows when given).
  // op(a) is [M,K] (a stored [K,M] when trans_a), op(b) is [K,N] (b stored [N,K] when trans_b).
  virtual void matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                      float alpha = 1.0f, float beta = 0.0f, const Tensor* bias = nullptr) = 0;
  // y[M,N] = x[M,K] W[N,K]^T (+ bias[N]) (+ y when `accumulate`): the inference linear.
  // Every row of y must come out bitwise the same whatever M is and whichever rows x holds
  // besides it, so that continuous batching gives a sequence the tokens it gets alone. The
  // default is matmul (fine for a backend whose GEMM already keeps rows independent).
  virtual void linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                           bool accumulate) {
    matmul(y, x, W, false, true, 1.0f, accumulate ? 1.0f : 0.0f, bias);
  }
  // out[cols] (+)= sum over rows of x[rows, cols]: bias gradients.
  virtual void sum_rows(Tensor out, const Tensor& x, bool accumulate) = 0;
  // GPT-2's MLP up-projection with its GELU fused (a device backend does it in the GEMM's
  // epilogue): pre[M,N] = x[M,K] W[N,K]^T (+ bias[N]), kept for backward, and act = gelu(pre).
  // The default is exactly matmul then gelu_fwd.
  virtual void matmul_bias_gelu(Tensor pre, Tensor act, const Tensor& x, const Tensor& W,
                                const Tensor* bias) {
    matmul(pre, x, W, false, true, 1.0f, 0.0f, bias);
    gelu_fwd(act, pre);
  }
  // Sampling where the logits are, so decoding reads back one token id per row instead of the
  // vocabulary's logits. Row r of logits [rows, vocab] draws with rows[r] (temperature > 0;
  // `u` is the host generator's uniform for that row) exactly as serve's TokenSampler walks a
  // sorted row; ids: i32 [rows] on this backend. Returns false, touching nothing, on a backend
  // that leaves sampling to the host (the CPU: the logits are already there); a call with no
  // rows (and empty tensors) only asks which it is.
  struct RowSample {
    float temperature = 1.0f;
    int top_k = 0;
    float top_p = 1.0f, min_p = 0.0f;
    double u = 0;
  };
  virtual bool sample_rows(Tensor /*ids*/, const Tensor& /*logits*/,
                           const std::vector<RowSample>& /*rows*/) {
    return false;
  }
  // A linear's backward, both GEMMs: dW[N,K] += dy[M,N]^T x[M,K] and dx[M,K] = dy[M,N] W[N,K]
  // (a device backend rounds dy to the GEMM dtype once for both). The default is exactly these
  // two matmuls.
  virtual void linear_grads(Tensor dx, Tensor dW, const Tensor& dy, const Tensor& x,
                            const Tensor& W) {
    matmul(dW, dy, x, /*trans_a=*/true, /*trans_b=*/false, 1.0f, 1.0f);
    matmul(dx, dy, W, false, false);
  }
  // The down-projection's input gradient through the GELU: dx[M,F] = (dy[M,N] W[N,F]) *
  // gelu'(pre[M,F]) (a device backend fuses the derivative into the GEMM's epilogue). The
  // default is exactly matmul into dx then gelu_bwd in place.
  virtual void matmul_dgelu(Tensor dx, const Tensor& dy, const Tensor& W, const Tensor& pre) {
    matmul(dx, dy, W, false, false);
    gelu_bwd(dx, dx, pre);
  }

  // --- elementwise ------------------------------------------------------------
  virtual void add(Tensor out, const Tensor& a, const Tensor& b) = 0;  // may alias
  virtual void scale(Tensor x, float a) = 0;                           // x *= a
  // GELU with the tanh approximation (GPT-2's "gelu_new").
  virtual void gelu_fwd(Tensor out, const Tensor& x) = 0;
  virtual void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) = 0;
  // gate_up[N, 2F] = [gate | up]; out[N, F] = silu(gate) * up.
  virtual void swiglu_fwd(Tensor out, const Tensor& gate_up) = 0;
  virtual void swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) = 0;

  // --- normalisation (rows of x) ----------------------------------------------
  // Saves mean/rstd per row (f32 [rows]) for the backward.
  virtual void layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& w,
                             const Tensor& b, float eps) = 0;
  virtual void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                             const Tensor& w, const Tensor& mean, const Tensor& rstd,
                             bool accumulate_dx) = 0;
  virtual void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                           float eps) = 0;
  virtual void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                           const Tensor& rstd, bool accumulate_dx) = 0;

  // --- positions and attention --------------------------------------------------
  // Rotates, in place, the first `rotated_heads` heads of every row of x [rows, *] by the
  // rotary angle of positions[row] (i32 [rows]); Hugging Face "rotate_half" pairing
  // (i, i + head_dim/2), frequencies from theta and `scaling` (backend/rope_frequencies.h).
  // inverse=true applies the transpose (for the backward).
  virtual void rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim, float theta,
                    const RopeScaling& scaling, bool inverse) = 0;
  // Causal attention over qkv [batch*seq, qkv_cols]; out [batch*seq, heads*head_dim];
  // lse [batch, heads, seq] keeps the log-sum-exp so the backward never stores probabilities.
  // Precision: fp32 throughout, except when attention_bf16_operands(gemm_dtype(), head_dim)
  // (bf16 compute, head_dim a multiple of 16 up to 128): then, as a tensor-core kernel does,
  // every matmul operand is rounded to bf16 and products accumulate in fp32 — Q, K for the
  // scores, P (exp(s - running max), per 64-key tile) and V for the output, and in the backward
  // Q, K, V, dout, P (for dV) and dS = P * (dP - delta) (for dQ, dK). Softmax, its max and sum,
  // lse and delta = rowsum(dout * out) stay fp32 from the unrounded values. attention_cached,
  // paged and block (context-parallel) attention are always fp32.
  virtual void attention_fwd(Tensor out, Tensor lse, const Tensor& qkv,
                             const AttentionShape& s) = 0;
  virtual void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const AttentionShape& s) = 0;
  // Attention of q [n_q, heads*head_dim] (query i sits at position start_pos + i) over a
  // contiguous cache k, v [>= start_pos + n_q, kv_heads*head_dim]; causal. For generation.
  virtual void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache,
                                const Tensor& v_cache, int start_pos, int heads, int kv_heads,
                                int head_dim) = 0;

  // Context parallelism (ring attention). Attention of a chunk of queries q [batch*s.seq,
  // heads*head_dim] over one chunk of keys and values k, v [batch*nk, kv_heads*head_dim] of
  // the same sequences: every query sees every key (causal = false: the key chunk lies wholly
  // before the query chunk), or, for a chunk against itself (nk == s.seq), the causal
  // triangle. out [batch*s.seq, heads*head_dim] and lse [batch, heads, s.seq] are the block's
  // partial result, which attention_lse_merge combines with the others.
  virtual void attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, int nk, bool causal, const AttentionShape& s) {
    (void)out, (void)lse, (void)q, (void)k, (void)v, (void)nk, (void)causal, (void)s;
    throw UserError("the " + name() + " backend has no block attention (context parallelism)");
  }
  // dst[r, col_begin : col_begin + src.cols()] = src[r, :]: the inverse of copy_cols (writes
  // a chunk's q, k or v gradient back into a fused qkv gradient).
  virtual void copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) {
    (void)dst, (void)src, (void)col_begin;
    throw UserError("the " + name() + " backend has no block attention (context parallelism)");
  }
  // Online-softmax merge: (out, lse) becomes the attention over the union of the keys behind
  // (out, lse) and those behind (block_out, block_lse). lse = -inf marks "no keys yet".
  virtual void attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out,
                                   const Tensor& block_lse, const AttentionShape& s) {
    (void)out, (void)lse, (void)block_out, (void)block_lse, (void)s;
    throw UserError("the " + name() + " backend has no block attention (context parallelism)");
  }
  // The backward of one block given the queries' final (merged) out and lse: ACCUMULATES the
  // block's share of dq [batch*s.seq, heads*head_dim] and dk, dv [batch*nk, kv_heads*head_dim].
  virtual void attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout,
                                   const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, int nk, bool causal,
                                   const AttentionShape& s) {
    (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)lse, (void)q, (void)k, (void)v;
    (void)nk, (void)causal, (void)s;
    throw UserError("the " + name() + " backend has no block attention (context parallelism)");
  }

  // Paged attention for serving: a flattened batch of sequences whose keys and values live
  // in fixed-size blocks of one shared pool. q [T, heads*head_dim] holds the new tokens of
  // every sequence back to back; sequence s owns rows query_starts[s] .. query_starts[s+1]
  // (i32 [S+1]) and has context_lens[s] (i32 [S]) tokens in the cache *including* its new
  // ones, so its query i sits at position context_lens[s] - n_new + i and attends causally to
  // positions 0 .. that one (chunked prefill and decode alike). block_tables i32
  // [S, max_blocks]: pool block of each block_size-token slice of the sequence. k_pool and
  // v_pool [num_blocks * block_size, kv_heads*head_dim] are one layer's pool; the new tokens'
  // k/v must already be in it (see scatter_rows). out [T, heads*head_dim].
  virtual void paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool,
                               const Tensor& v_pool, const Tensor& block_tables,
                               const Tensor& query_starts, const Tensor& context_lens,
                               int block_size, int heads, int kv_heads, int head_dim) = 0;
  // dst[slots[r], :] = src[r, col_begin : col_begin + dst.cols()] for every row r of src
  // (slots i32 [src.rows()]); a slot < 0 skips its row. Writes new k/v rows into pool slots.
  virtual void scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots,
                            int64_t col_begin) = 0;

  // --- embedding and loss --------------------------------------------------------
  // out[N, D] (+)= table[ids[n], :]; an id < 0 contributes nothing (zero row, or left as is
  // when accumulating): a vocab-parallel rank marks the ids another rank's table holds.
  virtual void embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table,
                             bool accumulate) = 0;
  virtual void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) = 0;
  // losses[N] = -log softmax(logits)[target]; logits [N, V] is overwritten IN PLACE with
  // grad_scale * (softmax - onehot(target)). Targets < 0 are ignored (loss 0, grad 0).
  virtual void softmax_xent(Tensor losses, Tensor logits, const Tensor& targets,
                            float grad_scale) = 0;
  // The same loss when the vocabulary is split across tensor-parallel ranks (logits [N, V_r]
  // are this rank's columns), in three passes around the group's reductions:
  //   xent_row_max:  row_max[N] = max of the local logits           -> all-reduce max
  //   xent_partials: sums[0, n] = sum_c exp(logit - row_max),
  //                  sums[1, n] = the target's logit when this rank holds it, else 0
  //                                                                   -> all-reduce sum
  //   xent_finish:   losses and, in place, grad_scale * (softmax - onehot) of the local columns.
  // Local targets: t >= 0 a column of this rank, -1 ignored (loss and gradient 0), -2 held by
  // another rank. Every rank ends with the same losses.
  virtual void xent_row_max(Tensor row_max, const Tensor& logits) = 0;
  virtual void xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                             const Tensor& targets) = 0;
  virtual void xent_finish(Tensor losses, Tensor logits, const Tensor& row_max, const Tensor& sums,
                           const Tensor& targets, float grad_scale) = 0;

  // --- optimizer and reductions -----------------------------------------------------
  virtual void adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
                     const AdamWParams& hp) = 0;
  virtual double sum_squares(const Tensor& x) = 0;
  virtual double sum(const Tensor& x) = 0;
  virtual float amax(const Tensor& x) = 0;

  // --- device seam: what a backend with its own memory needs ------------------------
  // Device backends keep the host out of the loop: a reduction lands in a tensor (no sync
  // per tensor), greedy sampling reads one id per row instead of the whole logits row, and
  // host staging buffers are page-locked so copies can run asynchronously.
  // out (f32 [1]) += sum of x[i]^2.
  virtual void sum_squares_into(Tensor out, const Tensor& x) = 0;
  // out (f32 [1]) = max(out, max |x[i]|).
  virtual void amax_into(Tensor out, const Tensor& x) = 0;
  // ids (i32 [rows]) = the column of each row's largest value, the lowest one on ties.
  virtual void argmax_rows(Tensor ids, const Tensor& x) = 0;
  // Host memory for staging copies (page-locked on a device backend). Zero-initialised.
  virtual Buffer allocate_host_pinned(size_t bytes) { return Buffer::host(bytes); }
  // The element type GEMM operands (matmul, linear_rows) are rounded to: f32, or bf16 for
  // `precision.compute: bf16`. Accumulation and outputs stay f32 either way.
  void set_gemm_dtype(DType t) {
    LLMRUN_CHECK(t == DType::f32 || t == DType::bf16, "GEMM operands are f32 or bf16");
    gemm_dtype_ = t;
  }
  DType gemm_dtype() const { return gemm_dtype_; }

  // Waits until every op issued so far has finished (a no-op on the host).
  virtual void synchronize() {}

 private:
  DType gemm_dtype_ = DType::f32;
};

// threads <= 0: use every core the process may run on.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace llmrun
