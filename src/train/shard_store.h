#pragma once
// Where the fp32 arrays that ZeRO keeps per bucket shard live: AdamW's moments (two arrays per
// bucket, m and v: memory.offload.optimizer) and, under ZeRO-3, the parameter shards (one
// array: memory.offload.params). In memory (the backend's, or host memory for `cpu`), or in one
// file per bucket under memory.offload.nvme_path streamed through a bounded set of staging
// buffers (`nvme`), so a run whose state exceeds memory still trains.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/memory_config.h"
#include "train/offload_pipeline.h"
#include "train/overlap_counter.h"

namespace llmrun {

struct ShardOffload {
  Offload kind = Offload::none;
  std::string nvme_path;              // a directory, for nvme
  int64_t buffer_bytes = 64ll << 20;  // nvme: all staging buffers of one store together
};

class ShardStore {
 public:
  // `arrays` zero-filled arrays of shard_numel[b] floats for every bucket b. `name` ("optimizer",
  // "params") names the nvme directory, llmrun-<name>-<pid>-rank<rank>, and messages.
  ShardStore(Backend& be, std::string name, const std::vector<int64_t>& shard_numel, int arrays,
             const ShardOffload& where, int rank);
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  // fn(offset, chunk) over consecutive chunks of elements [begin, end) of bucket b's shard;
  // chunk[a] is array a from `offset` on. One chunk when in memory. nvme reads the next chunk
  // ahead and writes each chunk back after fn, on other threads; while the last chunk is in
  // fn, the first chunk of the call expected next (see will_visit) is read already, and the
  // last chunk's write-back goes on after the call returns. Every rank with equal shards
  // sees the same chunk boundaries, so fn may run collectives. With a device backend and
  // host-side arrays (cpu, nvme), each chunk reaches fn in device staging buffers, at most
  // buffer_bytes / (2 * arrays) elements at a time, through an OffloadPipeline: pinned host
  // memory, copies on a copy stream overlapping fn's compute (train/offload_pipeline.h).
  using ChunkFn = std::function<void(int64_t offset, const std::vector<Tensor>& chunk)>;
  void for_each_chunk(int b, int64_t begin, int64_t end, const ChunkFn& fn);
  void for_each_chunk(int b, const ChunkFn& fn) { for_each_chunk(b, 0, shard_[b], fn); }
  // The next for_each_chunk call that ends its bucket will be followed by one over elements
  // [begin, end) of bucket b, whose first piece (host-held arrays on a device backend) or
  // first file chunk (nvme) may then be brought in while that call's last chunk is in fn. A
  // call that ends inside its bucket is taken to be followed by the rest of that bucket. A
  // wrong guess costs one copy or one read.
  void will_visit(int b, int64_t begin, int64_t end);
  // Whole-array copies between array a of bucket b and `t` (shard_numel(b) floats). Reads of
  // different buckets may run on several threads at once.
  void read(int b, int a, const Tensor& dst) const { read_range(b, a, 0, dst); }
  void write(int b, int a, const Tensor& src) { write_range(b, a, 0, src); }
  // Elements [first, first + t.numel()) of array a of bucket b. Thread-safe for nvme (no
  // shared staging), so checkpoint writers may read several arrays at once. nvme: a read waits
  // for the write-back still under way, a write also drops the chunk read ahead.
  void read_range(int b, int a, int64_t first, const Tensor& dst) const;
  void write_range(int b, int a, int64_t first, const Tensor& src);

  // Host memory on a device backend: array a of bucket b is copied into device memory `dst`
  // (shard_numel(b) floats) on a copy stream, behind the copies back to it, and the call
  // returns at once (OffloadPipeline::fetch). Device work issued after compute_after_fetch(dst)
  // sees it; the host never waits (a ZeRO-3 gather's shard, fetched ahead of the gather).
  bool fetches_to_device() const { return pipeline_ != nullptr && in_memory(); }
  void fetch(int b, int a, const Tensor& dst);
  void compute_after_fetch(const Tensor& dst);

  bool in_memory() const { return where_.kind != Offload::nvme; }
  Tensor array(int b, int a) const;  // the whole array; only when in_memory()
  int64_t shard_numel(int b) const { return shard_[b]; }
  int64_t max_chunk() const;      // elements of the largest chunk for_each_chunk passes
  size_t resident_bytes() const;  // memory held: the arrays, or the nvme staging buffers
  // Device memory of the slots that host-held arrays visit the device through (a device
  // backend with cpu or nvme offload: OffloadPipeline::device_bytes); 0 otherwise.
  size_t device_staging_bytes() const { return pipeline_ ? pipeline_->device_bytes() : 0; }
  std::string file(int b) const;  // nvme: bucket b's file (array a at a * shard_numel(b) floats)
  // nvme: for_each_chunk's reads and write-backs since construction, and the part of them that
  // ran beside fn (read-ahead, write-behind); plus, host-held arrays on a device backend, the
  // copies to and from the device and the part of them the compute did not wait for
  // (OffloadPipeline::transfers: pieces still under way count once finished).
  OverlapCounter transfers() const;
  // nvme: called (on the reading thread) as each chunk read of for_each_chunk starts, with
  // its bucket and first element: lets tests see what is read when. Set before any call.
  void on_chunk_read(std::function<void(int b, int64_t offset)> f) {
    on_chunk_read_ = std::move(f);
  }

 private:
  void read_chunk(int b, int64_t offset, int64_t len, std::vector<Buffer>& slot) const;
  // nvme: waits for the write-back still under way (and the chunk read ahead; dropping it when
  // `drop_read_ahead`, as the file is about to change).
  void finish_io(bool drop_read_ahead) const;
  void write_chunk(int b, int64_t offset, int64_t len, const std::vector<Buffer>& slot) const;

  Backend& be_;
  std::string name_;
  std::vector<int64_t> shard_;
  int arrays_;
  ShardOffload where_;
  std::vector<std::vector<Buffer>> mem_;  // in memory: [bucket][array]
  std::string dir_;                       // nvme
  std::vector<int> fds_;                  // nvme: one file per bucket
  int64_t chunk_ = 0;
  std::vector<Buffer> slots_[2];  // nvme: two staging slots of one buffer per array
  // A device backend with host-side arrays: chunks visit the device through it.
  std::unique_ptr<OffloadPipeline> pipeline_;
  mutable OverlapCounter transfers_;
  void run_chunk(int64_t offset, const std::vector<Tensor>& host_chunk, const ChunkFn& fn,
                 const std::vector<Tensor>& next = {});
  std::vector<Tensor> host_range(int b, int64_t begin, int64_t end) const;  // in memory
  struct Visit {
    int b = -1;
    int64_t begin = 0, end = 0;
  } next_visit_;                        // will_visit's hint
  Visit following(int b, int64_t end);  // the range expected after a call ending at `end`
  // nvme, between for_each_chunk calls: the first chunk of the expected next call being read
  // into a slot, and the previous call's last write-back (from the other slot).
  struct ReadAhead {
    int b = -1;
    int64_t offset = 0, len = 0;
    int slot = 0;
    TimedTask task;
  };
  std::function<void(int, int64_t)> on_chunk_read_;
  mutable std::mutex io_mu_;  // guards the two below and transfers_ (readers on threads)
  mutable ReadAhead read_ahead_;
  mutable TimedTask write_behind_;
  int write_behind_slot_ = 0;
  Visit write_behind_range_;
};

}  // namespace llmrun
