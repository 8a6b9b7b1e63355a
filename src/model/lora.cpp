#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "model/shard_copy.h"
#include "util/error.h"

namespace llmrun {

namespace {
// The elements of a bucket that the frozen base's backward writes: its 1-D tensors (norm
// weights and biases; bias and weight gradients of linears are the runner's, which skips
// them, and the embedding's backward is off).
int64_t written_extent(const BucketLayout& b) {
  int64_t end = 0;
  for (const ParamSpec& p : b.params)
    if (p.shape.size() == 1) end = std::max(end, p.offset + p.numel());
  return end;
}
}  // namespace

LoraAdapters::LoraAdapters(Transformer& base, const LoraSection& sec, const StoreOptions& stores,
                           Communicator* tp)
    : base_(base),
      be_(base.backend()),
      sec_(sec),
      tp_(tp),
      lora_(lora_layout(base.config(), base.shard(), sec)),
      params_(be_, lora_.buckets, stores.pad_multiple, stores.allocate_params),
      grads_(be_, lora_.buckets, stores.pad_multiple, stores.allocate_grads) {
  for (int b = 0; b < base.grads().num_buckets(); ++b)
    LLMRUN_CHECK(!base.grads().resident(b), "LoraAdapters: the base model must hold no gradients");
  int64_t extent = 0;
  for (const BucketLayout& b : base.layout()) extent = std::max(extent, written_extent(b));
  base_grad_scratch_ = be_.allocate(size_t(std::max<int64_t>(extent, 1)) * 4);
  base_grad_refs_.assign(base.layout().size(), 0);
  if (sec.base_dtype == "bf16") bf16_base_ = std::make_unique<Bf16FrozenBase>(base);
  base_.set_frozen_base(true);
  base_.set_linear_runner(this);
  base_.set_hooks(this);
}

LoraAdapters::~LoraAdapters() {
  base_.set_hooks(nullptr);
  base_.set_linear_runner(nullptr);
}

void LoraAdapters::set_hooks(BucketHooks* hooks) { hooks_ = hooks; }

void LoraAdapters::init_weights(uint64_t seed) {
  dropout_seed_ = seed * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull;
  // A tensor's generator is seeded by its name, so every layout draws the same values.
  std::vector<float> host;
  for (int b = 0; b < params_.num_buckets(); ++b)
    for (int p = 0; p < int(lora_.buckets[size_t(b)].params.size()); ++p) {
      const ParamSpec& spec = lora_.buckets[size_t(b)].params[size_t(p)];
      host.assign(size_t(spec.full_numel()), 0.0f);
      if (spec.init != ParamInit::zeros) {
        uint64_t h = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
        for (char c : spec.hf_name) h = (h ^ uint64_t(uint8_t(c))) * 0x100000001B3ull;
        std::mt19937_64 rng(h);
        const float bound = 1.0f / std::sqrt(float(spec.full_shape[1]));
        std::uniform_real_distribution<float> dist(-bound, bound);
        for (float& v : host) v = dist(rng);
      }
      extract_shard(be_, spec, Tensor(host.data(), DType::f32, {spec.full_numel()}),
                    params_.tensor(b, p));
    }
}

void LoraAdapters::reduce_partial_grads(int b) {
  if (tp_ == nullptr || tp_->size() <= 1) return;
  const BucketLayout& layout = lora_.buckets[size_t(b)];
  for (int p = 0; p < int(layout.params.size()); ++p) {
    const ParamSpec& spec = layout.params[size_t(p)];
    if (!spec.shard.grad_partial) continue;
    const Tensor g = grads_.tensor(b, p).view({spec.numel()});
    if (spec.numel() == spec.full_numel()) {
      tp_->all_reduce(g, ReduceOp::sum);
      continue;
    }
    // Shared by groups of ranks (B of GQA key/value heads): summed in a full-size buffer.
    Buffer full = be_.allocate(size_t(spec.full_numel()) * 4);
    const Tensor f = full.as(DType::f32, {spec.full_numel()});
    insert_shard(be_, spec, g, f);
    tp_->all_reduce(f, ReduceOp::sum);
    extract_shard(be_, spec, f, g);
  }
}

size_t LoraAdapters::base_bytes() const {
  if (!bf16_base_) return base_.params().resident_bytes();
  return bf16_base_->held_bytes() + bf16_base_->peak_working_bytes();
}

void LoraAdapters::acquire(int b, Phase phase) {
  if (hooks_) hooks_->acquire(b, phase);
  if (bf16_base_) bf16_base_->acquire(b);
  if (phase == Phase::backward && base_grad_refs_[size_t(b)]++ == 0) {
    // The view claims the bucket's size, but only written_extent() of it is ever touched.
    base_.grads().attach(b, Tensor(base_grad_scratch_.data(), DType::f32,
                                   {base_.grads().padded_numel(b)}, base_grad_scratch_.device()));
  }
}

void LoraAdapters::release(int b, Phase phase) {
  if (phase == Phase::backward && --base_grad_refs_[size_t(b)] == 0) base_.grads().detach(b);
  if (bf16_base_) bf16_base_->release(b);
  if (hooks_) hooks_->release(b, phase);
}

}  // namespace llmrun
