#pragma once
// LoRA over a frozen base model: y = W x + (alpha / rank) B A dropout(x) for every targeted
// linear. LoraAdapters is three things at once, each a seam the Transformer already has:
//   - the parameters an optimizer trains (TrainableParams: the adapter buckets of
//     lora_layout, so ZeRO, gradient reductions and checkpoints see adapters only);
//   - the Transformer's linear runner: the base GEMM as before plus the low-rank product, and
//     in the backward the input gradient and the adapters' gradients but no base gradient;
//   - the Transformer's bucket hooks: it forwards them to the optimizer (a model bucket and
//     its adapter bucket share an index), and lends the frozen base the one scratch its norms
//     write their (discarded) gradients into, so no base gradient store exists.
// One GEMM computes x A^T for all targets of a fused GEMM (q|k|v, gate|up); their B tensors
// are placed block-diagonally (by GEMMs with constant selector matrices, so every step runs on
// any backend) and one more GEMM adds the product to the fused output's columns.
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/lora_frozen_base.h"
#include "model/lora_layout.h"
#include "model/transformer.h"

namespace llmrun {

class LoraAdapters final : public TrainableParams, public BucketHooks, public LinearRunner {
 public:
  // `base` must have been built without gradient storage (StoreOptions::allocate_grads =
  // false); the adapters become its linear runner and, once an optimizer sets its hooks, its
  // bucket hooks. `tp` is the model's tensor-parallel group (null: none). With
  // sec.base_dtype bf16 the base's parameters move into a Bf16FrozenBase (frozen_base()).
  LoraAdapters(Transformer& base, const LoraSection& sec, const StoreOptions& stores,
               Communicator* tp);
  ~LoraAdapters() override;
  LoraAdapters(const LoraAdapters&) = delete;
  LoraAdapters& operator=(const LoraAdapters&) = delete;

  // PEFT's initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform, a = sqrt(5)),
  // B = 0, so training starts from the base model. Deterministic in `seed` for every layout.
  void init_weights(uint64_t seed);
  const LoraSection& section() const { return sec_; }
  // Dropout applies while training; validation turns it off.
  void set_dropout_active(bool active) { dropout_active_ = active; }
  const LoraLayout& lora() const { return lora_; }
  Transformer& base() { return base_; }
  // The bf16 base (finetune.base_dtype: bf16), else null.
  Bf16FrozenBase* frozen_base() { return bf16_base_.get(); }
  // The frozen base's bytes on this rank: its fp32 store, or the bf16 buckets plus the most
  // fp32 working copies held at once so far.
  size_t base_bytes() const;

  // TrainableParams
  Backend& backend() override { return be_; }
  BucketStore& params() override { return params_; }
  BucketStore& grads() override { return grads_; }
  const std::vector<BucketLayout>& layout() const override { return lora_.buckets; }
  void set_hooks(BucketHooks* hooks) override;
  void reduce_partial_grads(int bucket) override;
  bool tied_across_stages(int) const override { return false; }
  void sync_tied_grads(int) override {}

  // BucketHooks (of the base model)
  void acquire(int bucket, Phase phase) override;
  void release(int bucket, Phase phase) override;

  // LinearRunner
  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;
  void backward(Backend& be, LinearSite site, Tensor dx, const Tensor& dW, const Tensor& db,
                const Tensor& dy, const Tensor& x, const Tensor& W) override;

 private:
  // A growing scratch tensor (`slot` names its role).
  Tensor scratch(int slot, std::initializer_list<int64_t> dims, DType dtype = DType::f32);
  // out (+)= dropout(values) at `site` (lora_linear.cpp: the mask and how each backend
  // applies it). Accumulating, `values` is scaled in place.
  void dropout(LinearSite site, const LoraSite& s, Tensor values, Tensor out, bool accumulate);
  // The adapter input: x, or x with dropout applied into a scratch.
  Tensor adapter_input(LinearSite site, const LoraSite& s, const Tensor& x);
  // The site's A tensors as one [targets * rank, in] matrix (params or grads).
  Tensor stacked_a(const BucketStore& store, int layer, const LoraSite& s) const;
  // The site's B tensors placed block-diagonally in [out_cols, targets * rank].
  Tensor block_b(int layer, const LoraSite& s);
  // [rank, targets * rank] with an identity at block t.
  const Tensor& selector(int targets, int t);

  Transformer& base_;
  Backend& be_;
  LoraSection sec_;
  Communicator* tp_;
  LoraLayout lora_;
  BucketStore params_, grads_;
  BucketHooks* hooks_ = nullptr;
  std::unique_ptr<Bf16FrozenBase> bf16_base_;
  Buffer base_grad_scratch_;  // the frozen base's norm gradients land here and are dropped
  std::vector<int> base_grad_refs_;
  std::vector<Buffer> scratch_;
  std::vector<std::vector<Buffer>> selector_storage_;
  std::vector<std::vector<Tensor>> selectors_;
  uint64_t dropout_seed_ = 0;
  std::vector<int64_t> dropout_columns_;  // host scratch of dropout()
  std::vector<int32_t> dropout_ids_;
  bool dropout_active_ = true;
};

}  // namespace llmrun
