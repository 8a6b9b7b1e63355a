// LoraRegistry: named adapters, loaded and unloaded at runtime (see the header).
#include "serve/lora_registry.h"

#include "util/error.h"

namespace llmrun {

LoraRegistry::LoraRegistry(Transformer& model, std::string base_name, int max_loaded, int max_rank)
    : model_(model),
      base_name_(std::move(base_name)),
      max_loaded_(max_loaded),
      max_rank_(max_rank) {}

void LoraRegistry::load(const std::string& name, const std::string& dir) {
  if (name.empty() || name.size() > 256)
    throw UserError("a LoRA adapter name must be 1 to 256 characters");
  if (name == base_name_)
    throw UserError("LoRA adapter name '" + name + "' is the base model's name");
  auto taken = [&] {
    if (by_name_.count(name)) throw UserError("LoRA adapter '" + name + "' is already loaded");
    if (max_loaded_ > 0 && int(by_name_.size()) >= max_loaded_)
      throw UserError("cannot load LoRA adapter '" + name + "': " + std::to_string(max_loaded_) +
                      " adapters are loaded (--max-cpu-loras); unload one first");
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken();
  }
  // Reading the files is slow: outside the lock, then checked again (another load may have
  // taken the name meanwhile).
  std::shared_ptr<const ServedLora> lora = ServedLora::load(model_, name, dir, max_rank_);
  std::lock_guard<std::mutex> lock(mu_);
  taken();
  by_name_[name] = std::move(lora);
}

bool LoraRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return by_name_.erase(name) > 0;
}

std::shared_ptr<const ServedLora> LoraRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const ServedLora>> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const ServedLora>> out;
  for (const auto& [name, lora] : by_name_) out.push_back(lora);
  return out;
}

}  // namespace llmrun
