#include "parallel/context_parallel.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

namespace llmrun {

namespace {
constexpr int kKvTag = 0x4350;    // key/value chunks travelling the ring
constexpr int kGradTag = 0x4351;  // their dK/dV accumulators

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ContextParallel::ContextParallel(Backend& be, Communicator& cp, CpComm mode, int seq_len)
    : be_(be), comm_(cp), mode_(mode), chunks_{seq_len, cp.size(), cp.rank()} {
  if (const auto problem = cp_split_problem(seq_len, cp.size())) throw UserError(*problem);
}

Tensor ContextParallel::alloc(std::initializer_list<int64_t> dims) {
  Tensor probe(nullptr, DType::f32, dims);
  arena_.push_back(be_.allocate(probe.bytes()));
  bytes_ += probe.bytes();
  return arena_.back().as(DType::f32, dims);
}

void ContextParallel::plan(const AttentionShape& local) {
  LLMRUN_CHECK(local.seq == chunks_.local_len(),
               "context parallelism: a sequence's local part must be local_len tokens");
  if (local.batch == local_.batch && local.seq == local_.seq && local.heads == local_.heads &&
      local.kv_heads == local_.kv_heads && local.head_dim == local_.head_dim)
    return;
  local_ = local;
  chunk_ = local;
  chunk_.seq = chunks_.chunk_len();
  arena_.clear();
  bytes_ = 0;
  if (mode_ == CpComm::a2a) return plan_a2a(local);
  const int64_t rows = int64_t(local.batch) * chunk_.seq;
  const int64_t hd = int64_t(local.heads) * local.head_dim;
  const int64_t kvd = int64_t(local.kv_heads) * local.head_dim;
  packed_ = 4 * rows * kvd;  // [chunk 0: k | v][chunk 1: k | v]
  for (Chunk& c : c_) {
    c.q = alloc({rows, hd});
    c.out = alloc({rows, hd});
    c.dq = alloc({rows, hd});
    c.dout = alloc({rows, hd});
  }
  block_out_ = alloc({rows, hd});
  block_lse_ = alloc({int64_t(local.batch), local.heads, chunk_.seq});
  const int64_t ring = mode_ == CpComm::p2p ? packed_ : packed_ * chunks_.cp;
  kv_[0] = alloc({ring});
  dkv_[0] = alloc({ring});
  kv_[1] = alloc({packed_});  // p2p: the next hop; all_gather: this rank's own chunks
  dkv_[1] = alloc({packed_});
  if (mode_ == CpComm::p2p) dkv_local_ = alloc({packed_});
}

Tensor ContextParallel::kv_part(const Tensor& packed, int c, int part) const {
  const int64_t rows = int64_t(local_.batch) * chunk_.seq;
  const int64_t kvd = int64_t(local_.kv_heads) * local_.head_dim;
  return packed.flat((int64_t(c) * 2 + part) * rows * kvd, rows * kvd).view({rows, kvd});
}

void ContextParallel::split(const Tensor& qkv, const Tensor* attn, const Tensor* dattn,
                            const Tensor* lse) {
  const int64_t C = chunk_.seq, L = local_.seq;
  const int64_t hd = int64_t(local_.heads) * local_.head_dim;
  const int64_t kvd = int64_t(local_.kv_heads) * local_.head_dim;
  const int64_t bhc = int64_t(local_.batch) * local_.heads * C;
  const Tensor own = mode_ == CpComm::p2p ? kv_[0] : kv_[1];
  for (int c = 0; c < 2; ++c) {
    if (lse) c_[c].lse = lse->flat(c * bhc, bhc).view({int64_t(local_.batch), local_.heads, C});
    for (int64_t b = 0; b < local_.batch; ++b) {
      const int64_t at = b * L + c * C;  // local rows of chunk c of sequence b
      const Tensor rows = qkv.slice(at, at + C);
      be_.copy_cols(c_[c].q.slice(b * C, (b + 1) * C), rows, 0);
      be_.copy_cols(kv_part(own, c, 0).slice(b * C, (b + 1) * C), rows, hd);
      be_.copy_cols(kv_part(own, c, 1).slice(b * C, (b + 1) * C), rows, hd + kvd);
      if (attn) be_.copy(c_[c].out.slice(b * C, (b + 1) * C), attn->slice(at, at + C));
      if (dattn) be_.copy(c_[c].dout.slice(b * C, (b + 1) * C), dattn->slice(at, at + C));
    }
  }
}

ContextParallel::Block ContextParallel::block_kind(int q_chunk, int k_chunk) const {
  if (k_chunk < q_chunk) return Block::full;
  return k_chunk == q_chunk ? Block::causal : Block::none;
}

void ContextParallel::forward_blocks(int src, const Tensor& kv) {
  for (int qc = 0; qc < 2; ++qc)
    for (int kc = 0; kc < 2; ++kc) {
      const Block kind = block_kind(chunks_.chunk_of(chunks_.rank, qc), chunks_.chunk_of(src, kc));
      if (kind == Block::none) continue;
      be_.attention_block_fwd(block_out_, block_lse_, c_[qc].q, kv_part(kv, kc, 0),
                              kv_part(kv, kc, 1), chunk_.seq, kind == Block::causal, chunk_);
      be_.attention_lse_merge(c_[qc].out, c_[qc].lse, block_out_, block_lse_, chunk_);
      poll();
    }
}

void ContextParallel::backward_blocks(int src, const Tensor& kv, const Tensor& dkv) {
  for (int qc = 0; qc < 2; ++qc)
    for (int kc = 0; kc < 2; ++kc) {
      const Block kind = block_kind(chunks_.chunk_of(chunks_.rank, qc), chunks_.chunk_of(src, kc));
      if (kind == Block::none) continue;
      be_.attention_block_bwd(c_[qc].dq, kv_part(dkv, kc, 0), kv_part(dkv, kc, 1), c_[qc].dout,
                              c_[qc].out, c_[qc].lse, c_[qc].q, kv_part(kv, kc, 0),
                              kv_part(kv, kc, 1), chunk_.seq, kind == Block::causal, chunk_);
      poll();
    }
}

void ContextParallel::post_hop(Hop& hop, const Tensor& out, Tensor in, int tag) {
  const int n = chunks_.cp, r = chunks_.rank;
  hop.posted_at = now();
  hop.done_at = 0;
  hop.sent = comm_.isend(out, (r + 1) % n, tag);
  hop.got = comm_.irecv(in, (r + n - 1) % n, tag);
}

void ContextParallel::poll() {
  for (Hop* hop : {&kv_hop_, &grad_hop_}) {
    if (!hop->sent || hop->done_at > 0) continue;
    // test() also pushes the transfer along (MPI progresses inside its calls).
    const bool sent = hop->sent->test(), got = hop->got->test();
    if (sent && got) hop->done_at = now();
  }
}

void ContextParallel::finish_hop(Hop& hop, double computed, double& hop_s, double& hidden_s) {
  if (!hop.sent) return;
  hop.sent->wait();
  hop.got->wait();
  const double end = hop.done_at > 0 ? hop.done_at : now();
  exposed_s_ += std::max(0.0, now() - computed);
  hop_s += end - hop.posted_at;
  hidden_s += std::max(0.0, std::min(end, computed) - hop.posted_at);
  hop.sent.reset();
  hop.got.reset();
}

void ContextParallel::forward(Tensor attn, Tensor lse, const Tensor& qkv,
                              const AttentionShape& local) {
  plan(local);
  if (mode_ == CpComm::a2a) return forward_a2a(attn, lse, qkv);
  split(qkv, nullptr, nullptr, &lse);
  for (Chunk& c : c_) {
    be_.fill(c.out, 0.0f);
    be_.fill(c.lse, -std::numeric_limits<float>::infinity());  // no keys merged yet
  }
  const int n = chunks_.cp, r = chunks_.rank;
  const double t0 = now();
  if (mode_ == CpComm::p2p) {
    Tensor cur = kv_[0], next = kv_[1];
    for (int s = 0; s < n; ++s) {
      const double ts = now();
      if (s + 1 < n) post_hop(kv_hop_, cur, next, kKvTag);  // it travels while these compute
      forward_blocks((r + n - s) % n, cur);
      finish_hop(kv_hop_, now(), hop_s_, hidden_s_);
      ring_s_ += now() - ts;
      std::swap(cur, next);
    }
  } else {
    const double tw = now();
    comm_.all_gather(kv_[1], kv_[0]);
    exposed_s_ += now() - tw;
    for (int src = 0; src < n; ++src) forward_blocks(src, kv_[0].flat(src * packed_, packed_));
    ring_s_ += now() - t0;
  }
  const int64_t C = chunk_.seq;
  for (int c = 0; c < 2; ++c)
    for (int64_t b = 0; b < local_.batch; ++b)
      be_.copy(attn.slice(b * local_.seq + c * C, b * local_.seq + (c + 1) * C),
               c_[c].out.slice(b * C, (b + 1) * C));
}

void ContextParallel::backward(Tensor dqkv, const Tensor& dattn, const Tensor& qkv,
                               const Tensor& attn, const Tensor& lse, const AttentionShape& local) {
  plan(local);
  if (mode_ == CpComm::a2a) return backward_a2a(dqkv, dattn, qkv, attn, lse);
  split(qkv, &attn, &dattn, &lse);
  for (Chunk& c : c_) be_.fill(c.dq, 0.0f);
  const int n = chunks_.cp, r = chunks_.rank;
  const double t0 = now();
  Tensor mine;  // this rank's own chunks' dK/dV once every rank has added its share
  if (mode_ == CpComm::p2p) {
    // Step s computes its blocks' dK/dV into `local` while the accumulator of the chunks
    // it computes on arrives from the previous rank (sent there after its step s-1); the two
    // are then added and the sum sent on. After n steps each accumulator is home.
    Tensor cur = kv_[0], next = kv_[1], sending = dkv_[0], arriving = dkv_[1], local = dkv_local_;
    for (int s = 0; s < n; ++s) {
      const double ts = now();
      if (s + 1 < n) post_hop(kv_hop_, cur, next, kKvTag);
      be_.fill(local, 0.0f);
      backward_blocks((r + n - s) % n, cur, local);
      const double computed = now();
      finish_hop(kv_hop_, computed, hop_s_, hidden_s_);
      finish_hop(grad_hop_, computed, grad_hop_s_, grad_hidden_s_);
      // The accumulator now complete for these chunks: the arrival plus this step's share.
      if (s == 0)
        std::swap(sending, local);
      else {
        be_.add(arriving, arriving, local);
        std::swap(sending, arriving);
      }
      if (n > 1) post_hop(grad_hop_, sending, arriving, kGradTag);
      ring_s_ += now() - ts;
      std::swap(cur, next);
    }
    // The last hop brings this rank's own accumulator home: nothing is left to compute.
    finish_hop(grad_hop_, now(), grad_hop_s_, grad_hidden_s_);
    mine = n > 1 ? arriving : sending;
  } else {
    const double tw = now();
    comm_.all_gather(kv_[1], kv_[0]);
    exposed_s_ += now() - tw;
    be_.fill(dkv_[0], 0.0f);
    for (int src = 0; src < n; ++src)
      backward_blocks(src, kv_[0].flat(src * packed_, packed_),
                      dkv_[0].flat(src * packed_, packed_));
    const double tr = now();
    comm_.reduce_scatter(dkv_[0], dkv_[1]);
    exposed_s_ += now() - tr;
    mine = dkv_[1];
    ring_s_ += now() - t0;
  }
  const int64_t C = chunk_.seq;
  const int64_t hd = int64_t(local_.heads) * local_.head_dim;
  const int64_t kvd = int64_t(local_.kv_heads) * local_.head_dim;
  for (int c = 0; c < 2; ++c)
    for (int64_t b = 0; b < local_.batch; ++b) {
      const Tensor rows = dqkv.slice(b * local_.seq + c * C, b * local_.seq + (c + 1) * C);
      be_.copy_into_cols(rows, c_[c].dq.slice(b * C, (b + 1) * C), 0);
      be_.copy_into_cols(rows, kv_part(mine, c, 0).slice(b * C, (b + 1) * C), hd);
      be_.copy_into_cols(rows, kv_part(mine, c, 1).slice(b * C, (b + 1) * C), hd + kvd);
    }
}

}  // namespace llmrun
