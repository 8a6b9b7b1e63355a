#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/transformer.h"
#include "test_backend.h"
#include "tiny_model.h"

using namespace llmrun;

namespace {

ModelConfig small(Arch arch) { return test_models::tiny_config(arch, 32, 64, 50, 24); }

}  // namespace

// Generation with the KV cache (prefill, then one token at a time) must give the logits of
// the full training forward at every position.
TEST(Transformer, CachedGenerationMatchesFullForward) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    auto be = test::make_test_backend(2);
    const ModelConfig cfg = small(arch);
    Transformer model(*be, cfg);
    model.init_weights(5);
    std::vector<int32_t> tokens(cfg.seq_len);
    std::mt19937 rng(1);
    for (auto& t : tokens) t = int32_t(rng() % cfg.vocab);

    model.forward(tokens.data(), 1, cfg.seq_len);
    std::vector<float> full(size_t(model.logits().numel())), host(size_t(cfg.vocab));
    be->copy(Tensor(full.data(), DType::f32, {model.logits().numel()}),
             model.logits().view({model.logits().numel()}));

    KvCache cache = model.make_cache(cfg.seq_len);
    Buffer out = be->allocate(size_t(cfg.vocab) * 4);
    Tensor last = out.as(DType::f32, {cfg.vocab});
    const int prefill = 7;
    model.forward_cached(tokens.data(), prefill, cache, last);
    for (int pos = prefill - 1; pos < cfg.seq_len; ++pos) {
      if (pos >= prefill) model.forward_cached(&tokens[pos], 1, cache, last);
      double err = 0, ref = 0;
      be->copy(Tensor(host.data(), DType::f32, {cfg.vocab}), last);
      for (int v = 0; v < cfg.vocab; ++v) {
        err = std::max(err, double(std::fabs(host[size_t(v)] - full[size_t(pos) * cfg.vocab + v])));
        ref = std::max(ref, double(std::fabs(full[size_t(pos) * cfg.vocab + v])));
      }
      EXPECT_LT(err, 1e-5 * std::max(1.0, ref)) << arch_name(arch) << " position " << pos;
    }
    EXPECT_EQ(cache.length, cfg.seq_len);
  }
}
