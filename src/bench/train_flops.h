#pragma once
// FLOPs that MFU and HFU divide by. Model FLOPs are Megatron's count (Narayanan et al. 2021,
// eq. 3): per GPT step 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), i.e. per token
// 6 x (matmul parameters of the layers + the V x h head) + 12 l h s, with causal attention
// counted in full. ModelConfig::train_flops_per_token is exactly that, generalised from
// GPT's 12 h^2 per layer to the real matmul parameters (GQA, SwiGLU). Hardware FLOPs add
// what activation recompute runs again: with full recompute every layer's forward
// (a third of the layers' part, not the head), which gives Megatron's
// 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); selective recompute runs the attention core's
// forward again (4 l h s per token).
#include "model/config.h"
#include "model/recompute.h"

namespace llmrun {

struct TrainFlops {
  double model_per_token = 0;
  double hardware_per_token = 0;
};

TrainFlops train_flops(const ModelConfig& cfg, int seq, Recompute recompute);

}  // namespace llmrun
