#include "ckpt/hf_weight_files.h"

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
    throw UserError(dir.string() + ": has neither model.safetensors nor model.safetensors.index.json (the model's weights)");
  source_ = index.string();
  const nlohmann::json j = read_json_file(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(source_ + ": no \"weight_map\" object mapping tensor names to files");
  std::map<std::string, size_t> file_ids;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw UserError(source_ + ": weight_map[\"" + name + "\"] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw UserError(source_ + ": weight_map[\"" + name + "\"] = \"" + f + "\" is not a file in the directory");
    auto [it, fresh] = file_ids.emplace(f, files_.size());
    if (fresh) {
      if (!fs::exists(dir / f)) throw UserError(source_ + ": names shard " + f + ", which is missing");
      files_.emplace_back(dir / f);
    }
    if (!files_[it->second].has(name))
      throw UserError(source_ + ": says " + name + " is in " + f + ", but that file has no such tensor");
    owner_[name] = it->second;
  }
}

const SafetensorsFile* HfWeightFiles::find(const std::string& name) const {
  auto it = owner_.find(name);
  return it == owner_.end() ? nullptr : &files_[it->second];
}

}  // namespace llmrun
