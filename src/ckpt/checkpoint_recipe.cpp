#include "ckpt/checkpoint_recipe.h"

#include <spdlog/spdlog.h>

#include "model/hf_config.h"
#include "util/error.h"

namespace llmrun {

using json = nlohmann::json;

json model_config_json(const ModelConfig& c) {
  json j = {{"arch", arch_name(c.arch)},
            {"layers", c.layers},
            {"d_model", c.d_model},
            {"heads", c.heads},
            {"kv_heads", c.kv_heads},
            {"ffn", c.ffn},
            {"vocab", c.vocab},
            {"seq_len", c.seq_len},
            {"rope_theta", c.rope_theta},
            {"norm_eps", c.norm_eps},
            {"tie_embeddings", c.tie_embeddings}};
  // Only where there is one, so checkpoints of unscaled models read as before.
  if (c.rope_scaling.type != RopeScaling::Type::none)
    j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.phi3) j["phi3"] = true;
  if (c.qk_norm) j["qk_norm"] = true;  // OLMoE
  if (c.moe.enabled()) {
    const MoeConfig& m = c.moe;
    j["moe"] = {{"experts", m.experts},
                {"top_k", m.top_k},
                {"expert_ffn", m.expert_ffn},
                {"shared_experts", m.shared_experts},
                {"shared_ffn", m.shared_ffn},
                {"norm_topk_prob", m.norm_topk_prob},
                {"aux_loss", m.aux_loss},
                {"z_loss", m.z_loss},
                {"capacity_factor", m.capacity_factor},
                {"every", m.every}};
  }
  return j;
}

namespace {

// model.moe of a checkpoint's recipe (written by model_config_json above).
MoeConfig moe_from_json(const json& j, const std::string& where) {
  auto need = [&](const char* key) -> const json& {
    if (!j.is_object() || !j.contains(key))
      throw UserError(where + ": model.moe." + key + " is missing");
    return j[key];
  };
  auto count = [&](const char* key, int64_t lo) {
    const json& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > INT32_MAX)
      throw UserError(where + ": model.moe." + key +
                      " must be an integer >= " + std::to_string(lo) + ", got " + v.dump());
    return int(v.get<int64_t>());
  };
  auto number = [&](const char* key) {
    const json& v = need(key);
    if (!v.is_number() || v.get<double>() < 0)
      throw UserError(where + ": model.moe." + key + " must be a number >= 0, got " + v.dump());
    return v.get<float>();
  };
  MoeConfig m;
  m.experts = count("experts", 1);
  m.top_k = count("top_k", 1);
  m.expert_ffn = count("expert_ffn", 1);
  m.shared_experts = count("shared_experts", 0);
  m.shared_ffn = count("shared_ffn", 0);
  if (!need("norm_topk_prob").is_boolean())
    throw UserError(where + ": model.moe.norm_topk_prob must be true or false");
  m.norm_topk_prob = j["norm_topk_prob"].get<bool>();
  m.aux_loss = number("aux_loss");
  m.z_loss = number("z_loss");
  m.capacity_factor = number("capacity_factor");
  m.every = count("every", 1);
  if (m.top_k > m.experts) throw UserError(where + ": model.moe.top_k exceeds experts");
  return m;
}

}  // namespace

ModelConfig model_config_from_json(const json& j, const std::string& where) {
  auto need = [&](const char* key) -> const json& {
    if (!j.is_object() || !j.contains(key))
      throw UserError(where + ": model." + key + " is missing");
    return j[key];
  };
  auto integer = [&](const char* key) {
    const json& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > INT32_MAX)
      throw UserError(where + ": model." + key + " must be a positive integer, got " + v.dump());
    return int(v.get<int64_t>());
  };
  auto number = [&](const char* key) {
    const json& v = need(key);
    if (!v.is_number())
      throw UserError(where + ": model." + key + " must be a number, got " + v.dump());
    return v.get<float>();
  };
  ModelConfig c;
  const json& arch = need("arch");
  if (arch == "gpt2")
    c.arch = Arch::gpt2;
  else if (arch == "llama")
    c.arch = Arch::llama;
  else
    throw UserError(where + ": model.arch " + arch.dump() + " is not gpt2 or llama");
  c.layers = integer("layers");
  c.d_model = integer("d_model");
  c.heads = integer("heads");
  c.kv_heads = integer("kv_heads");
  c.ffn = integer("ffn");
  c.vocab = integer("vocab");
  c.seq_len = integer("seq_len");
  c.rope_theta = number("rope_theta");
  c.norm_eps = number("norm_eps");
  if (j.contains("rope_scaling"))
    c.rope_scaling = rope_scaling_from_json(j["rope_scaling"], where + ": model");
  for (auto [key, flag] : {std::pair{"qkv_bias", &c.qkv_bias}, std::pair{"phi3", &c.phi3},
                           std::pair{"qk_norm", &c.qk_norm}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean()) throw UserError(where + ": model." + key + " must be true or false");
    *flag = j[key].get<bool>();
  }
  if (j.contains("moe")) c.moe = moe_from_json(j["moe"], where);
  const json& tie = need("tie_embeddings");
  if (!tie.is_boolean()) throw UserError(where + ": model.tie_embeddings must be true or false");
  c.tie_embeddings = tie.get<bool>();
  if (c.d_model % c.heads != 0 || c.heads % c.kv_heads != 0)
    throw UserError(where + ": model heads/kv_heads/d_model do not divide");
  return c;
}

json recipe_json(const Recipe& r) {
  json sources = json::array();
  for (const DataSource& s : r.data.train)
    sources.push_back({{"path", s.path}, {"weight", s.weight}});
  const TrainSection& t = r.train;
  return {
      {"model", model_config_json(r.model)},
      {"data", {{"tokenizer", r.data.tokenizer}, {"train", sources}}},
      {"train",
       {{"steps", t.steps},
        {"micro_batch", t.micro_batch},
        {"global_batch", t.global_batch},
        {"lr", t.lr},
        {"min_lr", t.min_lr},
        {"warmup", t.warmup},
        {"schedule", lr_decay_name(t.schedule)},
        {"weight_decay", t.weight_decay},
        {"betas", {t.beta1, t.beta2}},
        {"eps", t.eps},
        {"clip", t.clip},
        {"seed", t.seed}}},
      {"precision",
       {{"compute", r.precision.compute},
        {"fp8",
         {{"enabled", r.precision.fp8.enabled},
          {"format", fp8_scheme_name(r.precision.fp8.format)},
          {"amax_history", r.precision.fp8.amax_history},
          {"amax_compute", amax_compute_name(r.precision.fp8.amax_compute)},
          {"margin", r.precision.fp8.margin},
          {"skip", r.precision.fp8.skip}}}}},
      {"checkpoint",
       {{"dir", r.checkpoint.dir},
        {"every", r.checkpoint.every},
        {"keep", r.checkpoint.keep},
        {"resume", r.checkpoint.resume},
        {"async", r.checkpoint.async}}},
      {"logging", {{"every", r.logging.every}, {"metrics", r.logging.metrics}}},
  };
}

void check_resume_compatible(const json& saved_recipe, const Recipe& now,
                             const std::string& checkpoint) {
  const json saved = saved_recipe.flatten();
  const json current = recipe_json(now).flatten();
  std::string refused;
  for (const auto& [key, was] : saved.items()) {
    const json is = current.contains(key) ? current[key] : json();
    if (is == was || key == "/checkpoint/resume") continue;
    // Model shape and tokenizer decide what the tensors mean; the token ids of a new
    // tokenizer would index the wrong embedding rows.
    const bool fatal = key.rfind("/model/", 0) == 0 || key == "/data/tokenizer";
    std::string name = key.substr(1);
    for (char& c : name)
      if (c == '/') c = '.';
    const std::string line =
        name + " was " + was.dump() + " in the checkpoint, the recipe has " + is.dump();
    if (fatal)
      refused += (refused.empty() ? "" : "; ") + line;
    else
      spdlog::info("resuming with a changed recipe: {}", line);
  }
  if (!refused.empty())
    throw UserError(checkpoint +
                    ": cannot resume, the checkpoint was trained with another model: " + refused +
                    " (use checkpoint.resume: never, or another checkpoint.dir)");
}

}  // namespace llmrun
