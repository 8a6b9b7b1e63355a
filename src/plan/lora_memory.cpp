#include "plan/lora_memory.h"

#include <sstream>

#include "model/lora_frozen_base.h"
#include "model/lora_layout.h"
#include "parallel/model_partition.h"

namespace llmrun {

std::string lora_memory_text(const Recipe& r) {
  if (!r.finetune.enabled) return "";
  const int dp = r.parallel.dp, zero = r.parallel.zero;
  std::ostringstream o;
  o << "\nLoRA memory per rank (finetune: lora, rank " << r.finetune.rank
    << "; replaces the params, grads and optimizer above, which count full fine-tuning):\n";
  for (int stage = 0; stage < r.parallel.pp; ++stage) {
    const ModelShard shard = model_shard(r.parallel, r.model.layers, 0, stage);
    int64_t base = 0, adapters = 0, owned = 0;
    const std::vector<BucketLayout> base_layout = model_layout(r.model, shard);
    for (const BucketLayout& b : base_layout) base += b.numel;
    for (const BucketLayout& b : lora_layout(r.model, shard, r.finetune).buckets) {
      const int64_t padded = (b.numel + dp - 1) / dp * dp;
      adapters += padded;
      owned += zero >= 1 ? padded / dp : padded;
    }
    // bf16: the base's bf16 buckets plus the fp32 copies of the buckets in use at once.
    const bool bf16 = r.finetune.base_dtype == "bf16";
    const int64_t working = bf16 ? frozen_base_working_numel(r.model, shard, base_layout) : 0;
    const int64_t base_bytes = (bf16 ? 2 : 4) * base + 4 * working;
    const double base_b = double(base_bytes), params_b = 4.0 * double(zero >= 3 ? owned : adapters);
    const double grads_b = 4.0 * double(zero >= 2 ? owned : adapters), opt_b = 8.0 * double(owned);
    o << "  stage " << stage << ": frozen base " << describe_bytes(base_b) << " ("
      << describe_number(double(base));
    if (bf16)
      o << " bf16 weights (" << describe_bytes(2.0 * double(base))
        << ") + fp32 copies of the buckets in use (" << describe_bytes(4.0 * double(working))
        << "), " << base_bytes << " bytes";
    else
      o << " fp32 weights";
    o << ", no gradients or moments); adapters " << describe_number(double(adapters))
      << " parameters: params " << describe_bytes(params_b) << ", grads " << describe_bytes(grads_b)
      << ", optimizer " << describe_bytes(opt_b) << "; total "
      << describe_bytes(base_b + params_b + grads_b + opt_b) << " + activations\n";
  }
  return o.str();
}

}  // namespace llmrun
