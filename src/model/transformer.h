#pragma once
// The whole model: embedding -> blocks -> final norm -> LM head (+ loss). It owns the
// parameter and gradient stores and plans its activation buffers for a (batch, seq) shape.
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/bucket_store.h"
#include "model/recompute.h"
#include "model/trainable.h"
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

// The part of the model this rank holds and the tensor-parallel group it shares it with.
struct ModelParallel {
  ModelShard shard;
  Communicator* tp = nullptr;  // null or size 1: no tensor parallelism
  Communicator* pp = nullptr;  // pipeline group: ties the first and last stage's token tables
  Communicator* ep = nullptr;  // expert-parallel group (size shard.ep): MoE token all-to-alls
};

class Transformer : public TrainableParams {
 public:
  Transformer(Backend& backend, const ModelConfig& cfg, const StoreOptions& stores = {},
              const ModelParallel& parallel = {});
  void set_hooks(BucketHooks* hooks) override { hooks_ = hooks; }
  // LoRA: the base is frozen, so its backward computes no embedding gradient (linears' weight
  // gradients are the linear runner's to skip).
  void set_frozen_base(bool frozen) { frozen_base_ = frozen; }
  // Runs the training path's linear GEMMs (blocks and LM head) through `runner` (an FP8
  // recipe); null: plain fp32. Generation and serving always run fp32.
  void set_linear_runner(LinearRunner* runner) { linear_ = runner; }
  // Context parallelism: this rank's tokens are chunks of longer sequences and attention
  // spans the ranks (null: whole sequences on this rank). Training only.
  void set_distributed_attention(DistributedAttention* a) { comm_.attention = a; }
  // Runs generation's and serving's linears (blocks and LM head) through `runner` (quantized
  // weights: src/quant); null: the batch-invariant fp32 inference_linear().
  void set_inference_linear(LinearRunner* runner) { inference_ = runner; }
  // Looks up token rows (out [N, d_model] = table[ids]) in place of the fp32 token table:
  // a quantized model keeps its table in block format (src/ckpt/gguf_model). Empty: the table.
  using EmbeddingLookup = std::function<void(Tensor out, const Tensor& ids)>;
  void set_embedding_lookup(EmbeddingLookup lookup) { embedding_lookup_ = std::move(lookup); }
  LinearRunner* inference_linear_runner() const { return inference_; }  // null: the default
  void set_recompute(Recompute r) {
    recompute_ = r;
    batch_ = seq_ = 0;  // re-plan the activation buffers
  }

  const ModelConfig& config() const { return cfg_; }
  const ModelShard& shard() const { return shard_; }
  const std::vector<BucketLayout>& layout() const override { return layout_; }
  BucketStore& params() override { return params_; }
  BucketStore& grads() override { return grads_; }
  Backend& backend() override { return be_; }

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 layers)), norms 1,
  // biases 0. Deterministic in `seed` whatever the thread count, and whatever the layout: a
  // shard holds its part of the tensors one rank would initialise.
  void init_weights(uint64_t seed);

  // Sums, over the tensor-parallel group, the gradients of bucket b's tensors that each rank
  // only computes part of (TensorShard::grad_partial). Called once a bucket's gradient is
  // complete, before it is reduced across data-parallel ranks.
  void reduce_partial_grads(int bucket) override;

  // Training forward over tokens [batch, seq] (host memory); logits() holds the result.
  void forward(const int32_t* tokens, int batch, int seq);
  Tensor logits() const { return m_->logits; }
  // Cross-entropy against targets [batch, seq] (host; < 0 ignored) and the full backward,
  // accumulating grad_scale * dLoss_sum/dparam into grads(). Returns the summed loss.
  // Consumes logits() (overwritten by their gradient).
  double backward(const int32_t* targets, float grad_scale);
  // Summed cross-entropy of logits() against targets, with no backward (validation).
  double loss(const int32_t* targets);
  // One key per row of the micro-batch in flight (its forward, backward or recomputed
  // forward): a hash of the row's sequence's tokens up to and including its own, so it is the
  // same on every backend, rank and schedule (LoRA draws its dropout masks from it). Under
  // context parallelism a rank hashes the tokens of its own chunk. Empty outside training.
  const std::vector<uint64_t>& row_keys() const;

  // Generation: runs `n` new tokens of one sequence through the model, appending their keys
  // and values to `cache`, and writes the logits of the last one into last_logits [vocab].
  KvCache make_cache(int max_tokens);
  void forward_cached(const int32_t* tokens, int n, KvCache& cache, Tensor last_logits);

  // Serving: one step over a flattened batch of n tokens from many sequences (chunked
  // prefills and decodes mixed), each with its own position: ids and positions i32 [n] on the
  // backend (the caller checked the positions). attention(layer, qkv, attn) is the attention
  // core of every layer: the caller owns the KV cache (a paged pool). Only the rows
  // logit_rows (i32 [n_logits] on the backend) go through the final norm and head, into
  // logits [n_logits, vocab]. The same block_forward as training runs; the buffers are one
  // inference set (no backward state) sized by reserve_batch and shared by all layers.
  using LayerAttention = std::function<void(int layer, const Tensor& qkv, Tensor attn)>;
  void reserve_batch(int max_tokens, int max_logit_rows);
  void forward_batch(const Tensor& ids, const Tensor& positions, const LayerAttention& attention,
                     const Tensor& logit_rows, Tensor logits);

  // Pipeline parallelism: one micro-batch through blocks [begin, end) of this rank (a model
  // chunk) as a unit of the schedule. Each unit in flight has its own activation buffers (a
  // slot, reused once released); the backward temporaries are shared.
  int acquire_slot(int begin, int end, int batch, int seq);
  void release_slot(int slot);
  // tokens [batch, seq] when the chunk starts with the embedding, else input [rows, d] from
  // the previous stage.
  void forward_chunk(int slot, const int32_t* tokens, const Tensor* input);
  Tensor chunk_output(int slot) const;  // [rows, d] for the next stage
  // targets when the chunk ends with the head (returns the summed loss), else d_output
  // [rows, d] from the next stage (returns 0). Afterwards input_grad() holds dL/d(input).
  double backward_chunk(int slot, const int32_t* targets, const Tensor* d_output, float grad_scale);
  Tensor input_grad() const { return d_resid_; }
  // Forward only, for validation: the summed loss when the chunk ends with the head.
  double loss_chunk(int slot, const int32_t* targets);

  // With tied embeddings split over pipeline stages, the first stage's token table and the
  // last stage's copy of it get the sum of both gradients (a pipeline-group exchange); the
  // optimizer then updates both alike. True for the bucket that needs it on this rank.
  bool tied_across_stages(int bucket) const override;
  void sync_tied_grads(int bucket) override;

  // Mixture of experts: the router statistics of the training forwards since the last call.
  MoeStats take_moe_stats() { return std::exchange(moe_stats_, MoeStats{}); }

  // Activation bytes planned: the shared buffers and every slot allocated so far.
  size_t activation_bytes() const { return activation_bytes_; }

 private:
  // One unit's activations: blocks [begin, end), with the embedding's ids when it starts at
  // block 0 and the head's buffers when it ends the model on this rank.
  struct MicroState {
    int begin = 0, end = 0;
    bool in_use = false;
    std::vector<Buffer> arena;
    std::vector<BlockActivations> acts;  // by global layer; [begin, end) allocated
    Tensor ids, local_ids;               // first chunk: tokens, and as this vocab slice sees them
    std::vector<uint64_t> row_keys;      // row_keys() while this unit is in flight
    Tensor final_norm, final_mean, final_rstd, head_input, logits;  // last chunk
  };
  void plan_activations(int batch, int seq);  // shared buffers (+ slot 0 for the whole model)
  TensorAllocator arena_allocator(std::vector<Buffer>& arena);
  void allocate_slot(MicroState& m);
  bool starts_model(const MicroState& m) const { return m.begin == 0 && shard_.embedding; }
  bool ends_model(const MicroState& m) const { return m.end == cfg_.layers && shard_.head; }
  // The head reads bucket 0's table (tied, both on this rank): bucket 0 stays acquired.
  bool head_reads_table() const { return cfg_.tie_embeddings && shard_.embedding && shard_.head; }
  void upload_positions(int64_t n, int seq, int first_position);
  // The training attention core: one rank's causal attention, or the distributed one.
  void attention_forward(Tensor attn, Tensor lse, const Tensor& qkv, const AttentionShape& s);
  void acquire(int bucket, BucketHooks::Phase p) {
    if (hooks_) hooks_->acquire(bucket, p);
  }
  void release(int bucket, BucketHooks::Phase p) {
    if (hooks_) hooks_->release(bucket, p);
  }
  int head_bucket() const { return cfg_.layers + 1; }
  bool tp_active() const { return comm_.active(); }
  void upload_ids(Tensor dst, const int32_t* host, int64_t n);
  void upload_tokens(const int32_t* tokens, int64_t n);  // m_->ids (+ this rank's m_->local_ids)
  void embed(Tensor x0, const Tensor& ids,
             const Tensor& positions);  // token (+ position) embedding
  void embed_training(Tensor x0);       // vocab-parallel under tensor parallelism
  // Summed cross-entropy of m_->logits against targets_, which become grad_scale * dLoss/dlogits.
  double cross_entropy(float grad_scale);
  void upload_targets(const int32_t* targets);  // targets_ (+ local_targets_)
  // Final norm of rows x, then logits = norm @ head^T (training: of every tensor-parallel
  // rank's rows, into this rank's vocabulary columns; otherwise the batch-invariant
  // inference linear).
  void head_forward(const Tensor& x, Tensor norm, Tensor mean, Tensor rstd, Tensor logits,
                    bool training = false);

  Backend& be_;
  ModelConfig cfg_;
  ModelShard shard_;
  ModelConfig block_cfg_;              // one tensor-parallel rank's share of every block
  std::pair<int64_t, int64_t> vocab_;  // token-table rows this rank holds
  BlockComm comm_;
  std::vector<BucketLayout> layout_;
  BucketStore params_, grads_;
  BucketHooks* hooks_ = nullptr;
  Recompute recompute_ = Recompute::none;
  LinearRunner* linear_ = nullptr;
  bool frozen_base_ = false;
  MoeStats moe_stats_;
  LinearRunner* inference_ = nullptr;
  EmbeddingLookup embedding_lookup_;
  LinearRunner& inference_runner() { return inference_ ? *inference_ : inference_linear(); }

  Communicator* pp_ = nullptr;
  int batch_ = 0, seq_ = 0;
  int64_t rows_ =
      0;  // residual-stream rows on this rank: batch * seq, / tp with sequence parallelism
  size_t activation_bytes_ = 0;
  std::vector<Buffer> arena_;  // shared buffers
  std::vector<std::unique_ptr<MicroState>> slots_;
  MicroState* m_ = nullptr;  // the unit being computed
  BlockActivations shared_;  // recompute's buffers, shared by all layers and slots
  BlockScratch scratch_;
  Tensor targets_, positions_, losses_, d_resid_;
  // Tensor parallelism: targets as this rank's vocabulary slice sees them, the positions of
  // its own rows, the vocab-parallel loss's reductions.
  Tensor local_targets_, row_positions_, row_max_, xent_sums_;

  // Inference buffers for forward_batch (see transformer_batch.cpp).
  struct BatchPlan {
    int max_tokens = 0, max_logit_rows = 0;
    std::vector<Buffer> arena;
    Tensor resid[2];         // ping-pong residual stream [max_tokens, d]
    BlockActivations layer;  // intermediates shared by every layer
    Tensor gathered, norm, mean, rstd;
  } batch_plan_;
};

}  // namespace llmrun
