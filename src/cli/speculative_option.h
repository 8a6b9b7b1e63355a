// The speculative decoding options `serve`, `generate` and `bench serve` share
// (--speculative, --num-speculative-tokens, --ngram-min/--ngram-max, --draft-model,
// --speculative-disable-by-batch-size, --no-speculative-backoff), checked and turned into the
// engine's config.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "ckpt/model_dir.h"
#include "serve/speculative/speculative.h"

namespace llmrun::cli {

struct SpeculativeOptions {
  std::string method = "none";
  int num_tokens = 4;
  int ngram_min = 1, ngram_max = 4;
  std::string draft_model_dir;
  int disable_by_batch_size = 8;
  bool no_backoff = false;  // --no-speculative-backoff: propose at every step
};

void add_speculative_options(CLI::App* app, SpeculativeOptions& o);

// The engine's config for these options. For --speculative draft it loads the draft model
// into `draft` (on `backend`) and refuses, saying why, one whose tokenizer differs from the
// target's. UserError on inconsistent options.
SpeculativeConfig make_speculative_config(const SpeculativeOptions& o, const LoadedModel& target,
                                          Backend& backend, LoadedModel& draft);

}  // namespace llmrun::cli
