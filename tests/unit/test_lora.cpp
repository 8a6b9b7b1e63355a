// LoRA pieces the oracle cannot reach: dropout (PyTorch draws its own masks), whose backward
// must regenerate the forward's mask, checked by finite differences, and whose masks a device
// backend must draw exactly as the CPU does; and the target checks of lora_layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/backend_factory.h"
#include "backend/cpu/emulated_device_backend.h"
#include "model/lora.h"
#include "tiny_model.h"
#include "util/error.h"

namespace llmrun {
namespace {

// One layer, adapters on q and v only (dropout masks come from the tokens, so the loss is
// smooth in A and B and finite differences are valid).
struct DropoutModel {
  std::unique_ptr<Backend> be;
  ModelConfig cfg = [] {
    ModelConfig c = test_models::tiny_config(Arch::llama, 32, 64, 64, 8);
    c.layers = 1;
    return c;
  }();
  Transformer model{*be, cfg, StoreOptions{1, true, false}};
  LoraSection sec;
  LoraAdapters lora;
  std::vector<int32_t> tokens, targets;

  static LoraSection section(double dropout) {
    LoraSection s;
    s.enabled = true;
    s.rank = 2;
    s.alpha = 4;
    s.dropout = dropout;
    s.targets = {"q_proj", "v_proj"};
    return s;
  }
  explicit DropoutModel(double dropout,
                        std::unique_ptr<Backend> backend = make_backend(BackendKind::cpu, 1))
      : be(std::move(backend)), sec(section(dropout)), lora(model, sec, StoreOptions{}, nullptr) {
    model.init_weights(3);
    lora.init_weights(4);
    std::mt19937 rng(5);
    for (int b = 0; b < lora.params().num_buckets(); ++b)
      for (int p = 0; p < int(lora.layout()[size_t(b)].params.size()); ++p) {
        const Tensor t = lora.params().tensor(b, p);
        std::vector<float> v(size_t(t.numel()));
        for (float& x : v) x = std::normal_distribution<float>(0.0f, 0.3f)(rng);
        be->copy(t, Tensor(v.data(), DType::f32, {t.numel()}));
      }
    for (int i = 0; i < 2 * 8; ++i) {
      tokens.push_back(int32_t(rng() % 64));
      targets.push_back(int32_t(rng() % 64));
    }
  }
  double loss() {
    model.forward(tokens.data(), 2, 8);
    return model.loss(targets.data());
  }
};

TEST(Lora, DropoutBackwardRegeneratesTheForwardMask) {
  DropoutModel m(0.5);
  const double with_dropout = m.loss();
  // Gradients: the optimizer's hooks give the adapter grads memory (ZeRO-0 owns them).
  for (int b = 0; b < m.lora.grads().num_buckets(); ++b) m.be->fill(m.lora.grads().bucket(b), 0);
  m.model.forward(m.tokens.data(), 2, 8);
  m.model.backward(m.targets.data(), 1.0f);
  int checked = 0;
  for (int p = 0; p < int(m.lora.layout()[1].params.size()); ++p) {
    float* w = m.lora.params().tensor(1, p).f32();
    const float* g = m.lora.grads().tensor(1, p).f32();
    for (int64_t i : {int64_t(0), int64_t(7)}) {
      const float h = 1e-2f, keep = w[i];
      w[i] = keep + h;
      const double up = m.loss();
      w[i] = keep - h;
      const double down = m.loss();
      w[i] = keep;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 2e-3 * std::max(1.0, std::abs(numeric)))
          << m.lora.layout()[1].params[size_t(p)].hf_name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);  // A and B of q and v
  // Deterministic, and dropout changes the result (the mask is not all ones).
  EXPECT_EQ(m.loss(), with_dropout);
  DropoutModel off(0.0);
  EXPECT_NE(off.loss(), with_dropout);
  // Switched off (validation), the adapters see x itself.
  m.lora.set_dropout_active(false);
  EXPECT_EQ(m.loss(), off.loss());
}

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  be.copy(Tensor(v.data(), DType::f32, {t.numel()}), t.view({t.numel()}));
  return v;
}

// A device backend (here the device-emulating one: CPU arithmetic over memory the host cannot
// read) draws the CPU's masks and applies them with the same fp32 products: loss and
// adapter gradients bit for bit, two micro-batches of different tokens included.
TEST(Lora, DropoutOnADeviceBackendIsTheCpus) {
  DropoutModel cpu(0.5), dev(0.5, make_emulated_device_backend(1));
  ASSERT_EQ(dev.be->device(), Device::cuda);
  for (int micro = 0; micro < 2; ++micro) {
    for (DropoutModel* m : {&cpu, &dev}) {
      if (micro == 1) std::rotate(m->tokens.begin(), m->tokens.begin() + 3, m->tokens.end());
      for (int b = 0; b < m->lora.grads().num_buckets(); ++b)
        m->be->fill(m->lora.grads().bucket(b), 0);
    }
    EXPECT_EQ(cpu.loss(), dev.loss());
    for (DropoutModel* m : {&cpu, &dev}) {
      m->model.forward(m->tokens.data(), 2, 8);
      m->model.backward(m->targets.data(), 1.0f);
    }
    for (int p = 0; p < int(cpu.lora.layout()[1].params.size()); ++p)
      EXPECT_EQ(host(*cpu.be, cpu.lora.grads().tensor(1, p)),
                host(*dev.be, dev.lora.grads().tensor(1, p)))
          << cpu.lora.layout()[1].params[size_t(p)].hf_name;
  }
  // The masks drop something on the device too.
  DropoutModel off(0.0, make_emulated_device_backend(1));
  EXPECT_NE(off.loss(), dev.loss());
}

TEST(Lora, UnknownTargetListsTheValidNames) {
  ModelConfig gpt2 = test_models::tiny_config(Arch::gpt2, 32, 64, 64, 8);
  LoraSection s;
  s.targets = {"q_proj"};
  try {
    lora_layout(gpt2, ModelShard{}, s);
    FAIL() << "q_proj accepted on GPT-2";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("c_attn, c_proj, c_fc"), std::string::npos) << e.what();
  }
  s.targets = {"attn.c_proj"};  // qualified: only the attention projection
  const LoraLayout l = lora_layout(gpt2, ModelShard{}, s);
  EXPECT_NE(l.site({0, LinearKind::out}), nullptr);
  EXPECT_EQ(l.site({0, LinearKind::down}), nullptr);
  EXPECT_EQ(l.buckets[1].params[0].hf_name,
            "base_model.model.transformer.h.0.attn.c_proj.lora_A.weight");
}

}  // namespace
}  // namespace llmrun
