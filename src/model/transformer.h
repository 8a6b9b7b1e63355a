#pragma once
// The whole model: embedding -> blocks -> final norm -> LM head (+ loss). It owns the
// parameter and gradient stores and plans its activation buffers for a (batch, seq) shape.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/bucket_store.h"
#include "model/transformer_block.h"

namespace llmrun {

// Per-layer key/value cache of one sequence for generation: k and v [max_tokens, kv_cols].
struct KvCache {
  int max_tokens = 0;
  int length = 0;  // tokens already cached
  std::vector<Buffer> k, v;
};

// Called in balanced pairs around each use of a bucket, so that sharded data parallelism can
// materialise a bucket's parameters (ZeRO-3) or gradients (ZeRO-2/3) only while needed and
// start a bucket's gradient reduction the moment its backward is complete.
class BucketHooks {
 public:
  enum class Phase { forward, backward };
  virtual ~BucketHooks() = default;
  virtual void acquire(int bucket, Phase phase) = 0;
  virtual void release(int bucket, Phase phase) = 0;  // backward: its gradient is complete
};

// How the parameter and gradient stores are laid out: padding for equal ZeRO shards, and
// whether their buckets own memory or get it attached by a BucketHooks implementation.
struct StoreOptions {
  int pad_multiple = 1;
  bool allocate_params = true;
  bool allocate_grads = true;
};

class Transformer {
 public:
  Transformer(Backend& backend, const ModelConfig& cfg, const StoreOptions& stores = {});
  void set_hooks(BucketHooks* hooks) { hooks_ = hooks; }
  // Runs the training path's linear GEMMs (forward(), backward(): blocks and LM head) through
  // `runner` (an FP8 recipe); null: plain fp32. Generation and serving always run fp32.
  void set_linear_runner(LinearRunner* runner) { linear_ = runner; }

  const ModelConfig& config() const { return cfg_; }
  const std::vector<BucketLayout>& layout() const { return layout_; }
  BucketStore& params() { return params_; }
  BucketStore& grads() { return grads_; }
  Backend& backend() { return be_; }

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 layers)), norms 1,
  // biases 0. Deterministic in `seed` whatever the thread count.
  void init_weights(uint64_t seed);

  // Training forward over tokens [batch, seq] (host memory); logits() holds the result.
  void forward(const int32_t* tokens, int batch, int seq);
  Tensor logits() const { return logits_; }
  // Cross-entropy against targets [batch, seq] (host; < 0 ignored) and the full backward,
  // accumulating grad_scale * dLoss_sum/dparam into grads(). Returns the summed loss.
  // Consumes logits() (overwritten by their gradient).
  double backward(const int32_t* targets, float grad_scale);
  // Summed cross-entropy of logits() against targets, with no backward (validation).
  double loss(const int32_t* targets);

  // Generation: runs `n` new tokens of one sequence through the model, appending their keys
  // and values to `cache`, and writes the logits of the last one into last_logits [vocab].
  KvCache make_cache(int max_tokens);
  void forward_cached(const int32_t* tokens, int n, KvCache& cache, Tensor last_logits);

  // Serving: one step over a flattened batch of n tokens from many sequences (chunked
  // prefills and decodes mixed), each with its own position. attention(layer, qkv, attn) is
  // the attention core of every layer: the caller owns the KV cache (a paged pool). Only the
  // rows logit_rows[0 .. n_logits) go through the final norm and head, into logits
  // [n_logits, vocab]. The same block_forward as training runs; the buffers are one inference
  // set (no backward state) sized by reserve_batch and shared by all layers.
  using LayerAttention = std::function<void(int layer, const Tensor& qkv, Tensor attn)>;
  void reserve_batch(int max_tokens, int max_logit_rows);
  void forward_batch(const int32_t* tokens, const int32_t* positions, int n, const LayerAttention& attention,
                     const int32_t* logit_rows, int n_logits, Tensor logits);

  // Activation bytes planned for the current (batch, seq).
  size_t activation_bytes() const { return activation_bytes_; }

 private:
  void plan_activations(int batch, int seq);
  void acquire(int bucket, BucketHooks::Phase p) {
    if (hooks_) hooks_->acquire(bucket, p);
  }
  void release(int bucket, BucketHooks::Phase p) {
    if (hooks_) hooks_->release(bucket, p);
  }
  int head_bucket() const { return cfg_.layers + 1; }
  void upload_ids(Tensor dst, const int32_t* host, int64_t n);
  void embed(Tensor x0, const Tensor& ids, const Tensor& positions);  // token (+ position) embedding
  // Final norm of rows x, then logits = norm @ head^T.
  void head_forward(const Tensor& x, Tensor norm, Tensor mean, Tensor rstd, Tensor logits,
                    LinearRunner* linear = nullptr);

  Backend& be_;
  ModelConfig cfg_;
  std::vector<BucketLayout> layout_;
  BucketStore params_, grads_;
  BucketHooks* hooks_ = nullptr;
  LinearRunner* linear_ = nullptr;

  int batch_ = 0, seq_ = 0;
  size_t activation_bytes_ = 0;
  std::vector<Buffer> arena_;
  std::vector<BlockActivations> acts_;
  BlockScratch scratch_;
  Tensor ids_, targets_, positions_, final_norm_, final_mean_, final_rstd_, logits_, losses_, d_resid_;

  // Inference buffers for forward_batch (see transformer_batch.cpp).
  struct BatchPlan {
    int max_tokens = 0, max_logit_rows = 0;
    std::vector<Buffer> arena;
    Tensor resid[2];  // ping-pong residual stream [max_tokens, d]
    BlockActivations layer;  // intermediates shared by every layer
    Tensor ids, positions, logit_rows, gathered, norm, mean, rstd;
  } batch_plan_;
};

}  // namespace llmrun
