#include "model/hf_config.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {

using json = nlohmann::json;

namespace {

// A float printed as the shortest decimal that reads back as it (1e-05, not
// 9.999999747378752e-06), so config.json holds the value the user wrote.
double decimal(float f) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, f);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Field access that turns every problem into "FILE: key \"k\" ..." for the user.
class HfReader {
 public:
  HfReader(const json& j, const std::string& path) : j_(j), path_(path) {}

  [[noreturn]] void fail(const std::string& what) const { throw UserError(path_ + ": " + what); }

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const std::string& where() const { return path_; }
  const json& object(const char* key) const {
    if (!j_[key].is_object())
      fail("key \"" + std::string(key) + "\" must be an object, got " + j_[key].dump());
    return j_[key];
  }

  int positive_int(const char* key) const {
    if (!has(key)) fail("missing key \"" + std::string(key) + "\"");
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > INT32_MAX)
      fail("key \"" + std::string(key) + "\" must be a positive integer, got " + v.dump());
    return static_cast<int>(v.get<int64_t>());
  }
  int positive_int(const char* key, int fallback) const {
    return has(key) ? positive_int(key) : fallback;
  }

  float positive_float(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number() || v.get<double>() <= 0)
      fail("key \"" + std::string(key) + "\" must be a positive number, got " + v.dump());
    return static_cast<float>(v.get<double>());
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail("key \"" + std::string(key) + "\" must be true or false");
    return j_[key].get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail("key \"" + std::string(key) + "\" must be a string");
    return j_[key].get<std::string>();
  }

  double j_number(const char* key) const {
    if (!j_[key].is_number()) fail("key \"" + std::string(key) + "\" must be a number");
    return j_[key].get<double>();
  }
  bool empty_list(const char* key) const {
    return !has(key) || (j_[key].is_array() && j_[key].empty());
  }

  // Keys whose non-default values change the math in ways llmrun does not implement.
  void require(bool ok, const char* key) const {
    if (!ok)
      fail("\"" + std::string(key) + "\": " + j_.value(key, json()).dump() +
           " is not supported by llmrun");
  }

 private:
  const json& j_;
  const std::string& path_;
};

ModelConfig gpt2_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.layers = r.positive_int("n_layer");
  c.d_model = r.positive_int("n_embd");
  c.heads = r.positive_int("n_head");
  c.kv_heads = c.heads;
  c.ffn = r.positive_int("n_inner", 4 * c.d_model);  // transformers: null means 4 * n_embd
  c.vocab = r.positive_int("vocab_size");
  c.seq_len = r.positive_int("n_positions", 1024);
  c.norm_eps = r.positive_float("layer_norm_epsilon", 1e-5f);
  c.tie_embeddings = true;
  r.require(r.boolean("tie_word_embeddings", true), "tie_word_embeddings");
  // gelu_pytorch_tanh is the same tanh approximation as gelu_new, computed faster.
  const std::string act = r.string("activation_function", "gelu_new");
  r.require(act == "gelu_new" || act == "gelu_pytorch_tanh", "activation_function");
  r.require(r.boolean("scale_attn_weights", true), "scale_attn_weights");
  r.require(!r.boolean("scale_attn_by_inverse_layer_idx", false),
            "scale_attn_by_inverse_layer_idx");
  return c;
}

ModelConfig llama_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = r.positive_int("num_hidden_layers");
  c.d_model = r.positive_int("hidden_size");
  c.heads = r.positive_int("num_attention_heads");
  c.kv_heads = r.positive_int("num_key_value_heads", c.heads);
  c.ffn = r.positive_int("intermediate_size");
  c.vocab = r.positive_int("vocab_size");
  c.seq_len = r.positive_int("max_position_embeddings", 2048);
  c.norm_eps = r.positive_float("rms_norm_eps", 1e-6f);
  c.rope_theta = r.positive_float("rope_theta", 10000.0f);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  r.require(r.string("hidden_act", "silu") == "silu", "hidden_act");
  r.require(!r.boolean("attention_bias", false), "attention_bias");
  r.require(!r.boolean("mlp_bias", false), "mlp_bias");
  // transformers >= 5 keeps theta and the scaling together in "rope_parameters".
  const char* rope_key = r.has("rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (r.has(rope_key)) {
    const json& rp = r.object(rope_key);
    c.rope_scaling = rope_scaling_from_json(rp, r.where());
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number())
      c.rope_theta = rp["rope_theta"].get<float>();
  }
  if (r.has("head_dim"))
    r.require(c.d_model % c.heads == 0 && r.positive_int("head_dim") == c.d_model / c.heads,
              "head_dim");
  if (c.heads % c.kv_heads != 0)
    r.fail("num_attention_heads " + std::to_string(c.heads) +
           " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
  return c;
}

// Mistral is Llama with sliding-window attention: each token sees the last sliding_window
// positions. Within a context no longer than the window that is full causal attention, so the
// model's context is capped at the window, where llmrun's attention is exact.
ModelConfig mistral_from_hf(const HfReader& r) {
  ModelConfig c = llama_from_hf(r);
  if (r.has("sliding_window")) c.seq_len = std::min(c.seq_len, r.positive_int("sliding_window"));
  return c;
}

// Qwen 2 is Llama with biases on the q/k/v projections. Its optional sliding window (on the
// layers from max_window_layers on) is, like Mistral's, exact below the window.
ModelConfig qwen2_from_hf(const HfReader& r) {
  ModelConfig c = llama_from_hf(r);
  c.qkv_bias = true;
  if (r.boolean("use_sliding_window", false) && r.has("sliding_window"))
    c.seq_len = std::min(c.seq_len, r.positive_int("sliding_window"));
  return c;
}

// Phi-3 (mini, medium) is Llama whose files fuse q|k|v and gate|up; its sliding window, like
// Mistral's, caps the context. A partial rotary dimension (Phi-4-mini) is refused by name.
ModelConfig phi3_from_hf(const HfReader& r) {
  ModelConfig c = llama_from_hf(r);
  c.phi3 = true;
  if (r.has("partial_rotary_factor"))
    r.require(r.positive_float("partial_rotary_factor", 1.0f) == 1.0f, "partial_rotary_factor");
  if (r.has("sliding_window")) c.seq_len = std::min(c.seq_len, r.positive_int("sliding_window"));
  return c;
}

// Mixtral is Mistral with every MLP a routed layer of SwiGLU experts (renormalised top-k).
ModelConfig mixtral_from_hf(const HfReader& r) {
  ModelConfig c = mistral_from_hf(r);
  MoeConfig& m = c.moe;
  m.experts = r.positive_int("num_local_experts");
  m.top_k = r.positive_int("num_experts_per_tok", 2);
  m.expert_ffn = c.ffn;
  m.norm_topk_prob = true;
  m.aux_loss =
      r.has("router_aux_loss_coef") ? r.positive_float("router_aux_loss_coef", 0.0f) : 0.001f;
  if (r.has("router_jitter_noise"))
    r.require(r.j_number("router_jitter_noise") == 0.0, "router_jitter_noise");
  if (m.top_k > m.experts) r.fail("num_experts_per_tok exceeds num_local_experts");
  return c;
}

// Qwen2-MoE is Qwen 2 whose every decoder_sparse_step-th MLP is a routed layer plus one shared
// expert behind a sigmoid gate.
ModelConfig qwen2_moe_from_hf(const HfReader& r) {
  ModelConfig c = qwen2_from_hf(r);
  MoeConfig& m = c.moe;
  m.experts = r.positive_int("num_experts");
  m.top_k = r.positive_int("num_experts_per_tok", 4);
  m.expert_ffn = r.positive_int("moe_intermediate_size");
  m.shared_experts = 1;
  m.shared_ffn = r.positive_int("shared_expert_intermediate_size");
  m.norm_topk_prob = r.boolean("norm_topk_prob", false);
  m.every = r.positive_int("decoder_sparse_step", 1);
  m.aux_loss =
      r.has("router_aux_loss_coef") ? r.positive_float("router_aux_loss_coef", 0.0f) : 0.001f;
  r.require(r.empty_list("mlp_only_layers"), "mlp_only_layers");
  if (m.top_k > m.experts) r.fail("num_experts_per_tok exceeds num_experts");
  return c;
}

// OLMoE is Llama (no biases) with q/k norms (ModelConfig::qk_norm) and every MLP a routed
// layer of SwiGLU experts named as Qwen2-MoE's, without a shared expert; the top-k is not
// renormalised unless norm_topk_prob says so.
ModelConfig olmoe_from_hf(const HfReader& r) {
  ModelConfig c = llama_from_hf(r);
  c.qk_norm = true;
  MoeConfig& m = c.moe;
  m.experts = r.positive_int("num_experts");
  m.top_k = r.positive_int("num_experts_per_tok", 8);
  m.expert_ffn = c.ffn;
  m.norm_topk_prob = r.boolean("norm_topk_prob", false);
  m.aux_loss =
      r.has("router_aux_loss_coef") ? r.positive_float("router_aux_loss_coef", 0.0f) : 0.01f;
  if (r.has("clip_qkv"))
    r.fail("\"clip_qkv\": " + std::to_string(r.j_number("clip_qkv")) +
           " is not supported by llmrun (it implements OLMoE without q/k/v clipping: null)");
  if (m.top_k > m.experts) r.fail("num_experts_per_tok exceeds num_experts");
  return c;
}

}  // namespace

json hf_config_json(const ModelConfig& c, int eos_token_id) {
  const json eos = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  if (c.arch == Arch::gpt2) {
    return {
        {"architectures", {"GPT2LMHeadModel"}},
        {"model_type", "gpt2"},
        {"n_layer", c.layers},
        {"n_embd", c.d_model},
        {"n_head", c.heads},
        {"n_inner", c.ffn},
        {"n_positions", c.seq_len},
        {"n_ctx", c.seq_len},
        {"vocab_size", c.vocab},
        {"layer_norm_epsilon", decimal(c.norm_eps)},
        {"activation_function", "gelu_new"},
        {"tie_word_embeddings", c.tie_embeddings},  // false: a GGUF's untied head
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},
        {"bos_token_id", eos},  // GPT-2 uses its end token as the start token too
        {"eos_token_id", eos},
        {"torch_dtype", "float32"},
    };
  }
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"num_hidden_layers", c.layers},
      {"hidden_size", c.d_model},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"intermediate_size", c.ffn},
      {"max_position_embeddings", c.seq_len},
      {"vocab_size", c.vocab},
      {"rms_norm_eps", decimal(c.norm_eps)},
      {"rope_theta", decimal(c.rope_theta)},
      {"rope_scaling", rope_scaling_json(c.rope_scaling)},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_embeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"bos_token_id", nullptr},  // byte-level vocabularies have no start token
      {"eos_token_id", eos},
      {"torch_dtype", "float32"},
  };
  if (c.phi3) {  // fused q|k|v and gate|up tensors
    j["architectures"] = {"Phi3ForCausalLM"};
    j["model_type"] = "phi3";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j["original_max_position_embeddings"] = c.seq_len;
    j["sliding_window"] = nullptr;
  }
  if (c.qkv_bias) {  // Qwen 2: Llama with q/k/v biases (and no attention_bias/mlp_bias keys)
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["model_type"] = "qwen2";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j["use_sliding_window"] = false;
  }
  const MoeConfig& m = c.moe;
  if (m.enabled() && c.qk_norm) {  // OLMoE (model.from an olmoe dir)
    j["architectures"] = {"OlmoeForCausalLM"};
    j["model_type"] = "olmoe";
    j["intermediate_size"] = m.expert_ffn;
    j["num_experts"] = m.experts;
    j["num_experts_per_tok"] = m.top_k;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["router_aux_loss_coef"] = decimal(m.aux_loss);
    j["output_router_logits"] = false;
    j["clip_qkv"] = nullptr;
    j.erase("mlp_bias");
  } else if (m.enabled() &&
             m.shared_width() == 0) {  // Mixtral (recipe validation: every 1, top-k renormalised)
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j["intermediate_size"] = m.expert_ffn;
    j["num_local_experts"] = m.experts;
    j["num_experts_per_tok"] = m.top_k;
    j["router_aux_loss_coef"] = decimal(m.aux_loss);
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
    j["sliding_window"] = nullptr;
  } else if (m.enabled()) {  // Qwen2-MoE (recipe validation: q/k/v biases)
    j["architectures"] = {"Qwen2MoeForCausalLM"};
    j["model_type"] = "qwen2_moe";
    j["num_experts"] = m.experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.expert_ffn;
    j["shared_expert_intermediate_size"] = m.shared_width();
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = m.every;
    j["mlp_only_layers"] = json::array();
    j["router_aux_loss_coef"] = decimal(m.aux_loss);
    j["output_router_logits"] = false;
  }
  return j;
}

json rope_scaling_json(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::none:
      return nullptr;
    case RopeScaling::Type::linear:
      return {{"rope_type", "linear"}, {"factor", decimal(s.factor)}};
    case RopeScaling::Type::llama3:
      return {{"rope_type", "llama3"},
              {"factor", decimal(s.factor)},
              {"low_freq_factor", decimal(s.low_freq_factor)},
              {"high_freq_factor", decimal(s.high_freq_factor)},
              {"original_max_position_embeddings", s.original_max_positions}};
  }
  return nullptr;
}

RopeScaling rope_scaling_from_json(const json& j, const std::string& where) {
  RopeScaling s;
  if (j.is_null()) return s;
  HfReader r(j, where);
  auto fail = [&](const std::string& what) { r.fail("rope_scaling: " + what); };
  // "rope_type" since transformers 4.45, "type" before.
  const std::string type =
      r.has("rope_type") ? r.string("rope_type", "") : r.string("type", "default");
  if (type == "default") return s;
  if (type != "linear" && type != "llama3")
    fail("type \"" + type + "\" is not supported (llmrun implements linear and llama3)");
  s.type = type == "linear" ? RopeScaling::Type::linear : RopeScaling::Type::llama3;
  if (!r.has("factor")) fail("missing key \"factor\"");
  s.factor = r.positive_float("factor", 1.0f);
  if (s.type == RopeScaling::Type::llama3) {
    for (const char* k :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!r.has(k)) fail("missing key \"" + std::string(k) + "\"");
    s.low_freq_factor = r.positive_float("low_freq_factor", 1.0f);
    s.high_freq_factor = r.positive_float("high_freq_factor", 4.0f);
    s.original_max_positions = r.positive_int("original_max_position_embeddings");
    if (!(s.high_freq_factor > s.low_freq_factor))
      fail("high_freq_factor must exceed low_freq_factor");
  }
  return s;
}

ModelConfig model_config_from_hf(const json& j, const std::string& source_path) {
  if (!j.is_object()) throw UserError(source_path + ": config.json is not a JSON object");
  HfReader r(j, source_path);
  const std::string type = r.string("model_type", "");
  ModelConfig c;
  if (type == "gpt2")
    c = gpt2_from_hf(r);
  else if (type == "llama")
    c = llama_from_hf(r);
  else if (type == "mistral")
    c = mistral_from_hf(r);
  else if (type == "qwen2")
    c = qwen2_from_hf(r);
  else if (type == "phi3")
    c = phi3_from_hf(r);
  else if (type == "mixtral")
    c = mixtral_from_hf(r);
  else if (type == "qwen2_moe")
    c = qwen2_moe_from_hf(r);
  else if (type == "olmoe")
    c = olmoe_from_hf(r);
  else if (type.empty())
    r.fail("missing key \"model_type\"");
  else
    r.fail("model_type \"" + type +
           "\" is not supported (llmrun reads gpt2, llama, mistral, qwen2, phi3, mixtral, "
           "qwen2_moe and olmoe)");
  if (c.d_model % c.heads != 0)
    r.fail("hidden size " + std::to_string(c.d_model) + " is not a multiple of the " +
           std::to_string(c.heads) + " attention heads");
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  std::filesystem::path path = dir;
  if (std::filesystem::is_directory(path)) path /= "config.json";
  return model_config_from_hf(read_json_file(path), path.string());
}

}  // namespace llmrun
