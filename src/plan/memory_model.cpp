#include "plan/memory_model.h"

#include <algorithm>

#include "parallel/stage_layers.h"
#include "plan/offload_staging.h"
#include "util/error.h"

namespace llmrun {

int64_t vocab_rows(int64_t vocab, int tp, int rank) {
  return vocab / tp + (rank < vocab % tp ? 1 : 0);
}

namespace {

// One tensor-parallel rank's shapes for one micro-batch.
struct RankDims {
  bool gpt2, qkv_bias;
  int64_t d, f, vocab, seq, mb;
  int64_t heads, qkv_cols, attn_cols, up_cols, kv_cols;
  int64_t n, n_seq;  // tokens of a micro-batch; of them, the rows of a sequence-parallel shard
  MoeConfig moe;     // model.moe (whole on every tp rank)
  int ep = 1;        // expert parallel: E / ep experts per rank, routed buffers for ep ranks
};

RankDims rank_dims(const TrainingShape& s, const TrainingLayout& l) {
  const ModelConfig& m = s.model;
  RankDims x{};
  x.gpt2 = m.arch == Arch::gpt2;
  x.qkv_bias = m.qkv_bias;
  x.d = m.d_model;
  x.f = m.ffn / l.tp;
  x.vocab = vocab_rows(m.vocab, l.tp, 0);
  x.seq = m.seq_len / l.cp;  // context parallelism: this rank's two chunks of each sequence
  x.mb = s.micro_batch;
  x.heads = m.heads / l.tp;
  const int64_t kv = std::max(m.kv_heads / l.tp, 1);
  x.kv_cols = kv * m.head_dim();
  x.qkv_cols = (x.heads + 2 * kv) * m.head_dim();
  x.attn_cols = x.heads * m.head_dim();
  x.up_cols = x.gpt2 ? x.f : 2 * x.f;
  x.n = x.mb * x.seq;
  x.n_seq = l.sequence_parallel ? x.n / l.tp : x.n;
  x.moe = m.moe;
  x.ep = l.ep;
  return x;
}

int64_t block_params(const RankDims& x) {
  const int64_t d = x.d;
  if (x.gpt2)  // ln_1, c_attn (+bias), c_proj (+replicated bias), ln_2, c_fc (+bias), c_proj
               // (+replicated bias)
    return 2 * d + x.qkv_cols * d + x.qkv_cols + d * x.attn_cols + d + 2 * d + x.f * d + x.f +
           d * x.f + d;
  return 2 * d + x.qkv_cols * d + (x.qkv_bias ? x.qkv_cols : 0) + d * x.attn_cols + 2 * x.f * d +
         d * x.f;  // norms, qkv (+bias), o, gate|up, down
}

// An MoE layer's parameters over a dense block's: router, experts, shared expert and its gate
// in place of the MLP.
int64_t moe_block_delta(const RankDims& x) {
  const MoeConfig& m = x.moe;
  const int64_t d = x.d, fs = m.shared_width();
  const int64_t held = m.experts / x.ep;  // expert parallelism: this rank's experts only
  return d * m.experts + held * 3 * d * m.expert_ffn + (fs > 0 ? 3 * d * fs + d : 0) - 3 * d * x.f;
}

// An MoE model's per-block routed buffers (model/moe.h: router logits, the permuted rows'
// token ids, inputs, gate|up, activations and outputs, the shared expert's), one set per
// block whether or not the block is routed; and the backward scratch shared by all blocks.
// Under expert parallelism the expert side (gate|up, activations, and the received rows and
// their outputs) is sized for every ep rank's rows: dropless routing may send them all here.
double moe_saved(const RankDims& x) {
  const MoeConfig& m = x.moe;
  if (!m.enabled()) return 0;
  const double n = double(x.n), rows = n * m.top_k, fs = m.shared_width();
  const double expert_rows = rows * x.ep;
  return n * m.experts + rows * (1 + 2.0 * x.d) + expert_rows * 3.0 * m.expert_ffn +
         (x.ep > 1 ? expert_rows * 2.0 * x.d : 0) + (fs > 0 ? n * (3 * fs + x.d + 1) : 0);
}
double moe_scratch(const RankDims& x) {
  const MoeConfig& m = x.moe;
  if (!m.enabled()) return 0;
  const double n = double(x.n), rows = n * m.top_k, fs = m.shared_width();
  const double expert_rows = rows * x.ep;
  return rows * 2.0 * x.d + expert_rows * 3.0 * m.expert_ffn +
         (x.ep > 1 ? expert_rows * 2.0 * x.d : 0) + n * m.experts +
         (fs > 0 ? n * (3 * fs + x.d + 1) : 0);
}

// Floats one block keeps from its forward for its backward (one micro-batch).
double block_saved(const RankDims& x, Recompute r) {
  const double input = double(x.n_seq) * x.d;
  if (r == Recompute::full) return input;  // everything else is rebuilt from the block's input
  // norm outputs with their mean and rstd, qkv after RoPE, mid residual, up/gate and activation.
  double f = input + 2 * (double(x.n_seq) * x.d + 2.0 * x.n_seq) + double(x.n) * x.qkv_cols +
             double(x.n_seq) * x.d + double(x.n) * x.up_cols + double(x.n) * x.f + moe_saved(x);
  if (r == Recompute::none)
    f += double(x.n) * x.attn_cols + double(x.mb) * x.heads * x.seq;  // attention out, LSE
  return f;
}

// One pipeline stage's planning context, shared by the parts below.
struct StagePlan {
  const TrainingShape& s;
  const TrainingLayout& l;
  const RankDims& x;
  PipelineShape pipe;
  int stage;
  std::vector<std::vector<int>> chunks;  // the blocks of each of the stage's chunks
  bool pipelined() const { return l.pp > 1; }
};

// Parameters, gradients, optimizer state (resident or offloaded) and ZeRO buffers.
void plan_persistent(const StagePlan& sp, StageMemory& st) {
  const TrainingShape& s = sp.s;
  const TrainingLayout& l = sp.l;
  const RankDims& x = sp.x;
  const ModelConfig& m = s.model;
  // Weights, gradients and AdamW state are fp32 under both precision.compute settings (bf16
  // rounds the GEMM operands as they are used, it keeps no bf16 copy), so the weights are
  // their own master copy.
  const double param_bytes = 4, master_bytes = 0;
  const int64_t group = int64_t(l.dp) * l.cp;  // ZeRO shards over dp x cp
  auto padded = [&](int64_t n) { return (n + group - 1) / group * group; };
  // Parameters, bucket by bucket.
  // Expert parallelism at ZeRO 1-3: a routed block's bucket shards over the dp x cp / ep ranks that
  // hold the same experts (train/zero_optimizer.h), the others over dp.
  std::vector<std::pair<int64_t, int64_t>> buckets;  // elements, ranks sharing its shards
  if (st.embedding)
    buckets.emplace_back(x.vocab * x.d + (x.gpt2 ? int64_t(m.seq_len) * x.d : 0), group);
  for (size_t i = 0; i < st.blocks.size(); ++i) {
    const bool routed = m.moe.layer_is_moe(st.blocks[i]);
    buckets.emplace_back(block_params(x) + (routed ? moe_block_delta(x) : 0),
                         routed && l.zero >= 1 ? group / x.ep : group);
  }
  if (st.head) {
    int64_t n = x.gpt2 ? 2 * x.d : x.d;  // final norm
    if (!m.tie_embeddings || sp.pipelined())
      n += x.vocab * x.d;  // head, or the last stage's tied copy
    buckets.emplace_back(n, group);
  }
  for (const auto& [n, shards] : buckets) {
    st.param_elements += padded(n);
    st.shard_elements += padded(n) / shards;
    st.largest_bucket = std::max(st.largest_bucket, padded(n));
    // The moments (and ZeRO-3 parameter) stores hold a bucket whole at ZeRO-0, else its shard.
    st.largest_shard = std::max(st.largest_shard, l.zero >= 1 ? padded(n) / shards : padded(n));
  }
  st.buckets = static_cast<int>(buckets.size());
  const double owned = double(l.zero >= 1 ? st.shard_elements : st.param_elements);
  const double params = param_bytes * double(l.zero >= 3 ? st.shard_elements : st.param_elements);
  // Offloaded ZeRO-3 shards leave device memory; a bucket is brought in only while it is
  // gathered (the ZeRO buffers below), through the fetch buffers of the offload staging.
  (s.offload_params == Offload::none ? st.params : st.params_offloaded) = params;
  st.grads = 4.0 * double(l.zero >= 2 ? st.shard_elements : st.param_elements);
  const double optimizer = (8 + master_bytes) * owned;
  (s.offload_optimizer == Offload::none ? st.optimizer : st.optimizer_offloaded) = optimizer;
  // ZeRO-2/3: each bucket's full gradient lives in a slot until its reduce-scatter is done
  // (one per bucket at most), ZeRO-3 adds the gathered parameters in use and the prefetched
  // ones (and a tied token table held from the embedding to the head); plus one shard-sized
  // receive buffer per bucket.
  if (l.zero >= 2) {
    int slots = st.buckets;
    if (l.zero == 3) slots += 2 + (m.tie_embeddings && !sp.pipelined() ? 1 : 0);
    st.buffers = 4.0 * (double(slots) * double(st.largest_bucket) + double(st.shard_elements));
  }
  const OffloadStaging o = plan_offload_staging(s, l.zero, st.largest_shard, st.optimizer_offloaded,
                                                st.params_offloaded);
  st.optimizer_piece = o.optimizer_piece;
  st.params_piece = o.params_piece;
  st.optimizer_staging = o.optimizer_staging;
  st.params_staging = o.params_staging;
  st.params_fetch = o.params_fetch;
  st.offload_staging = o.device();
  st.host_pinned = o.host_pinned;
}

// Activations. A unit is one micro-batch through one chunk: its blocks' saved tensors and
// the chunk's output residual. The first virtual stage also keeps the micro-batch's token
// ids (and their vocab-parallel local copy); the last keeps the final norm with its
// statistics, under sequence parallelism the gathered head input, and the logits
// (overwritten in place by their gradient): with several micro-batches in flight on the
// last stage (gpipe) each holds its own.
double unit_floats(const StagePlan& sp, int chunk, Recompute r) {
  const RankDims& x = sp.x;
  double f = double(sp.chunks[size_t(chunk)].size()) * block_saved(x, r) + double(x.n_seq) * x.d;
  const int v = virtual_stage(sp.pipe, sp.stage, chunk);
  if (v == 0) f += double(x.n) * (sp.l.tp > 1 ? 2 : 1);
  if (v == sp.l.pp * sp.l.virtual_stages - 1)
    f += double(x.n_seq) * (x.d + 2) + (x.n_seq < x.n ? double(x.n) * x.d : 0) +
         double(x.n) * x.vocab;
  return f;
}

// Saved activations per micro-batch, and the most alive at once over the stage's schedule.
void plan_in_flight(const StagePlan& sp, StageMemory& st) {
  const int V = sp.l.virtual_stages;
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    for (int c = 0; c < V; ++c)
      st.act_per_micro[static_cast<int>(r)] += 4.0 * unit_floats(sp, c, r);
  // Walk this stage's instruction list: a forward takes a unit, a backward frees it. The
  // model keeps a pool of units per chunk (a freed unit serves the next micro-batch of the
  // same chunk), so each chunk costs its own most-alive count.
  const PipelineSchedule sched = sp.pipelined() ? sp.l.schedule : PipelineSchedule::one_f_one_b;
  st.max_in_flight = max_in_flight(sched, sp.pipe, sp.stage);
  std::vector<int> alive(size_t(V), 0), most(size_t(V), 0);
  for (const PipeOp& op : pipeline_ops(sched, sp.pipe, sp.stage)) {
    int& a = alive[size_t(op.chunk)];
    if (op.kind == PipeOpKind::forward)
      most[size_t(op.chunk)] = std::max(most[size_t(op.chunk)], ++a);
    if (op.kind == PipeOpKind::backward) --a;
  }
  for (int c = 0; c < V; ++c)
    st.act_in_flight += 4.0 * unit_floats(sp, c, sp.l.recompute) * most[size_t(c)];
}

// Floats used once whatever is in flight.
double workspace_floats(const StagePlan& sp, const StageMemory& st) {
  const RankDims& x = sp.x;
  const TrainingLayout& l = sp.l;
  // Positions, targets and per-token losses, and the residual-stream gradient.
  double ws = 3.0 * double(x.n) + double(x.n_seq) * x.d;
  if (!st.blocks.empty()) {
    // Backward scratch shared by all blocks: d_norm, d_attn, d_qkv, d_act, d_up.
    ws += double(x.n_seq) * x.d + double(x.n) * (x.attn_cols + x.qkv_cols + x.f + x.up_cols) +
          moe_scratch(x);
    if (l.recompute == Recompute::selective)
      ws += double(x.n) * x.attn_cols + double(x.mb) * x.heads * x.seq;
    if (l.recompute == Recompute::full)
      ws += block_saved(x, Recompute::none) - double(x.n_seq) * x.d;
  }
  // Tensor parallelism: the row-parallel partial sum (and its sequence-parallel gather), the
  // local targets, the rows' positions and the vocab-parallel cross-entropy's max and sums.
  if (l.tp > 1) ws += double(x.n) * x.d * (x.n_seq < x.n ? 2 : 1) + 4.0 * x.n + double(x.n_seq);
  // Pipeline messages: the activation or gradient arriving from a neighbour and the gradient
  // leaving for the previous stage (the runner recycles them).
  if (sp.pipelined()) ws += 2.0 * double(x.n_seq) * x.d;
  // Context parallelism (shared by all blocks): each local chunk's q, output, dq and output
  // gradient, one block's partial output and LSE, and the packed key/value chunks with their
  // gradient accumulators: two hops of each plus one step's own dK/dV (p2p), or every rank's
  // plus this rank's own (all_gather).
  // a2a instead: two exchange buffers, q|k|v and their gradient, the output and its gradient,
  // all head-split over the whole sequence (as many floats as the local tokens' full width).
  if (l.cp > 1 && !st.blocks.empty() && l.cp_comm == CpComm::a2a)
    ws += 4.0 * double(x.n) * x.qkv_cols + 2.0 * double(x.n) * x.attn_cols;
  else if (l.cp > 1 && !st.blocks.empty()) {
    const double packed = 2.0 * double(x.n) * x.kv_cols;
    const double rings = l.cp_comm == CpComm::p2p ? 5.0 : 2.0 * l.cp + 2.0;
    ws += 4.5 * double(x.n) * x.attn_cols + double(x.mb) * x.heads * x.seq / 2 + rings * packed;
  }
  return ws;
}

}  // namespace

std::vector<StageMemory> plan_memory(const TrainingShape& s, const TrainingLayout& l) {
  if (const auto problem = layout_problem(s, l))
    throw UserError(problem->key + ": " + problem->reason);
  const ModelConfig& m = s.model;
  const RankDims x = rank_dims(s, l);
  const int P = l.pp, V = l.virtual_stages;
  const std::vector<int> per_virtual = virtual_stage_layers(m.layers, P, V, l.pp_layers);
  std::vector<StageMemory> out;
  for (int p = 0; p < P; ++p) {
    StagePlan sp{s, l, x, {P, micro_batches_per_step(s, l), V}, p, {}};
    StageMemory st;
    st.stage = p;
    st.embedding = p == 0;
    st.head = p == P - 1;
    for (int c = 0; c < V; ++c) {
      sp.chunks.push_back(chunk_blocks(per_virtual, P, p, c));
      st.blocks.insert(st.blocks.end(), sp.chunks.back().begin(), sp.chunks.back().end());
    }
    plan_persistent(sp, st);
    plan_in_flight(sp, st);
    st.act_workspace = 4.0 * workspace_floats(sp, st);
    st.activations = st.act_in_flight + st.act_workspace;
    st.peak =
        st.params + st.grads + st.optimizer + st.buffers + st.offload_staging + st.activations;
    st.kv_cache_per_sequence = 2.0 * 4.0 * double(st.blocks.size()) *
                               double(std::max(m.kv_heads / l.tp, 1)) * m.head_dim() *
                               double(m.seq_len);
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace llmrun
