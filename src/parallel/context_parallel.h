// Context parallelism's attention: this rank holds two chunks of every sequence (cp_chunks.h)
// and its queries must see the keys and values of every earlier chunk, held by other ranks.
// p2p (ring attention): key/value chunks travel around the cp group one hop per step, the
// next hop posted before the current block is computed so the transfer overlaps it; each
// (query chunk, key chunk) block's partial output is merged by log-sum-exp (online softmax).
// The backward sends the same chunks around again, with their dK/dV accumulators following
// one hop behind, and a last hop returns each accumulator to its owner. all_gather: every
// rank gathers all key/value chunks up front and reduce-scatters their gradients at the end.
// a2a (DeepSpeed-Ulysses, context_parallel_a2a.cpp): an all-to-all swaps the sequence split
// for a head split (each rank: heads/cp heads of every token), one whole-sequence causal
// attention runs per rank, and a second all-to-all swaps back; the backward mirrors it.
// Everything outside attention (norms, MLPs, embeddings, loss) runs on the local tokens.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/distributed_attention.h"
#include "parallel/cp_chunks.h"

namespace llmrun {

class ContextParallel final : public DistributedAttention {
 public:
  // seq_len: tokens of a full sequence; the group's rank and size give the chunks.
  ContextParallel(Backend& be, Communicator& cp, CpComm mode, int seq_len);

  const CpChunks& chunks() const { return chunks_; }
  int position(int local_token) const override { return chunks_.position(local_token); }
  Communicator& token_group() override { return comm_; }
  // local: batch sequences of local_len() tokens (this rank's two chunks each).
  // qkv [batch*local_len, qkv_cols] after RoPE; attn [batch*local_len, heads*head_dim];
  // lse [batch*heads*local_len] in this class's own (chunk-major) order, read by backward().
  void forward(Tensor attn, Tensor lse, const Tensor& qkv, const AttentionShape& local) override;
  // dqkv (overwritten) from dattn, given the forward's qkv, attn and lse.
  void backward(Tensor dqkv, const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                const Tensor& lse, const AttentionShape& local) override;

  // Since construction: seconds of ring steps in all (compute + waits); seconds waiting for
  // transfers the block compute did not hide; and of the key/value hops posted before their
  // blocks (p2p), their duration (from posting to completion, polled between blocks) and the
  // part of it that overlapped the compute.
  double ring_seconds() const { return ring_s_; }
  double exposed_wait_seconds() const { return exposed_s_; }
  double hop_seconds() const { return hop_s_; }
  double hidden_seconds() const { return hidden_s_; }
  // The same for the backward's dK/dV hops (p2p), each of which travels while the next ring
  // step's blocks compute; only the last (home) hop has nothing to hide behind.
  double grad_hop_seconds() const { return grad_hop_s_; }
  double grad_hidden_seconds() const { return grad_hidden_s_; }
  // Bytes of this rank's chunk and ring buffers (activation memory beside the model's).
  size_t buffer_bytes() const { return bytes_; }

 private:
  struct Chunk {  // one local chunk of every sequence, as contiguous [batch*C, cols] tensors
    Tensor q, k, v, out, lse, dq, dout;
  };
  void plan(const AttentionShape& local);
  Tensor alloc(std::initializer_list<int64_t> dims);  // an arena tensor, counted in bytes_
  // Splits qkv (and the forward's outputs, for the backward) into chunks_[0..1].
  void split(const Tensor& qkv, const Tensor* attn, const Tensor* dattn, const Tensor* lse);
  // k or v (part 0 or 1) of local chunk c inside a packed key/value buffer.
  Tensor kv_part(const Tensor& packed, int c, int part) const;
  // The blocks of my query chunks against the key/value chunks of rank `src` held in `kv`;
  // backward: their gradient contributions, accumulated into dq and `dkv` (packed like kv).
  void forward_blocks(int src, const Tensor& kv);
  void backward_blocks(int src, const Tensor& kv, const Tensor& dkv);
  // Global chunk order: a key chunk before the query chunk is a full block, the same chunk the
  // causal triangle, a later one nothing.
  enum class Block { none, full, causal };
  Block block_kind(int q_chunk, int k_chunk) const;

  Backend& be_;
  Communicator& comm_;
  CpComm mode_;
  CpChunks chunks_;
  AttentionShape local_{}, chunk_{};  // chunk_: seq = one chunk
  int64_t packed_ = 0;                // floats of one rank's packed keys and values
  std::vector<Buffer> arena_;
  Chunk c_[2];
  Tensor kv_[2], dkv_[2];  // ring buffers (p2p) or gathered [cp * packed] (all_gather)
  Tensor dkv_local_;       // p2p backward: one step's dK/dV, added to the arriving accumulator
  Tensor block_out_, block_lse_;
  // One hop around the ring in flight: a send to the next rank and a receive from the
  // previous one, with when it was posted and (polled between blocks) when it completed.
  struct Hop {
    std::unique_ptr<CommRequest> sent, got;
    double posted_at = 0, done_at = 0;
  };
  // Posts a hop on `hop`: out to the next rank, in from the previous one.
  void post_hop(Hop& hop, const Tensor& out, Tensor in, int tag);
  // Drives the posted hops' progress between blocks and notes when they completed.
  void poll();
  // Waits for `hop` (if posted) and books its overlap into the given totals; `computed` is
  // when the blocks it travelled behind ended.
  void finish_hop(Hop& hop, double computed, double& hop_s, double& hidden_s);
  Hop kv_hop_, grad_hop_;

  // a2a (context_parallel_a2a.cpp). A tensor's columns split over the ranks by head: groups
  // of columns (q | k | v, or one group for attention outputs), each `width` columns per rank,
  // rank p's share of group g at columns cp * (widths before g) + p * width.
  using HeadGroups = std::vector<int64_t>;
  void plan_a2a(const AttentionShape& local);
  void forward_a2a(Tensor attn, Tensor lse, const Tensor& qkv);
  void backward_a2a(Tensor dqkv, const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                    const Tensor& lse);
  // src [batch*local_len, cp * sum(widths)] (sequence split) -> dst [batch*seq, sum(widths)]
  // (this rank's heads of every token, in global token order); heads_to_seq is its inverse.
  void seq_to_heads(Tensor dst, const Tensor& src, const HeadGroups& widths);
  void heads_to_seq(Tensor dst, const Tensor& src, const HeadGroups& widths);
  // Visits the exchange buffer `buf` by rank p and head group: the [batch*local_len, width]
  // block holding rank p's share of the group; in_block is the widths of the earlier groups
  // (the group's first column in the head-split layout).
  using ShareVisitor = std::function<void(int p, int64_t in_block, int64_t width, const Tensor&)>;
  void for_each_share(const Tensor& buf, const HeadGroups& widths, const ShareVisitor& visit) const;
  // Visits rank `rank`'s chunks of every sequence: the first row of each in the whole-sequence
  // layout (global) and in that rank's local layout.
  using ChunkVisitor = std::function<void(int64_t global, int64_t local)>;
  void for_each_chunk(int rank, const ChunkVisitor& visit) const;
  // All-to-all of a2a_send_ into a2a_recv_, `block` floats for and from each rank
  // (Communicator::all_to_allv with equal counts).
  void exchange(int64_t block);
  AttentionShape heads_{};  // whole sequences, this rank's heads/cp and kv_heads/cp heads
  HeadGroups qkv_widths_, out_widths_;
  Tensor a2a_send_, a2a_recv_, hs_qkv_, hs_out_, hs_dout_, hs_dqkv_;
  double exposed_s_ = 0, ring_s_ = 0, hop_s_ = 0, hidden_s_ = 0, grad_hop_s_ = 0,
         grad_hidden_s_ = 0;
  size_t bytes_ = 0;
};

}  // namespace llmrun
