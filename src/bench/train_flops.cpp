#include "bench/train_flops.h"

namespace llmrun {

TrainFlops train_flops(const ModelConfig& cfg, int seq, Recompute recompute) {
  TrainFlops f;
  f.model_per_token = cfg.train_flops_per_token(seq);
  // The LM head is 6 V h of the count; the rest is the layers', forward being a third of it
  // (forward 2 FLOPs per weight and token, backward 4).
  const double head = 6.0 * double(cfg.vocab) * cfg.d_model;
  const double layers_forward = (f.model_per_token - head) / 3.0;
  const double attention_forward = 4.0 * cfg.layers * double(cfg.d_model) * seq;
  f.hardware_per_token =
      f.model_per_token + (recompute == Recompute::full        ? layers_forward
                           : recompute == Recompute::selective ? attention_forward
                                                               : 0.0);
  return f;
}

}  // namespace llmrun
