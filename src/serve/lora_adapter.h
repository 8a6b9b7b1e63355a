#pragma once
// One LoRA adapter as the serving engine applies it (S-LoRA/Punica style: the base weights stay
// untouched; each sequence's rows get their own low-rank delta). Loaded from a Hugging Face
// PEFT adapter dir (the one llmrun's LoRA training writes), and reshaped once for the
// inference GEMMs. On the CPU: per block GEMM (q|k|v, out, gate|up, down) one transposed,
// stacked A and per target one transposed B already multiplied by lora_alpha / r, for the
// host kernel of serve/lora_delta.h (one A product per fused input, one B product per target).
// On a device backend: one stacked A [targets * r, in] and one B [out_cols, targets * r],
// block-diagonal over the fused GEMM's targets and scaled, so a row group's delta is two of
// the backend's batch-invariant linears.
#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/bucket_store.h"
#include "model/linear.h"
#include "model/lora_layout.h"
#include "model/transformer.h"
#include "serve/lora_delta.h"

namespace llmrun {

class ServedLora {
 public:
  // The adapter of `dir` for `model` (one rank holding the whole model). UserError, naming the
  // file and what is wrong, for a dir that is no PEFT LoRA adapter, a rank above max_rank,
  // targets this architecture does not have (the valid names listed), or tensors whose
  // shapes do not fit the model.
  static std::shared_ptr<const ServedLora> load(Transformer& model, const std::string& name,
                                                const std::filesystem::path& dir, int max_rank);

  struct Site {
    Tensor a;  // [width, in]: x A^T gives every target's rank-r projection
    Tensor b;  // [out_cols, width]: scale * B_t in target t's rows and columns, zeros elsewhere
    bool empty() const { return a.empty(); }
  };
  // The GEMM's adapter, or null when the adapter leaves it alone (and for the LM head).
  // host_site() on the CPU backend, site() on a device backend; the other is always null.
  const Site* site(LinearSite s) const;
  const LoraHostSite* host_site(LinearSite s) const;

  const std::string& name() const { return name_; }
  const std::filesystem::path& path() const { return path_; }
  int rank() const { return sec_.rank; }
  // Widest stacked A among the sites (targets * rank): the runner's scratch columns.
  int64_t max_width() const { return max_width_; }
  // Where this adapter's prefix-cache hash chains start: distinct for every adapter ever
  // loaded (also one unloaded and loaded again under its name), so KV blocks computed under
  // one adapter are never found under another or under the base.
  uint64_t prefix_seed() const { return prefix_seed_; }

  ServedLora(const ServedLora&) = delete;
  ServedLora& operator=(const ServedLora&) = delete;

 private:
  ServedLora(Transformer& model, std::string name, std::filesystem::path dir,
             const LoraSection& sec);

  std::string name_;
  std::filesystem::path path_;
  LoraSection sec_;
  LoraLayout layout_;
  BucketStore store_;                       // the PEFT tensors as loaded (A read in place)
  std::vector<Buffer> b_storage_;           // the block-diagonal, scaled B of each site
  std::vector<std::array<Site, 4>> sites_;  // [layer][qkv, out, up, down]: device backends
  std::vector<std::array<LoraHostSite, 4>> host_sites_;  // [layer][...]: the CPU backend
  int64_t max_width_ = 0;
  uint64_t prefix_seed_ = 0;
};

}  // namespace llmrun
