// The serving model runner: the device side of one engine step. It owns the step's input
// buffers (tokens, positions, KV slots, block tables, query starts, context lengths, the rows
// that need logits), allocated once at their largest size, the paged KV pool, the forward
// pass and the logits. The engine hands it a BatchInput (what the scheduler decided, on the
// host) and reads back only what sampling needs: one id per greedy row (argmax on the
// backend), full logits rows only for the rows whose sampling needs the distribution.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/transformer.h"
#include "quant/block_formats.h"

namespace llmrun {

struct ModelRunnerLimits {
  int max_batched_tokens = 512;  // tokens per step
  int max_num_seqs = 64;         // sequences per step (and logits rows)
  int max_model_len = 0;         // tokens per sequence
  int block_size = 16;
  int num_blocks = 0;  // KV pool size
  // Logits rows per step (0: max_num_seqs, one per sequence); speculative decoding verifies
  // several rows of a sequence at once.
  int max_logit_rows = 0;
  // The pool's storage type (--kv-dtype): f32 runs the backend's kernels; f16, bf16 and q8_0
  // run quant/kv_cache_dtype.h's on host memory (the CPU backend).
  quant::QType kv_dtype = quant::QType::f32;
};

// One step's batch, flattened: sequence s owns token rows query_starts[s] .. query_starts[s+1]
// and has context_lens[s] tokens in the cache counting its new ones; block_tables holds
// max_blocks pool blocks per sequence. logit_rows: the token rows whose logits are wanted.
struct BatchInput {
  std::vector<int32_t> tokens, positions, slots, query_starts, context_lens, block_tables,
      logit_rows;
  int max_blocks = 1;
};

class ModelRunner {
 public:
  // sample_vocab: the columns a token may be sampled from (the tokenizer's vocabulary; an
  // embedding table padded beyond it never emits its extra rows).
  ModelRunner(Transformer& model, const ModelRunnerLimits& limits, int sample_vocab);

  // Uploads the batch in one copy and runs the forward; logits of logit_rows stay on the
  // backend until argmax_rows/copy_rows ask for them.
  void execute(const BatchInput& in);
  // The greedy token of every logits row of the last step (lowest id on ties), computed on the
  // backend over the sample_vocab columns; one id per row comes back.
  std::vector<int32_t> argmax_rows();
  // Logits row `row` of the last step into host [vocab].
  void copy_row(int row, float* host);
  // The last step's logits [rows, vocab], on the backend (serve/device_sampler.h samples them).
  Tensor logits() const { return logits_buf_.as(DType::f32, {std::max(rows_, 1), vocab_}); }

 private:
  Transformer& model_;
  Backend& be_;
  ModelRunnerLimits lim_;
  int vocab_, sample_vocab_, max_blocks_per_seq_;
  std::vector<Buffer> k_pool_, v_pool_;  // per layer [num_blocks * block_size, kv_cols]
  Buffer q_buf_, logits_buf_, argmax_cols_buf_, ids_buf_;
  Buffer meta_, meta_host_;  // the step's inputs, packed: device side and pinned host staging
  int rows_ = 0;             // logits rows of the last step
};

}  // namespace llmrun
