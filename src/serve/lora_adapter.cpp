// ServedLora: a PEFT adapter dir reshaped for serving (see the header).
#include "serve/lora_adapter.h"

#include <algorithm>

#include "ckpt/peft_adapter.h"
#include "serve/kv_block_manager.h"
#include "util/error.h"

namespace llmrun {

namespace {
std::atomic<uint64_t> g_loaded{0};  // adapters loaded so far in this process

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::shared_ptr<const ServedLora> ServedLora::load(Transformer& model, const std::string& name,
                                                   const std::filesystem::path& dir, int max_rank) {
  if (!std::filesystem::is_directory(dir))
    throw UserError("LoRA adapter '" + name + "': " + dir.string() + " is not a directory");
  const LoraSection sec = read_peft_config(dir);
  if (sec.rank > max_rank)
    throw UserError("LoRA adapter '" + name + "': rank " + std::to_string(sec.rank) +
                    " exceeds --max-lora-rank " + std::to_string(max_rank));
  return std::shared_ptr<const ServedLora>(new ServedLora(model, name, dir, sec));
}

ServedLora::ServedLora(Transformer& model, std::string name, std::filesystem::path dir,
                       const LoraSection& sec)
    : name_(std::move(name)),
      path_(std::move(dir)),
      sec_(sec),
      layout_(lora_layout(model.config(), model.shard(), sec)),
      store_(model.backend(), layout_.buckets) {
  Backend& be = model.backend();
  load_peft_adapter(be, store_, path_, sec_);
  prefix_seed_ = mix(kPrefixChainSeed ^ mix(++g_loaded * 0x9E3779B97F4A7C15ull));
  const int64_t r = sec_.rank;
  const float scale = sec_.scale();
  const bool host = be.device() == Device::cpu;
  if (host) host_sites_.resize(layout_.sites.size());
  sites_.resize(layout_.sites.size());
  std::vector<float> host_a, host_b, bd;
  for (size_t l = 0; l < layout_.sites.size(); ++l)
    for (int k = 0; k < 4; ++k) {
      const LoraSite& s = layout_.sites[l][size_t(k)];
      if (s.empty()) continue;
      const int bucket = int(l) + 1;  // adapter bucket b belongs to the model's bucket b
      const int64_t width = int64_t(s.targets.size()) * r;
      max_width_ = std::max(max_width_, width);
      // The targets' A tensors are adjacent in the bucket (lora_layout): one [width, in] view.
      Tensor a = store_.tensor(bucket, s.targets.front().a);
      a.shape[0] = width;
      if (host) {  // the CPU kernel's packed copy (serve/lora_delta.h)
        host_a.resize(size_t(a.numel()));
        be.copy(Tensor(host_a.data(), DType::f32, {width, a.cols()}), a);
        std::vector<std::vector<float>> host_bs(s.targets.size());
        std::vector<LoraTargetSource> sources;
        for (size_t t = 0; t < s.targets.size(); ++t) {
          const LoraTarget& tg = s.targets[t];
          const Tensor b = store_.tensor(bucket, tg.b);  // [cols, r]
          host_bs[t].resize(size_t(b.numel()));
          be.copy(Tensor(host_bs[t].data(), DType::f32, {tg.cols, r}), b);
          sources.push_back({tg.col_begin, tg.cols, host_bs[t].data()});
        }
        host_sites_[l][size_t(k)] = lora_pack_site(a.cols(), r, host_a.data(), sources, scale);
        continue;
      }
      bd.assign(size_t(s.out_cols * width), 0.0f);
      for (size_t t = 0; t < s.targets.size(); ++t) {
        const LoraTarget& tg = s.targets[t];
        const Tensor b = store_.tensor(bucket, tg.b);  // [cols, r]
        host_b.resize(size_t(b.numel()));
        be.copy(Tensor(host_b.data(), DType::f32, {tg.cols, r}), b);
        for (int64_t i = 0; i < tg.cols; ++i)
          for (int64_t j = 0; j < r; ++j)
            bd[size_t((tg.col_begin + i) * width + int64_t(t) * r + j)] =
                scale * host_b[size_t(i * r + j)];
      }
      b_storage_.push_back(be.allocate(bd.size() * 4));
      const Tensor b = b_storage_.back().as(DType::f32, {s.out_cols, width});
      be.copy(b, Tensor(bd.data(), DType::f32, {s.out_cols, width}));
      sites_[l][size_t(k)] = Site{a, b};
    }
}

const ServedLora::Site* ServedLora::site(LinearSite s) const {
  if (s.kind == LinearKind::lm_head || s.layer < 0 || s.layer >= int(sites_.size())) return nullptr;
  const Site& site = sites_[size_t(s.layer)][size_t(s.kind)];
  return site.empty() ? nullptr : &site;
}

const LoraHostSite* ServedLora::host_site(LinearSite s) const {
  if (s.kind == LinearKind::lm_head || s.layer < 0 || s.layer >= int(host_sites_.size()))
    return nullptr;
  const LoraHostSite& site = host_sites_[size_t(s.layer)][size_t(s.kind)];
  return site.empty() ? nullptr : &site;
}

}  // namespace llmrun
