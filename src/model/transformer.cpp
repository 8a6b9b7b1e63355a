#include "model/transformer.h"

#include <cmath>
#include <map>
#include <random>

#include "model/shard_copy.h"

namespace llmrun {

Transformer::Transformer(Backend& backend, const ModelConfig& cfg, const StoreOptions& stores,
                         const ModelParallel& parallel)
    : be_(backend),
      cfg_(cfg),
      shard_(parallel.shard),
      block_cfg_(tp_block_config(cfg, parallel.shard.tp)),
      vocab_(vocab_range(cfg.vocab, parallel.shard.tp, parallel.shard.tp_rank)),
      layout_(model_layout(cfg, parallel.shard)),
      params_(backend, layout_, stores.pad_multiple, stores.allocate_params),
      grads_(backend, layout_, stores.pad_multiple, stores.allocate_grads) {
  comm_.tp = parallel.tp;
  pp_ = parallel.pp;
  comm_.sequence_parallel = parallel.shard.sequence_parallel;
  comm_.ep = parallel.ep;
  block_cfg_.moe.ep = shard_.ep;  // routed buffers for every ep rank's rows
  LLMRUN_CHECK((parallel.ep ? parallel.ep->size() : 1) == shard_.ep,
               "Transformer: expert-parallel group size differs from the shard's ep");
  const int tp_size = parallel.tp ? parallel.tp->size() : 1;
  LLMRUN_CHECK(tp_size == shard_.tp,
               "Transformer: tensor-parallel group size differs from the shard's tp");
}

void Transformer::init_weights(uint64_t seed) {
  const float std_normal = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * cfg_.layers);
  // A tensor's generator is seeded by its index in the full model, so every layout draws the
  // same values (a shard keeps its part), whatever the thread count.
  std::map<std::string, uint64_t> index;
  for (const BucketLayout& b : model_layout(cfg_))
    for (const ParamSpec& p : b.params) index.emplace(p.hf_name, index.size());
  std::vector<float> host;
  for (int b = 0; b < params_.num_buckets(); ++b) {
    for (int p = 0; p < static_cast<int>(layout_[b].params.size()); ++p) {
      const ParamSpec& spec = layout_[b].params[p];
      host.assign(static_cast<size_t>(spec.full_numel()), 0.0f);
      if (spec.init == ParamInit::ones) {
        host.assign(host.size(), 1.0f);
      } else if (spec.init != ParamInit::zeros) {
        std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index.at(spec.hf_name));
        std::normal_distribution<float> dist(
            0.0f, spec.init == ParamInit::normal ? std_normal : std_residual);
        for (float& v : host) v = dist(rng);
      }
      extract_shard(be_, spec, Tensor(host.data(), DType::f32, {spec.full_numel()}),
                    params_.tensor(b, p));
    }
  }
}

void Transformer::reduce_partial_grads(int b) {
  if (!tp_active()) return;
  for (int p = 0; p < static_cast<int>(layout_[b].params.size()); ++p) {
    const ParamSpec& spec = layout_[b].params[p];
    if (!spec.shard.grad_partial) continue;
    const Tensor g = grads_.tensor(b, p).view({spec.numel()});
    if (spec.numel() == spec.full_numel()) {
      comm_.tp->all_reduce(g, ReduceOp::sum);
      continue;
    }
    // Ranks share this tensor in groups (GQA key/value heads): each adds its part into a
    // full-size buffer at its own place, so one all-reduce sums every group at once.
    Buffer full = be_.allocate(size_t(spec.full_numel()) * 4);
    const Tensor f = full.as(DType::f32, {spec.full_numel()});
    insert_shard(be_, spec, g, f);
    comm_.tp->all_reduce(f, ReduceOp::sum);
    extract_shard(be_, spec, f, g);
  }
}

TensorAllocator Transformer::arena_allocator(std::vector<Buffer>& arena) {
  return [this, &arena](DType t, std::initializer_list<int64_t> dims) {
    Tensor probe(nullptr, t, dims);
    arena.push_back(be_.allocate(probe.bytes()));
    activation_bytes_ += probe.bytes();
    return arena.back().as(t, dims);
  };
}

void Transformer::plan_activations(int batch, int seq) {
  if (batch == batch_ && seq == seq_) return;
  arena_.clear();
  slots_.clear();
  activation_bytes_ = 0;
  const TensorAllocator alloc = arena_allocator(arena_);
  const ModelConfig& bc = block_cfg_;
  const int64_t n = int64_t(batch) * seq, d = cfg_.d_model, f = bc.ffn;
  const int64_t attn_cols = int64_t(bc.heads) * bc.head_dim();
  const int64_t qkv_cols = int64_t(bc.heads + 2 * bc.kv_heads) * bc.head_dim();
  const int64_t up_cols = cfg_.arch == Arch::gpt2 ? f : 2 * f;
  const bool sp = tp_active() && comm_.sequence_parallel;
  LLMRUN_CHECK(!sp || n % shard_.tp == 0,
               "sequence parallelism: batch * seq tokens must divide by tp");
  const int64_t rows = sp ? n / shard_.tp : n;
  batch_ = batch;
  seq_ = seq;
  rows_ = rows;

  // Recompute shares one set of buffers across the layers: every activation (full) or the
  // attention output and its log-sum-exp (selective).
  shared_ = BlockActivations{};
  if (recompute_ == Recompute::full) shared_ = allocate_block_activations(bc, n, alloc, rows);
  if (recompute_ == Recompute::selective) shared_.attn = alloc(DType::f32, {n, attn_cols});
  if (recompute_ != Recompute::none) shared_.lse = alloc(DType::f32, {batch, bc.heads, seq});
  if (tp_active()) {
    comm_.partial = alloc(DType::f32, {n, d});
    if (sp) comm_.gathered = alloc(DType::f32, {n, d});
    local_targets_ = alloc(DType::i32, {n});
    row_positions_ = alloc(DType::i32, {rows});
    row_max_ = alloc(DType::f32, {n});
    xent_sums_ = alloc(DType::f32, {2 * n});
  }
  scratch_.d_norm = alloc(DType::f32, {rows, d});
  scratch_.d_attn = alloc(DType::f32, {n, attn_cols});
  scratch_.d_qkv = alloc(DType::f32, {n, qkv_cols});
  scratch_.d_act = alloc(DType::f32, {n, f});
  scratch_.d_up = alloc(DType::f32, {n, up_cols});
  scratch_.moe = allocate_moe_scratch(bc, n, alloc);
  if (bc.qk_norm) scratch_.d_qk = alloc(DType::f32, {n, attn_cols});
  targets_ = alloc(DType::i32, {n});
  positions_ = alloc(DType::i32, {n});
  losses_ = alloc(DType::f32, {n});
  d_resid_ = alloc(DType::f32, {rows, d});
}

void Transformer::allocate_slot(MicroState& m) {
  const TensorAllocator alloc = arena_allocator(m.arena);
  const ModelConfig& bc = block_cfg_;
  const int64_t n = int64_t(batch_) * seq_, d = cfg_.d_model, rows = rows_;
  std::vector<Tensor> resid(size_t(cfg_.layers) + 1);
  for (int l = m.begin; l <= m.end; ++l) resid[size_t(l)] = alloc(DType::f32, {rows, d});
  m.acts.assign(size_t(cfg_.layers), {});
  for (int l = m.begin; l < m.end; ++l) {
    BlockActivations& a = m.acts[size_t(l)];
    if (recompute_ == Recompute::full) {
      a = shared_;
    } else if (recompute_ == Recompute::selective) {
      a = allocate_block_activations(bc, n, alloc, rows, /*with_attention=*/false);
      a.attn = shared_.attn;
      a.lse = shared_.lse;
    } else {
      a = allocate_block_activations(bc, n, alloc, rows);
      a.lse = alloc(DType::f32, {batch_, bc.heads, seq_});
    }
    a.input = resid[size_t(l)];
    a.output = resid[size_t(l) + 1];
  }
  if (starts_model(m)) {
    m.ids = alloc(DType::i32, {n});
    if (tp_active()) m.local_ids = alloc(DType::i32, {n});
  }
  if (ends_model(m)) {
    m.final_norm = alloc(DType::f32, {rows, d});
    m.final_mean = alloc(DType::f32, {rows});
    m.final_rstd = alloc(DType::f32, {rows});
    m.head_input = rows == n ? m.final_norm : alloc(DType::f32, {n, d});
    m.logits = alloc(DType::f32, {n, vocab_.second - vocab_.first});
  }
}

int Transformer::acquire_slot(int begin, int end, int batch, int seq) {
  LLMRUN_CHECK(begin < end, "acquire_slot: a chunk needs at least one block");
  LLMRUN_CHECK(seq <= cfg_.seq_len, "sequence longer than the model's context");
  plan_activations(batch, seq);
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i]->in_use && slots_[i]->begin == begin && slots_[i]->end == end) {
      slots_[i]->in_use = true;
      return int(i);
    }
  auto m = std::make_unique<MicroState>();
  m->begin = begin;
  m->end = end;
  m->in_use = true;
  allocate_slot(*m);
  slots_.push_back(std::move(m));
  return int(slots_.size()) - 1;
}

void Transformer::release_slot(int slot) { slots_[size_t(slot)]->in_use = false; }

Tensor Transformer::chunk_output(int slot) const {
  const MicroState& m = *slots_[size_t(slot)];
  return m.acts[size_t(m.end) - 1].output;
}

void Transformer::upload_positions(int64_t n, int seq, int first_position) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int j = static_cast<int>(i % seq);
    pos[i] =
        static_cast<int32_t>(first_position + (comm_.attention ? comm_.attention->position(j) : j));
  }
  upload_ids(positions_.slice(0, n), pos.data(), n);
  if (tp_active())
    upload_ids(row_positions_, pos.data() + (rows_ == n ? 0 : rows_ * shard_.tp_rank), rows_);
}

void Transformer::attention_forward(Tensor attn, Tensor lse, const Tensor& qkv,
                                    const AttentionShape& s) {
  if (comm_.attention)
    comm_.attention->forward(attn, lse, qkv, s);
  else
    be_.attention_fwd(attn, lse, qkv, s);
}

void Transformer::upload_ids(Tensor dst, const int32_t* host, int64_t n) {
  be_.copy(dst, Tensor(const_cast<int32_t*>(host), DType::i32, {n}));
}

void Transformer::upload_tokens(const int32_t* tokens, int64_t n) {
  upload_ids(m_->ids, tokens, n);
  if (!tp_active()) return;
  std::vector<int32_t> local(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    local[i] = tokens[i] >= vocab_.first && tokens[i] < vocab_.second
                   ? int32_t(tokens[i] - vocab_.first)
                   : -1;
  upload_ids(m_->local_ids, local.data(), n);
}

void Transformer::embed_training(Tensor x0) {
  if (!tp_active()) {
    embed(x0, m_->ids, positions_);
    return;
  }
  // Each rank looks up the tokens its slice of the table holds (zeros elsewhere); the sum
  // over the group is the embedding.
  if (comm_.sequence_parallel) {
    be_.embedding_fwd(comm_.partial, m_->local_ids, params_.tensor(0, 0), false);
    comm_.tp->reduce_scatter(comm_.partial, x0);
  } else {
    be_.embedding_fwd(x0, m_->local_ids, params_.tensor(0, 0), false);
    comm_.tp->all_reduce(x0, ReduceOp::sum);
  }
  if (cfg_.arch == Arch::gpt2) be_.embedding_fwd(x0, row_positions_, params_.tensor(0, 1), true);
}

double Transformer::cross_entropy(float grad_scale) {
  const Tensor logits = m_->logits;
  if (!tp_active()) {
    be_.softmax_xent(losses_, logits, targets_, grad_scale);
    return be_.sum(losses_);
  }
  // Vocab-parallel: the full logits never exist on one rank; only per-row maxima, sums of
  // exponentials and target logits cross the group.
  be_.xent_row_max(row_max_, logits);
  comm_.tp->all_reduce(row_max_, ReduceOp::max);
  be_.xent_partials(xent_sums_, logits, row_max_, local_targets_);
  comm_.tp->all_reduce(xent_sums_, ReduceOp::sum);
  be_.xent_finish(losses_, logits, row_max_, xent_sums_, local_targets_, grad_scale);
  return be_.sum(losses_);
}

void Transformer::embed(Tensor x0, const Tensor& ids, const Tensor& positions) {
  if (embedding_lookup_)
    embedding_lookup_(x0, ids);
  else
    be_.embedding_fwd(x0, ids, params_.tensor(0, 0), false);
  if (cfg_.arch == Arch::gpt2) be_.embedding_fwd(x0, positions, params_.tensor(0, 1), true);
}

void Transformer::head_forward(const Tensor& x, Tensor norm, Tensor mean, Tensor rstd,
                               Tensor logits, bool training) {
  const HeadTensors e = head_tensors(cfg_, params_);
  if (cfg_.arch == Arch::gpt2)
    be_.layernorm_fwd(norm, mean, rstd, x, e.norm_w, e.norm_b, cfg_.norm_eps);
  else
    be_.rmsnorm_fwd(norm, rstd, x, e.norm_w, cfg_.norm_eps);
  // Under sequence parallelism every rank's rows meet again for the vocab-parallel head.
  const bool gather = training && tp_active() && comm_.sequence_parallel;
  if (gather) comm_.tp->all_gather(norm, m_->head_input);
  (training ? linear_or_fp32(linear_) : inference_runner())
      .forward(be_, {cfg_.layers, LinearKind::lm_head}, logits, gather ? m_->head_input : norm,
               e.head, nullptr, false);
}

void Transformer::forward(const int32_t* tokens, int batch, int seq) {
  const int slot = acquire_slot(0, cfg_.layers, batch, seq);
  release_slot(slot);  // one micro-batch at a time: its buffers serve the next one too
  forward_chunk(slot, tokens, nullptr);
}

const std::vector<uint64_t>& Transformer::row_keys() const {
  static const std::vector<uint64_t> none;
  return m_ ? m_->row_keys : none;
}

void Transformer::forward_chunk(int slot, const int32_t* tokens, const Tensor* input) {
  m_ = slots_[size_t(slot)].get();
  MicroState& m = *m_;
  const int64_t n = int64_t(batch_) * seq_;
  m.row_keys.assign(tokens ? size_t(n) : 0, 0);
  for (int64_t b = 0; tokens && b < batch_; ++b) {
    uint64_t h = 0x9E3779B97F4A7C15ull;  // FNV-1a over the prefix, one token at a time
    for (int64_t t = 0; t < seq_; ++t) {
      h = (h ^ uint32_t(tokens[b * seq_ + t])) * 0x100000001B3ull;
      m.row_keys[size_t(b * seq_ + t)] = h;
    }
  }
  upload_positions(n, seq_, 0);
  using P = BucketHooks::Phase;
  if (starts_model(m)) {
    upload_tokens(tokens, n);
    acquire(0, P::forward);
    embed_training(m.acts[size_t(m.begin)].input);
    if (!head_reads_table()) release(0, P::forward);  // a tied head reads it again at the end
  } else {
    be_.copy(m.acts[size_t(m.begin)].input, *input);
  }

  const AttentionShape shape{batch_, seq_, block_cfg_.heads, block_cfg_.kv_heads,
                             block_cfg_.head_dim()};
  for (int l = m.begin; l < m.end; ++l) {
    BlockActivations& a = m.acts[size_t(l)];
    acquire(l + 1, P::forward);
    block_forward(
        be_, block_cfg_, block_tensors(cfg_, params_, l), a, positions_,
        [&](const Tensor& qkv, Tensor attn) { attention_forward(attn, a.lse, qkv, shape); }, comm_,
        linear_, l);
    if (block_cfg_.moe.layer_is_moe(l)) moe_stats_.add(*a.moe.routing);
    release(l + 1, P::forward);
  }
  if (ends_model(m)) {
    acquire(head_bucket(), P::forward);
    head_forward(chunk_output(slot), m.final_norm, m.final_mean, m.final_rstd, m.logits, true);
    release(head_bucket(), P::forward);
    if (head_reads_table()) release(0, P::forward);
  }
}

void Transformer::upload_targets(const int32_t* targets) {
  const int64_t n = int64_t(batch_) * seq_;
  upload_ids(targets_, targets, n);
  if (!tp_active()) return;
  std::vector<int32_t> local(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = targets[i];
    local[i] =
        t < 0 ? -1 : (t >= vocab_.first && t < vocab_.second ? int32_t(t - vocab_.first) : -2);
  }
  upload_ids(local_targets_, local.data(), n);
}

double Transformer::loss(const int32_t* targets) {
  LLMRUN_CHECK(m_ && ends_model(*m_), "loss: no forward through the head");
  upload_targets(targets);
  return cross_entropy(0.0f);
}

double Transformer::loss_chunk(int slot, const int32_t* targets) {
  m_ = slots_[size_t(slot)].get();
  return loss(targets);
}

double Transformer::backward(const int32_t* targets, float grad_scale) {
  LLMRUN_CHECK(m_ != nullptr, "backward: no forward");
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].get() == m_) return backward_chunk(int(i), targets, nullptr, grad_scale);
  LLMRUN_CHECK(false, "backward: the forward's buffers are gone");
  return 0;
}

double Transformer::backward_chunk(int slot, const int32_t* targets, const Tensor* d_output,
                                   float grad_scale) {
  m_ = slots_[size_t(slot)].get();
  MicroState& m = *m_;
  upload_positions(int64_t(batch_) * seq_, seq_, 0);
  using P = BucketHooks::Phase;
  double loss_sum = 0;
  if (ends_model(m)) {
    upload_targets(targets);
    loss_sum = cross_entropy(grad_scale);
    if (head_reads_table()) acquire(0, P::backward);  // the head's gradient lands in bucket 0
    acquire(head_bucket(), P::backward);
    const HeadTensors e = head_tensors(cfg_, params_);
    const HeadTensors ge = head_tensors(cfg_, grads_);
    const Tensor last = chunk_output(slot);
    // m.logits now holds dL/dlogits (this rank's vocabulary columns). Under tensor parallelism
    // d(norm) is this rank's columns' share, summed over the group (reduce-scattered to this
    // rank's rows under sequence parallelism).
    const bool scatter = tp_active() && comm_.sequence_parallel;
    linear_or_fp32(linear_).backward(be_, {cfg_.layers, LinearKind::lm_head},
                                     scatter ? comm_.partial : scratch_.d_norm, ge.head, Tensor(),
                                     m.logits, m.head_input, e.head);
    if (scatter)
      comm_.tp->reduce_scatter(comm_.partial, scratch_.d_norm);
    else if (tp_active())
      comm_.tp->all_reduce(scratch_.d_norm, ReduceOp::sum);
    if (cfg_.arch == Arch::gpt2)
      be_.layernorm_bwd(d_resid_, ge.norm_w, ge.norm_b, scratch_.d_norm, last, e.norm_w,
                        m.final_mean, m.final_rstd, false);
    else
      be_.rmsnorm_bwd(d_resid_, ge.norm_w, scratch_.d_norm, last, e.norm_w, m.final_rstd, false);
    release(head_bucket(), P::backward);
  } else {
    be_.copy(d_resid_, *d_output);
  }

  const AttentionShape shape{batch_, seq_, block_cfg_.heads, block_cfg_.kv_heads,
                             block_cfg_.head_dim()};
  // The router losses are per micro-batch means: weighted by its tokens, like the summed
  // cross-entropy, so that grad_scale turns both into a per-token average.
  scratch_.moe.loss_scale = grad_scale * float(int64_t(batch_) * seq_);
  for (int l = m.end - 1; l >= m.begin; --l) {
    acquire(l + 1, P::backward);
    BlockActivations& a = m.acts[size_t(l)];
    if (recompute_ == Recompute::full)
      block_forward(
          be_, block_cfg_, block_tensors(cfg_, params_, l), a, positions_,
          [&](const Tensor& qkv, Tensor attn) { attention_forward(attn, a.lse, qkv, shape); },
          comm_, linear_, l);
    else if (recompute_ == Recompute::selective)
      attention_forward(a.attn, a.lse, a.qkv, shape);
    block_backward(be_, block_cfg_, block_tensors(cfg_, params_, l), block_tensors(cfg_, grads_, l),
                   a, scratch_, d_resid_, positions_, shape, comm_, linear_, l);
    release(l + 1, P::backward);
  }

  if (starts_model(m) && !frozen_base_) {
    if (!head_reads_table()) acquire(0, P::backward);
    if (!tp_active()) {
      be_.embedding_bwd(grads_.tensor(0, 0), d_resid_, m.ids);
      if (cfg_.arch == Arch::gpt2) be_.embedding_bwd(grads_.tensor(0, 1), d_resid_, positions_);
    } else {
      Tensor d_all = d_resid_;
      if (comm_.sequence_parallel) {
        comm_.tp->all_gather(d_resid_, comm_.gathered);
        d_all = comm_.gathered;
      }
      be_.embedding_bwd(grads_.tensor(0, 0), d_all, m.local_ids);
      if (cfg_.arch == Arch::gpt2) be_.embedding_bwd(grads_.tensor(0, 1), d_resid_, row_positions_);
    }
    release(0, P::backward);
  }
  return loss_sum;
}

bool Transformer::tied_across_stages(int bucket) const {
  if (!cfg_.tie_embeddings || shard_.embedding == shard_.head) return false;
  return (bucket == 0 && shard_.embedding) || (bucket == head_bucket() && shard_.head);
}

void Transformer::sync_tied_grads(int bucket) {
  LLMRUN_CHECK(tied_across_stages(bucket) && pp_ != nullptr, "sync_tied_grads: not a tied bucket");
  const int n = static_cast<int>(layout_[size_t(bucket)].params.size());
  const Tensor mine =
      grads_.tensor(bucket, bucket == 0 ? 0 : n - 1)
          .view({layout_[size_t(bucket)].params[bucket == 0 ? 0 : size_t(n) - 1].numel()});
  const int peer = shard_.embedding ? pp_->size() - 1 : 0;
  Buffer theirs = be_.allocate(mine.bytes());
  const Tensor t = theirs.as(DType::f32, {mine.numel()});
  auto sent = pp_->isend(mine, peer, 1 << 20);
  pp_->recv(t, peer, 1 << 20);
  sent->wait();
  be_.add(mine, mine, t);  // a + b on one stage, b + a on the other: the same floats
}

KvCache Transformer::make_cache(int max_tokens) {
  LLMRUN_CHECK(!tp_active() && shard_.head && shard_.embedding && !comm_.attention,
               "generation runs on one rank holding the whole model");
  KvCache c;
  c.max_tokens = max_tokens;
  const size_t bytes = size_t(max_tokens) * cfg_.kv_heads * cfg_.head_dim() * 4;
  for (int l = 0; l < cfg_.layers; ++l) {
    c.k.push_back(be_.allocate(bytes));
    c.v.push_back(be_.allocate(bytes));
  }
  return c;
}

void Transformer::forward_cached(const int32_t* tokens, int n, KvCache& cache, Tensor last_logits) {
  LLMRUN_CHECK(cache.length + n <= cache.max_tokens, "KV cache overflow");
  LLMRUN_CHECK(cfg_.arch != Arch::gpt2 || cache.length + n <= cfg_.seq_len,
               "GPT-2 context exceeds its position table");
  // Generation reuses the training activation plan with batch 1 and seq n: the block code is
  // the same, only the attention core reads and extends the cache.
  const int slot = acquire_slot(0, cfg_.layers, 1, n);
  release_slot(slot);
  m_ = slots_[size_t(slot)].get();
  MicroState& m = *m_;
  upload_ids(m.ids, tokens, n);
  upload_positions(n, n, cache.length);

  embed(m.acts[0].input, m.ids, positions_);

  const int hd = cfg_.head_dim();
  const int64_t kv_cols = int64_t(cfg_.kv_heads) * hd;
  const int total = cache.length + n;
  for (int l = 0; l < cfg_.layers; ++l) {
    Tensor k_all = cache.k[l].as(DType::f32, {cache.max_tokens, kv_cols});
    Tensor v_all = cache.v[l].as(DType::f32, {cache.max_tokens, kv_cols});
    AttentionCore core = [&](const Tensor& qkv, Tensor attn) {
      Tensor q = scratch_.d_attn;  // free during generation; [n, heads*head_dim]
      be_.copy_cols(q, qkv, 0);
      be_.copy_cols(k_all.slice(cache.length, total), qkv, int64_t(cfg_.heads) * hd);
      be_.copy_cols(v_all.slice(cache.length, total), qkv,
                    int64_t(cfg_.heads + cfg_.kv_heads) * hd);
      be_.attention_cached(attn, q, k_all.slice(0, total), v_all.slice(0, total), cache.length,
                           cfg_.heads, cfg_.kv_heads, hd);
    };
    block_forward(be_, cfg_, block_tensors(cfg_, params_, l), m.acts[size_t(l)], positions_, core,
                  {}, &inference_runner(), l);
  }
  cache.length = total;

  head_forward(chunk_output(slot).slice(n - 1, n), m.final_norm.slice(0, 1),
               m.final_mean.slice(0, 1), m.final_rstd.slice(0, 1),
               last_logits.view({1, cfg_.vocab}));
}

}  // namespace llmrun
