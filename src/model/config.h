// src/model owns the transformer: its configuration, the flat per-bucket parameter
// layout (with Hugging Face names), and explicit forward/backward per layer.
#pragma once
#include <cstdint>
#include <string>

#include "backend/rope_frequencies.h"
#include "model/moe_config.h"

namespace llmrun {

enum class Arch { gpt2, llama };
const char* arch_name(Arch a);

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int layers = 2;
  int d_model = 64;
  int heads = 4;
  int kv_heads = 4;  // == heads for GPT-2
  int ffn = 256;     // MLP hidden size
  int vocab = 256;
  int seq_len = 64;  // maximum context (GPT-2: size of the position table)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;  // Llama: context-extension rescaling of the rotary frequencies
  float norm_eps = 1e-5f;
  bool tie_embeddings = true;  // GPT-2 always ties; Llama usually does not
  bool qkv_bias = false;       // Llama family: biases on q/k/v (Qwen 2; Megatron's --add-qkv-bias)
  bool phi3 = false;           // Llama whose files fuse q|k|v (qkv_proj) and gate|up (gate_up_proj)
  // OLMoE: RMSNorm (own weights, the model's eps) over the whole q projection output
  // (heads * head_dim wide) and the whole k output (kv_heads * head_dim), before RoPE.
  bool qk_norm = false;
  int fixed_head_dim = 0;  // 0: d_model / heads (a tensor-parallel shard keeps the full model's)
  MoeConfig moe;           // Llama only: routed experts in place of the MLP (experts == 0: dense)

  int head_dim() const { return fixed_head_dim > 0 ? fixed_head_dim : d_model / heads; }
  // Exact number of parameters (the sum of all tensor sizes).
  int64_t param_count() const;
  // Non-embedding parameters: the "N" of 6N FLOPs per token.
  int64_t matmul_param_count() const;
  // Training FLOPs per token (forward + backward) at sequence length `seq`:
  // 6 * N_matmul + 6 * N_head + 12 * layers * d_model * seq (attention scores and values, causal
  // counted as full, as Megatron and nanoGPT do).
  double train_flops_per_token(int seq) const;
};

}  // namespace llmrun
