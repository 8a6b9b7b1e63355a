#include <gtest/gtest.h>

#include "model/hf_config.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using json = nlohmann::json;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

static void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
}

static void expect_user_error(const json& j, const std::string& needle) {
  try {
    model_config_from_hf(j, "m/config.json");
    ADD_FAILURE() << "expected UserError containing " << needle;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("m/config.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

static ModelConfig gpt2_config() {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.layers = 3;
  c.d_model = 96;
  c.heads = 6;
  c.kv_heads = 6;
  c.ffn = 384;
  c.vocab = 256;
  c.seq_len = 128;
  c.norm_eps = 1e-5f;
  c.tie_embeddings = true;
  return c;
}

static ModelConfig llama_config() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 4;
  c.d_model = 128;
  c.heads = 8;
  c.kv_heads = 2;
  c.ffn = 352;
  c.vocab = 256;
  c.seq_len = 512;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-6f;
  c.tie_embeddings = false;
  return c;
}

TEST(HfConfig, Gpt2RoundTrip) {
  const ModelConfig c = gpt2_config();
  const json j = hf_config_json(c);
  EXPECT_EQ(j["architectures"], json({"GPT2LMHeadModel"}));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["n_inner"], 384);
  EXPECT_EQ(j["n_ctx"], 128);
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["layer_norm_epsilon"].get<double>(), 1e-5);  // the decimal, not the float
  EXPECT_TRUE(j["eos_token_id"].is_null());
  EXPECT_EQ(hf_config_json(c, 7)["eos_token_id"], 7);
  expect_same(model_config_from_hf(j, "x"), c);
}

TEST(HfConfig, LlamaRoundTrip) {
  const ModelConfig c = llama_config();
  const json j = hf_config_json(c);
  EXPECT_EQ(j["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["tie_word_embeddings"], false);
  expect_same(model_config_from_hf(j, "x"), c);

  TempDir tmp;
  write_text(tmp / "config.json", j.dump(2));
  expect_same(load_model_config(tmp.path()), c);
  expect_same(load_model_config(tmp / "config.json"), c);
}

TEST(HfConfig, DefaultsFollowTransformers) {
  json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2},      {"n_embd", 64},
               {"n_head", 4},          {"vocab_size", 256}, {"n_inner", nullptr}};
  ModelConfig c = model_config_from_hf(gpt2, "x");
  EXPECT_EQ(c.ffn, 256);  // null n_inner means 4 * n_embd
  EXPECT_EQ(c.seq_len, 1024);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_TRUE(c.tie_embeddings);

  json llama = {{"model_type", "llama"},    {"num_hidden_layers", 2},   {"hidden_size", 64},
                {"num_attention_heads", 4}, {"intermediate_size", 172}, {"vocab_size", 256}};
  c = model_config_from_hf(llama, "x");
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.seq_len, 2048);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tie_embeddings);
}

// Llama 3.1's rope_scaling (and transformers 5's rope_parameters) reads and writes back.
TEST(HfConfig, RopeScalingRoundTrip) {
  json j = hf_config_json(llama_config());
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const ModelConfig c = model_config_from_hf(j, "x");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 8192);
  EXPECT_EQ(hf_config_json(c)["rope_scaling"], j["rope_scaling"]);
  EXPECT_TRUE(hf_config_json(llama_config())["rope_scaling"].is_null());
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 500000.0}};
  const ModelConfig l = model_config_from_hf(j, "x");
  EXPECT_EQ(l.rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_EQ(l.rope_theta, 500000.0f);
  // The frequencies: linear divides all; llama3 keeps the high ones and divides the low ones.
  const auto base = rope_inv_freq(10000.0f, 8, {});
  const auto lin = rope_inv_freq(10000.0f, 8, l.rope_scaling);
  const auto l3 = rope_inv_freq(10000.0f, 8, {RopeScaling::Type::llama3, 8.0f, 1.0f, 8.0f, 256});
  for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(lin[i], base[i] / 2.0f);
  EXPECT_EQ(l3[0], base[0]);
  EXPECT_GT(l3[1], base[1] / 8.0f);
  EXPECT_LT(l3[1], base[1]);
  EXPECT_EQ(l3[3], base[3] / 8.0f);
}

// Qwen 2 reads as Llama with q/k/v biases and exports back as qwen2.
TEST(HfConfig, Qwen2IsLlamaWithQkvBiases) {
  ModelConfig c = llama_config();
  c.qkv_bias = true;
  json j = hf_config_json(c);
  EXPECT_EQ(j["model_type"], "qwen2");
  EXPECT_FALSE(j.contains("attention_bias"));
  const ModelConfig back = model_config_from_hf(j, "x");
  EXPECT_TRUE(back.qkv_bias);
  EXPECT_EQ(back.param_count(), c.param_count());
  EXPECT_EQ(c.param_count() - llama_config().param_count(),
            int64_t(c.layers) * (c.heads + 2 * c.kv_heads) * c.head_dim());
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  EXPECT_EQ(model_config_from_hf(j, "x").seq_len, std::min(16, c.seq_len));
  EXPECT_FALSE(model_config_from_hf(hf_config_json(llama_config()), "x").qkv_bias);
}

// Phi-3 reads as Llama with fused tensor names, its context capped at the window.
TEST(HfConfig, Phi3IsLlamaWithFusedTensors) {
  ModelConfig c = llama_config();
  c.phi3 = true;
  json j = hf_config_json(c);
  EXPECT_EQ(j["model_type"], "phi3");
  EXPECT_TRUE(model_config_from_hf(j, "x").phi3);
  j["sliding_window"] = 16;
  EXPECT_EQ(model_config_from_hf(j, "x").seq_len, std::min(16, c.seq_len));
  j["partial_rotary_factor"] = 0.75;
  expect_user_error(j, "\"partial_rotary_factor\": 0.75 is not supported");
}

// Mistral reads as Llama with its context capped at the attention window (null: no window).
TEST(HfConfig, MistralIsLlamaWithinItsWindow) {
  json j = hf_config_json(llama_config());
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  ModelConfig c = model_config_from_hf(j, "x");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.seq_len, 4096);
  EXPECT_EQ(c.kv_heads, llama_config().kv_heads);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(model_config_from_hf(j, "x").seq_len, 32768);
  j["sliding_window"] = 0;
  expect_user_error(j, "sliding_window");
}

TEST(HfConfig, Errors) {
  json j = hf_config_json(gpt2_config());
  j.erase("n_head");
  expect_user_error(j, "missing key \"n_head\"");

  j = hf_config_json(llama_config());
  j.erase("intermediate_size");
  expect_user_error(j, "missing key \"intermediate_size\"");

  j = hf_config_json(llama_config());
  j["hidden_size"] = "128";
  expect_user_error(j, "key \"hidden_size\" must be a positive integer");

  j = hf_config_json(llama_config());
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_user_error(j, "rope_scaling: type \"yarn\" is not supported");

  j = hf_config_json(llama_config());
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_user_error(j, "rope_scaling: missing key \"low_freq_factor\"");

  j = hf_config_json(llama_config());
  j["num_key_value_heads"] = 3;
  expect_user_error(j, "not a multiple of num_key_value_heads 3");

  j = hf_config_json(gpt2_config());
  j["activation_function"] = "relu";
  expect_user_error(j, "\"activation_function\": \"relu\" is not supported");

  j = hf_config_json(gpt2_config());
  j["model_type"] = "deepseek_v2";
  expect_user_error(j, "model_type \"deepseek_v2\" is not supported");

  j.erase("model_type");
  expect_user_error(j, "missing key \"model_type\"");

  TempDir tmp;
  EXPECT_THROW(load_model_config(tmp.path()), UserError);  // no config.json
}
