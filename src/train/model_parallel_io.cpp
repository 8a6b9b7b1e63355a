#include "train/model_parallel_io.h"

#include <map>

#include "model/shard_copy.h"
#include "train/model_partition.h"

namespace llmrun {

namespace {

// Where each tensor of a store's layout lives, by Hugging Face name.
std::map<std::string, std::pair<int, int>> index_by_name(const std::vector<BucketLayout>& layout) {
  std::map<std::string, std::pair<int, int>> at;
  for (int b = 0; b < int(layout.size()); ++b)
    for (int p = 0; p < int(layout[b].params.size()); ++p)
      if (!layout[b].params[p].tied_copy) at[layout[b].params[p].hf_name] = {b, p};
  return at;
}

void insert_all(Backend& be, const std::vector<BucketLayout>& layout, int bucket, const Tensor& data,
                const std::map<std::string, std::pair<int, int>>& at, BucketStore& full) {
  for (const ParamSpec& spec : layout[size_t(bucket)].params) {
    if (spec.tied_copy) continue;
    const auto [fb, fp] = at.at(spec.hf_name);
    insert_shard(be, spec, data.flat(spec.offset, spec.numel()), full.tensor(fb, fp));
  }
}

}  // namespace

void gather_full_model(const Recipe& r, const Topology& topo, Backend& be, const BucketStore& local,
                       BucketStore* full) {
  if (topo.dp().rank() != 0) return;
  const int tp = r.parallel.tp, pp = r.parallel.pp;
  Communicator& world = topo.world();
  if (world.rank() != 0) {
    for (int b = 0; b < local.num_buckets(); ++b)
      if (local.layout()[size_t(b)].numel > 0) world.send(local.bucket(b).flat(0, local.layout()[size_t(b)].numel), 0, b);
    return;
  }
  LLMRUN_CHECK(full != nullptr, "gather_full_model: rank 0 needs the full store");
  const auto at = index_by_name(full->layout());
  std::vector<float> staging;
  for (int pp_rank = 0; pp_rank < pp; ++pp_rank) {
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      const int q = tp_rank + tp * pp_rank;  // world rank at dp rank 0 (tp fastest)
      if (q == 0) {
        for (int b = 0; b < local.num_buckets(); ++b)
          if (local.layout()[size_t(b)].numel > 0) insert_all(be, local.layout(), b, local.bucket(b), at, *full);
        continue;
      }
      const std::vector<BucketLayout> layout = model_layout(r.model, model_shard(r, tp_rank, pp_rank));
      for (int b = 0; b < int(layout.size()); ++b) {
        const int64_t n = layout[size_t(b)].numel;
        if (n == 0) continue;
        staging.resize(size_t(n));
        const Tensor t(staging.data(), DType::f32, {n});
        world.recv(t, q, b);
        insert_all(be, layout, b, t, at, *full);
      }
    }
  }
}

}  // namespace llmrun
