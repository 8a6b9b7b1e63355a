#include "model/transformer.h"

#include <cmath>
#include <random>

namespace llmrun {

Transformer::Transformer(Backend& backend, const ModelConfig& cfg, const StoreOptions& stores)
    : be_(backend),
      cfg_(cfg),
      layout_(model_layout(cfg)),
      params_(backend, layout_, stores.pad_multiple, stores.allocate_params),
      grads_(backend, layout_, stores.pad_multiple, stores.allocate_grads) {}

void Transformer::init_weights(uint64_t seed) {
  const float std_normal = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * cfg_.layers);
  uint64_t index = 0;
  std::vector<float> host;
  for (int b = 0; b < params_.num_buckets(); ++b) {
    for (int p = 0; p < static_cast<int>(layout_[b].params.size()); ++p, ++index) {
      const ParamSpec& spec = layout_[b].params[p];
      Tensor dst = params_.tensor(b, p);
      host.assign(static_cast<size_t>(spec.numel()), 0.0f);
      if (spec.init == ParamInit::ones) {
        host.assign(host.size(), 1.0f);
      } else if (spec.init != ParamInit::zeros) {
        // One generator per tensor: the values do not depend on how tensors are split
        // across threads or ranks.
        std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
        std::normal_distribution<float> dist(0.0f, spec.init == ParamInit::normal ? std_normal : std_residual);
        for (float& v : host) v = dist(rng);
      }
      be_.copy(dst, Tensor(host.data(), DType::f32, {spec.numel()}).view({dst.numel()}));
    }
  }
}

void Transformer::plan_activations(int batch, int seq) {
  if (batch == batch_ && seq == seq_) return;
  arena_.clear();
  activation_bytes_ = 0;
  auto alloc = [&](DType t, std::initializer_list<int64_t> dims) {
    Tensor probe(nullptr, t, dims);
    arena_.push_back(be_.allocate(probe.bytes()));
    activation_bytes_ += probe.bytes();
    return arena_.back().as(t, dims);
  };
  const int64_t n = int64_t(batch) * seq, d = cfg_.d_model, f = cfg_.ffn;
  const int64_t attn_cols = int64_t(cfg_.heads) * cfg_.head_dim();
  const int64_t qkv_cols = int64_t(cfg_.heads + 2 * cfg_.kv_heads) * cfg_.head_dim();
  const int64_t up_cols = cfg_.arch == Arch::gpt2 ? f : 2 * f;

  std::vector<Tensor> resid;
  for (int l = 0; l <= cfg_.layers; ++l) resid.push_back(alloc(DType::f32, {n, d}));
  acts_.assign(cfg_.layers, {});
  for (int l = 0; l < cfg_.layers; ++l) {
    BlockActivations& a = acts_[l];
    a = allocate_block_activations(cfg_, n, alloc);
    a.input = resid[l];
    a.output = resid[l + 1];
    a.lse = alloc(DType::f32, {batch, cfg_.heads, seq});
  }
  scratch_.d_norm = alloc(DType::f32, {n, d});
  scratch_.d_attn = alloc(DType::f32, {n, attn_cols});
  scratch_.d_qkv = alloc(DType::f32, {n, qkv_cols});
  scratch_.d_act = alloc(DType::f32, {n, f});
  scratch_.d_up = alloc(DType::f32, {n, up_cols});
  ids_ = alloc(DType::i32, {n});
  targets_ = alloc(DType::i32, {n});
  positions_ = alloc(DType::i32, {n});
  final_norm_ = alloc(DType::f32, {n, d});
  final_mean_ = alloc(DType::f32, {n});
  final_rstd_ = alloc(DType::f32, {n});
  logits_ = alloc(DType::f32, {n, cfg_.vocab});
  losses_ = alloc(DType::f32, {n});
  d_resid_ = alloc(DType::f32, {n, d});
  batch_ = batch;
  seq_ = seq;
}

void Transformer::upload_ids(Tensor dst, const int32_t* host, int64_t n) {
  be_.copy(dst, Tensor(const_cast<int32_t*>(host), DType::i32, {n}));
}

void Transformer::embed(Tensor x0, const Tensor& ids, const Tensor& positions) {
  be_.embedding_fwd(x0, ids, params_.tensor(0, 0), false);
  if (cfg_.arch == Arch::gpt2) be_.embedding_fwd(x0, positions, params_.tensor(0, 1), true);
}

void Transformer::head_forward(const Tensor& x, Tensor norm, Tensor mean, Tensor rstd, Tensor logits,
                               LinearRunner* linear) {
  const HeadTensors e = head_tensors(cfg_, params_);
  if (cfg_.arch == Arch::gpt2)
    be_.layernorm_fwd(norm, mean, rstd, x, e.norm_w, e.norm_b, cfg_.norm_eps);
  else
    be_.rmsnorm_fwd(norm, rstd, x, e.norm_w, cfg_.norm_eps);
  linear_or_fp32(linear).forward(be_, {cfg_.layers, LinearKind::lm_head}, logits, norm, e.head, nullptr, false);
}

void Transformer::forward(const int32_t* tokens, int batch, int seq) {
  LLMRUN_CHECK(seq <= cfg_.seq_len, "sequence longer than the model's context");
  plan_activations(batch, seq);
  const int64_t n = int64_t(batch) * seq;
  upload_ids(ids_, tokens, n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i % seq);
  upload_ids(positions_, pos.data(), n);

  using P = BucketHooks::Phase;
  acquire(0, P::forward);
  embed(acts_[0].input, ids_, positions_);
  if (!cfg_.tie_embeddings) release(0, P::forward);  // a tied head reads it again at the end

  const AttentionShape shape{batch, seq, cfg_.heads, cfg_.kv_heads, cfg_.head_dim()};
  for (int l = 0; l < cfg_.layers; ++l) {
    BlockActivations& a = acts_[l];
    acquire(l + 1, P::forward);
    block_forward(be_, cfg_, block_tensors(cfg_, params_, l), a, positions_,
                  [&](const Tensor& qkv, Tensor attn) { be_.attention_fwd(attn, a.lse, qkv, shape); }, linear_, l);
    release(l + 1, P::forward);
  }
  acquire(head_bucket(), P::forward);
  head_forward(acts_.back().output, final_norm_, final_mean_, final_rstd_, logits_, linear_);
  release(head_bucket(), P::forward);
  if (cfg_.tie_embeddings) release(0, P::forward);
}

double Transformer::loss(const int32_t* targets) {
  upload_ids(targets_, targets, int64_t(batch_) * seq_);
  be_.softmax_xent(losses_, logits_, targets_, 0.0f);
  return be_.sum(losses_);
}

double Transformer::backward(const int32_t* targets, float grad_scale) {
  const int64_t n = int64_t(batch_) * seq_;
  upload_ids(targets_, targets, n);
  be_.softmax_xent(losses_, logits_, targets_, grad_scale);
  const double loss_sum = be_.sum(losses_);

  using P = BucketHooks::Phase;
  if (cfg_.tie_embeddings) acquire(0, P::backward);  // the head's gradient lands in bucket 0
  acquire(head_bucket(), P::backward);
  const HeadTensors e = head_tensors(cfg_, params_);
  const HeadTensors ge = head_tensors(cfg_, grads_);
  const Tensor& last = acts_.back().output;
  // logits_ now holds dL/dlogits.
  linear_or_fp32(linear_).backward(be_, {cfg_.layers, LinearKind::lm_head}, scratch_.d_norm, ge.head, Tensor(),
                                   logits_, final_norm_, e.head);
  if (cfg_.arch == Arch::gpt2)
    be_.layernorm_bwd(d_resid_, ge.norm_w, ge.norm_b, scratch_.d_norm, last, e.norm_w, final_mean_,
                      final_rstd_, false);
  else
    be_.rmsnorm_bwd(d_resid_, ge.norm_w, scratch_.d_norm, last, e.norm_w, final_rstd_, false);
  release(head_bucket(), P::backward);

  const AttentionShape shape{batch_, seq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim()};
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    acquire(l + 1, P::backward);
    block_backward(be_, cfg_, block_tensors(cfg_, params_, l), block_tensors(cfg_, grads_, l), acts_[l],
                   scratch_, d_resid_, positions_, shape, linear_, l);
    release(l + 1, P::backward);
  }

  if (!cfg_.tie_embeddings) acquire(0, P::backward);
  be_.embedding_bwd(grads_.tensor(0, 0), d_resid_, ids_);
  if (cfg_.arch == Arch::gpt2) be_.embedding_bwd(grads_.tensor(0, 1), d_resid_, positions_);
  release(0, P::backward);
  return loss_sum;
}

KvCache Transformer::make_cache(int max_tokens) {
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
  plan_activations(1, n);
  upload_ids(ids_, tokens, n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[i] = cache.length + i;
  upload_ids(positions_, pos.data(), n);

  embed(acts_[0].input, ids_, positions_);

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
      be_.copy_cols(v_all.slice(cache.length, total), qkv, int64_t(cfg_.heads + cfg_.kv_heads) * hd);
      be_.attention_cached(attn, q, k_all.slice(0, total), v_all.slice(0, total), cache.length,
                           cfg_.heads, cfg_.kv_heads, hd);
    };
    block_forward(be_, cfg_, block_tensors(cfg_, params_, l), acts_[l], positions_, core);
  }
  cache.length = total;

  head_forward(acts_.back().output.slice(n - 1, n), final_norm_.slice(0, 1), final_mean_.slice(0, 1),
               final_rstd_.slice(0, 1), last_logits.view({1, cfg_.vocab}));
}

}  // namespace llmrun
