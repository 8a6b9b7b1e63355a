#pragma once
// Data-parallel gradient reduction and AdamW, with ZeRO sharding of stage 0 to 3:
//   0: every rank keeps everything; gradient buckets are all-reduced.
//   1: AdamW moments are sharded: gradients reduce-scatter into the owned shard, each rank
//      updates its shard of the parameters, and the parameters are all-gathered.
//   2: also gradients: a bucket's full gradient exists only during its backward and is
//      reduce-scattered into the owned shard as soon as that backward ends.
//   3: also parameters: each rank keeps its shard; a bucket is all-gathered just before it
//      is used (the next one prefetched) and freed after. With parameter offload the shards
//      live in a ShardStore (host memory, or files): a bucket's shard is read two buckets
//      ahead into a staging buffer (from its file on another thread; from host memory on a
//      device, on the copy stream with the gather ordered behind it on the device, so the
//      host never waits) and gathered from there; on a host backend the host memory is
//      gathered directly. The optimizer streams shard, moments and gradient chunk by chunk.
// Bucket b splits into dp equal shards (buckets are padded to a multiple of dp); rank r owns
// elements [r * n_b / dp, (r + 1) * n_b / dp). Communication is non-blocking and is polled
// between layers, so it overlaps the backward of the layers below.
// Expert parallelism (ExpertGroups): a bucket holding routed experts differs between the ep
// ranks, so at stages 1-3 it shards over edp (the ranks holding the same experts) instead of dp.
// Its dense tensors (attention, router, norms, shared experts) are then held by the ep ranks
// alike, shard for shard: their gradients, reduce-scattered over edp, are summed over ep too.
// Buckets without experts shard over dp as before.
#include <deque>
#include <future>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "train/overlap_counter.h"
#include "train/shard_store.h"

namespace llmrun {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;  // decay: matrices only
};

// Persistent per-rank bytes by kind, plus the high-water mark of transient bucket buffers.
// `staging`: offload's own device memory (the plan's offload_staging): the slots that stream
// host-held (cpu, nvme) moments and ZeRO-3 parameter shards through a device backend, and
// ZeRO-3's buffers that offloaded shards are fetched into ahead of their gathers.
struct TrainingMemory {
  size_t params = 0, grads = 0, optimizer = 0, buffers = 0, staging = 0;
};

// Expert parallelism: routed experts' tensors (ParamSpec::expert) reduce (and at stages 1-3
// shard) over `edp`, the ranks holding the same experts, instead of dp; `ep` holds the other
// experts (their squares add up in the gradient norm; dense gradients sum over it at stages 1-3).
// Both null: no expert parallelism.
struct ExpertGroups {
  Communicator* edp = nullptr;
  Communicator* ep = nullptr;
};

class ZeroOptimizer final : public BucketHooks {
 public:
  // `model` (the Transformer, or LoRA adapters) must have been built with
  // store_options(stage, dp.size()).
  // `params_offload` other than none needs stage 3 (the recipe refuses other stages).
  ZeroOptimizer(TrainableParams& model, Communicator& dp, int stage, const AdamWConfig& cfg,
                const ShardOffload& optimizer_offload = {}, const ShardOffload& params_offload = {},
                ExpertGroups experts = {});
  ~ZeroOptimizer() override;
  static StoreOptions store_options(int stage, int dp_size);

  // Sets up a step: `micro_batches` backward passes follow before finish_gradients().
  void begin_step(int micro_batches);
  // Model-parallel groups (tensor, pipeline) whose ranks hold other parts of the model: the
  // gradient norm sums over them too.
  void set_norm_groups(std::vector<Communicator*> groups) { norm_groups_ = std::move(groups); }
  // Waits for all reductions; returns the global gradient norm (before clipping).
  double finish_gradients();
  void scale_gradients(float factor);
  void step(float lr);

  // Checkpoints: every rank writes and reads the state it holds, by ranges of bucket elements.
  enum class State { params, exp_avg, exp_avg_sq };
  // The elements [begin, end) of bucket b's `s` that this rank holds: the whole (padded)
  // bucket, or its ZeRO shard (moments from stage 1, parameters at stage 3).
  std::pair<int64_t, int64_t> held(State s, int b) const;
  // This rank's share, when writing a checkpoint, of the tensor starting at bucket element
  // `offset` of bucket b: its 1/dp partition (ranks that hold the same values still split the
  // writing), inside held() for every state. Under expert parallelism a routed expert's tensor
  // splits over its edp group only, and in a bucket sharded over edp (stages 1-3) a dense
  // tensor's elements in this rank's shard split over the ep ranks holding that shard.
  std::pair<int64_t, int64_t> partition_at(int b, int64_t offset) const;
  // The group bucket b's ZeRO shards split over: edp for a bucket with routed experts under
  // expert parallelism at stages 1-3, else dp.
  Communicator& shard_group(int b) const;
  // Host memory holding held(s, b), when it lives there (no copy needed); else an empty Tensor.
  Tensor host_view(State s, int b) const;
  // Copies between `t` and bucket elements [first, first + t.numel()), inside held(s, b).
  void read_state(State s, int b, int64_t first, const Tensor& dst) const;
  void write_state(State s, int b, int64_t first, const Tensor& src);
  void set_steps_taken(int64_t steps) { steps_ = steps; }

  TrainingMemory memory() const;
  int stage() const { return stage_; }
  int64_t steps_taken() const { return steps_; }
  double comm_wait_seconds() const { return comm_wait_s_; }
  // Gradient reductions since construction: their time in flight (posting to the completion
  // seen by a poll between layers or by a wait) and the part of it this rank did not spend
  // blocked waiting for them, i.e. the communication hidden behind the backward. Polls run
  // between layers, so a reduction that finished mid-layer counts as in flight until the
  // layer ends: the hidden share is exact when nothing is hidden and an upper bound otherwise.
  double grad_reduce_seconds() const { return reduce_s_; }
  double grad_reduce_hidden_seconds() const { return reduce_hidden_s_; }
  // Parameter all-gathers since construction, counted the same way: ZeRO-3's before each
  // bucket's use (the next bucket's prefetched while this one computes; a prefetch's flight
  // ends at the poll between layers that sees it done), and ZeRO-1/2's after the optimizer
  // (each bucket's posted while the next buckets update). Groups of one rank count nothing.
  const OverlapCounter& param_gathers() const { return gathers_; }
  // Offloaded state's transfers since construction: nvme reads and write-backs of the moments
  // and parameter shards (read ahead, written behind the optimizer's compute), ZeRO-3's
  // reads of offloaded parameter shards (a bucket ahead of their gathers), and, on a device
  // backend, the copy-stream copies of host-held (cpu or nvme) state to and from the device
  // (the next piece or bucket copied in while this one updates; OffloadPipeline). Zero when
  // nothing is offloaded, or on the CPU backend with cpu offload (nothing moves).
  OverlapCounter offload_transfers() const;

  void acquire(int bucket, Phase phase) override;
  void release(int bucket, Phase phase) override;

 private:
  struct PendingReduce {
    int bucket;
    std::unique_ptr<CommRequest> req;
    Tensor slot;           // full gradient buffer to free after completion (ZeRO-2/3), else empty
    Tensor received;       // shard that must be added into the accumulator (ZeRO-2/3), else empty
    double posted_at = 0;  // steady-clock seconds
    double waited = 0;     // seconds this rank blocked in wait() on it
  };

  Tensor shard_of(const Tensor& full_bucket, int b) const;
  int64_t shard_begin(int b) const;  // this rank's shard's first bucket element (0 at stage 0)
  bool edp_sharded(int b) const;     // shard_group(b) is edp
  // Stages 1-3, buckets sharded over edp: sums the owned shard's dense elements over ep.
  void sum_dense_over_ep();
  Tensor take_slot();
  void free_slot(Tensor slot);
  void gather_params(int b, bool blocking);
  void read_param_shard(int b);
  bool staged_param_shards() const;
  void poll_gathers();
  void drain_reduces(bool all);
  void wait(CommRequest& req);
  void wait_reduce(PendingReduce& p);
  void post_reduce(int b, std::unique_ptr<CommRequest> req, Tensor slot, Tensor received);
  void count_reduce(double posted_at, double waited);  // adds a finished reduction's times
  // AdamW on elements [begin, begin + params.numel()) of bucket b's shard.
  void adamw_shard(int b, Tensor params, int64_t begin, const Tensor& grads, float lr);

  TrainableParams& model_;
  Backend& be_;
  Communicator& dp_;
  int stage_;
  AdamWConfig cfg_;
  int64_t steps_ = 0;
  int micro_batches_ = 1;
  std::vector<int> released_;  // backward releases of each bucket in this step
  std::vector<Communicator*> norm_groups_;
  Communicator *edp_ = nullptr, *ep_ = nullptr;            // expert parallelism (ExpertGroups)
  std::vector<std::pair<int64_t, int64_t>> expert_range_;  // per bucket: its experts' elements
  // The grad norm's per-tensor sums of squares, one slot each, land here on the device and
  // come back to the host in one copy per step (no sync per tensor).
  Buffer norm_parts_, norm_parts_host_;
  int64_t norm_slots_ = 0;
  double comm_wait_s_ = 0;
  double reduce_s_ = 0, reduce_hidden_s_ = 0;

  std::vector<int64_t> shard_numel_;
  std::unique_ptr<ShardStore>
      moments_;  // AdamW m, v of the owned shards (whole buckets at stage 0)
  std::unique_ptr<ShardStore> param_shards_;  // stage 3: the owned parameter shards
  // Stage 3 with offloaded shards: shard-sized staging buffers (a pool), the one each bucket's
  // read or gather is using, and the reads under way (read one bucket ahead of the gathers).
  std::vector<Buffer> shard_buffer_storage_;
  std::vector<Tensor> free_shard_buffers_;
  std::vector<Tensor> param_staging_;
  std::vector<TimedTask> param_reads_;  // file reads (a fetch on the device has no task)
  OverlapCounter shard_reads_;          // param_reads_' transfers
  std::vector<Buffer> grad_shard_;
  std::vector<int> param_refs_, grad_refs_;
  std::vector<std::unique_ptr<CommRequest>> gathering_;  // ZeRO-3 prefetches by bucket
  std::vector<double> gather_posted_, gather_done_;      // their times (done: 0 until seen)
  OverlapCounter gathers_;
  std::deque<PendingReduce> reduces_;

  int64_t slot_numel_ = 0;
  std::vector<Buffer> slot_storage_;
  std::vector<Tensor> free_slots_;
  std::vector<Buffer> recv_storage_;  // one shard-sized receive buffer per bucket
};

}  // namespace llmrun
