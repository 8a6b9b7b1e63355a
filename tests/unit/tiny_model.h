#pragma once
// Small model shapes for unit tests: 2 layers, 4 heads, GQA (2 kv heads) and an untied head for
// Llama, tied for GPT-2.
#include "model/config.h"

namespace llmrun::test_models {

inline ModelConfig tiny_config(Arch arch, int d_model, int ffn, int vocab, int seq_len) {
  ModelConfig c;
  c.arch = arch;
  c.layers = 2;
  c.d_model = d_model;
  c.heads = 4;
  c.kv_heads = arch == Arch::llama ? 2 : 4;
  c.ffn = ffn;
  c.vocab = vocab;
  c.seq_len = seq_len;
  c.tie_embeddings = arch == Arch::gpt2;
  return c;
}

}  // namespace llmrun::test_models
