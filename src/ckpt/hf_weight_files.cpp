#include "ckpt/hf_weight_files.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <regex>
#include <set>

#include "model/param_layout.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

namespace fs = std::filesystem;

HfWeightFiles::HfWeightFiles(SafetensorsFile single) : source_(single.path().string()) {
  files_.push_back(std::move(single));
  for (const std::string& n : files_[0].names()) owner_[n] = 0;
}

HfWeightFiles::HfWeightFiles(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    *this = HfWeightFiles(SafetensorsFile(single));
    return;
  }
  if (!fs::exists(index))
    throw UserError(
        dir.string() +
        ": has neither model.safetensors nor model.safetensors.index.json (the model's weights)");
  source_ = index.string();
  const nlohmann::json j = read_json_file(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(source_ + ": no \"weight_map\" object mapping tensor names to files");
  std::map<std::string, size_t> file_ids;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      throw UserError(source_ + ": weight_map[\"" + name + "\"] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw UserError(source_ + ": weight_map[\"" + name + "\"] = \"" + f +
                      "\" is not a file in the directory");
    auto [it, fresh] = file_ids.emplace(f, files_.size());
    if (fresh) {
      if (!fs::exists(dir / f))
        throw UserError(source_ + ": names shard " + f + ", which is missing");
      files_.emplace_back(dir / f);
    }
    if (!files_[it->second].has(name))
      throw UserError(source_ + ": says " + name + " is in " + f +
                      ", but that file has no such tensor");
    owner_[name] = it->second;
  }
}

const SafetensorsFile* HfWeightFiles::find(const std::string& name) const {
  auto it = owner_.find(name);
  return it == owner_.end() ? nullptr : &files_[it->second];
}

std::vector<std::string> HfWeightFiles::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, file] : owner_) out.push_back(name);
  return out;
}

namespace {
std::atomic<bool> g_ignore_extra{false};

bool is_known_buffer(const std::string& name) {
  for (const char* suffix : {".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias"})
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return name == "lm_head.weight";  // tied embeddings: transformers may still save the head
}
}  // namespace

void set_ignore_extra_weights(bool ignore) { g_ignore_extra = ignore; }

void check_weights_explained(const HfWeightFiles& files, const ModelConfig& cfg) {
  std::set<std::string> expected;
  for (const BucketLayout& b : model_layout(cfg))
    for (const ParamSpec& p : b.params) expected.insert(p.hf_name);
  // Llama "model.layers.N.", GPT-2 "transformer.h.N." (with or without a "model." prefix).
  static const std::regex layer_re(R"(^(?:.*\.)?(?:layers|h)\.(\d+)\.)");
  std::vector<std::string> extra;
  int64_t max_layer = -1;
  for (const std::string& name : files.names()) {
    if (expected.count(name) || is_known_buffer(name)) continue;
    extra.push_back(name);
    std::smatch m;
    if (std::regex_search(name, m, layer_re))
      max_layer = std::max<int64_t>(max_layer, std::stoll(m[1].str()));
  }
  if (extra.empty()) return;
  std::string what = std::to_string(extra.size()) + " tensor" + (extra.size() == 1 ? "" : "s") +
                     " that config.json does not explain (the first: " + extra.front() + ")";
  if (max_layer >= cfg.layers)
    what += "; the weights hold " + std::to_string(max_layer + 1) +
            " layers, config.json says num_hidden_layers=" + std::to_string(cfg.layers);
  if (g_ignore_extra) {
    spdlog::warn("{}: {}; ignored (--ignore-extra-weights)", files.source(), what);
    return;
  }
  throw UserError(
      files.source() + ": " + what +
      ": the model would run as part of what the weights describe. Fix config.json, or pass "
      "--ignore-extra-weights to load only what it describes");
}

}  // namespace llmrun
