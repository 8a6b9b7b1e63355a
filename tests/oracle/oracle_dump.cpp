// Writes what the PyTorch oracle (check_against_torch.py) compares against: a tiny model's
// initial weights as a Hugging Face model dir, and llmrun's logits, loss, gradients and the
// parameters after two optimizer steps, all under Hugging Face names. Everything goes
// through the library code that `llmrun train` uses (Transformer, TrainStep, model export).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "backend/backend_factory.h"
#include "ckpt/hf_weights.h"
#include "ckpt/model_dir.h"
#include "ckpt/safetensors.h"
#include "data/tokenizer.h"
#include "train/train_step.h"

using namespace llmrun;

namespace {

ModelConfig tiny_config(const std::string& arch) {
  ModelConfig c;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.vocab = 256;
  c.seq_len = 16;
  if (arch == "gpt2") {
    c.arch = Arch::gpt2;
    c.kv_heads = 4;
    c.ffn = 128;
    c.tie_embeddings = true;
  } else {
    c.arch = Arch::llama;
    c.kv_heads = 2;  // grouped-query attention
    c.ffn = 88;
    c.tie_embeddings = arch == "llama-tied";
    c.rope_theta = 10000.0f;
    c.qkv_bias = arch == "qwen2";  // Llama with q/k/v biases (jittered below, so they matter)
    c.phi3 = arch == "phi3";       // Llama with fused qkv_proj / gate_up_proj tensors
    if (arch == "mixtral") {       // every MLP routed: 4 experts, top-2, renormalised
      c.moe = MoeConfig{4, 2, 24, 0, 0, true, 0.01f, 0.001f, 0.0f, 1};
    }
    if (arch == "qwen2-moe") {  // layer 1 routed (every 2), a gated shared expert, capacity 1
      c.qkv_bias = true;
      c.moe = MoeConfig{4, 2, 24, 1, 40, false, 0.02f, 0.002f, 1.0f, 2};
    }
    if (arch == "olmoe") {  // q/k norms, every MLP routed, the top-k not renormalised
      c.qk_norm = true;
      c.moe = MoeConfig{4, 2, 24, 0, 0, false, 0.01f, 0.001f, 0.0f, 1};
    }
    if (arch == "llama-rope-llama3") {
      // Llama 3.1's scheme with a context of 256 so that the 4 frequencies fall in every
      // band: kept (wavelength < 32), blended (62.8) and divided by the factor (> 256).
      c.rope_scaling = {RopeScaling::Type::llama3, 8.0f, 1.0f, 8.0f, 256};
    }
  }
  return c;
}

// Norm weights and biases start at 1 and 0; jitter them so the check sees them used.
// Routers start at N(0, 0.02), nearly uniform: sharpen them so that top-k choices are clear
// (no near-ties that float rounding could flip between llmrun and PyTorch).
void sharpen_routers(Backend& be, Transformer& m) {
  const auto& layout = m.layout();
  for (int b = 0; b < m.params().num_buckets(); ++b)
    for (int p = 0; p < static_cast<int>(layout[b].params.size()); ++p) {
      const std::string& name = layout[b].params[p].hf_name;
      if (name.size() < 12 || name.compare(name.size() - 12, 12, ".gate.weight") != 0) continue;
      be.scale(m.params().tensor(b, p), 50.0f);
    }
}

void jitter_vectors(Backend& be, Transformer& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  const auto& layout = m.layout();
  for (int b = 0; b < m.params().num_buckets(); ++b)
    for (int p = 0; p < static_cast<int>(layout[b].params.size()); ++p) {
      if (layout[b].params[p].shape.size() != 1) continue;
      Tensor t = m.params().tensor(b, p);
      std::vector<float> host(size_t(t.numel()));
      be.copy(Tensor(host.data(), DType::f32, {t.numel()}), t);
      for (float& v : host) v += noise(rng);
      be.copy(t, Tensor(host.data(), DType::f32, {t.numel()}));
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(
        stderr,
        "usage: %s gpt2|llama|llama-tied|llama-rope-llama3|qwen2|phi3|mixtral|qwen2-moe|olmoe "
        "OUT_DIR\n",
        argv[0]);
    return 2;
  }
  const std::string arch = argv[1];
  const std::filesystem::path out = argv[2];
  std::filesystem::create_directories(out);

  auto be = make_backend(BackendKind::cpu, 2);
  const ModelConfig cfg = tiny_config(arch);
  Transformer model(*be, cfg);
  model.init_weights(1234);
  jitter_vectors(*be, model, 99);
  sharpen_routers(*be, model);
  save_model_dir((out / "model").string(), model, ByteLevelTokenizer());

  const int B = 4, T = cfg.seq_len;
  std::vector<int32_t> windows(size_t(B) * (T + 1)), inputs(size_t(B) * T), targets(size_t(B) * T);
  std::mt19937_64 rng(7);
  for (auto& t : windows) t = static_cast<int32_t>(rng() % cfg.vocab);
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < T; ++t) {
      inputs[size_t(i) * T + t] = windows[size_t(i) * (T + 1) + t];
      targets[size_t(i) * T + t] = windows[size_t(i) * (T + 1) + t + 1];
    }

  // Forward and backward of the whole batch.
  model.take_moe_stats();
  model.forward(inputs.data(), B, T);
  const MoeStats router = model.take_moe_stats();
  std::vector<float> logits(size_t(model.logits().numel()));
  be->copy(Tensor(logits.data(), DType::f32, {int64_t(logits.size())}),
           model.logits().view({int64_t(logits.size())}));
  auto single = make_self_communicator("dp");
  ZeroOptimizer opt(model, *single, 0, {0.9f, 0.95f, 1e-8f, 0.1f});
  opt.begin_step(1);
  // The training loss: mean cross-entropy plus the router losses of an MoE model.
  const float loss = float(model.backward(targets.data(), 1.0f / float(B * T)) / double(B * T) +
                           router.aux + router.z);
  std::vector<HfTensor> grads = export_hf_tensors(*be, model.grads());
  const double norm = opt.finish_gradients();

  // Two optimizer steps through the training step, with two micro-batches of two
  // sequences each (gradient accumulation) and clipping that really clips.
  const float lr = 1e-2f, clip = float(0.5 * norm);
  TrainStep step(model, opt, *single, LrSchedule{lr, lr, 0, 2, LrDecay::constant},
                 StepShape{2, T, 2, clip});
  int micro = 0;
  auto source = [&](int32_t* dst) {
    std::copy_n(windows.begin() + (micro % 2) * 2 * (T + 1), 2 * (T + 1), dst);
    ++micro;
  };
  step.run(source);
  step.run(source);
  std::vector<HfTensor> params = export_hf_tensors(*be, model.params());

  SafetensorsWriter w;
  w.add("tokens", DType::i32, {B, T + 1}, windows.data());
  w.add("logits", DType::f32, {B, T, cfg.vocab}, logits.data());
  w.add("loss", DType::f32, {1}, &loss);
  for (auto& g : grads) g.name = "grad." + g.name;
  for (auto& p : params) p.name = "step2." + p.name;
  for (const auto* set : {&grads, &params})
    for (const HfTensor& t : *set) w.add(t.name, DType::f32, t.shape, t.data.data());
  auto exact = [](float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  std::map<std::string, std::string> meta{{"lr", exact(lr)},
                                          {"beta1", "0.9"},
                                          {"beta2", "0.95"},
                                          {"eps", "1e-8"},
                                          {"weight_decay", "0.1"},
                                          {"clip", exact(clip)},
                                          {"arch", arch_name(cfg.arch)}};
  if (cfg.moe.enabled()) {
    meta["moe_aux_loss"] = exact(cfg.moe.aux_loss);
    meta["moe_z_loss"] = exact(cfg.moe.z_loss);
    meta["moe_capacity_factor"] = exact(cfg.moe.capacity_factor);
    std::printf("router: aux %.6f z %.6f dropped %lld of %lld slots, load share %.3f..%.3f\n",
                router.aux, router.z, static_cast<long long>(router.dropped),
                static_cast<long long>(router.slots), router.min_share, router.max_share);
  }
  w.set_metadata(meta);
  w.write(out / "reference.safetensors");
  std::printf("wrote %s (loss %.6f, grad norm %.6f, clip %.6f)\n", out.c_str(), loss, norm, clip);
  return 0;
}
