// The serving engine under continuous batching must produce, token for token, what the
// single-sequence generation path (the one `llmrun generate` runs) produces for each prompt
// alone: greedy and seeded sampling, 1 to 64 concurrent requests, a KV pool so small that
// sequences get preempted and recomputed, prefix reuse on and off. And it must give every
// KV block back.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "data/tokenizer.h"
#include "model/transformer.h"
#include "serve/engine.h"
#include "test_backend.h"
#include "tiny_model.h"

using namespace llmrun;

namespace {

ModelConfig tiny(Arch arch) { return test_models::tiny_config(arch, 64, 128, 256, 128); }

// Random weights scaled up so next-token distributions are peaked: greedy choices then have
// margins far above float rounding differences between batched and single-sequence math.
std::unique_ptr<Transformer> make_model(Backend& be, Arch arch) {
  auto m = std::make_unique<Transformer>(be, tiny(arch));
  m->init_weights(11);
  for (int b = 0; b < m->params().num_buckets(); ++b) be.scale(m->params().bucket(b), 6.0f);
  return m;
}

std::vector<int32_t> reference(Transformer& m, const std::vector<int32_t>& prompt, int max_tokens,
                               const SamplingParams& sp) {
  Backend& be = m.backend();
  const int vocab = m.config().vocab;
  KvCache cache = m.make_cache(static_cast<int>(prompt.size()) + max_tokens);
  Buffer buf = be.allocate(size_t(vocab) * 4);
  Tensor logits = buf.as(DType::f32, {vocab});
  TokenSampler sampler(sp);
  std::vector<int32_t> out;
  std::vector<float> host(static_cast<size_t>(vocab));
  m.forward_cached(prompt.data(), static_cast<int>(prompt.size()), cache, logits);
  for (int i = 0; i < max_tokens; ++i) {
    be.copy(Tensor(host.data(), DType::f32, {vocab}), logits);
    out.push_back(sampler.sample(host.data(), vocab));
    if (i + 1 < max_tokens) m.forward_cached(&out.back(), 1, cache, logits);
  }
  return out;
}

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> reasons;
  int done = 0;
};

struct Case {
  int requests;
  int pool_blocks;
  bool prefix;
  bool sample;
  int max_batched = 64;
};

void run_case(Arch arch, const Case& c) {
  auto be = test::make_test_backend(2);
  auto model = make_model(*be, arch);
  ByteLevelTokenizer tok;
  std::mt19937 rng(c.requests * 7 + c.pool_blocks);
  // Prompts share prefixes (a common 20-byte head for half of them) so prefix reuse is hit.
  const std::string head = "The shared beginning:";
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  std::vector<SamplingParams> params;
  for (int i = 0; i < c.requests; ++i) {
    std::string text = (i % 2 ? head : std::string()) + "prompt " + std::to_string(i * 37 % 101);
    for (int k = 0, extra = int(rng() % 30); k < extra; ++k) text += char('a' + rng() % 26);
    prompts.push_back(tok.encode(text));
    max_tokens.push_back(4 + int(rng() % 20));
    SamplingParams sp{0.0f, 0, 1.0f, 0};
    if (c.sample) sp = SamplingParams{0.9f, 40, 0.95f, uint64_t(1000 + i)};
    params.push_back(sp);
  }
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < c.requests; ++i)
    want.push_back(reference(*model, prompts[i], max_tokens[i], params[i]));

  EngineConfig ec;
  ec.max_num_seqs = 64;
  ec.max_batched_tokens = c.max_batched;
  ec.block_size = 4;
  ec.num_blocks = c.pool_blocks;
  ec.max_model_len = 96;
  ec.prefix_caching = c.prefix;
  Collected got;
  got.tokens.resize(c.requests);
  got.reasons.resize(c.requests);
  {
    Engine engine(*model, tok, ec);
    std::vector<Engine::Submission> batch;  // one step: the small pool preempts for sure
    for (int i = 0; i < c.requests; ++i) {
      GenerationParams gp;
      gp.sampling = params[i];
      gp.seeded = true;
      gp.max_tokens = max_tokens[i];
      batch.push_back({prompts[i], gp, [&got, i](SequenceEvent&& ev) {
                         std::lock_guard<std::mutex> lock(got.mu);
                         got.tokens[i].insert(got.tokens[i].end(), ev.token_ids.begin(),
                                              ev.token_ids.end());
                         if (ev.finished) {
                           got.reasons[i] = ev.finish_reason;
                           ++got.done;
                           got.cv.notify_all();
                         }
                       }});
    }
    engine.submit(std::move(batch));
    std::unique_lock<std::mutex> lock(got.mu);
    ASSERT_TRUE(
        got.cv.wait_for(lock, std::chrono::seconds(60), [&] { return got.done == c.requests; }));
    lock.unlock();
    // Stats are published after the step that finished the last sequence (up to 60 s: a loaded
    // machine can deschedule the engine thread between the two).
    EngineStats st;
    for (int spin = 0; spin < 12000; ++spin) {
      st = engine.stats();
      if (st.running == 0 && st.waiting == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(st.kv_blocks_used, 0) << "KV blocks leaked";
    if (c.pool_blocks < 40 && c.requests > 4) {
      EXPECT_GT(st.preemptions, 0) << "pool was meant to force preemption";
    }
    if (c.prefix && c.requests >= 8) {
      EXPECT_GT(st.prefix_hits, 0);
    }
    if (!c.prefix) {
      EXPECT_EQ(st.prefix_hits, 0);
    }
  }
  for (int i = 0; i < c.requests; ++i) {
    EXPECT_EQ(got.reasons[i], "length") << "request " << i;
    EXPECT_EQ(got.tokens[i], want[i]) << "request " << i << " of " << c.requests;
  }
}

}  // namespace

TEST(ServeEngine, GreedyMatchesSingleSequenceGeneration) {
  for (Arch arch : {Arch::gpt2, Arch::llama})
    for (int n : {1, 7, 64}) run_case(arch, {n, 1024, true, false});
}

TEST(ServeEngine, SeededSamplingMatchesWhateverTheBatch) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) run_case(arch, {33, 1024, true, true});
}

TEST(ServeEngine, TinyPoolPreemptsAndRecomputesExactly) {
  // 24 blocks of 4 tokens = one max-length sequence: constant preemption.
  run_case(Arch::llama, {16, 24, true, false});
  run_case(Arch::gpt2, {16, 24, false, true});
}

TEST(ServeEngine, PrefixReuseOffAndChunkedPrefill) {
  // A token budget of 8 splits every prompt into several chunks.
  run_case(Arch::gpt2, {12, 1024, false, false, 8});
  run_case(Arch::llama, {12, 1024, true, true, 8});
}
