#include "serve/engine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <unordered_map>

#include "quant/kv_cache_dtype.h"
#include "serve/logit_processors.h"
#include "serve/speculative/proposal_grammar.h"
#include "serve/speculative/rejection.h"
#include "util/error.h"

namespace llmrun {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t kv_bytes_per_block(const ModelConfig& cfg, int block_size, quant::QType kv_dtype) {
  return quant::kv_bytes_per_token(cfg, kv_dtype) * block_size;
}
}  // namespace

int kv_blocks_for_bytes(const ModelConfig& cfg, int block_size, int64_t bytes,
                        quant::QType kv_dtype) {
  return static_cast<int>(
      std::min<int64_t>(bytes / kv_bytes_per_block(cfg, block_size, kv_dtype), 1 << 30));
}

Engine::Engine(Transformer& model, const Tokenizer& tok, const EngineConfig& cfg)
    : model_(model),
      tok_(tok),
      cfg_(cfg),
      kv_(cfg.num_blocks, cfg.block_size, cfg.prefix_caching),
      scheduler_(kv_, {cfg.max_num_seqs, cfg.max_batched_tokens, cfg.max_loras}) {
  // One sequence alone must always fit, or preemption could never make room for it.
  if (int64_t(cfg_.num_blocks) * cfg_.block_size < cfg_.max_model_len)
    throw UserError("the KV cache holds " +
                    std::to_string(int64_t(cfg_.num_blocks) * cfg_.block_size) +
                    " tokens, less than --max-model-len " + std::to_string(cfg_.max_model_len) +
                    ": raise --kv-blocks/--kv-cache-bytes or lower --max-model-len");
  const SpeculativeConfig& sc = cfg_.speculative;
  // Verification reads k + 1 logits rows of a proposing sequence.
  const int logit_rows =
      sc.enabled() ? std::max(cfg_.max_num_seqs, std::min(cfg_.max_batched_tokens,
                                                          cfg_.max_num_seqs * (sc.num_tokens + 1)))
                   : cfg_.max_num_seqs;
  runner_ = std::make_unique<ModelRunner>(
      model_,
      ModelRunnerLimits{cfg_.max_batched_tokens, cfg_.max_num_seqs, cfg_.max_model_len,
                        cfg_.block_size, cfg_.num_blocks, logit_rows, cfg_.kv_dtype},
      tok_.vocab_size());
  device_sampler_ =
      std::make_unique<DeviceSampler>(model_.backend(), model_.config().vocab, tok_.vocab_size());
  if (sc.enabled()) metrics_.num_spec_tokens = sc.num_tokens;
  if (!sc.fixed_step_seconds.empty())
    spec_cost_.fix(sc.fixed_step_seconds, sc.fixed_row_seconds, sc.fixed_draft_seconds);
  if (sc.enabled() && sc.method == SpecMethod::draft) {
    LLMRUN_CHECK(sc.draft_model != nullptr, "speculative draft: no draft model");
    if (sc.draft_model->config().vocab != model_.config().vocab)
      throw UserError("--draft-model: its vocabulary has " +
                      std::to_string(sc.draft_model->config().vocab) + " tokens, the target's " +
                      std::to_string(model_.config().vocab) + ": they must share the tokenizer");
    drafter_ = std::make_unique<DraftProposer>(
        *sc.draft_model, DraftLimits{cfg_.max_num_seqs, cfg_.max_batched_tokens, cfg_.max_model_len,
                                     cfg_.block_size, tok_.vocab_size()});
  }
  if (cfg_.max_lora_width > 0)
    lora_ = std::make_unique<LoraBatchRunner>(model_, cfg_.max_batched_tokens, cfg_.max_lora_width);
  stats_.kv_blocks = cfg_.num_blocks;
  // OpenMP's thread count is per thread: the engine thread starts at the default (every
  // core), not at the --threads the backend set on this one, and on a loaded machine its
  // spinning extra threads made a --threads 1 decode step 40x slower.
  const int omp_threads = omp_get_max_threads();
  thread_ = std::thread([this, omp_threads] {
    omp_set_num_threads(omp_threads);
    loop();
  });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Engine::submit(std::vector<int32_t> prompt, const GenerationParams& params,
                        EventSink sink) {
  std::vector<Submission> one;
  one.push_back({std::move(prompt), params, std::move(sink)});
  return submit(std::move(one)).front();
}

std::unique_ptr<Sequence> Engine::make_sequence(Submission&& sub) const {
  std::vector<int32_t>& prompt = sub.prompt;
  const GenerationParams& params = sub.params;
  LLMRUN_CHECK(!prompt.empty() && int(prompt.size()) + params.max_tokens <= cfg_.max_model_len,
               "Engine::submit: prompt of " + std::to_string(prompt.size()) + " tokens + " +
                   std::to_string(params.max_tokens) + " exceeds max_model_len");
  for (int32_t t : prompt)
    LLMRUN_CHECK(t >= 0 && t < model_.config().vocab, "Engine::submit: token outside vocabulary");
  auto s = std::make_unique<Sequence>();
  s->prompt_len = static_cast<int>(prompt.size());
  s->tokens = std::move(prompt);
  s->params = params;
  if (s->params.lora) {
    LLMRUN_CHECK(lora_ != nullptr, "Engine::submit: a LoRA adapter on an engine without LoRA");
    s->prefix_seed = s->params.lora->prefix_seed();
  }
  if (!s->params.seeded)
    s->params.sampling.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  s->sampler = std::make_unique<TokenSampler>(s->params.sampling);
  if (s->params.constraint)
    s->matcher = std::make_unique<structured::ConstraintMatcher>(s->params.constraint);
  s->text = std::make_unique<TextStream>(tok_, s->params.stop);
  s->sink = std::move(sub.sink);
  s->arrival = Clock::now();
  return s;
}

std::vector<uint64_t> Engine::submit(std::vector<Submission> batch) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (Submission& sub : batch) seqs.push_back(make_sequence(std::move(sub)));
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : seqs) {
      ids.push_back(s->id = next_id_++);
      inbox_.push_back(std::move(s));
      ++unfinished_;
    }
  }
  wake_.notify_all();
  return ids;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> fresh;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (auto& s : fresh) {
    stats_prompt_tokens_ += s->prompt_len;
    scheduler_.add(s.get());
    seqs_[s->id] = std::move(s);
  }
  for (uint64_t id : aborts) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    SequenceEvent ev;
    finish(*it->second, ev, "abort");
  }
  erase_finished();
}

void Engine::erase_finished() {
  for (uint64_t id : finished_) seqs_.erase(id);
  finished_.clear();
}

void Engine::publish_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting() + static_cast<int>(inbox_.size());
  stats_.kv_blocks_used = kv_.num_referenced();
  stats_.kv_blocks_cached = kv_.num_cached();
  stats_.prefix_queries = kv_.prefix_queries();
  stats_.prefix_hits = kv_.prefix_hits();
  stats_.preemptions = scheduler_.preemptions();
  stats_.lora_max_per_step = scheduler_.max_step_loras();
  stats_.lora_waits = scheduler_.lora_waits();
  stats_.draft_kv_blocks_used = drafter_ ? drafter_->blocks_in_use() : 0;
  stats_.prompt_tokens = stats_prompt_tokens_;
  stats_.generation_tokens = stats_generation_tokens_;
  stats_.steps = steps_;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock,
                 [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || !seqs_.empty(); });
      if (stop_) break;
    }
    take_inbox();
    if (!seqs_.empty()) {
      propose();
      const std::vector<ScheduledChunk> chunks = scheduler_.schedule();
      LLMRUN_CHECK(!chunks.empty(), "scheduler made no progress with " +
                                        std::to_string(seqs_.size()) + " sequences");
      step(chunks);
      erase_finished();
    }
    publish_stats();
  }
  for (auto& [id, s] : seqs_) {
    SequenceEvent ev;
    finish(*s, ev, "abort");
  }
  erase_finished();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : inbox_) {
    SequenceEvent ev;
    ev.finished = true;
    ev.finish_reason = "abort";
    ev.prompt_tokens = s->prompt_len;
    s->sink(std::move(ev));
    --unfinished_;
  }
  inbox_.clear();
}

void Engine::propose() {
  const SpeculativeConfig& sc = cfg_.speculative;
  for (auto& [id, s] : seqs_) s->spec.draft.clear();
  if (!sc.enabled()) return;
  // A large batch is compute-bound: extra verification rows cost what they would save.
  if (sc.disable_by_batch_size > 0 && scheduler_.num_running() >= sc.disable_by_batch_size) return;
  std::vector<Sequence*> drafting;
  std::vector<int> want;
  // Only a running sequence in its decode phase (everything but its last token computed).
  auto decoding = [](const Sequence& s) {
    return !s.kv.blocks.empty() && s.computed + 1 == static_cast<int>(s.tokens.size());
  };
  int batch = 0;  // the step's decoding sequences
  for (auto& [id, sp] : seqs_) batch += decoding(*sp) ? 1 : 0;
  std::vector<std::unique_ptr<ProposalGrammar>> grammars;  // per drafting sequence, or null
  for (auto& [id, sp] : seqs_) {
    Sequence& s = *sp;
    if (!decoding(s)) continue;
    // k proposals yield up to k + 1 tokens: stay within max_tokens and max_model_len.
    const int limit = std::min(s.prompt_len + s.params.max_tokens, cfg_.max_model_len);
    const int cap = std::min(sc.num_tokens, limit - static_cast<int>(s.tokens.size()) - 1);
    const int k = plan_proposal(s.spec, sc, s.tokens, cap, batch, spec_cost_, metrics_.spec);
    if (k <= 0) continue;
    // Structured output: the proposal stays inside the grammar (proposal_grammar.h).
    auto grammar =
        s.matcher ? std::make_unique<ProposalGrammar>(*s.matcher, end_tokens(s), token_budget(s))
                  : nullptr;
    if (sc.method == SpecMethod::ngram) {
      s.spec.draft = propose_ngram(s.tokens, sc.ngram, k);
      if (grammar) cut_to_grammar(s.spec.draft, std::move(*grammar));
    } else {
      drafting.push_back(&s);
      want.push_back(k);
      grammars.push_back(std::move(grammar));
    }
  }
  if (drafter_ && !drafting.empty()) {
    const auto t0 = Clock::now();
    std::vector<ProposalGrammar*> gates;
    for (auto& g : grammars) gates.push_back(g.get());
    drafter_->propose(drafting, want, gates);
    int drafted = 0;
    for (const Sequence* s : drafting) drafted += static_cast<int>(s->spec.draft.size());
    spec_cost_.record_draft(drafted, seconds(Clock::now() - t0));
  }
}

void Engine::step(const std::vector<ScheduledChunk>& scheduled) {
  // Multi-LoRA: a sequence's rows go anywhere in the step (rows are independent), so the
  // sequences of one adapter are placed together: one delta GEMM pair per adapter, not per run.
  std::vector<ScheduledChunk> sorted;
  if (lora_) {
    sorted = scheduled;
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return std::less<const ServedLora*>()(a.seq->params.lora.get(), b.seq->params.lora.get());
    });
  }
  const std::vector<ScheduledChunk>& chunks = lora_ ? sorted : scheduled;
  const auto t0 = Clock::now();
  bool decode_only = true;  // every chunk one sequence's last token (plus its proposals)
  for (const auto& c : chunks) decode_only = decode_only && c.samples && c.n == c.draft + 1;
  step_rows(chunks);
  // The speculation back-off's cost model (spec_policy.h) learns from decode steps.
  if (decode_only && cfg_.speculative.enabled()) {
    int rows = 0;
    for (const auto& c : chunks) rows += c.n;
    spec_cost_.record_step(static_cast<int>(chunks.size()), rows, seconds(Clock::now() - t0));
  }
}

void Engine::step_rows(const std::vector<ScheduledChunk>& chunks) {
  const int V = model_.config().vocab;
  const int S = static_cast<int>(chunks.size()), bs = cfg_.block_size;
  BatchInput in;
  for (const auto& c : chunks)
    in.max_blocks = std::max(in.max_blocks, static_cast<int>(c.seq->kv.blocks.size()));
  in.query_starts.assign(size_t(S) + 1, 0);
  in.context_lens.resize(size_t(S));
  in.block_tables.assign(size_t(S) * in.max_blocks, 0);
  std::vector<Sequence*> samplers;
  std::vector<int> first_row, drafts;  // per sampler: its first logits row, its proposal size
  for (int s = 0; s < S; ++s) {
    const ScheduledChunk& c = chunks[s];
    const int real = static_cast<int>(c.seq->tokens.size());
    for (int p = c.start; p < c.start + c.n; ++p) {
      in.tokens.push_back(p < real ? c.seq->tokens[p] : c.seq->spec.draft[size_t(p - real)]);
      in.positions.push_back(p);
      in.slots.push_back(c.seq->kv.blocks[p / bs] * bs + p % bs);
    }
    in.query_starts[s + 1] = in.query_starts[s] + c.n;
    in.context_lens[s] = c.start + c.n;
    std::copy(c.seq->kv.blocks.begin(), c.seq->kv.blocks.end(),
              in.block_tables.begin() + size_t(s) * in.max_blocks);
    if (c.samples) {
      // The last real token's row and one per proposed token: verification reads them all.
      first_row.push_back(static_cast<int>(in.logit_rows.size()));
      drafts.push_back(c.draft);
      for (int j = c.draft; j >= 0; --j) in.logit_rows.push_back(in.query_starts[s + 1] - 1 - j);
      samplers.push_back(c.seq);
    }
  }
  if (lora_) {
    std::vector<const ServedLora*> seq_lora;
    for (const auto& c : chunks) seq_lora.push_back(c.seq->params.lora.get());
    lora_->set_step(seq_lora, in.query_starts);
  }
  runner_->execute(in);
  ++steps_;

  for (const auto& c : chunks) {
    // Proposed tokens count as computed only once accepted (verify).
    c.seq->computed = c.start + c.n - c.draft;
    kv_.publish(c.seq->kv, c.seq->tokens, c.seq->computed);
  }
  const int R = static_cast<int>(samplers.size());
  bool any_greedy = false;
  for (const Sequence* s : samplers) any_greedy = any_greedy || !needs_distribution(s->params);
  const std::vector<int32_t> greedy =
      any_greedy ? runner_->argmax_rows() : std::vector<int32_t>(in.logit_rows.size(), -1);
  // Rows sampled where the logits are, in one launch (serve/device_sampler.h says which stay
  // on the host); the rest copy their logits row below.
  std::vector<int> on_device(size_t(R), -1);
  std::vector<DeviceRow> device_rows;
  std::vector<std::vector<uint32_t>> masks(static_cast<size_t>(R));
  for (int r = 0; r < R && device_sampler_->available(); ++r) {
    Sequence& s = *samplers[r];
    if (!needs_distribution(s.params) ||
        !samples_on_device(s.params, s.matcher != nullptr, drafts[size_t(r)] > 0))
      continue;
    if (s.matcher &&
        !grammar_bitmask(*s.matcher, V, token_budget(s), end_tokens(s), masks[size_t(r)]))
      continue;  // no token allowed: the host path ends it
    on_device[size_t(r)] = static_cast<int>(device_rows.size());
    device_rows.push_back({first_row[size_t(r)], &s.params, &s.tokens, s.prompt_len,
                           s.sampler.get(), s.matcher ? &masks[size_t(r)] : nullptr});
  }
  const std::vector<DeviceDraw> drawn = device_sampler_->sample(runner_->logits(), device_rows);
  std::vector<float> row;
  for (int r = 0; r < R; ++r) {
    const int first = first_row[size_t(r)];
    if (on_device[size_t(r)] >= 0 && drawn[size_t(on_device[size_t(r)])].token >= 0) {
      const DeviceDraw& d = drawn[size_t(on_device[size_t(r)])];
      if (samplers[r]->matcher) advance_grammar(*samplers[r], d.token);
      report_token(*samplers[r], d.token, nullptr, nullptr, d.has_logprob ? &d.logprob : nullptr);
      continue;
    }  // token -1: its grammar's tokens all have -inf logits; the host path below ends it
    if (drafts[size_t(r)] > 0) {
      verify(*samplers[r], first, drafts[size_t(r)], greedy);
      continue;
    }
    if (!needs_distribution(samplers[r]->params)) {
      sample_and_report(*samplers[r], nullptr, greedy[size_t(first)]);
      continue;
    }
    row.resize(size_t(V));
    runner_->copy_row(first, row.data());
    sample_and_report(*samplers[r], row.data(), -1);
  }
}

void Engine::verify(Sequence& s, int first_row, int d, const std::vector<int32_t>& greedy) {
  const int V = model_.config().vocab;
  SpecState& st = s.spec;
  const bool dist = needs_distribution(s.params);
  std::vector<float> row, masked, work;
  std::vector<double> p;
  int accepted = 0;
  bool rejected = false;
  // The step's tokens go to the client as one event: one wake-up of its writer per step.
  SequenceEvent pending;
  for (int i = 0; i <= d; ++i) {
    int32_t token;
    bool ok = false;
    const float* raw = nullptr;
    if (!dist) {
      // Greedy: the target's own pick at each position; a proposal survives when it is that.
      token = greedy[size_t(first_row + i)];
      ok = i < d && token == st.draft[size_t(i)];
    } else {
      row.resize(size_t(V));
      runner_->copy_row(first_row + i, row.data());
      // Penalties see the accepted proposals: s.tokens grows as they are reported.
      const float* use = apply_logit_processors(s.params, s.tokens, s.prompt_len, row.data(), V,
                                                tok_.vocab_size(), masked, work, raw);
      // Structured output: this position's mask (the grammar has taken the tokens before it),
      // so p is the constrained law, greedy's argmax the constrained argmax.
      if (s.matcher && !mask_row(s, use, work)) {
        pending.text += s.text->flush();
        finish(s, pending, "length");
        break;
      }
      s.sampler->distribution(use, V, p);
      if (i < d) {
        const std::vector<double>* q =
            size_t(i) < st.draft_probs.size() ? &st.draft_probs[size_t(i)] : nullptr;
        const Verdict v =
            verify_proposal(p, st.draft[size_t(i)], q, *s.sampler, cfg_.speculative.accept);
        token = v.token;
        ok = v.accepted;
      } else {
        token = s.sampler->draw(p);  // every proposal accepted: one more from the target
      }
    }
    if (ok) ++accepted;
    rejected = i < d && !ok;
    if (s.matcher) advance_grammar(s, token);
    report_token(s, token, raw, &pending);
    if (finished(s) || !ok) break;
  }
  if (!finished(s)) s.sink(std::move(pending));
  metrics_.spec.record(d, accepted);
  record_verification(st, d, accepted, rejected);
  st.draft.clear();
  st.draft_probs.clear();
  if (finished(s)) return;
  // The accepted proposals' k/v are the sequence's own now; the rejected ones' blocks go back.
  s.computed += accepted;
  kv_.publish(s.kv, s.tokens, s.computed);
  kv_.trim(s.kv, static_cast<int>(s.tokens.size()));
}

void Engine::sample_and_report(Sequence& s, const float* logits, int32_t greedy) {
  const int V = model_.config().vocab;
  const GenerationParams& p = s.params;
  if (!logits) return report_token(s, greedy, nullptr);
  std::vector<float> masked, work;
  const float* raw = nullptr;
  const float* use = apply_logit_processors(p, s.tokens, s.prompt_len, logits, V, tok_.vocab_size(),
                                            masked, work, raw);
  if (s.matcher) {  // structured output: refused tokens get -inf (serve/structured)
    if (!mask_row(s, use, work)) {
      SequenceEvent ev;
      ev.text = s.text->flush();
      return finish(s, ev, "length");
    }
    const int32_t token = s.sampler->sample(use, V);
    advance_grammar(s, token);
    return report_token(s, token, raw);
  }
  report_token(s, s.sampler->sample(use, V), raw);
}

std::vector<int32_t> Engine::end_tokens(const Sequence& s) const {
  std::vector<int32_t> ends = cfg_.stop_token_ids;
  ends.insert(ends.end(), s.params.stop_token_ids.begin(), s.params.stop_token_ids.end());
  if (tok_.eos_id() >= 0 && !s.params.ignore_eos) ends.push_back(tok_.eos_id());
  return ends;
}

int64_t Engine::token_budget(const Sequence& s) const {
  return std::min<int64_t>(s.params.max_tokens - s.generated(),
                           cfg_.max_model_len - int64_t(s.tokens.size()));
}

bool Engine::mask_row(Sequence& s, const float*& use, std::vector<float>& work) {
  const int V = model_.config().vocab;
  if (use != work.data()) work.assign(use, use + V);
  use = work.data();
  return s.matcher->mask_logits(work.data(), V, token_budget(s), end_tokens(s));
}

void Engine::advance_grammar(Sequence& s, int32_t token) {
  const std::vector<int32_t> ends = end_tokens(s);
  if (std::find(ends.begin(), ends.end(), token) == ends.end())
    LLMRUN_CHECK(s.matcher->accept(token), "a masked token was sampled");
}

void Engine::report_token(Sequence& s, int32_t token, const float* raw, SequenceEvent* pending,
                          const TokenLogprob* lp) {
  const int V = model_.config().vocab;
  const GenerationParams& p = s.params;
  SequenceEvent local;
  SequenceEvent& ev = pending ? *pending : local;
  ev.token_ids.push_back(token);
  if (p.logprobs >= 0) {
    LLMRUN_CHECK(raw != nullptr || lp != nullptr, "logprobs need the logits row");
    ev.tokens.push_back(lp ? *lp : token_logprobs(raw, V, token, p.logprobs));
  }
  s.tokens.push_back(token);
  ++stats_generation_tokens_;
  const auto now = Clock::now();
  if (!s.got_first_token) {
    metrics_.ttft.observe(seconds(now - s.arrival));
    s.got_first_token = true;
  } else {
    metrics_.itl.observe(seconds(now - s.last_token));
  }
  s.last_token = now;

  const auto stops_on = [&](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (!p.ignore_eos && (token == tok_.eos_id() || stops_on(cfg_.stop_token_ids)))
    return finish(s, ev, "stop");
  if (stops_on(p.stop_token_ids)) return finish(s, ev, "stop");
  bool stopped = false;
  ev.text += s.text->push(token, stopped);
  if (stopped) return finish(s, ev, "stop");
  if (s.matcher && s.matcher->complete()) {  // the grammar allows nothing more
    ev.text += s.text->flush();
    return finish(s, ev, "stop");
  }
  if (s.generated() >= p.max_tokens || static_cast<int>(s.tokens.size()) >= cfg_.max_model_len) {
    ev.text += s.text->flush();
    return finish(s, ev, "length");
  }
  if (!pending) s.sink(std::move(ev));
}

void Engine::finish(Sequence& s, SequenceEvent& ev, const std::string& reason) {
  scheduler_.remove(&s);
  if (drafter_) drafter_->release(s);
  ev.finished = true;
  ev.finish_reason = reason;
  ev.prompt_tokens = s.prompt_len;
  ev.completion_tokens = s.generated();
  ev.cached_tokens = s.cached_prompt_tokens;
  metrics_.e2e.observe(seconds(Clock::now() - s.arrival));
  s.sink(std::move(ev));
  finished_.push_back(s.id);
  --unfinished_;
}

}  // namespace llmrun
