// model.moe: the mixture-of-experts section of a recipe (src/model/moe_config.h), with the
// checks that keep a model exportable as Mixtral (no shared experts) or Qwen2-MoE (shared
// expert with its sigmoid gate).
#include <algorithm>

#include "recipe/recipe_internal.h"

namespace llmrun::recipe_detail {

namespace {

constexpr int64_t kMaxExperts = 1 << 12;
constexpr int64_t kMaxWidth = int64_t(1) << 24;

// The keys that only shape training (not the weights): the only ones model.from allows.
void read_training_keys(const MapReader& m, const Locator& loc, MoeConfig& x) {
  if (m.has("aux_loss")) x.aux_loss = float(*m.number("aux_loss"));
  if (m.has("z_loss")) x.z_loss = float(*m.number("z_loss"));
  if (x.aux_loss < 0) loc.fail(m.key("aux_loss"), "must be >= 0");
  if (x.z_loss < 0) loc.fail(m.key("z_loss"), "must be >= 0");
  x.capacity_factor = 0;  // null or absent: dropless
  if (m.has("capacity_factor") && !m.node("capacity_factor").IsNull()) {
    const double cf = *m.number("capacity_factor");
    if (!(cf > 0)) loc.fail(m.key("capacity_factor"), "must be > 0, or null for dropless routing");
    x.capacity_factor = float(cf);
  }
}

}  // namespace

void read_moe(const MapReader& model, Locator& loc, ModelConfig& c, bool from_hf) {
  if (!model.has("moe") || model.node("moe").IsNull()) return;
  const MapReader m(model.node("moe"), "model.moe", loc,
                    {"experts", "top_k", "expert_ffn", "shared_experts", "shared_ffn", "router",
                     "norm_topk_prob", "aux_loss", "z_loss", "capacity_factor", "every"});
  MoeConfig& x = c.moe;
  if (from_hf) {
    if (!x.enabled())
      loc.fail("model.moe", "model.from names a dense model; only MoE dirs take model.moe");
    for (const char* k : {"experts", "top_k", "expert_ffn", "shared_experts", "shared_ffn",
                          "norm_topk_prob", "every"})
      if (m.has(k))
        loc.fail(m.key(k),
                 "comes from config.json (model.from); only aux_loss, z_loss and "
                 "capacity_factor can be set");
    read_training_keys(m, loc, x);
    return;
  }
  if (c.arch != Arch::llama) loc.fail("model.moe", "mixture of experts needs model.arch llama");
  if (!m.has("experts")) loc.fail(m.key("experts"), "missing (required)");
  x.experts = int(*m.integer("experts", 1, kMaxExperts));
  x.top_k = int(m.integer("top_k", 1, x.experts).value_or(std::min(2, x.experts)));
  x.expert_ffn = int(m.integer("expert_ffn", 1, kMaxWidth).value_or(c.ffn));
  x.shared_experts = int(m.integer("shared_experts", 0, 64).value_or(0));
  x.shared_ffn = int(m.integer("shared_ffn", 0, kMaxWidth).value_or(0));
  if (x.shared_experts > 0 && x.shared_ffn == 0) x.shared_ffn = x.expert_ffn;
  const std::string router = m.string("router").value_or("softmax_topk");
  if (router != "softmax_topk")
    loc.fail(m.key("router"), "expected softmax_topk, got '" + router + "'");
  x.norm_topk_prob = m.boolean("norm_topk_prob").value_or(true);
  x.every = int(m.integer("every", 1, c.layers).value_or(1));
  read_training_keys(m, loc, x);
  if (x.shared_width() == 0) {
    // The Hugging Face format without shared experts is Mixtral's: every layer routed, top-k
    // renormalised, no q/k/v biases.
    if (x.shared_ffn > 0) loc.fail(m.key("shared_ffn"), "needs shared_experts > 0");
    if (x.every != 1)
      loc.fail(m.key("every"), "must be 1 without shared experts (Mixtral routes every layer)");
    if (!x.norm_topk_prob)
      loc.fail(m.key("norm_topk_prob"),
               "must be true without shared experts (Mixtral renormalises the top-k)");
    if (c.qkv_bias)
      loc.fail("model.qkv_bias", "Mixtral-style MoE (no shared experts) has no q/k/v biases");
  } else if (!c.qkv_bias) {
    loc.fail("model.moe.shared_experts",
             "shared experts are the Qwen2-MoE format, which has q/k/v biases: set "
             "model.qkv_bias: true");
  }
}

}  // namespace llmrun::recipe_detail
