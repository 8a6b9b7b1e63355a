#include "model/lora_layout.h"

#include "util/error.h"

namespace llmrun {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// PEFT's rule: a target names a module when it is the whole path or its last components.
bool matches(const std::string& module, const std::string& target) {
  return module == target || ends_with(module, "." + target);
}

// Which of a block's GEMMs a base weight feeds, by its Hugging Face module name.
int site_of(const std::string& module) {
  for (const char* q : {"c_attn", "q_proj", "k_proj", "v_proj", "qkv_proj"})
    if (ends_with(module, std::string(".") + q)) return int(LinearKind::qkv);
  for (const char* o : {"attn.c_proj", "o_proj"})
    if (ends_with(module, std::string(".") + o)) return int(LinearKind::out);
  for (const char* u : {"c_fc", "gate_proj", "up_proj", "gate_up_proj"})
    if (ends_with(module, std::string(".") + u)) return int(LinearKind::up);
  for (const char* d : {"mlp.c_proj", "down_proj"})
    if (ends_with(module, std::string(".") + d)) return int(LinearKind::down);
  return -1;
}

std::string module_of(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string(".weight").size());
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

ParamSpec adapter_spec(std::string name, std::vector<int64_t> full, TensorShard shard,
                       ParamInit init) {
  ParamSpec p;
  p.hf_name = std::move(name);
  p.full_shape = full;
  p.shape = full;
  int64_t extent = 0;
  for (auto [lo, hi] : shard.ranges) extent += hi - lo;
  p.shape[size_t(shard.axis)] = extent;
  p.shard = std::move(shard);
  p.init = init;
  p.decay = true;
  return p;
}

}  // namespace

std::string peft_module_name(const std::string& base_weight_name) {
  return "base_model.model." + module_of(base_weight_name);
}

const LoraSite* LoraLayout::site(LinearSite s) const {
  if (s.kind == LinearKind::lm_head || s.layer < 0 || s.layer >= int(sites.size())) return nullptr;
  const LoraSite& site = sites[size_t(s.layer)][size_t(s.kind)];
  return site.empty() ? nullptr : &site;
}

LoraLayout lora_layout(const ModelConfig& cfg, const ModelShard& shard, const LoraSection& sec) {
  const std::vector<std::string> valid = lora_target_names(cfg);
  for (const std::string& t : sec.targets) {
    bool known = false;
    for (const std::string& v : valid) known |= matches(v, t) || matches(t, v);
    if (!known)
      throw UserError("finetune.targets: '" + t + "' is not a linear module of " +
                      std::string(arch_name(cfg.arch)) + " (expected one of: " + joined(valid) +
                      ")");
  }
  // The whole model's layout names every linear even on a pipeline stage that holds few.
  const std::vector<BucketLayout> base = model_layout(cfg, shard);
  const std::vector<BucketLayout> whole = model_layout(cfg, ModelShard{});
  LoraLayout out;
  out.sites.resize(size_t(cfg.layers));
  for (size_t b = 0; b < base.size(); ++b) {
    BucketLayout bucket;
    bucket.name = "lora." + base[b].name;
    const int layer = int(b) - 1;
    if (layer < 0 || layer >= cfg.layers || !shard.holds_layer(layer)) {
      out.buckets.push_back(std::move(bucket));
      continue;
    }
    // Per site: the base weights it fuses (in bucket order) and which of them are targets.
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<const ParamSpec*> fused, chosen;
      for (const ParamSpec& spec : base[b].params) {
        if (spec.shape.size() != 2) continue;
        const std::string module = module_of(spec.hf_name);
        if (site_of(module) != kind) continue;
        fused.push_back(&spec);
        for (const std::string& t : sec.targets)
          if (matches(module, t)) {
            chosen.push_back(&spec);
            break;
          }
      }
      if (chosen.empty()) continue;
      LoraSite& site = out.sites[size_t(layer)][size_t(kind)];
      const int64_t in_local = fused.front()->shape[1];
      for (const ParamSpec* f : fused) site.out_cols += f->shape[0];
      site.in_ranges = fused.front()->shard.axis == 1
                           ? fused.front()->shard.ranges
                           : std::vector<std::pair<int64_t, int64_t>>{{0, in_local}};
      const int tp = shard.tp;
      std::vector<ParamSpec> as, bs;
      for (const ParamSpec* spec : chosen) {
        const std::string module = peft_module_name(spec->hf_name);
        const int64_t out_full = spec->full_shape[0], in_full = spec->full_shape[1];
        TensorShard a_shard, b_shard;
        if (spec->shard.axis == 1) {  // row-parallel: A splits its input, B is whole
          a_shard = spec->shard;
          b_shard.axis = 0;
          b_shard.ranges = {{0, out_full}};
          b_shard.replicas = tp;
          b_shard.grad_partial = tp > 1;
        } else {  // column-parallel (or whole): B takes the base's rows, A is whole
          a_shard.axis = 0;
          a_shard.ranges = {{0, sec.rank}};
          a_shard.replicas = tp;
          a_shard.grad_partial = tp > 1;
          b_shard = spec->shard;
        }
        as.push_back(adapter_spec(module + ".lora_A.weight", {sec.rank, in_full}, a_shard,
                                  ParamInit::normal));
        bs.push_back(adapter_spec(module + ".lora_B.weight", {out_full, sec.rank}, b_shard,
                                  ParamInit::zeros));
        LoraTarget t;
        t.col_begin = (spec->offset - fused.front()->offset) / in_local;
        t.cols = spec->shape[0];
        site.targets.push_back(t);
      }
      for (size_t i = 0; i < as.size(); ++i) {
        site.targets[i].a = int(bucket.params.size());
        bucket.params.push_back(std::move(as[i]));
      }
      for (size_t i = 0; i < bs.size(); ++i) {
        site.targets[i].b = int(bucket.params.size());
        bucket.params.push_back(std::move(bs[i]));
      }
    }
    for (ParamSpec& p : bucket.params) {
      p.offset = bucket.numel;
      bucket.numel += p.numel();
    }
    out.buckets.push_back(std::move(bucket));
  }
  // A target that names a module of the architecture but none of this model (c_proj on a
  // model without it cannot happen; kept as a guard for qualified names).
  for (const std::string& t : sec.targets) {
    bool used = false;
    for (const BucketLayout& b : whole)
      for (const ParamSpec& spec : b.params)
        used |= spec.shape.size() == 2 && site_of(module_of(spec.hf_name)) >= 0 &&
                matches(module_of(spec.hf_name), t);
    if (!used)
      throw UserError("finetune.targets: '" + t +
                      "' names no linear of this model (expected one of: " + joined(valid) + ")");
  }
  return out;
}

}  // namespace llmrun
