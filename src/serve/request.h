#pragma once
// What a client asks of the engine for one sequence, and what the engine reports back.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "serve/sampler.h"

namespace llmrun {

namespace structured {
class CompiledConstraint;
}
class ServedLora;

struct GenerationParams {
  SamplingParams sampling;  // temperature 0 = greedy
  bool seeded = false;      // false: the engine draws a seed
  int max_tokens = 16;
  std::vector<std::string> stop;  // strings that end generation; not emitted
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // vLLM's: tokens that end generation like the end token
  float presence_penalty = 0, frequency_penalty = 0;  // OpenAI: over generated tokens
  float repetition_penalty = 1;  // Hugging Face/CTRL: over prompt and generated tokens
  std::map<int32_t, float> logit_bias;
  int logprobs = -1;  // -1: none; else also this many top alternatives
  // Structured output (serve/structured): tokens outside this grammar are never sampled.
  std::shared_ptr<structured::CompiledConstraint> constraint;
  // Multi-LoRA serving (serve/lora_adapter.h): the adapter applied to this sequence; null: base.
  std::shared_ptr<const ServedLora> lora;
};

struct TopLogprob {
  int32_t token;
  float logprob;
};
struct TokenLogprob {
  int32_t token;
  float logprob;  // of the raw model distribution (before penalties)
  std::vector<TopLogprob> top;
};

// One report for a sequence: new text (stop strings held back until ruled out), the tokens
// behind it, and on the last report why it ended.
struct SequenceEvent {
  std::string text;
  std::vector<TokenLogprob> tokens;  // filled when logprobs >= 0, one per generated token
  std::vector<int32_t> token_ids;
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "abort"
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// Called on the engine thread; must not block.
using EventSink = std::function<void(SequenceEvent&&)>;

}  // namespace llmrun
