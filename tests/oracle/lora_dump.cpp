// Writes what the LoRA oracle (check_lora_against_torch.py) compares against: a tiny base
// model (Hugging Face dir), a PEFT adapter dir with random A and B (B nonzero, so every
// gradient is exercised), and llmrun's logits, loss, adapter gradients and adapters after two
// optimizer steps. Everything runs through the library code `llmrun train` uses for
// finetune: lora (Transformer + LoraAdapters + ZeroOptimizer + TrainStep, write_peft_adapter).
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "backend/backend_factory.h"
#include "ckpt/hf_weights.h"
#include "ckpt/model_dir.h"
#include "ckpt/peft_adapter.h"
#include "ckpt/safetensors.h"
#include "data/tokenizer.h"
#include "model/lora.h"
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
  } else {
    c.arch = Arch::llama;
    c.kv_heads = 2;  // grouped-query attention
    c.ffn = 88;
    c.tie_embeddings = false;
  }
  return c;
}

// Adds N(0, std) to every element of every tensor of `store`.
void perturb(Backend& be, BucketStore& store, uint64_t seed, float std, bool vectors_only) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, std);
  const auto& layout = store.layout();
  for (int b = 0; b < store.num_buckets(); ++b)
    for (int p = 0; p < int(layout[size_t(b)].params.size()); ++p) {
      if (vectors_only && layout[size_t(b)].params[size_t(p)].shape.size() != 1) continue;
      Tensor t = store.tensor(b, p);
      std::vector<float> host(size_t(t.numel()));
      be.copy(Tensor(host.data(), DType::f32, {t.numel()}), t.view({t.numel()}));
      for (float& v : host) v += noise(rng);
      be.copy(t.view({t.numel()}), Tensor(host.data(), DType::f32, {t.numel()}));
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s gpt2|llama[-bf16] OUT_DIR\n", argv[0]);
    return 2;
  }
  // ARCH-bf16: the frozen base is held in bf16 (finetune.base_dtype); the oracle rounds the
  // base weights to bf16 and must then agree as closely as with an fp32 base.
  std::string arch = argv[1];
  const bool bf16_base = arch.size() > 5 && arch.substr(arch.size() - 5) == "-bf16";
  if (bf16_base) arch.resize(arch.size() - 5);
  const std::filesystem::path out = argv[2];
  std::filesystem::create_directories(out);
  auto be = make_backend(BackendKind::cpu, 2);
  const ModelConfig cfg = tiny_config(arch);

  Transformer model(*be, cfg, StoreOptions{1, true, false});
  model.init_weights(1234);
  perturb(*be, model.params(), 99, 0.1f, true);  // norms and biases away from 1 and 0
  save_model_dir((out / "model").string(), model, ByteLevelTokenizer());

  LoraSection sec;
  sec.enabled = true;
  sec.rank = 4;
  sec.alpha = 8;
  sec.base_dtype = bf16_base ? "bf16" : "fp32";
  // GPT-2: every linear; Llama: a subset, so fused GEMMs have columns without an adapter.
  sec.targets = arch == "gpt2" ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
                               : std::vector<std::string>{"q_proj", "v_proj", "o_proj", "gate_proj",
                                                          "down_proj"};
  LoraAdapters lora(model, sec, StoreOptions{}, nullptr);
  if (bf16_base && (lora.frozen_base() == nullptr || model.params().resident_bytes() != 0)) {
    std::fprintf(stderr, "base_dtype bf16: the fp32 base is still held\n");
    return 1;
  }
  lora.init_weights(5);
  perturb(*be, lora.params(), 17, 0.05f, false);  // B != 0: A's gradients are not zero
  write_peft_adapter(out / "adapter", export_hf_tensors(*be, lora.params()), sec, cfg,
                     (out / "model").string());

  const int B = 4, T = cfg.seq_len;
  std::vector<int32_t> windows(size_t(B) * (T + 1)), inputs(size_t(B) * T), targets(size_t(B) * T);
  std::mt19937_64 rng(7);
  for (auto& t : windows) t = static_cast<int32_t>(rng() % cfg.vocab);
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < T; ++t) {
      inputs[size_t(i) * T + t] = windows[size_t(i) * (T + 1) + t];
      targets[size_t(i) * T + t] = windows[size_t(i) * (T + 1) + t + 1];
    }

  model.forward(inputs.data(), B, T);
  std::vector<float> logits(size_t(model.logits().numel()));
  be->copy(Tensor(logits.data(), DType::f32, {int64_t(logits.size())}),
           model.logits().view({int64_t(logits.size())}));
  auto single = make_self_communicator("dp");
  ZeroOptimizer opt(lora, *single, 0, {0.9f, 0.95f, 1e-8f, 0.1f});
  opt.begin_step(1);
  const float loss = float(model.backward(targets.data(), 1.0f / float(B * T)) / double(B * T));
  std::vector<HfTensor> grads = export_hf_tensors(*be, lora.grads());
  const double norm = opt.finish_gradients();

  // Two optimizer steps: two micro-batches of two sequences (accumulation), clipping that clips.
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
  std::vector<HfTensor> params = export_hf_tensors(*be, lora.params());

  SafetensorsWriter w;
  w.add("tokens", DType::i32, {B, T + 1}, windows.data());
  w.add("logits", DType::f32, {B, T, cfg.vocab}, logits.data());
  w.add("loss", DType::f32, {1}, &loss);
  for (auto& g : grads) g.name = "grad." + g.name;
  for (auto& p : params) p.name = "step2." + p.name;
  for (const auto* set : {&grads, &params})
    for (const HfTensor& t : *set) w.add(t.name, DType::f32, t.shape, t.data.data());
  char clip_text[32];
  std::snprintf(clip_text, sizeof clip_text, "%.9g", clip);
  w.set_metadata({{"lr", "0.01"},
                  {"beta1", "0.9"},
                  {"beta2", "0.95"},
                  {"eps", "1e-8"},
                  {"weight_decay", "0.1"},
                  {"clip", clip_text},
                  {"arch", arch_name(cfg.arch)},
                  {"base_dtype", sec.base_dtype}});
  w.write(out / "reference.safetensors");
  std::printf("wrote %s (loss %.6f, adapter grad norm %.6f)\n", out.c_str(), loss, norm);
  return 0;
}
