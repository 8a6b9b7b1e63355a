#include "ckpt/peft_adapter.h"

#include <fstream>
#include <set>

#include "ckpt/hf_weight_files.h"
#include "ckpt/safetensors.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

namespace fs = std::filesystem;

void write_peft_adapter(const fs::path& dir, const std::vector<HfTensor>& tensors,
                        const LoraSection& sec, const ModelConfig& cfg,
                        const std::string& base_model) {
  AtomicDir out(dir);
  // The fields of PEFT's LoraConfig that decide how the adapter applies; GPT-2's Conv1D
  // stores its weights [in, out], which PEFT marks with fan_in_fan_out.
  const nlohmann::json config = {{"peft_type", "LORA"},
                                 {"task_type", "CAUSAL_LM"},
                                 {"base_model_name_or_path", base_model},
                                 {"r", sec.rank},
                                 {"lora_alpha", sec.alpha},
                                 {"lora_dropout", sec.dropout},
                                 {"target_modules", sec.targets},
                                 {"bias", "none"},
                                 {"fan_in_fan_out", cfg.arch == Arch::gpt2},
                                 {"use_rslora", false},
                                 {"use_dora", false},
                                 {"init_lora_weights", true},
                                 {"inference_mode", true},
                                 {"modules_to_save", nullptr},
                                 {"layers_to_transform", nullptr},
                                 {"layers_pattern", nullptr},
                                 {"rank_pattern", nlohmann::json::object()},
                                 {"alpha_pattern", nlohmann::json::object()},
                                 {"revision", nullptr}};
  {
    std::ofstream f(out.path() / "adapter_config.json");
    f << config.dump(2) << "\n";
    if (!f) throw UserError("cannot write " + (out.path() / "adapter_config.json").string());
  }
  SafetensorsWriter w;
  for (const HfTensor& t : tensors) w.add(t.name, DType::f32, t.shape, t.data.data());
  w.set_metadata({{"format", "pt"}});
  w.write(out.path() / "adapter_model.safetensors", false);
  out.commit();
}

LoraSection read_peft_config(const fs::path& dir) {
  const fs::path path = dir / "adapter_config.json";
  if (!fs::is_regular_file(path))
    throw UserError(dir.string() + " holds no adapter_config.json (expected a PEFT adapter dir)");
  const nlohmann::json j = read_json_file(path);
  auto fail = [&](const std::string& what) -> void {
    throw UserError(path.string() + ": " + what);
  };
  if (!j.is_object()) fail("expected a JSON object");
  if (j.value("peft_type", std::string()) != "LORA")
    fail("peft_type is " + j.value("peft_type", nlohmann::json()).dump() + ", expected \"LORA\"");
  LoraSection s;
  s.enabled = true;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1)
    fail("r must be a positive integer");
  s.rank = j["r"].get<int>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number())
    fail("lora_alpha must be a number");
  s.alpha = j["lora_alpha"].get<double>();
  s.dropout = j.value("lora_dropout", 0.0);
  const nlohmann::json& t = j.contains("target_modules") ? j["target_modules"] : nlohmann::json();
  if (!t.is_array() || t.empty())
    fail(
        "target_modules must be a list of module names (llmrun does not expand regexes or "
        "\"all-linear\")");
  for (const auto& name : t) {
    if (!name.is_string()) fail("target_modules must list strings");
    s.targets.push_back(name.get<std::string>());
  }
  for (const char* flag : {"use_dora", "use_rslora"})
    if (j.value(flag, false))
      fail(std::string(flag) + " adapters are not LoRA as llmrun applies it");
  if (j.value("bias", std::string("none")) != "none") fail("bias must be \"none\"");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && j[key].is_object() && !j[key].empty())
      fail(std::string(key) + " (per-module ranks or alphas) is not supported");
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() &&
      !j["modules_to_save"].empty())
    fail("modules_to_save (fully trained modules beside the adapters) is not supported");
  return s;
}

void load_peft_adapter(Backend& be, BucketStore& store, const fs::path& dir,
                       const LoraSection& sec) {
  const LoraSection file = read_peft_config(dir);
  const std::string where = (dir / "adapter_config.json").string();
  if (file.rank != sec.rank)
    throw UserError(where + ": r is " + std::to_string(file.rank) + ", finetune.rank is " +
                    std::to_string(sec.rank));
  if (file.alpha != sec.alpha)
    throw UserError(where + ": lora_alpha is " + std::to_string(file.alpha) +
                    ", finetune.alpha is " + std::to_string(sec.alpha));
  if (std::set<std::string>(file.targets.begin(), file.targets.end()) !=
      std::set<std::string>(sec.targets.begin(), sec.targets.end()))
    throw UserError(where + ": target_modules differ from finetune.targets");
  const fs::path weights = dir / "adapter_model.safetensors";
  if (!fs::is_regular_file(weights))
    throw UserError(dir.string() + " holds no adapter_model.safetensors");
  import_hf_tensors(be, store, HfWeightFiles(SafetensorsFile(weights)));
}

}  // namespace llmrun
