#pragma once
// The serving engine: one loop thread schedules steps over a flattened batch of every
// scheduled sequence, has the ModelRunner (serve/model_runner.h: device buffers, paged KV
// pool, forward, logits) run them, samples each finished row with its own seeded sampler and
// reports text to the request's sink. Other threads only submit and abort; both are queued
// and picked up between steps.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer.h"
#include "model/transformer.h"
#include "serve/device_sampler.h"
#include "serve/kv_block_manager.h"
#include "serve/lora_runner.h"
#include "serve/metrics.h"
#include "serve/model_runner.h"
#include "serve/scheduler.h"
#include "serve/speculative/draft_proposer.h"
#include "serve/speculative/speculative.h"

namespace llmrun {

struct EngineConfig {
  int max_num_seqs = 64;
  int max_batched_tokens = 512;
  int block_size = 16;
  int num_blocks = 0;     // KV pool size in blocks
  int max_model_len = 0;  // prompt + generated tokens per sequence
  bool prefix_caching = true;
  // Tokens that end every sequence besides the tokenizer's end token (ignore_eos aside):
  // generation_config.json's eos_token_id, e.g. Llama 3 Instruct's <|eot_id|>.
  std::vector<int32_t> stop_token_ids;
  // Speculative decoding (serve/speculative/speculative.h); off by default.
  SpeculativeConfig speculative;
  // The KV pool's storage type (--kv-dtype; see ModelRunnerLimits).
  quant::QType kv_dtype = quant::QType::f32;
  // Multi-LoRA serving (serve/lora_runner.h): > 0 applies each sequence's adapter
  // (GenerationParams::lora), whose stacked A is at most this wide; 0: adapters are refused.
  int64_t max_lora_width = 0;
  // Distinct adapters the running batch may mix (--max-loras; 0: no limit): see scheduler.h.
  int max_loras = 0;
};

// KV pool blocks that fit `bytes` for this model (k and v, every layer, in kv_dtype).
int kv_blocks_for_bytes(const ModelConfig& cfg, int block_size, int64_t bytes,
                        quant::QType kv_dtype = quant::QType::f32);

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t prefix_queries = 0, prefix_hits = 0, preemptions = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0, steps = 0;
  int draft_kv_blocks_used = 0;  // the draft model's pool (--speculative draft)
  // Multi-LoRA: the most distinct adapters one step has run; admissions held back by --max-loras.
  int lora_max_per_step = 0;
  int64_t lora_waits = 0;
};

class Engine {
 public:
  Engine(Transformer& model, const Tokenizer& tok, const EngineConfig& cfg);
  ~Engine();  // stops the loop; unfinished sequences get an "abort" event

  const EngineConfig& config() const { return cfg_; }
  // Thread-safe. The prompt must be non-empty, in the vocabulary, and prompt + max_tokens
  // within max_model_len (the HTTP layer checks and answers 400 first). Returns the id.
  uint64_t submit(std::vector<int32_t> prompt, const GenerationParams& params, EventSink sink);
  struct Submission {
    std::vector<int32_t> prompt;
    GenerationParams params;
    EventSink sink;
  };
  // All or none, and in one step: a request's choices and prompts are scheduled together
  // (as vLLM does), however the engine thread and the caller interleave. Returns the ids.
  std::vector<uint64_t> submit(std::vector<Submission> batch);
  // Thread-safe; a finished or unknown id is ignored. The sink gets a final "abort" event.
  void abort(uint64_t id);
  EngineStats stats() const;
  int unfinished() const { return unfinished_.load(); }
  ServingMetrics& metrics() { return metrics_; }

 private:
  void loop();
  std::unique_ptr<Sequence> make_sequence(Submission&& sub) const;  // checks the request
  void take_inbox();
  void step(const std::vector<ScheduledChunk>& chunks);  // times step_rows for spec_cost_
  void step_rows(const std::vector<ScheduledChunk>& chunks);
  // Speculative decoding: fills spec.draft of the decoding sequences before scheduling, and
  // after the step keeps the accepted prefix of a sequence's proposal plus one token.
  void propose();
  void verify(Sequence& s, int first_row, int draft, const std::vector<int32_t>& greedy);
  bool finished(const Sequence& s) const {
    return std::find(finished_.begin(), finished_.end(), s.id) != finished_.end();
  }
  // logits: the row's full distribution (host), or null for a greedy row whose token the
  // backend's argmax already picked (`greedy`).
  void sample_and_report(Sequence& s, const float* logits, int32_t greedy);
  // Appends the token, reports it (with logprobs from `raw`, the row's unpenalised logits)
  // and finishes the sequence on a stop or its length.
  // `pending`: add to this event instead of sending one (a verification step's tokens go out
  // together; a finish sends it).
  // `lp`: the logprobs already computed where the logits are (serve/device_sampler.h).
  void report_token(Sequence& s, int32_t token, const float* raw, SequenceEvent* pending = nullptr,
                    const TokenLogprob* lp = nullptr);
  // Structured output. end_tokens: the tokens that end `s` (its grammar allows them once the
  // output is complete); token_budget: the tokens it may still generate. mask_row: `use`
  // copied into `work` (unless it is `work`) with the tokens the grammar refuses now at -inf;
  // false when it allows none. advance_grammar: the grammar takes a picked token.
  std::vector<int32_t> end_tokens(const Sequence& s) const;
  int64_t token_budget(const Sequence& s) const;
  bool mask_row(Sequence& s, const float*& use, std::vector<float>& work);
  void advance_grammar(Sequence& s, int32_t token);
  void finish(Sequence& s, SequenceEvent& ev, const std::string& reason);
  void erase_finished();
  void publish_stats();

  Transformer& model_;
  const Tokenizer& tok_;
  EngineConfig cfg_;
  KvBlockManager kv_;
  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<DeviceSampler> device_sampler_;       // rows sampled on a device backend
  std::unique_ptr<DraftProposer> drafter_;              // --speculative draft
  StepCostModel spec_cost_;                             // the speculation back-off's step costs
  std::unique_ptr<LoraBatchRunner> lora_;               // max_lora_width > 0
  std::map<uint64_t, std::unique_ptr<Sequence>> seqs_;  // engine thread only
  ServingMetrics metrics_;
  std::vector<uint64_t> finished_;  // erased from seqs_ once no step holds pointers to them
  int64_t stats_prompt_tokens_ = 0, stats_generation_tokens_ = 0, steps_ = 0;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<uint64_t> aborts_;
  EngineStats stats_;  // published after each step, under mu_
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::atomic<int> unfinished_{0};
  std::thread thread_;
};

}  // namespace llmrun
