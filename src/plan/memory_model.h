#pragma once
// Bytes per rank, predicted from shapes. Tensor parallelism gives each rank heads/tp query
// heads, max(kv_heads/tp, 1) key/value heads and ffn/tp hidden units (column-parallel qkv and
// up/gate, row-parallel out and down with their biases replicated), vocab/tp rows of the token
// table and head (rank 0 has the extra row of an uneven split, so it is the one shown), and
// replicated norms and GPT-2 position table; sequence parallelism shards the residual stream
// and the norms' activations by tp. Pipeline stage p holds the blocks of its virtual stages,
// the embedding on the first, the final norm and head on the last (with tied embeddings and
// pp > 1 the last stage keeps its own copy of the token table as the head). Each bucket
// (embedding, each block, head) is padded to a multiple of dp, as ZeroOptimizer does.
// memory.offload moves the moments (and ZeRO-3 parameter shards) to host memory or files and
// adds the device slots that stream them, for a device backend (plan/offload_staging.h).
#include <array>
#include <cstdint>
#include <vector>

#include "parallel/layout_rules.h"

namespace llmrun {

struct StageMemory {
  int stage = 0;
  std::vector<int> blocks;  // global indices of the blocks this stage runs
  bool embedding = false, head = false;
  int64_t param_elements = 0;  // this rank's parameters, buckets padded to a multiple of dp
  int64_t shard_elements = 0;  // what ZeRO leaves this rank of them (== param_elements at dp 1)
  int64_t largest_bucket = 0;  // padded elements of its largest bucket (ZeRO-2/3 buffer size)
  int buckets = 0;             // non-empty buckets
  // Persistent bytes.
  double params = 0, grads = 0;
  double optimizer = 0;  // AdamW m + v in device memory (fp32 weights are their own master)
  double optimizer_offloaded = 0;  // the same state held in host memory (cpu) or on disk (nvme)
  double params_offloaded =
      0;               // ZeRO-3 parameter shards held in host memory (cpu) or on disk (nvme)
  double buffers = 0;  // ZeRO-2/3 gather/reduce slots and receive shards: an upper bound
  // Offload's own memory (plan/offload_staging.h): device slots that stream the offloaded
  // moments and parameter shards through the optimizer, the ZeRO-3 shards fetched ahead of
  // their gathers (all in the peak), and the page-locked host memory (not in the peak).
  int64_t largest_shard = 0;  // elements of the largest per-bucket array an offload store holds
  int64_t optimizer_piece = 0, params_piece = 0;  // floats per slot and array (0: not offloaded)
  double optimizer_staging = 0, params_staging = 0, params_fetch = 0;
  double offload_staging = 0;  // the three above
  double host_pinned = 0;      // cpu: the offloaded arrays; nvme: the file slots
  // Activations: saved for backward by one micro-batch through all of the stage's blocks.
  std::array<double, 3> act_per_micro{};  // indexed by Recompute: none, selective, full
  int max_in_flight = 1;  // schedule's bound, in units (interleaved: micro-batch x chunk)
  double act_in_flight =
      0;  // most saved bytes alive at once over the schedule (layout's recompute)
  double act_workspace = 0;  // used once whatever is in flight: backward scratch, head, recompute
  double activations = 0;    // act_in_flight + act_workspace
  double peak = 0;           // params + grads + optimizer + buffers + offload_staging + activations
  double kv_cache_per_sequence = 0;  // serving: k and v of the stage's layers at seq_len, fp32
};

// One entry per pipeline stage (tensor-parallel rank 0; data-parallel ranks are equal).
std::vector<StageMemory> plan_memory(const TrainingShape& s, const TrainingLayout& l);

// Rows of the token table tensor-parallel rank `rank` holds: vocab / tp, the first
// vocab mod tp ranks one more.
int64_t vocab_rows(int64_t vocab, int tp, int rank);

}  // namespace llmrun
