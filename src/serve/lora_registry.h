#pragma once
// The LoRA adapters a server holds, by the name requests select them with (vLLM's
// --lora-modules and /v1/load_lora_adapter). Thread-safe: HTTP threads look adapters up and
// load or unload them while the engine runs; a request holds its adapter (shared_ptr), so an
// adapter unloaded mid-request serves that request to its end and is freed after it.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/lora_adapter.h"

namespace llmrun {

class LoraRegistry {
 public:
  // base_name: the served model's own name (no adapter may take it); max_loaded: adapters held
  // at once (--max-cpu-loras; 0: no limit); max_rank: the largest rank accepted. How many
  // adapters one batch mixes is the scheduler's limit (--max-loras), not this one.
  LoraRegistry(Transformer& model, std::string base_name, int max_loaded, int max_rank);

  // Loads DIR as `name`. UserError (one line, the adapter named) for a bad name, a name in
  // use, a full registry or an adapter that does not fit the model; the registry is then
  // unchanged.
  void load(const std::string& name, const std::string& dir);
  // False when no adapter has that name.
  bool unload(const std::string& name);
  std::shared_ptr<const ServedLora> find(const std::string& name) const;  // null: none
  std::vector<std::shared_ptr<const ServedLora>> list() const;            // by name
  const std::string& base_name() const { return base_name_; }
  int max_rank() const { return max_rank_; }
  // The widest per-GEMM stacked A any accepted adapter can have (3 fused targets: q|k|v).
  int64_t max_width() const { return int64_t(3) * max_rank_; }

 private:
  Transformer& model_;
  std::string base_name_;
  int max_loaded_, max_rank_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ServedLora>> by_name_;
};

}  // namespace llmrun
