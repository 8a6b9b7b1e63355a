// Context parallelism with cp_comm a2a (DeepSpeed-Ulysses): this rank holds two chunks of
// every sequence with all heads; an all-to-all turns that into every token of the sequence
// with heads/cp query heads and kv_heads/cp key/value heads, one ordinary causal attention
// (the one-rank kernel) runs over the whole sequence, and a second all-to-all returns the
// output to the sequence split. The backward re-gathers q/k/v, the output and its gradient
// the same way (nothing head-split is kept between the passes, so the memory is per layer
// call, not per layer), runs the one-rank attention backward and sends dq/dk/dv home.
// Query head j of a rank's share uses key/value head j / (heads/kv_heads) of the same share,
// because both split contiguously: GQA groups never straddle ranks.
#include <chrono>
#include <vector>

#include "parallel/context_parallel.h"

namespace llmrun {

namespace {
double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int64_t sum(const std::vector<int64_t>& widths) {
  int64_t w = 0;
  for (int64_t g : widths) w += g;
  return w;
}
}  // namespace

void ContextParallel::plan_a2a(const AttentionShape& local) {
  const int n = chunks_.cp;
  if (const auto problem = cp_heads_problem(local.heads, local.kv_heads, 1, n))
    throw UserError("parallel.cp_comm: " + *problem);
  heads_ = local;
  heads_.seq = chunks_.seq;
  heads_.heads = local.heads / n;
  heads_.kv_heads = local.kv_heads / n;
  const int64_t hd = local.head_dim;
  qkv_widths_ = {heads_.heads * hd, heads_.kv_heads * hd, heads_.kv_heads * hd};
  out_widths_ = {heads_.heads * hd};
  // Every rank's tokens, this rank's heads: batch*seq rows = the local rows times cp.
  const int64_t rows = int64_t(local.batch) * heads_.seq;
  const int64_t qkv_cols = heads_.qkv_cols(), out_cols = heads_.heads * hd;
  // The exchange buffers hold cp blocks of the widest tensor sent (q | k | v).
  a2a_send_ = alloc({rows * qkv_cols});
  a2a_recv_ = alloc({rows * qkv_cols});
  hs_qkv_ = alloc({rows, qkv_cols});
  hs_dqkv_ = alloc({rows, qkv_cols});
  hs_out_ = alloc({rows, out_cols});
  hs_dout_ = alloc({rows, out_cols});
}

void ContextParallel::exchange(int64_t block) {
  const int n = chunks_.cp;
  const double t0 = seconds();
  const std::vector<int64_t> counts(size_t(n), block);
  comm_.all_to_allv(a2a_send_.flat(0, n * block), counts, a2a_recv_.flat(0, n * block), counts);
  exposed_s_ += seconds() - t0;  // nothing computes while the all-to-all runs
}

void ContextParallel::for_each_share(const Tensor& buf, const HeadGroups& widths,
                                     const ShareVisitor& visit) const {
  const int64_t rows = int64_t(local_.batch) * local_.seq;
  const int64_t block = rows * sum(widths);  // what one rank sends to one other
  for (int p = 0; p < chunks_.cp; ++p) {
    int64_t in_block = 0;  // columns of the earlier groups (their floats: rows * in_block)
    for (int64_t g : widths) {
      visit(p, in_block, g, buf.flat(p * block + rows * in_block, rows * g).view({rows, g}));
      in_block += g;
    }
  }
}

void ContextParallel::for_each_chunk(int rank, const ChunkVisitor& visit) const {
  const int64_t L = local_.seq, S = heads_.seq, C = chunk_.seq;
  for (int64_t b = 0; b < local_.batch; ++b)
    for (int c = 0; c < 2; ++c)
      visit(b * S + int64_t(chunks_.chunk_of(rank, c)) * C, b * L + c * C);
}

void ContextParallel::seq_to_heads(Tensor dst, const Tensor& src, const HeadGroups& widths) {
  const int n = chunks_.cp;
  const int64_t C = chunk_.seq;
  // Send rank p its heads' columns of every group.
  for_each_share(a2a_send_, widths, [&](int p, int64_t in_block, int64_t g, const Tensor& part) {
    be_.copy_cols(part, src, n * in_block + p * g);
  });
  exchange(int64_t(local_.batch) * local_.seq * sum(widths));
  // Rank s's tokens (its two chunks of every sequence) into their global rows.
  for_each_share(a2a_recv_, widths, [&](int s, int64_t in_block, int64_t, const Tensor& part) {
    for_each_chunk(s, [&](int64_t global, int64_t local) {
      be_.copy_into_cols(dst.slice(global, global + C), part.slice(local, local + C), in_block);
    });
  });
}

void ContextParallel::heads_to_seq(Tensor dst, const Tensor& src, const HeadGroups& widths) {
  const int n = chunks_.cp;
  const int64_t C = chunk_.seq;
  // Send rank s its chunks' rows, in its local order.
  for_each_share(a2a_send_, widths, [&](int s, int64_t in_block, int64_t, const Tensor& part) {
    for_each_chunk(s, [&](int64_t global, int64_t local) {
      be_.copy_cols(part.slice(local, local + C), src.slice(global, global + C), in_block);
    });
  });
  exchange(int64_t(local_.batch) * local_.seq * sum(widths));
  // Rank p's heads of my tokens.
  for_each_share(a2a_recv_, widths, [&](int p, int64_t in_block, int64_t g, const Tensor& part) {
    be_.copy_into_cols(dst, part, n * in_block + p * g);
  });
}

void ContextParallel::forward_a2a(Tensor attn, Tensor lse, const Tensor& qkv) {
  const double t0 = seconds();
  seq_to_heads(hs_qkv_, qkv, qkv_widths_);
  // lse has batch*heads*local_len floats, the same count as [batch, heads/cp, seq].
  be_.attention_fwd(hs_out_, lse.view({int64_t(heads_.batch), heads_.heads, heads_.seq}), hs_qkv_,
                    heads_);
  heads_to_seq(attn, hs_out_, out_widths_);
  ring_s_ += seconds() - t0;
}

void ContextParallel::backward_a2a(Tensor dqkv, const Tensor& dattn, const Tensor& qkv,
                                   const Tensor& attn, const Tensor& lse) {
  const double t0 = seconds();
  seq_to_heads(hs_qkv_, qkv, qkv_widths_);
  seq_to_heads(hs_out_, attn, out_widths_);
  seq_to_heads(hs_dout_, dattn, out_widths_);
  be_.attention_bwd(hs_dqkv_, hs_dout_, hs_qkv_, hs_out_,
                    lse.view({int64_t(heads_.batch), heads_.heads, heads_.seq}), heads_);
  heads_to_seq(dqkv, hs_dqkv_, qkv_widths_);
  ring_s_ += seconds() - t0;
}

}  // namespace llmrun
