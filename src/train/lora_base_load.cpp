#include "train/lora_base_load.h"

#include "ckpt/hf_weights.h"

namespace llmrun {

void load_bf16_base(Backend& be, const std::vector<BucketLayout>& layout, Bf16FrozenBase& base,
                    const HfWeightFiles& files) {
  for (size_t b = 0; b < layout.size(); ++b) {
    if (layout[b].numel == 0) continue;  // another pipeline stage's bucket
    // A one-bucket store with bucket b's layout: import fills it by Hugging Face names.
    const std::vector<BucketLayout> one{layout[b]};
    BucketStore fp32(be, one);
    import_hf_tensors(be, fp32, files, false);
    base.hold(int(b), fp32.bucket(0));
  }
}

}  // namespace llmrun
