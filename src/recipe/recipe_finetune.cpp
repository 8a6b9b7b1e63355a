// finetune: {method: lora, rank, alpha, dropout, targets, base_dtype, init_adapter}.
#include <algorithm>

#include "recipe/recipe_internal.h"

namespace llmrun::recipe_detail {

namespace {
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

void read_finetune(const MapReader& top, Locator& loc, const std::filesystem::path& base,
                   Recipe& r) {
  if (!top.has("finetune")) return;
  const MapReader f(
      top.node("finetune"), "finetune", loc,
      {"method", "rank", "alpha", "dropout", "targets", "base_dtype", "init_adapter"});
  LoraSection& l = r.finetune;
  const std::string method = f.string("method").value_or("");
  if (method != "lora")
    loc.fail("finetune.method",
             method.empty() ? "missing (required: lora)" : "'" + method + "' is not one of lora");
  l.enabled = true;
  l.rank = int(f.integer("rank", 1, 1 << 16).value_or(l.rank));
  l.alpha = f.number("alpha").value_or(l.alpha);
  if (!(l.alpha > 0)) loc.fail("finetune.alpha", "must be > 0");
  l.dropout = f.number("dropout").value_or(l.dropout);
  if (!(l.dropout >= 0 && l.dropout < 1)) loc.fail("finetune.dropout", "must be in [0, 1)");
  l.base_dtype = f.string("base_dtype").value_or(l.base_dtype);
  if (l.base_dtype != "fp32" && l.base_dtype != "bf16")
    loc.fail("finetune.base_dtype", "'" + l.base_dtype + "' is not one of fp32, bf16");
  const std::vector<std::string> valid = lora_target_names(r.model);
  if (!f.has("targets")) loc.fail("finetune.targets", "missing (required: " + joined(valid) + ")");
  const YAML::Node list = f.node("targets");
  if (!list.IsSequence() || list.size() == 0)
    loc.fail("finetune.targets",
             "expected a list of module names (" + joined(valid) + "), got " + show(list));
  l.targets.clear();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = "finetune.targets." + std::to_string(i);
    loc.note(key, list[i].Mark());
    const std::string name = read_string(list[i], key, loc);
    if (std::find(valid.begin(), valid.end(), name) == valid.end())
      loc.fail(key, "'" + name + "' is not a linear module of " + arch_name(r.model.arch) +
                        (r.model.phi3 ? " (Phi-3)" : "") + " (expected one of: " + joined(valid) +
                        ")");
    if (std::find(l.targets.begin(), l.targets.end(), name) != l.targets.end())
      loc.fail(key, "'" + name + "' is listed twice");
    l.targets.push_back(name);
  }
  if (f.has("init_adapter")) {
    std::filesystem::path p(*f.string("init_adapter"));
    if (p.is_relative())
      p = loc.override_for("finetune.init_adapter") ? std::filesystem::absolute(p) : base / p;
    l.init_adapter = p.lexically_normal().string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(
            std::filesystem::path(l.init_adapter) / "adapter_config.json", ec))
      loc.fail("finetune.init_adapter",
               l.init_adapter + " holds no adapter_config.json (expected a PEFT adapter dir)");
  }
  if (r.model_from.empty())
    loc.fail("finetune", "needs model.from (the Hugging Face model whose weights LoRA adapts)");
  if (r.model.moe.experts > 0)
    loc.fail("finetune", "LoRA adapts dense models only (this model has " +
                             std::to_string(r.model.moe.experts) + " experts per MoE layer)");
  if (r.precision.fp8.enabled)
    loc.fail("finetune", "LoRA runs its linears in fp32 or bf16: set precision.fp8.enabled: false");
}

}  // namespace llmrun::recipe_detail
