#pragma once
// Where AdamW's moments (m, v) of each bucket's owned shard live: in memory (the backend's, or
// host memory for memory.offload.optimizer: cpu), or in files under
// memory.offload.nvme_path streamed through a bounded buffer (nvme), so a run whose optimizer
// state exceeds memory still trains.
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun {

struct OptimizerOffload {
  std::string kind = "none";  // none | cpu | nvme
  std::string nvme_path;      // a directory, for nvme
  int64_t buffer_bytes = 64ll << 20;  // nvme: all staging buffers together
};

class MomentStore {
 public:
  MomentStore(Backend& be, const std::vector<int64_t>& shard_numel, const OptimizerOffload& offload, int rank);
  ~MomentStore();
  MomentStore(const MomentStore&) = delete;
  MomentStore& operator=(const MomentStore&) = delete;

  // Calls fn(offset, m, v) over consecutive chunks of bucket b's shard (one chunk when in
  // memory). Files are read ahead asynchronously and each chunk is written back after fn.
  // Every rank with equal shards sees the same chunk boundaries, so fn may run collectives.
  void for_each_chunk(int b, const std::function<void(int64_t offset, Tensor m, Tensor v)>& fn);
  bool in_memory() const { return offload_.kind != "nvme"; }
  Tensor m(int b) const;  // whole shard; only when in_memory()
  Tensor v(int b) const;
  int64_t max_chunk() const;  // elements of the largest chunk for_each_chunk passes
  size_t resident_bytes() const;

 private:
  struct Slot {
    Buffer m, v;
  };
  void read(int b, int64_t offset, int64_t len, Slot& slot) const;
  void write(int b, int64_t offset, int64_t len, const Slot& slot) const;

  std::vector<int64_t> shard_;
  OptimizerOffload offload_;
  std::vector<Buffer> m_, v_;  // in memory
  std::string dir_;            // nvme
  std::vector<int> fds_;       // nvme: per bucket, m at [0, shard) and v at [shard, 2 shard) floats
  int64_t chunk_ = 0;
  Slot slots_[2];
};

}  // namespace llmrun
