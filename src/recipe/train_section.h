// The recipe's train section: batch, optimizer and learning-rate schedule. Defined here, not in
// src/train, because src/train depends on src/recipe (the run starts from a whole recipe).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace llmrun {

// How the learning rate decays after warmup, to min_lr at the last step.
enum class LrDecay { cosine, linear, constant };
const char* lr_decay_name(LrDecay d);
std::optional<LrDecay> lr_decay_from_name(std::string_view name);

struct TrainSection {
  int64_t steps = 100;
  int micro_batch = 4;
  int global_batch = 4;  // sequences per optimizer step; multiple of micro_batch
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup = 0;
  LrDecay schedule = LrDecay::cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double clip = 1.0;  // global-norm clipping; 0 disables
  uint64_t seed = 1;
  int64_t eval_every = 0;  // validation every N steps (and at the last step); 0: only at the last
  int eval_batches = 4;    // micro-batches of data.valid per evaluation
};

}  // namespace llmrun
