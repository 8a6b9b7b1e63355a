#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "ckpt/model_dir.h"
#include "cli/backend_option.h"
#include "cli/commands.h"
#include "cli/speculative_option.h"
#include "quant/kv_cache_dtype.h"
#include "serve/engine.h"
#include "serve/sampler.h"

namespace llmrun::cli {

namespace {
struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  int max_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  BackendOptions backend;
  bool timing = false;
  SpeculativeOptions speculative;
  std::string kv_dtype;  // empty: f32 in the contiguous cache
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// With --speculative (whose steps verify several proposed tokens at once) or --kv-dtype (whose
// typed KV storage is the serving engine's paged pool) the single sequence runs through the
// serving engine; the output is printed the way the plain loop prints it.
void generate_with_engine(const GenerateArgs& a, LoadedModel& m, Backend& backend,
                          const std::vector<int32_t>& prompt, int budget) {
  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.max_batched_tokens = 512;
  ec.max_model_len = budget;
  ec.num_blocks = (budget + ec.block_size - 1) / ec.block_size + 1;
  ec.prefix_caching = false;
  ec.stop_token_ids = m.eos_token_ids;
  ec.kv_dtype = quant::parse_kv_dtype(a.kv_dtype.empty() ? "f32" : a.kv_dtype);
  quant::check_kv_dtype(ec.kv_dtype, m.model->config().head_dim());
  if (!a.kv_dtype.empty())
    std::fprintf(stderr, "%s\n",
                 quant::kv_cache_summary(m.model->config(), ec.kv_dtype,
                                         int64_t(ec.num_blocks) * ec.block_size)
                     .c_str());
  LoadedModel draft;
  ec.speculative = make_speculative_config(a.speculative, m, backend, draft);
  GenerationParams gp;
  gp.sampling = a.sampling;
  gp.seeded = true;
  gp.max_tokens = budget - static_cast<int>(prompt.size());
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int tokens = 0;
  Clock::time_point first, last;
  const auto start = Clock::now();
  const Tokenizer& tok = *m.tokenizer;
  {
    Engine engine(*m.model, tok, ec);
    engine.submit(prompt, gp, [&](SequenceEvent&& ev) {
      for (int32_t id : ev.token_ids) {
        if (id == tok.eos_id() ||
            std::find(m.eos_token_ids.begin(), m.eos_token_ids.end(), id) != m.eos_token_ids.end())
          continue;  // the end token ends the text; it is not part of it
        const std::string piece = tok.token_bytes(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
      }
      std::fflush(stdout);
      std::lock_guard<std::mutex> lock(mu);
      const auto now = Clock::now();
      if (tokens == 0) first = now;
      last = now;
      tokens += static_cast<int>(ev.token_ids.size());
      if (ev.finished) {
        done = true;
        cv.notify_all();
      }
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    std::fputs("\n", stdout);
    if (a.timing) {
      std::fflush(stdout);
      const ServingMetrics& sm = engine.metrics();
      const double prefill_ms = std::chrono::duration<double, std::milli>(first - start).count();
      const double decode_ms = std::chrono::duration<double, std::milli>(last - first).count();
      const int steps = tokens - 1;
      std::fprintf(stderr,
                   "timing: prefill %zu tokens %.2f ms; decode %d tokens %.2f ms (%.2f ms/token, "
                   "%.1f tokens/s)\n",
                   prompt.size(), prefill_ms, steps, decode_ms, steps > 0 ? decode_ms / steps : 0.0,
                   decode_ms > 0 ? 1000.0 * steps / decode_ms : 0.0);
      if (!ec.speculative.enabled()) return;
      const int64_t drafts = sm.spec.drafts(), proposed = sm.spec.draft_tokens(),
                    accepted = sm.spec.accepted_tokens();
      std::fprintf(stderr,
                   "speculative: %lld drafts, %lld of %lld proposed tokens accepted (acceptance "
                   "rate %.3f, mean acceptance length %.2f)\n",
                   static_cast<long long>(drafts), static_cast<long long>(accepted),
                   static_cast<long long>(proposed), proposed ? double(accepted) / proposed : 0.0,
                   drafts ? 1.0 + double(accepted) / drafts : 0.0);
      std::fprintf(stderr, "speculative back-off: %lld steps without proposals, %lld back-offs\n",
                   static_cast<long long>(sm.spec.skipped_steps()),
                   static_cast<long long>(sm.spec.backoffs()));
    }
  }
}

int generate(const GenerateArgs& a) {
  auto backend = make_cli_backend(a.backend, {a.model_dir, a.speculative.draft_model_dir});
  LoadedModel m = load_model_dir(a.model_dir, *backend);
  const ModelConfig& cfg = m.model->config();
  std::vector<int32_t> prompt = m.tokenizer->encode_prompt(a.prompt);
  if (prompt.empty()) throw UserError("--prompt: the prompt encodes to no tokens");
  for (int32_t t : prompt)
    if (t >= cfg.vocab)
      throw UserError("--prompt: token " + std::to_string(t) +
                      " is outside the model's vocabulary");
  const int asked = static_cast<int>(prompt.size()) + a.max_tokens;
  int budget = asked;
  if (cfg.arch == Arch::gpt2 && budget > cfg.seq_len) {
    if (static_cast<int>(prompt.size()) >= cfg.seq_len)
      throw UserError("--prompt: " + std::to_string(prompt.size()) +
                      " tokens do not fit the model's context of " + std::to_string(cfg.seq_len));
    budget = cfg.seq_len;
  }

  if (parse_spec_method(a.speculative.method) != SpecMethod::none || !a.kv_dtype.empty()) {
    std::fputs(a.prompt.c_str(), stdout);
    generate_with_engine(a, m, *backend, prompt, budget);
    if (budget < asked)
      std::fprintf(stderr,
                   "note: stopped after at most %d of %d tokens: the model's context length is %d "
                   "tokens (prompt %zu)\n",
                   budget - static_cast<int>(prompt.size()), a.max_tokens, cfg.seq_len,
                   prompt.size());
    return 0;
  }
  KvCache cache = m.model->make_cache(budget);
  Buffer logits_buf = backend->allocate(size_t(cfg.vocab) * 4);
  Tensor logits = logits_buf.as(DType::f32, {cfg.vocab});
  std::vector<float> host(cfg.vocab);
  TokenSampler sampler(a.sampling);
  // Ids past the tokenizer's vocabulary (an embedding table padded for speed) cannot be
  // decoded: sample among the tokenizer's ids only, as `llmrun serve` does.
  const int sample_vocab = std::min(cfg.vocab, m.tokenizer->vocab_size());
  // Greedy decoding picks on the backend and reads back one id, not the logits row.
  const bool greedy = a.sampling.temperature <= 0.0f;
  Buffer argmax_buf = backend->allocate(size_t(sample_vocab) * 4 + 64);
  const Tensor argmax_in = sample_vocab < cfg.vocab ? argmax_buf.as(DType::f32, {1, sample_vocab})
                                                    : logits.view({1, cfg.vocab});
  const Tensor argmax_id = argmax_buf.as(DType::i32, {1}, size_t(sample_vocab) * 4);
  // A device backend samples where the logits are (one id comes back, not the row): the host
  // generator only draws each step's uniform. A step whose cuts leave one token draws one too,
  // where the host sampler draws none, so a seed's later tokens may differ from a CPU run's.
  const Backend::RowSample device_params{a.sampling.temperature, a.sampling.top_k, a.sampling.top_p,
                                         a.sampling.min_p, 0.0};
  const bool device_sampling = !greedy && backend->sample_rows(Tensor(), Tensor(), {});
  auto next_token = [&]() -> int32_t {
    if (!greedy && device_sampling) {
      if (sample_vocab < cfg.vocab) backend->copy_cols(argmax_in, logits.view({1, cfg.vocab}), 0);
      Backend::RowSample row = device_params;
      row.u = a.sampling.top_k == 1 ? 0.0 : sampler.uniform();
      backend->sample_rows(argmax_id, argmax_in, {row});
      int32_t id = 0;
      backend->copy(Tensor(&id, DType::i32, {1}), argmax_id);
      return id;
    }
    if (!greedy) {
      backend->copy(Tensor(host.data(), DType::f32, {cfg.vocab}), logits);
      return sampler.sample(host.data(), sample_vocab);
    }
    if (sample_vocab < cfg.vocab) backend->copy_cols(argmax_in, logits.view({1, cfg.vocab}), 0);
    backend->argmax_rows(argmax_id, argmax_in);
    int32_t id = 0;
    backend->copy(Tensor(&id, DType::i32, {1}), argmax_id);
    return id;
  };

  std::fputs(a.prompt.c_str(), stdout);
  const auto t_prefill = Clock::now();
  m.model->forward_cached(prompt.data(), static_cast<int>(prompt.size()), cache, logits);
  const double prefill_ms = ms_since(t_prefill);
  const int new_tokens = budget - static_cast<int>(prompt.size());
  // Decode timing covers every single-token step: forward, logits copy, sampling, output.
  const auto t_decode = Clock::now();
  int decode_steps = 0;
  bool ended_by_eos = false;
  for (int i = 0; i < new_tokens; ++i) {
    int32_t next = next_token();
    if (next == m.tokenizer->eos_id() ||
        std::find(m.eos_token_ids.begin(), m.eos_token_ids.end(), next) != m.eos_token_ids.end()) {
      ended_by_eos = true;
      break;
    }
    std::string piece = m.tokenizer->token_bytes(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    if (i + 1 < new_tokens) {
      m.model->forward_cached(&next, 1, cache, logits);
      ++decode_steps;
    }
  }
  const double decode_ms = ms_since(t_decode);
  std::fputs("\n", stdout);
  // A learned-position model (GPT-2) cannot go past its context: say why the text stops early.
  if (!ended_by_eos && budget < asked) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "note: stopped after %d of %d tokens: the model's context length is %d tokens "
                 "(prompt %zu)\n",
                 new_tokens, a.max_tokens, cfg.seq_len, prompt.size());
  }
  if (a.timing) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "timing: prefill %zu tokens %.2f ms; decode %d steps %.2f ms (%.2f ms/token, %.1f "
                 "tokens/s)\n",
                 prompt.size(), prefill_ms, decode_steps, decode_ms,
                 decode_steps ? decode_ms / decode_steps : 0.0,
                 decode_ms > 0 ? 1000.0 * decode_steps / decode_ms : 0.0);
  }
  return 0;
}
}  // namespace

Command add_generate_command(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app = root.add_subcommand("generate", "Generate text from a model directory");
  app->add_option("model_dir", args->model_dir,
                  "Hugging Face model directory (as written by train)")
      ->required();
  app->add_option("--prompt", args->prompt, "Text to continue")->required();
  app->add_option("--max-tokens", args->max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--temperature", args->sampling.temperature, "0 for greedy")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-k", args->sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--top-p", args->sampling.top_p, "Nucleus sampling mass")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--seed", args->sampling.seed, "Sampling seed");
  add_backend_options(app, args->backend, /*with_dtype=*/true);
  app->add_flag("--timing", args->timing, "Print prefill and per-token decode time to stderr");
  add_speculative_options(app, args->speculative);
  app->add_option("--kv-dtype", args->kv_dtype,
                  "KV cache storage f32, f16, bf16 or q8_0 (runs the paged cache of serve; "
                  "reduced types: CPU backend)");
  return {app, [args]() { return generate(*args); }};
}

}  // namespace llmrun::cli
