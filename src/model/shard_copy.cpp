#include "model/shard_copy.h"

namespace llmrun {

void for_each_shard_run(const ParamSpec& spec,
                        const std::function<void(int64_t, int64_t, int64_t)>& run) {
  const TensorShard& s = spec.shard;
  if (spec.numel() == spec.full_numel()) {
    run(0, 0, spec.numel());
    return;
  }
  // Elements per unit of the split axis in the full tensor, and units of the axes before it.
  int64_t inner = 1, outer = 1;
  for (size_t i = size_t(s.axis) + 1; i < spec.full_shape.size(); ++i) inner *= spec.full_shape[i];
  for (size_t i = 0; i < size_t(s.axis); ++i) outer *= spec.full_shape[i];
  const int64_t full_axis = spec.full_shape[size_t(s.axis)],
                local_axis = spec.shape[size_t(s.axis)];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t local_pos = 0;
    for (auto [lo, hi] : s.ranges) {
      run((o * full_axis + lo) * inner, (o * local_axis + local_pos) * inner, (hi - lo) * inner);
      local_pos += hi - lo;
    }
  }
}

void extract_shard(Backend& be, const ParamSpec& spec, const Tensor& full, Tensor local) {
  LLMRUN_CHECK(full.numel() == spec.full_numel() && local.numel() == spec.numel(),
               "extract_shard: sizes do not match " + spec.hf_name);
  const Tensor f = full.view({full.numel()}), l = local.view({local.numel()});
  for_each_shard_run(
      spec, [&](int64_t fo, int64_t lo, int64_t n) { be.copy(l.flat(lo, n), f.flat(fo, n)); });
}

void insert_shard(Backend& be, const ParamSpec& spec, const Tensor& local, Tensor full) {
  LLMRUN_CHECK(full.numel() == spec.full_numel() && local.numel() == spec.numel(),
               "insert_shard: sizes do not match " + spec.hf_name);
  const Tensor f = full.view({full.numel()}), l = local.view({local.numel()});
  for_each_shard_run(
      spec, [&](int64_t fo, int64_t lo, int64_t n) { be.copy(f.flat(fo, n), l.flat(lo, n)); });
}

}  // namespace llmrun
