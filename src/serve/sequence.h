#pragma once
// One sequence the engine is working on: its tokens, how far its KV cache is computed, its
// blocks, and its per-request sampling state.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "serve/kv_block_manager.h"
#include "serve/request.h"
#include "serve/sampler.h"
#include "serve/speculative/speculative.h"
#include "serve/structured/token_mask.h"
#include "serve/text_stream.h"

namespace llmrun {

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt then generated
  int prompt_len = 0;
  int computed = 0;              // leading tokens whose k/v are in the cache
  int cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache at first admission
  bool admitted_once = false;
  SeqBlocks kv;
  GenerationParams params;
  std::unique_ptr<TokenSampler> sampler;
  std::unique_ptr<structured::ConstraintMatcher> matcher;  // set when params.constraint is
  std::unique_ptr<TextStream> text;
  EventSink sink;
  std::chrono::steady_clock::time_point arrival, last_token;
  bool got_first_token = false;
  SpecState spec;  // speculative decoding: this step's proposal, back-off, draft KV
  uint64_t prefix_seed = kPrefixChainSeed;  // its adapter's prefix-cache chain (serve/lora_*)

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

}  // namespace llmrun
