#include "ckpt/huge_page_params.h"

#include <vector>

#include "quant/weight_arena.h"

namespace llmrun {

std::shared_ptr<void> attach_huge_page_params(BucketStore& params) {
  auto owned = std::make_shared<std::vector<std::shared_ptr<uint8_t>>>();
  for (int b = 0; b < params.num_buckets(); ++b) {
    const int64_t n = params.padded_numel(b);
    owned->push_back(quant::weight_copy_bytes(static_cast<size_t>(n) * 4));
    params.attach(b, Tensor(owned->back().get(), DType::f32, {n}));
  }
  return owned;
}

}  // namespace llmrun
