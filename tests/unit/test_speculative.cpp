// Speculative decoding (serve/speculative): the n-gram proposer; greedy requests give token for
// token what they give without speculation (n-gram and draft model, alone and batched, with
// preemption forced, chunked prefill, prefix reuse on and off) and every KV block comes back;
// sampled requests keep the target's distribution, checked by a chi-square test of the first
// two speculated tokens against the exact probabilities of the non-speculative sampler, under
// temperature, top-k/top-p/min-p, penalties and logit_bias. The test's self-check: the same
// statistic must reject deliberately wrong acceptance rules.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "data/tokenizer.h"
#include "model/transformer.h"
#include "serve/engine.h"
#include "serve/logit_processors.h"
#include "serve/speculative/ngram_proposer.h"
#include "serve/speculative/proposal_grammar.h"
#include "serve/speculative/spec_policy.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/regex.h"
#include "serve/structured/token_mask.h"
#include "test_backend.h"
#include "tiny_model.h"

using namespace llmrun;

TEST(NgramProposer, LongestMostRecentMatchAndPeriodicContinuation) {
  NgramOptions o{1, 3};
  // The latest earlier occurrence of the tail "6 7" is followed by 9 2 (an older one by 8 1).
  EXPECT_EQ(propose_ngram({6, 7, 8, 1, 6, 7, 9, 2, 6, 7}, o, 2), (std::vector<int32_t>{9, 2}));
  // The tail's longest recurring n-gram decides: "5 6 7" (followed by 8 1) beats "6 7".
  EXPECT_EQ(propose_ngram({5, 6, 7, 8, 1, 6, 7, 9, 2, 5, 6, 7}, o, 2),
            (std::vector<int32_t>{8, 1}));
  // Longest n-gram wins over a more recent shorter one: "1 2 3" -> 4, though "3" -> 0 is later.
  EXPECT_EQ(propose_ngram({1, 2, 3, 4, 3, 0, 1, 2, 3}, o, 1), (std::vector<int32_t>{4}));
  // A period shorter than k continues through the proposal itself.
  EXPECT_EQ(propose_ngram({1, 2, 1, 2}, o, 5), (std::vector<int32_t>{1, 2, 1, 2, 1}));
  EXPECT_TRUE(propose_ngram({1, 2, 3, 4}, o, 4).empty());       // nothing recurs
  EXPECT_TRUE(propose_ngram({1, 2, 1, 2}, {3, 3}, 4).empty());  // only 3-grams allowed
  EXPECT_TRUE(propose_ngram({7}, o, 4).empty());
}

TEST(ProposalGrammar, CutsAtTheFirstRefusedTokenAndAfterTheEnd) {
  ByteLevelTokenizer tok;
  structured::ConstraintCache cache(tok);
  const auto grammar = [&](const std::string& re) {
    return cache.get("root ::= " + structured::regex_to_gbnf(re, false));
  };
  structured::ConstraintMatcher m(grammar("ab[cd]*"));
  ASSERT_TRUE(m.accept('a'));  // the sequence's own matcher, after "a"
  auto cut = [&](std::vector<int32_t> draft, std::vector<int32_t> ends) {
    cut_to_grammar(draft, ProposalGrammar(m, std::move(ends), 16));
    return draft;
  };
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(cut({'b', 'x', 'c'}, {}), (Ids{'b'}));
  // An end token is kept, and ends the proposal, where the output so far is a sentence, or
  // where it is an ordinary token the grammar takes (a stop_token_ids entry); else refused.
  EXPECT_EQ(cut({'b', 'c', 'z', 'd'}, {'z'}), (Ids{'b', 'c', 'z'}));
  EXPECT_EQ(cut({'z'}, {'z'}), (Ids{}));
  EXPECT_EQ(cut({'b', 'c'}, {'b'}), (Ids{'b'}));
  // The sequence's matcher did not move.
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.accept('b'));
  // A complete sentence (nothing can follow) ends the proposal.
  structured::ConstraintMatcher done(grammar("ab"));
  Ids draft = {'a', 'b', 'a'};
  cut_to_grammar(draft, ProposalGrammar(done, {}, 16));
  EXPECT_EQ(draft, (Ids{'a', 'b'}));
}

namespace {

std::unique_ptr<Transformer> make_model(Backend& be, const ModelConfig& cfg, uint64_t seed,
                                        float scale) {
  auto m = std::make_unique<Transformer>(be, cfg);
  m->init_weights(seed);
  for (int b = 0; b < m->params().num_buckets(); ++b) be.scale(m->params().bucket(b), scale);
  return m;
}

std::vector<int32_t> greedy_reference(Transformer& m, const std::vector<int32_t>& prompt,
                                      int max_tokens) {
  Backend& be = m.backend();
  const int vocab = m.config().vocab;
  KvCache cache = m.make_cache(static_cast<int>(prompt.size()) + max_tokens);
  Buffer buf = be.allocate(size_t(vocab) * 4);
  Tensor logits = buf.as(DType::f32, {vocab});
  std::vector<int32_t> out;
  std::vector<float> host(static_cast<size_t>(vocab));
  m.forward_cached(prompt.data(), static_cast<int>(prompt.size()), cache, logits);
  for (int i = 0; i < max_tokens; ++i) {
    be.copy(Tensor(host.data(), DType::f32, {vocab}), logits);
    out.push_back(static_cast<int32_t>(std::max_element(host.begin(), host.end()) - host.begin()));
    if (i + 1 < max_tokens) m.forward_cached(&out.back(), 1, cache, logits);
  }
  return out;
}

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> tokens;
  int done = 0;
};

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
  int64_t drafts = 0, proposed = 0, accepted = 0, skipped = 0, backoffs = 0;
};

// Runs every request through one engine and waits for all; stats after the engine is idle.
RunResult run_engine(Transformer& model, const Tokenizer& tok, const EngineConfig& ec,
                     const std::vector<std::vector<int32_t>>& prompts,
                     const std::vector<GenerationParams>& params) {
  const int n = static_cast<int>(prompts.size());
  Collected got;
  got.tokens.resize(size_t(n));
  RunResult r;
  Engine engine(model, tok, ec);
  // One batch: the engine schedules every request from its first step, so that a small
  // pool preempts however the threads interleave.
  std::vector<Engine::Submission> batch;
  for (int i = 0; i < n; ++i)
    batch.push_back({prompts[size_t(i)], params[size_t(i)], [&got, i](SequenceEvent&& ev) {
                       std::lock_guard<std::mutex> lock(got.mu);
                       got.tokens[size_t(i)].insert(got.tokens[size_t(i)].end(),
                                                    ev.token_ids.begin(), ev.token_ids.end());
                       if (ev.finished) {
                         ++got.done;
                         got.cv.notify_all();
                       }
                     }});
  engine.submit(std::move(batch));
  {
    std::unique_lock<std::mutex> lock(got.mu);
    EXPECT_TRUE(got.cv.wait_for(lock, std::chrono::seconds(120), [&] { return got.done == n; }));
  }
  for (int spin = 0; spin < 12000; ++spin) {  // up to 60 s: a loaded machine
    r.stats = engine.stats();
    if (r.stats.running == 0 && r.stats.waiting == 0 && r.stats.kv_blocks_used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.tokens = got.tokens;
  r.drafts = engine.metrics().spec.drafts();
  r.proposed = engine.metrics().spec.draft_tokens();
  r.accepted = engine.metrics().spec.accepted_tokens();
  r.skipped = engine.metrics().spec.skipped_steps();
  r.backoffs = engine.metrics().spec.backoffs();
  return r;
}

// 64 sequences, 4-token blocks; `method` proposing 4 tokens at every batch size and every step
// (no back-off: exactness is under test), drafting with `draft` (method draft).
EngineConfig spec_engine(int max_batched, int blocks, int max_len, SpecMethod method,
                         Transformer* draft) {
  EngineConfig ec;
  ec.max_num_seqs = 64;
  ec.max_batched_tokens = max_batched;
  ec.block_size = 4;
  ec.num_blocks = blocks;
  ec.max_model_len = max_len;
  ec.speculative.method = method;
  ec.speculative.num_tokens = 4;
  ec.speculative.disable_by_batch_size = 0;
  ec.speculative.adaptive = false;
  ec.speculative.draft_model = draft;
  return ec;
}

struct GreedyCase {
  int requests, pool_blocks;
  bool prefix;
  int max_batched;
};

// Repetitive prompts (a random short unit repeated) so that prompt lookup has something to find.
void greedy_case(Arch arch, SpecMethod method, const GreedyCase& c) {
  auto be = test::make_test_backend(2);
  const ModelConfig cfg = test_models::tiny_config(arch, 64, 128, 256, 128);
  auto model = make_model(*be, cfg, 11, 6.0f);
  // The draft: the target itself for odd request counts (everything accepted), otherwise the
  // same weights scaled differently (its picks often agree, not always): both verdicts.
  std::unique_ptr<Transformer> other;
  Transformer* draft = model.get();
  if (method == SpecMethod::draft && c.requests % 2 == 0) {
    other = make_model(*be, cfg, 11, 4.5f);
    draft = other.get();
  }
  ByteLevelTokenizer tok;
  std::mt19937 rng(uint32_t(c.requests * 7 + c.pool_blocks));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < c.requests; ++i) {
    GenerationParams gp;
    gp.sampling = SamplingParams{0.0f, 0, 1.0f, 0};
    gp.seeded = true;
    gp.max_tokens = 8 + int(rng() % 24);
    // Prompts whose greedy continuation prompt lookup partly predicts (most random prompts
    // of a random model have none), so that accepted proposals are verified in every case.
    for (int attempt = 0;; ++attempt) {
      std::string unit;
      for (int k = 0, len = 2 + int(rng() % 5); k < len; ++k) unit += char('a' + rng() % 26);
      std::string text = (i % 2 ? "shared head: " : "") + std::to_string(i);
      for (int k = 0, reps = 2 + int(rng() % 4); k < reps; ++k) text += unit;
      std::vector<int32_t> prompt = tok.encode(text);
      std::vector<int32_t> out = greedy_reference(*model, prompt, gp.max_tokens);
      bool predicted = false;
      std::vector<int32_t> history = prompt;
      for (int32_t t : out) {
        const std::vector<int32_t> guess = propose_ngram(history, NgramOptions{}, 1);
        predicted = predicted || (!guess.empty() && guess[0] == t);
        history.push_back(t);
      }
      if (predicted || attempt == 100) {
        prompts.push_back(prompt);
        want.push_back(out);
        break;
      }
    }
    params.push_back(gp);
  }
  EngineConfig ec = spec_engine(c.max_batched, c.pool_blocks, 96, method, draft);
  ec.prefix_caching = c.prefix;
  const RunResult r = run_engine(*model, tok, ec, prompts, params);
  const std::string what = std::string(method == SpecMethod::ngram ? "ngram" : "draft") + " " +
                           std::to_string(c.requests) + " requests, " +
                           std::to_string(c.pool_blocks) + " blocks";
  for (int i = 0; i < c.requests; ++i)
    EXPECT_EQ(r.tokens[size_t(i)], want[size_t(i)]) << "request " << i << ": " << what;
  EXPECT_EQ(r.stats.kv_blocks_used, 0) << "KV blocks leaked: " << what;
  EXPECT_EQ(r.stats.draft_kv_blocks_used, 0) << "draft KV blocks leaked: " << what;
  EXPECT_GT(r.drafts, 0) << "nothing was proposed: " << what;
  EXPECT_GT(r.accepted, 0) << "no proposal accepted, the exactness is untested: " << what;
  if (draft != model.get()) {
    EXPECT_LT(r.accepted, r.proposed) << "no proposal rejected: " << what;
  }
  if (c.pool_blocks < 40 && c.requests > 4) {
    EXPECT_GT(r.stats.preemptions, 0) << "pool was meant to force preemption: " << what;
  }
}

}  // namespace

TEST(SpeculativeEngine, NgramGreedyMatchesWithoutSpeculation) {
  for (Arch arch : {Arch::gpt2, Arch::llama})
    for (int n : {1, 16}) greedy_case(arch, SpecMethod::ngram, {n, 1024, true, 64});
}

TEST(SpeculativeEngine, NgramGreedyExactUnderPreemptionAndChunkedPrefill) {
  // 24 blocks of 4 tokens = one max-length sequence: constant preemption; a budget of 8
  // tokens chunks every prompt and drops proposals that do not fit.
  greedy_case(Arch::llama, SpecMethod::ngram, {16, 24, true, 64});
  greedy_case(Arch::gpt2, SpecMethod::ngram, {12, 24, false, 8});
}

TEST(SpeculativeEngine, DraftModelGreedyMatchesWithoutSpeculation) {
  greedy_case(Arch::llama, SpecMethod::draft, {1, 1024, true, 64});
  greedy_case(Arch::gpt2, SpecMethod::draft, {16, 1024, true, 64});
  greedy_case(Arch::llama, SpecMethod::draft, {15, 24, true, 64});  // preempted, same draft
  greedy_case(Arch::gpt2, SpecMethod::draft, {12, 24, false, 8});
}

namespace {

// Structured outputs under speculation: greedy constrained requests (a JSON schema and a
// regex, half each) must give token for token what the same requests give without
// speculation, and a valid sentence of their grammar.
const char* kItemsSchema = R"({"type":"array","minItems":2,"maxItems":4,"items":{"type":"object",)"
                           R"("properties":{"id":{"type":"integer","minimum":0,"maximum":99},)"
                           R"("tag":{"enum":["red","green","blue"]}},"required":["id","tag"],)"
                           R"("additionalProperties":false}})";
const char* kTokensRegex = "(token[0-9] ){2,6}stop";

void check_constrained_output(const std::string& text, bool json_case, const std::string& what) {
  if (!json_case) {
    EXPECT_TRUE(std::regex_match(text, std::regex(kTokensRegex))) << what << ": '" << text << "'";
    return;
  }
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_array()) << what << ": '" << text << "'";
  EXPECT_GE(j.size(), 2u) << what;
  EXPECT_LE(j.size(), 4u) << what;
  for (const auto& item : j) {
    ASSERT_TRUE(item.is_object() && item.size() == 2) << what << ": '" << text << "'";
    EXPECT_TRUE(item["id"].is_number_integer() && item["id"] >= 0 && item["id"] <= 99) << text;
    const std::string tag = item["tag"].is_string() ? item["tag"].get<std::string>() : "";
    EXPECT_TRUE(tag == "red" || tag == "green" || tag == "blue") << text;
  }
}

void constrained_greedy_case(SpecMethod method, int requests, int pool_blocks) {
  auto be = test::make_test_backend(2);
  const ModelConfig cfg = test_models::tiny_config(Arch::llama, 64, 128, 256, 128);
  auto model = make_model(*be, cfg, 11, 6.0f);
  // As in greedy_case: the target as its own draft for odd counts, a rescaled copy otherwise.
  std::unique_ptr<Transformer> other;
  Transformer* draft = model.get();
  if (method == SpecMethod::draft && requests % 2 == 0) {
    other = make_model(*be, cfg, 11, 4.5f);
    draft = other.get();
  }
  ByteLevelTokenizer tok;
  structured::ConstraintCache cache(tok);
  auto json_c = cache.get(structured::json_schema_to_gbnf(nlohmann::json::parse(kItemsSchema)));
  auto regex_c = cache.get("root ::= " + structured::regex_to_gbnf(kTokensRegex, false));
  std::mt19937 rng(uint32_t(requests * 13 + pool_blocks));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  for (int i = 0; i < requests; ++i) {
    GenerationParams gp;
    gp.sampling = SamplingParams{0.0f, 0, 1.0f, 0};
    gp.seeded = true;
    gp.max_tokens = 50 + int(rng() % 30);
    gp.constraint = i % 2 ? regex_c : json_c;
    // Prompts holding text of the output's shape, for prompt lookup to find.
    const std::string text =
        i % 2 ? "token" + std::to_string(i % 10) + " token" + std::to_string(rng() % 10) + " stop "
              : R"([{"id":)" + std::to_string(rng() % 100) + R"(,"tag":"red"},{"id":)" +
                    std::to_string(i) + R"(,"tag":"blue"}] )";
    prompts.push_back(tok.encode(text));
    params.push_back(gp);
  }
  // Without speculation, in a pool that never preempts: the reference.
  const RunResult plain =
      run_engine(*model, tok, spec_engine(64, 1024, 128, SpecMethod::none, draft), prompts, params);
  const RunResult r =
      run_engine(*model, tok, spec_engine(64, pool_blocks, 128, method, draft), prompts, params);
  const std::string what = std::string(method == SpecMethod::ngram ? "ngram" : "draft") + " " +
                           std::to_string(requests) + " constrained requests, " +
                           std::to_string(pool_blocks) + " blocks";
  for (int i = 0; i < requests; ++i) {
    EXPECT_EQ(r.tokens[size_t(i)], plain.tokens[size_t(i)]) << "request " << i << ": " << what;
    check_constrained_output(tok.decode(r.tokens[size_t(i)]), i % 2 == 0,
                             what + ", request " + std::to_string(i));
  }
  EXPECT_EQ(r.stats.kv_blocks_used, 0) << "KV blocks leaked: " << what;
  EXPECT_EQ(r.stats.draft_kv_blocks_used, 0) << "draft KV blocks leaked: " << what;
  EXPECT_GT(r.accepted, 0) << "no proposal accepted, the exactness is untested: " << what;
  if (draft != model.get()) {
    EXPECT_LT(r.accepted, r.proposed) << "no proposal rejected: " << what;
  }
  if (pool_blocks < 1024) {
    EXPECT_GT(r.stats.preemptions, 0) << "pool was meant to force preemption: " << what;
  }
}

}  // namespace

TEST(SpeculativeEngine, ConstrainedGreedyMatchesWithoutSpeculation) {
  // 36 blocks of 4 tokens: one max-length sequence and a little more, so the batch preempts.
  for (SpecMethod m : {SpecMethod::ngram, SpecMethod::draft}) {
    constrained_greedy_case(m, 1, 1024);
    constrained_greedy_case(m, 16, 36);
  }
  constrained_greedy_case(SpecMethod::draft, 15, 36);  // the target as its own draft
}

namespace {

// Upper 1e-4 quantiles of chi-square with 1..7 degrees of freedom: a correct sampler fails
// one seeded run of this test with probability 1e-4 per statistic.
double chi2_critical(int df) {
  static const double q[] = {0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88};
  return q[std::min(df, 7)];
}

// Pearson's statistic of counts against probabilities (cells expected below 5 pooled).
std::pair<double, int> chi_square(const std::vector<int>& counts, const std::vector<double>& p,
                                  int n) {
  double stat = 0, pool_e = 0, pool_o = 0;
  int cells = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    const double e = p[v] * n;
    if (e < 5) {
      pool_e += e;
      pool_o += counts[v];
      continue;
    }
    stat += (counts[v] - e) * (counts[v] - e) / e;
    ++cells;
  }
  if (pool_e > 0) {
    if (pool_e >= 1) {
      stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
      ++cells;
    } else if (pool_o > 3) {
      stat += 1e9;  // tokens the target (almost) never emits showed up several times
    }
  }
  return {stat, std::max(cells - 1, 1)};
}

// The exact law of generated tokens 2 and 3 without speculation, enumerating tokens 1 and 2:
// every transform (penalties over the growing context, logit_bias, temperature, top-k/p,
// min-p) and the structured-output mask applied by the same functions the engine uses.
struct ExactLaw {
  std::vector<double> second, third;
};
ExactLaw exact_law(Transformer& m, const std::vector<int32_t>& prompt, const GenerationParams& gp,
                   int vocab) {
  Backend& be = m.backend();
  Buffer buf = be.allocate(size_t(vocab) * 4);
  Tensor logits = buf.as(DType::f32, {vocab});
  TokenSampler sampler(gp.sampling);
  std::vector<float> host(static_cast<size_t>(vocab)), masked, work;
  auto law = [&](const std::vector<int32_t>& ctx) {
    KvCache cache = m.make_cache(static_cast<int>(ctx.size()));
    m.forward_cached(ctx.data(), static_cast<int>(ctx.size()), cache, logits);
    be.copy(Tensor(host.data(), DType::f32, {vocab}), logits);
    const float* raw = nullptr;
    const float* use = apply_logit_processors(gp, ctx, static_cast<int>(prompt.size()), host.data(),
                                              vocab, vocab, masked, work, raw);
    if (gp.constraint) {  // the engine's mask after the tokens generated so far
      structured::ConstraintMatcher matcher(gp.constraint);
      for (size_t i = prompt.size(); i < ctx.size(); ++i) EXPECT_TRUE(matcher.accept(ctx[i]));
      if (use != work.data()) work.assign(use, use + vocab);
      use = work.data();
      const int64_t generated = static_cast<int64_t>(ctx.size() - prompt.size());
      EXPECT_TRUE(matcher.mask_logits(work.data(), vocab, gp.max_tokens - generated, {}));
    }
    std::vector<double> p;
    sampler.distribution(use, vocab, p);
    return p;
  };
  ExactLaw out{std::vector<double>(size_t(vocab)), std::vector<double>(size_t(vocab))};
  const std::vector<double> p1 = law(prompt);
  for (int a = 0; a < vocab; ++a) {
    if (p1[size_t(a)] == 0) continue;
    std::vector<int32_t> ctx = prompt;
    ctx.push_back(a);
    const std::vector<double> p2 = law(ctx);
    for (int b = 0; b < vocab; ++b) {
      if (p2[size_t(b)] == 0) continue;
      out.second[size_t(b)] += p1[size_t(a)] * p2[size_t(b)];
      ctx.push_back(b);
      const std::vector<double> p3 = law(ctx);
      ctx.pop_back();
      for (int c = 0; c < vocab; ++c)
        out.third[size_t(c)] += p1[size_t(a)] * p2[size_t(b)] * p3[size_t(c)];
    }
  }
  return out;
}

// A byte tokenizer whose vocabulary is cut to the model's 8 tokens.
struct SmallTokenizer : Tokenizer {
  ByteLevelTokenizer bytes;
  std::vector<int32_t> encode(std::string_view text) const override { return bytes.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bytes.decode(ids); }
  int32_t vocab_size() const override { return 8; }
  int32_t eos_id() const override { return -1; }
  nlohmann::ordered_json tokenizer_json() const override { return bytes.tokenizer_json(); }
};

// Chi-square statistics (normalised by their critical values: > 1 rejects) of tokens 2 and 3
// of `n` seeded requests under speculation with acceptance rule `accept`; `grammar`: a GBNF
// structured-output constraint on every request (over the 8 one-byte tokens).
std::pair<double, double> speculative_fit(SpecMethod method,
                                          std::function<bool(double, double, double)> accept,
                                          const GenerationParams& base, int n,
                                          const std::string& grammar = "") {
  auto be = test::make_test_backend(2);
  const int V = 8;
  const ModelConfig cfg = test_models::tiny_config(Arch::llama, 32, 64, V, 64);
  auto model = make_model(*be, cfg, 5, 2.5f);
  auto draft = make_model(*be, cfg, 77, 2.5f);  // a different model: q differs from p
  SmallTokenizer tok;
  GenerationParams common = base;
  common.max_tokens = 4;  // token 1 from the prefill, tokens 2 and 3 proposed and verified
  common.ignore_eos = true;
  if (!grammar.empty()) common.constraint = structured::ConstraintCache(tok).get(grammar);
  // A repeating prompt: prompt lookup proposes its continuation at every step.
  const std::vector<int32_t> prompt = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2};
  const ExactLaw exact = exact_law(*model, prompt, common, V);
  std::vector<std::vector<int32_t>> prompts(size_t(n), prompt);
  std::vector<GenerationParams> params;
  for (int i = 0; i < n; ++i) {
    GenerationParams gp = common;
    gp.seeded = true;
    gp.sampling.seed = 1000 + uint64_t(i);
    params.push_back(gp);
  }
  EngineConfig ec = spec_engine(256, 512, 32, method, draft.get());  // tokens 2, 3 verified
  ec.speculative.accept = std::move(accept);
  const RunResult r = run_engine(*model, tok, ec, prompts, params);
  EXPECT_EQ(r.stats.kv_blocks_used, 0);
  EXPECT_GE(r.drafts, n / 2) << "most requests should have verified a proposal";
  std::vector<int> second(V, 0), third(V, 0);
  for (const auto& t : r.tokens) {
    EXPECT_EQ(t.size(), 4u);
    if (t.size() < 3) continue;
    ++second[size_t(t[1])];
    ++third[size_t(t[2])];
  }
  const auto [s2, df2] = chi_square(second, exact.second, n);
  const auto [s3, df3] = chi_square(third, exact.third, n);
  return {s2 / chi2_critical(df2), s3 / chi2_critical(df3)};
}

GenerationParams every_transform() {
  GenerationParams gp;
  gp.sampling = SamplingParams{0.8f, 7, 0.97f, 0, 0.01f};
  gp.presence_penalty = 0.3f;
  gp.frequency_penalty = 0.2f;
  gp.repetition_penalty = 1.15f;
  gp.logit_bias = {{3, 0.7f}, {5, -0.4f}};
  return gp;
}

}  // namespace

TEST(SpeculativeSampling, NgramKeepsTheTargetDistribution) {
  const int n = 3000;
  const auto [s2, s3] = speculative_fit(SpecMethod::ngram, nullptr, every_transform(), n);
  EXPECT_LT(s2, 1.0) << "token 2: chi-square / critical value";
  EXPECT_LT(s3, 1.0) << "token 3: chi-square / critical value";
  // Plain temperature sampling too (no truncation, no penalties).
  GenerationParams plain;
  plain.sampling = SamplingParams{1.0f, 0, 1.0f, 0};
  const auto [p2, p3] = speculative_fit(SpecMethod::ngram, nullptr, plain, n);
  EXPECT_LT(p2, 1.0);
  EXPECT_LT(p3, 1.0);
}

TEST(SpeculativeSampling, DraftModelKeepsTheTargetDistribution) {
  const auto [s2, s3] = speculative_fit(SpecMethod::draft, nullptr, every_transform(), 3000);
  EXPECT_LT(s2, 1.0) << "token 2: chi-square / critical value";
  EXPECT_LT(s3, 1.0) << "token 3: chi-square / critical value";
}

// Token 2 in {2, 3, 5, 6}, token 3 in {0, 1, 3, 4, 7}: prompt lookup's guesses (the prompt
// repeats 1 2 3) are cut where they leave the grammar after token 1 = 3 (guess 1), kept
// whole after 1 or 2; the draft model's q is masked the same way.
const char* kSmallGrammar =
    R"(root ::= [\x00-\x07] [\x02\x03\x05\x06] [\x00\x01\x03\x04\x07] [\x00-\x07]*)";

TEST(SpeculativeSampling, ConstrainedKeepsTheConstrainedTargetDistribution) {
  for (SpecMethod m : {SpecMethod::ngram, SpecMethod::draft}) {
    const auto [s2, s3] = speculative_fit(m, nullptr, every_transform(), 3000, kSmallGrammar);
    EXPECT_LT(s2, 1.0) << "token 2: chi-square / critical value";
    EXPECT_LT(s3, 1.0) << "token 3: chi-square / critical value";
  }
  // Self-check: accepting every (grammar-valid) proposal is still caught.
  const auto always = [](double, double, double) { return true; };
  const auto [a2, a3] =
      speculative_fit(SpecMethod::draft, always, every_transform(), 3000, kSmallGrammar);
  EXPECT_GT(std::max(a2, a3), 1.0) << "always-accept went undetected under a grammar";
}

TEST(SpeculativeSampling, SelfCheckRejectsWrongAcceptanceRules) {
  // Accepting every proposal, and accepting with probability sqrt(p) (too often) instead of p:
  // the same statistic must reject both, or it could not have caught a broken sampler.
  const auto always = [](double, double, double) { return true; };
  const auto too_often = [](double p, double q, double u) { return u * q < std::sqrt(p / q) * q; };
  for (SpecMethod m : {SpecMethod::ngram, SpecMethod::draft}) {
    const auto [a2, a3] = speculative_fit(m, always, every_transform(), 3000);
    EXPECT_GT(std::max(a2, a3), 1.0) << "always-accept went undetected";
    const auto [b2, b3] = speculative_fit(m, too_often, every_transform(), 3000);
    EXPECT_GT(std::max(b2, b3), 1.0) << "accept-with-sqrt(p) went undetected";
  }
}

TEST(SpeculativeBackoff, CostModelPicksTheLengthThatPays) {
  // A memory-bound machine (a proposal row costs 5% of a plain step) and a compute-bound one
  // (60%): the same acceptance pays for long proposals on the first, none on the second.
  StepCostModel cheap, dear;
  cheap.fix({0, 1.0}, 0.05, 0);
  dear.fix({0, 1.0}, 0.6, 0);
  EXPECT_EQ(choose_length(0.8, 4, 1, cheap, false), 4);
  EXPECT_EQ(choose_length(0.5, 4, 1, dear, false), 0) << "1.5 tokens for 1.6 steps pays nothing";
  EXPECT_EQ(choose_length(0.95, 4, 1, dear, false), 4);
  EXPECT_EQ(choose_length(0.1, 4, 1, cheap, false), 0) << "near-hopeless proposals are not made";
  // A draft model's passes count: drafting at a whole step per token never pays.
  StepCostModel slow_draft;
  slow_draft.fix({0, 1.0}, 0.05, 1.0);
  EXPECT_EQ(choose_length(0.8, 4, 1, slow_draft, false), 4);
  EXPECT_EQ(choose_length(0.8, 4, 1, slow_draft, true), 0);
  // Measured: plain steps set the base, speculative ones the marginal row cost.
  StepCostModel m;
  for (int i = 0; i < 20; ++i) {
    m.record_step(1, 1, 1e-3);
    m.record_step(1, 5, 3e-3);
  }
  EXPECT_NEAR(m.step_seconds(1, 0), 1e-3, 1e-9);
  EXPECT_NEAR(m.step_seconds(1, 4), 3e-3, 1e-6);
  EXPECT_NEAR(m.step_seconds(1, 2), 2e-3, 1e-6);
  EXPECT_NEAR(expected_tokens(0.5, 2), 1.75, 1e-12);
}

TEST(SpeculativeBackoff, ShadowGuessesSwitchAnNgramSequenceOffAndOn) {
  SpeculativeConfig c;
  c.method = SpecMethod::ngram;
  StepCostModel cost;
  cost.fix({0, 1.0}, 0.3, 0);
  SpecDecodeMetrics m;
  SpecState st;
  // A proposing sequence whose proposals fail: it stops proposing, and says so once.
  st.speculating = true;
  for (int i = 0; i < 4; ++i) record_verification(st, 4, 0, true);
  std::vector<int32_t> tokens = {1, 2, 3, 1, 2, 3, 1, 2};
  EXPECT_EQ(plan_proposal(st, c, tokens, 4, 1, cost, m), 0);
  EXPECT_EQ(m.backoffs(), 1);
  EXPECT_EQ(m.skipped_steps(), 1);
  EXPECT_EQ(st.shadow, 3) << "the n-gram guess is still made, to be scored";
  // The target keeps producing what the lookup guessed: speculation comes back on.
  int k = 0, steps = 0;
  while (k == 0 && steps < 20) {
    tokens.push_back(tokens[tokens.size() - 3]);
    k = plan_proposal(st, c, tokens, 4, 1, cost, m);
    ++steps;
  }
  EXPECT_GT(k, 0) << "correct shadow guesses never switched speculation back on";
  EXPECT_LE(steps, 6);
  EXPECT_EQ(m.backoffs(), 1);
  // A fresh sequence whose guesses are all wrong (verified or shadow): off within a few
  // steps, and it stays off.
  SpecState off;
  std::vector<int32_t> other = {1, 2, 3, 1, 2, 3, 1, 2};
  SpecDecodeMetrics m2;
  int proposing = 0;
  for (int i = 0; i < 30; ++i) {
    const int kk = plan_proposal(off, c, other, 4, 1, cost, m2);
    if (kk > 0) {
      ++proposing;
      EXPECT_LT(i, 3) << "still proposing after " << i << " failed steps";
      record_verification(off, kk, 0, true);
    }
    other.push_back(9 + i % 50);  // never what the lookup guessed
  }
  EXPECT_LE(proposing, 3);
  EXPECT_GE(m2.skipped_steps(), 27);
  EXPECT_EQ(m2.backoffs(), proposing > 0 ? 1 : 0);
  EXPECT_LT(acceptance_estimate(off), 0.3);
  // Not adaptive: always the cap.
  c.adaptive = false;
  EXPECT_EQ(plan_proposal(off, c, other, 3, 1, cost, m2), 3);
}

TEST(SpeculativeBackoff, DraftSequenceProbesAfterDoublingPauses) {
  SpeculativeConfig c;
  c.method = SpecMethod::draft;
  c.backoff_steps = 4;
  StepCostModel cost;
  cost.fix({0, 1.0}, 0.3, 0.05);
  SpecDecodeMetrics m;
  SpecState st;
  const std::vector<int32_t> tokens = {5, 6, 7};
  EXPECT_GT(plan_proposal(st, c, tokens, 4, 1, cost, m), 0) << "a fresh sequence proposes";
  record_verification(st, 4, 0, true);
  EXPECT_EQ(plan_proposal(st, c, tokens, 4, 1, cost, m), 0);
  EXPECT_EQ(m.backoffs(), 1);
  int plain = 0;
  while (plan_proposal(st, c, tokens, 4, 1, cost, m) == 0) ++plain;
  EXPECT_EQ(plain, 4) << "first pause: backoff_steps plain steps, then a probe";
  record_verification(st, 4, 0, true);
  EXPECT_EQ(plan_proposal(st, c, tokens, 4, 1, cost, m), 0);
  plain = 0;
  while (plan_proposal(st, c, tokens, 4, 1, cost, m) == 0) ++plain;
  EXPECT_EQ(plain, 8) << "a failed probe doubles the pause";
  // A probe whose drafts are accepted keeps it on.
  for (int i = 0; i < 3; ++i) record_verification(st, 4, 4, false);
  EXPECT_GT(plan_proposal(st, c, tokens, 4, 1, cost, m), 0);
  EXPECT_EQ(st.pauses, 0);
}

TEST(SpeculativeBackoff, EngineStopsProposingWhereLookupFailsAndStaysExact) {
  // Through the engine, on a compute-bound cost model: random prompts of a random model
  // (prompt lookup rarely right) end up decoding plain; repetitive text keeps speculating.
  auto be = test::make_test_backend(2);
  const ModelConfig cfg = test_models::tiny_config(Arch::gpt2, 64, 128, 256, 128);
  auto model = make_model(*be, cfg, 11, 6.0f);
  ByteLevelTokenizer tok;
  EngineConfig ec;
  ec.max_num_seqs = 8;
  ec.max_batched_tokens = 256;
  ec.block_size = 4;
  ec.num_blocks = 512;
  ec.max_model_len = 120;
  ec.speculative.method = SpecMethod::ngram;
  ec.speculative.num_tokens = 4;
  ec.speculative.fixed_step_seconds = {0, 1.0};
  ec.speculative.fixed_row_seconds = 0.3;
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 4; ++i) {
    std::string text;
    for (int j = 0; j < 24; ++j) text += char(33 + rng() % 90);
    prompts.push_back(tok.encode(text));
    GenerationParams gp;
    gp.sampling = SamplingParams{0.0f, 0, 1.0f, 0};
    gp.max_tokens = 60;
    gp.ignore_eos = true;
    params.push_back(gp);
    want.push_back(greedy_reference(*model, prompts.back(), gp.max_tokens));
  }
  const RunResult r = run_engine(*model, tok, ec, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(r.tokens[i], want[i]) << "request " << i;
  // Without the back-off every wrong lookup would be verified and rejected: at least one
  // proposed token wasted each.
  int wrong = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> hist = prompts[i];
    for (int32_t t : want[i]) {
      const std::vector<int32_t> g = propose_ngram(hist, NgramOptions{}, 1);
      wrong += !g.empty() && g[0] != t ? 1 : 0;
      hist.push_back(t);
    }
  }
  EXPECT_GT(wrong, 40) << "the workload should give the lookup wrong guesses to make";
  EXPECT_LT(2 * (r.proposed - r.accepted), wrong) << "the back-off let failing lookups be verified";
  EXPECT_GT(r.skipped, wrong / 2) << "decode steps without proposals are counted";
  EXPECT_EQ(r.stats.kv_blocks_used, 0);
}
