// Serve's device sampling (serve/device_sampler.h, kernels/sampling_rows*.cuh): the per-row
// math, compiled here for the CPU, against the host path the engine takes without a device
// (apply_logit_processors, TokenSampler::sample, token_logprobs) over many seeded rows with
// every parameter: temperature (greedy included), top-k, top-p, min-p, repetition / presence /
// frequency penalties, logit_bias, a padded vocabulary and logprobs. Token, generator stream
// and logprobs must be identical, not close. On a GPU, CudaBackend::sample_processed_rows
// must give a mixed batch what the host path gives (skipped without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "../../kernels/sampling_rows_math.cuh"
#include "backend/backend.h"
#include "data/tokenizer.h"
#include "sampling_rows_test_util.h"
#include "serve/device_sampler.h"
#include "serve/logit_processors.h"
#include "serve/sampler.h"
#include "serve/structured/json_schema.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace llmrun {
namespace {

// The device's steps on the CPU, one row: fill (mask), adjust (per entry), the stable
// descending sort (of the row before the entries too, when its logprobs need it), pick.
// Returns the result words.
std::vector<int32_t> device_math(const RowCase& c, double u, int top_n) {
  const int V = int(c.logits.size());
  std::vector<ProcessedTokenAdjust> adjusts;
  kernels::ProcessedRow p = processed_row_params(
      pack_processed_row(c.params, c.tokens, c.prompt_len, 0, V, c.sample_vocab, u, 0, adjusts));
  std::vector<float> raw(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) raw[size_t(v)] = v < p.sample_vocab ? c.logits[size_t(v)] : -INFINITY;
  std::vector<float> work = raw;
  for (const ProcessedTokenAdjust& a : adjusts) {
    const kernels::TokenAdjust k{a.row, a.id, a.seen, a.generated, a.has_bias, a.bias};
    work[size_t(a.id)] = kernels::adjusted_logit(work[size_t(a.id)], p, k);
  }
  if (!c.mask.empty()) {  // the mask kernel: after the processors, processed row only
    p.mask_at = 0;
    for (int v = 0; v < V; ++v)
      if (!kernels::mask_allows(c.mask.data(), 0, v)) work[size_t(v)] = -INFINITY;
  }
  auto sorted = [&](const std::vector<float>& row, std::vector<int32_t>& ids,
                    std::vector<float>& keys) {
    ids.resize(size_t(V));
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
    keys.resize(size_t(V));
    for (int i = 0; i < V; ++i) keys[size_t(i)] = row[size_t(ids[size_t(i)])];
  };
  std::vector<int32_t> ids, raw_ids;
  std::vector<float> keys, raw_keys;
  sorted(work, ids, keys);
  const bool apart = p.logprobs >= 0 && !adjusts.empty();  // processed_raw_rows' rule
  if (apart) sorted(raw, raw_ids, raw_keys);
  std::vector<double> w(static_cast<size_t>(V));
  std::vector<int32_t> out(size_t(kernels::processed_row_words(top_n)));
  kernels::pick_processed(
      out.data(), top_n, keys.data(), ids.data(), apart ? raw_keys.data() : keys.data(),
      apart ? raw_ids.data() : ids.data(), apart ? raw.data() : work.data(), w.data(), p, V);
  return out;
}

void expect_same_logprobs(const TokenLogprob& want, const int32_t* r, int top_n,
                          const std::string& where) {
  EXPECT_EQ(want.logprob, as_float(r[2])) << where;
  for (size_t j = 0; j < want.top.size(); ++j) {
    EXPECT_EQ(want.top[j].token, r[3 + j]) << where << " top " << j;
    EXPECT_EQ(want.top[j].logprob, as_float(r[3 + top_n + int(j)])) << where << " top " << j;
  }
}

TEST(SamplingRowsMath, ProcessedRowsPickWhatTheHostPathPicks) {
  std::mt19937 rng(11);
  int compared = 0, drew = 0, not_top = 0, with_logprobs = 0, masked = 0, ended = 0;
  for (int i = 0; i < 3000; ++i) {
    const RowCase c = make_case(rng, i, 300);
    const std::string where = "case " + std::to_string(i);
    TokenSampler host(c.params.sampling), dev(c.params.sampling);
    // Three steps of one sequence: each step's draw must leave both generators alike.
    RowCase step = c;
    for (int k = 0; k < 3; ++k) {
      const HostPick h = host_pick(step, host);
      const double u = step.params.sampling.temperature > 0.0f ? dev.peek_uniform() : 0.0;
      const int top_n = std::max(0, std::min(step.params.logprobs, int(step.logits.size())));
      const std::vector<int32_t> r = device_math(step, u, top_n);
      ASSERT_EQ(r[0], h.token) << where << " step " << k << " vocab " << step.logits.size() << " T "
                               << step.params.sampling.temperature;
      if (r[1]) dev.skip_uniform();
      ASSERT_EQ(dev.peek_uniform(), host.peek_uniform()) << where << ": generator streams apart";
      ++compared;
      if (h.token < 0) {  // the grammar allows only -inf tokens: the sequence ends here
        ++ended;
        break;
      }
      if (step.params.logprobs >= 0) {
        expect_same_logprobs(h.lp, r.data(), top_n, where);
        ++with_logprobs;
      }
      masked += !step.mask.empty();
      drew += r[1];
      // Compare against the unprocessed argmax: the draws and the processors move the pick.
      not_top += h.token != int32_t(std::max_element(step.logits.begin(), step.logits.end()) -
                                    step.logits.begin());
      step.tokens.push_back(h.token);
    }
  }
  EXPECT_GT(compared, 5000);
  EXPECT_GT(drew, 1500);
  EXPECT_GT(not_top, 1500);
  EXPECT_GT(with_logprobs, 800);
  EXPECT_GT(masked, 800);  // structured rows, sampled under their bitmask
  EXPECT_GT(ended, 3);     // and rows whose grammar left only -inf tokens
}

TEST(SamplingRowsMath, EachProcessorMovesTheRowAsTheHostDoes) {
  // One token per processor, checked on the processed value itself.
  RowCase c;
  c.logits = {2.0f, -1.5f, 0.25f, 3.0f, -0.75f, 1.0f};
  c.sample_vocab = 5;  // column 5 is padding
  c.tokens = {0, 1, 2, 2, 1};
  c.prompt_len = 2;  // generated: 2, 2, 1
  c.params.repetition_penalty = 1.25f;
  c.params.presence_penalty = 0.5f;
  c.params.frequency_penalty = 0.3f;
  c.params.logit_bias = {{3, -10.0f}, {5, 4.0f}, {9, 1.0f}, {-1, 2.0f}};
  std::vector<float> masked, work;
  const float* raw = nullptr;
  const float* use = apply_logit_processors(c.params, c.tokens, c.prompt_len, c.logits.data(), 6,
                                            c.sample_vocab, masked, work, raw);
  std::vector<ProcessedTokenAdjust> adjusts;
  const kernels::ProcessedRow p = processed_row_params(
      pack_processed_row(c.params, c.tokens, c.prompt_len, 0, 6, c.sample_vocab, 0.0, 0, adjusts));
  ASSERT_EQ(adjusts.size(), 5u);  // ids 0, 1, 2 (seen), 3 and 5 (bias); 9 and -1 outside
  std::vector<float> got(c.logits);
  got[5] = -INFINITY;
  for (const ProcessedTokenAdjust& a : adjusts)
    got[size_t(a.id)] = kernels::adjusted_logit(
        got[size_t(a.id)], p, {a.row, a.id, a.seen, a.generated, a.has_bias, a.bias});
  for (int v = 0; v < 6; ++v) EXPECT_EQ(got[size_t(v)], use[v]) << "token " << v;
  EXPECT_EQ(adjusts[2].generated, 2);  // token 2 twice in the output
  EXPECT_EQ(adjusts[1].generated, 1);
  EXPECT_EQ(adjusts[0].generated, 0);
}

TEST(SamplingRowsMath, PeekThenSkipIsTheSamplersOwnStream) {
  SamplingParams sp;
  sp.seed = 42;
  TokenSampler a(sp), b(sp);
  for (int i = 0; i < 100; ++i) {
    const double peeked = a.peek_uniform();
    EXPECT_EQ(peeked, a.peek_uniform());  // peeking does not advance
    a.skip_uniform();
    EXPECT_EQ(peeked, b.uniform());
  }
}

TEST(SamplingRowsMath, OnlyVerificationRowsStayOnTheHost) {
  GenerationParams p;
  EXPECT_TRUE(samples_on_device(p, false, false));
  EXPECT_TRUE(samples_on_device(p, true, false));   // a grammar's mask goes up as bits
  EXPECT_FALSE(samples_on_device(p, false, true));  // verification needs the whole law
  p.logprobs = 2;
  p.presence_penalty = 0.5f;  // logprobs of the row before penalties: a second sorted segment
  EXPECT_TRUE(samples_on_device(p, false, false));
}

TEST(SamplingRowsMath, GrammarBitmaskIsTheMatchersOwnMask) {
  // Along random walks through a JSON-schema grammar, the bits the device applies are exactly
  // the tokens Engine::mask_row leaves finite in a finite row (padded columns and an end
  // token included).
  ByteLevelTokenizer tok;
  const int vocab = tok.vocab_size() + 5;  // padded embedding rows
  auto words = std::make_shared<structured::TokenVocabulary>(tok, vocab);
  structured::ConstraintCache cache(words);
  auto c = cache.get(structured::json_schema_to_gbnf(nlohmann::json::parse(
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer"}},"required":["ok"]})")));
  const std::vector<int32_t> ends = {vocab - 2};
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 2.0f);
  int checked = 0;
  for (int walk = 0; walk < 10; ++walk) {
    structured::ConstraintMatcher m(c);
    for (int step = 0; step < 40 && !m.complete(); ++step) {
      const int64_t budget = 40 - step;
      std::vector<uint32_t> bits;
      ASSERT_TRUE(grammar_bitmask(m, vocab, budget, ends, bits));
      std::vector<float> row(static_cast<size_t>(vocab));
      for (float& x : row) x = d(rng);
      ASSERT_TRUE(m.mask_logits(row.data(), vocab, budget, ends));
      std::vector<int32_t> allowed_ids;
      for (int v = 0; v < vocab; ++v) {
        EXPECT_EQ(allowed(bits, v), row[size_t(v)] > -INFINITY) << "token " << v;
        if (allowed(bits, v) && v != ends[0]) allowed_ids.push_back(v);
      }
      ++checked;
      if (allowed_ids.empty()) break;
      ASSERT_TRUE(m.accept(allowed_ids[rng() % allowed_ids.size()]));
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(SamplingRowsMath, TheCpuBackendLeavesSamplingToTheHost) {
  auto cpu = make_cpu_backend(1);
  EXPECT_FALSE(DeviceSampler(*cpu, 10, 10).available());
}

TEST(CudaProcessedSampling, DeviceBatchMatchesTheHostPath) {
#if LLMRUN_HAVE_CUDA
  if (cuda_device_count() == 0) GTEST_SKIP() << "SKIPPED: no CUDA device";
  auto be = make_cuda_backend(0);
  std::mt19937 rng(23);
  for (int vocab : {7, 300, 50257}) {
    // A batch of mixed rows sharing the vocabulary, sampled for a few steps.
    const int rows = 12;
    const int sample_vocab = vocab > 300 ? vocab - 17 : vocab;
    std::vector<RowCase> cases;
    std::vector<std::unique_ptr<TokenSampler>> host_s, dev_s;
    for (int r = 0; r < rows; ++r) {
      RowCase c = make_case(rng, r * 17 + vocab % 11, 2);
      c.logits.assign(size_t(vocab), 0.0f);
      c.sample_vocab = sample_vocab;
      for (int32_t& t : c.tokens) t = int32_t(rng() % uint32_t(sample_vocab));
      host_s.push_back(std::make_unique<TokenSampler>(c.params.sampling));
      dev_s.push_back(std::make_unique<TokenSampler>(c.params.sampling));
      cases.push_back(std::move(c));
    }
    DeviceSampler ds(*be, vocab, sample_vocab);
    ASSERT_TRUE(ds.available());
    Buffer lb = be->allocate(size_t(rows) * vocab * 4);
    const Tensor L = lb.as(DType::f32, {rows, vocab});
    for (int step = 0; step < 3; ++step) {
      std::vector<float> all(size_t(rows) * vocab);
      std::normal_distribution<float> d(0.0f, 3.0f);
      for (float& l : all) l = d(rng);
      be->copy(L, Tensor(all.data(), DType::f32, {rows, vocab}));
      for (int r = 0; r < rows; ++r)
        cases[size_t(r)].logits.assign(all.begin() + int64_t(r) * vocab,
                                       all.begin() + int64_t(r + 1) * vocab);
      // Batch row i is case rows-1-i (its logits row): the batch maps rows, not positions.
      std::vector<DeviceRow> dr;
      for (int i = 0; i < rows; ++i) {
        const int r = rows - 1 - i;
        RowCase& c = cases[size_t(r)];
        if (!c.mask.empty())
          c.mask = random_mask(rng, vocab, sample_vocab, 0.3, (step + r) % 5 == 0);
        dr.push_back({r, &c.params, &c.tokens, c.prompt_len, dev_s[size_t(r)].get(),
                      c.mask.empty() ? nullptr : &c.mask});
      }
      const std::vector<DeviceDraw> got = ds.sample(L, dr);
      for (int i = 0; i < rows; ++i) {
        const int r = rows - 1 - i;
        RowCase& c = cases[size_t(r)];
        const HostPick h = host_pick(c, *host_s[size_t(r)]);
        const std::string where = "vocab " + std::to_string(vocab) + " step " +
                                  std::to_string(step) + " row " + std::to_string(r) + " T " +
                                  std::to_string(c.params.sampling.temperature);
        EXPECT_EQ(got[size_t(i)].token, h.token) << where;
        EXPECT_EQ(dev_s[size_t(r)]->peek_uniform(), host_s[size_t(r)]->peek_uniform()) << where;
        if (h.token < 0) {  // only -inf tokens allowed: the engine would end it
          c.mask.clear();
          continue;
        }
        if (c.params.logprobs >= 0) {
          ASSERT_TRUE(got[size_t(i)].has_logprob) << where;
          const TokenLogprob& g = got[size_t(i)].logprob;
          // The device's exp and log may differ from glibc's in the last bit.
          EXPECT_NEAR(g.logprob, h.lp.logprob, 1e-4f * (1 + std::fabs(h.lp.logprob))) << where;
          ASSERT_EQ(g.top.size(), h.lp.top.size()) << where;
          for (size_t j = 0; j < g.top.size(); ++j) {
            EXPECT_EQ(g.top[j].token, h.lp.top[j].token) << where << " top " << j;
            EXPECT_NEAR(g.top[j].logprob, h.lp.top[j].logprob,
                        1e-4f * (1 + std::fabs(h.lp.top[j].logprob)))
                << where;
          }
        }
        c.tokens.push_back(h.token);
      }
    }
  }
#else
  GTEST_SKIP() << "SKIPPED: no CUDA device (this build has no CUDA backend)";
#endif
}

}  // namespace
}  // namespace llmrun
