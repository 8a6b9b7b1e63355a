// The serving engine on quantized weights: continuous batching (1 to 24 requests), a KV pool
// small enough to preempt, prefix reuse and chunked prefill must give, token for token, what
// single-sequence generation gives on the same quantized model: the quantized GEMM (blocked
// for batches) keeps batch invariance, so there is no separate deterministic mode to test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "backend/backend_factory.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "quant/quantized_linear.h"
#include "serve/engine.h"
#include "tiny_model.h"

namespace llmrun {
namespace {

using quant::QType;

// A tiny model whose linears (and head) run quantized from its own fp32 weights, scaled up so
// greedy choices have wide margins.
struct QuantModel {
  std::unique_ptr<Backend> be = make_backend(BackendKind::cpu, 2);
  std::unique_ptr<Transformer> model;
  quant::QuantizedLinear runner;
  std::vector<std::vector<uint8_t>> blocks;

  QuantModel(Arch arch, QType t, int d) {
    model = std::make_unique<Transformer>(*be, test_models::tiny_config(arch, d, d, 256, 128));
    model->init_weights(5);
    for (int b = 0; b < model->params().num_buckets(); ++b)
      be->scale(model->params().bucket(b), 6.0f);
    const ModelConfig& c = model->config();
    auto add = [&](LinearSite site, const Tensor& w) {
      const int64_t rows = w.rows(), cols = w.cols();
      blocks.emplace_back(quant::row_bytes(t, cols) * size_t(rows));
      for (int64_t r = 0; r < rows; ++r)
        quant::quantize_row(t, w.f32() + r * cols,
                            blocks.back().data() + size_t(r) * quant::row_bytes(t, cols), cols);
      runner.set(site, {{t, rows, cols, blocks.back().data()}});
    };
    for (int l = 0; l < c.layers; ++l) {
      const BlockTensors w = block_tensors(c, model->params(), l);
      add({l, LinearKind::qkv}, w.qkv_w);
      add({l, LinearKind::out}, w.out_w);
      add({l, LinearKind::up}, w.up_w);
      add({l, LinearKind::down}, w.down_w);
    }
    add({c.layers, LinearKind::lm_head}, head_tensors(c, model->params()).head);
    // The fp32 weights are now wrong: a path that still read them would not match.
    for (int l = 0; l < c.layers; ++l) be->scale(block_tensors(c, model->params(), l).qkv_w, 0.5f);
    model->set_inference_linear(&runner);
  }
};

std::vector<int32_t> alone(Transformer& m, const std::vector<int32_t>& prompt, int max_tokens) {
  const int vocab = m.config().vocab;
  KvCache cache = m.make_cache(int(prompt.size()) + max_tokens);
  std::vector<float> logits(size_t(vocab), 0.0f);
  const Tensor t(logits.data(), DType::f32, {vocab});
  std::vector<int32_t> out;
  m.forward_cached(prompt.data(), int(prompt.size()), cache, t);
  for (int i = 0; i < max_tokens; ++i) {
    out.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < max_tokens) m.forward_cached(&out.back(), 1, cache, t);
  }
  return out;
}

void run(Arch arch, QType t, int d, int requests, int pool_blocks, int max_batched) {
  QuantModel q(arch, t, d);
  ByteLevelTokenizer tok;
  std::mt19937 rng(static_cast<uint32_t>(requests));
  std::vector<std::vector<int32_t>> prompts, want;
  std::vector<int> max_tokens;
  for (int i = 0; i < requests; ++i) {
    std::string text = (i % 2 ? "A shared head, then " : "") + std::to_string(i * 37 % 101);
    for (int k = 0, extra = int(rng() % 20); k < extra; ++k) text += char('a' + rng() % 26);
    prompts.push_back(tok.encode(text));
    max_tokens.push_back(4 + int(rng() % 16));
    want.push_back(alone(*q.model, prompts.back(), max_tokens.back()));
  }
  EngineConfig ec;
  ec.max_num_seqs = 64;
  ec.max_batched_tokens = max_batched;
  ec.block_size = 4;
  ec.num_blocks = pool_blocks;
  ec.max_model_len = 96;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(requests));
  int done = 0;
  EngineStats st;
  {
    Engine engine(*q.model, tok, ec);
    std::vector<Engine::Submission> batch;  // one step: the small pool preempts for sure
    for (int i = 0; i < requests; ++i) {
      GenerationParams gp;
      gp.sampling = SamplingParams{0.0f, 0, 1.0f, 0};
      gp.seeded = true;
      gp.max_tokens = max_tokens[size_t(i)];
      batch.push_back({prompts[size_t(i)], gp, [&, i](SequenceEvent&& ev) {
                         std::lock_guard<std::mutex> lock(mu);
                         auto& g = got[size_t(i)];
                         g.insert(g.end(), ev.token_ids.begin(), ev.token_ids.end());
                         if (ev.finished) {
                           ++done;
                           cv.notify_all();
                         }
                       }});
    }
    engine.submit(std::move(batch));
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == requests; }));
    st = engine.stats();
  }
  if (pool_blocks < 40) {
    EXPECT_GT(st.preemptions, 0) << "the pool was meant to force preemption";
  }
  for (int i = 0; i < requests; ++i)
    EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << quant::type_name(t) << " request " << i;
}

TEST(QuantEngine, BatchedEqualsAlone) {
  run(Arch::llama, QType::q8_0, 64, 24, 1024, 64);
  run(Arch::gpt2, QType::q4_0, 64, 8, 1024, 64);
  run(Arch::llama, QType::q4_k, 256, 8, 1024, 64);
}

TEST(QuantEngine, PreemptionAndChunkedPrefill) {
  run(Arch::llama, QType::q6_k, 256, 12, 24, 64);  // 24 blocks of 4: constant preemption
  run(Arch::gpt2, QType::q8_0, 64, 12, 1024, 8);   // 8-token budget: chunked prefills
}

}  // namespace
}  // namespace llmrun
