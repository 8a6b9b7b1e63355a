// The planner's offload staging (plan/offload_staging.h): the device slots that stream
// offloaded moments and ZeRO-3 parameter shards through the optimizer, the shards fetched
// ahead of their gathers, and the page-locked host memory, checked (1) against hand
// arithmetic from the training code's rules and (2) against what the real ZeroOptimizer
// allocates for one training step on a device backend with a copy stream (every allocation
// counted by a test backend).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/copy_stream.h"
#include "backend/device_streams.h"
#include "comm/communicator.h"
#include "forwarding_backend.h"
#include "model/transformer.h"
#include "plan/memory_budget.h"
#include "plan/memory_model.h"
#include "temp_dir.h"
#include "train/zero_optimizer.h"

namespace llmrun {
namespace {

// Llama, 4 layers, d 32, 4 heads (2 kv, head_dim 8), ffn 64, vocab 300, untied: buckets of
// 9600 (embedding), 4 x 9280 (blocks: 2 norms 64, qkv 64 x 32, o 32 x 32, gate|up 128 x 32,
// down 32 x 64) and 9632 (final norm 32 + head 300 x 32) elements.
ModelConfig llama() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.vocab = 300;
  c.seq_len = 16;
  c.tie_embeddings = false;
  return c;
}
constexpr int64_t kEmbedding = 9600, kBlock = 9280, kHead = 9632;

TrainingShape shape(Offload optimizer, Offload params, int64_t buffer_bytes, int batch = 2) {
  TrainingShape s;
  s.model = llama();
  s.micro_batch = batch;
  s.global_batch = 4 * batch;
  s.offload_optimizer = optimizer;
  s.offload_params = params;
  s.offload_buffer_bytes = buffer_bytes;
  return s;
}

StageMemory plan(const TrainingShape& s, int dp, int zero) {
  TrainingLayout l;
  l.dp = dp;
  l.zero = zero;
  return plan_memory(s, l)[0];
}

TEST(PlanOffloadStaging, ByHandFromTheTrainingCodesRules) {
  ASSERT_EQ(kEmbedding + 4 * kBlock + kHead, llama().param_count());
  // dp 2, ZeRO-3: shards of 4800, 4640 and 4816 elements; both stores in host memory.
  const int64_t shards = kEmbedding / 2 + 4 * kBlock / 2 + kHead / 2, largest = kHead / 2;
  const int64_t buffer = 64 << 10;
  StageMemory m = plan(shape(Offload::cpu, Offload::cpu, buffer), 2, 3);
  EXPECT_EQ(m.largest_shard, largest);
  // Moments: 2 arrays, pieces of 64 KiB / (2 slots x 2 arrays x 4 bytes) = 4096 floats.
  EXPECT_EQ(m.optimizer_piece, 4096);
  EXPECT_EQ(m.optimizer_staging, 2.0 * 2 * 4096 * 4);
  // Parameter shards: one array, 64 KiB / 8 = 8192 floats, capped at the largest shard.
  EXPECT_EQ(m.params_piece, largest);
  EXPECT_EQ(m.params_staging, 2.0 * largest * 4);
  // Two shard buffers fetched ahead of the gathers.
  EXPECT_EQ(m.params_fetch, 2.0 * largest * 4);
  EXPECT_EQ(m.offload_staging, 65536.0 + 38528 + 38528);
  // Host memory holds the moments (8 bytes an element) and the parameter shards (4).
  EXPECT_EQ(m.host_pinned, 12.0 * shards);
  EXPECT_EQ(m.peak,
            m.params + m.grads + m.optimizer + m.buffers + m.offload_staging + m.activations);
  EXPECT_EQ(m.params, 0.0);
  EXPECT_EQ(m.optimizer, 0.0);

  // Both in files: each store gets half the buffer (pieces of 2048 and 4096 floats), and the
  // files are read and written through host slots of the same size.
  m = plan(shape(Offload::nvme, Offload::nvme, buffer), 2, 3);
  EXPECT_EQ(m.optimizer_piece, 2048);
  EXPECT_EQ(m.params_piece, 4096);
  EXPECT_EQ(m.optimizer_staging, 2.0 * 2 * 2048 * 4);
  EXPECT_EQ(m.params_staging, 2.0 * 1 * 4096 * 4);
  EXPECT_EQ(m.params_fetch, 2.0 * largest * 4);
  EXPECT_EQ(m.host_pinned, 32768.0 + 32768);
  // Only the optimizer in files: it keeps the whole buffer.
  m = plan(shape(Offload::nvme, Offload::cpu, buffer), 2, 3);
  EXPECT_EQ(m.optimizer_piece, 4096);
  EXPECT_EQ(m.host_pinned, 65536.0 + 4.0 * shards);

  // ZeRO-0 at dp 1: whole buckets; a small buffer gives the 1024-float floor.
  m = plan(shape(Offload::cpu, Offload::none, 8 << 10), 1, 0);
  EXPECT_EQ(m.largest_shard, kHead);
  EXPECT_EQ(m.optimizer_piece, 1024);
  EXPECT_EQ(m.optimizer_staging, 16384.0);
  EXPECT_EQ(m.params_staging + m.params_fetch, 0.0);
  EXPECT_EQ(m.host_pinned, 8.0 * (kEmbedding + 4 * kBlock + kHead));
  // Parameters stay on the device below ZeRO-3, whatever the recipe says about them.
  EXPECT_EQ(plan(shape(Offload::none, Offload::cpu, buffer), 2, 1).offload_staging, 0.0);

  // Nothing offloaded: nothing staged, nothing pinned.
  m = plan(shape(Offload::none, Offload::none, buffer), 2, 3);
  EXPECT_EQ(m.offload_staging, 0.0);
  EXPECT_EQ(m.host_pinned, 0.0);
}

TEST(PlanOffloadStaging, PeakAndBudgetCountTheStaging) {
  const int64_t buffer = 64 << 10;
  const StageMemory kept = plan(shape(Offload::none, Offload::none, buffer), 2, 3);
  const StageMemory moved = plan(shape(Offload::cpu, Offload::cpu, buffer), 2, 3);
  // Offloading frees the state but costs the staging.
  EXPECT_DOUBLE_EQ(moved.peak, kept.peak - kept.params - kept.optimizer + moved.offload_staging);
  TrainingLayout l;
  l.dp = 2;
  l.zero = 3;
  const std::string problem =
      memory_budget_problem({moved}, l, int64_t(moved.peak - moved.offload_staging / 2));
  EXPECT_NE(problem.find("offload staging " + format_bytes(moved.offload_staging)),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("a smaller memory.offload.buffer_mb"), std::string::npos) << problem;
  EXPECT_EQ(memory_budget_problem({moved}, l, int64_t(moved.peak)), "");
}

// Every allocation counted, device memory and page-locked host memory apart (the deleter is a
// plain function, so the live allocations are kept here).
struct Allocations {
  std::mutex mu;
  std::map<void*, std::pair<size_t, bool>> live;  // bytes, pinned
  size_t device = 0, pinned = 0;
};
Allocations& allocations() {
  static Allocations a;
  return a;
}
void free_counted(void* p) {
  Allocations& a = allocations();
  {
    std::lock_guard<std::mutex> lock(a.mu);
    const auto it = a.live.find(p);
    (it->second.second ? a.pinned : a.device) -= it->second.first;
    a.live.erase(it);
  }
  std::free(p);
}
Buffer counted(size_t bytes, bool pinned) {
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, rounded);
  std::memset(p, 0, rounded);
  Allocations& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  a.live[p] = {bytes, pinned};
  (pinned ? a.pinned : a.device) += bytes;
  return Buffer(p, bytes, Device::cpu, &free_counted);
}

// A copy stream whose copies run at once: every order the events allow includes this one.
class ImmediateCopyStream final : public CopyStream {
  struct Mark final : StreamEvent {};

 public:
  StreamEventPtr mark_compute() override { return std::make_unique<Mark>(); }
  StreamEventPtr mark_copy(CopyLane) override { return std::make_unique<Mark>(); }
  void copy_waits(CopyLane, const StreamEvent&) override {}
  void compute_waits(const StreamEvent&) override {}
  void copy(CopyLane, Tensor dst, const Tensor& src) override {
    std::memcpy(dst.data, src.data, dst.bytes());
  }
  bool complete(const StreamEvent&) override { return true; }
  void host_waits(const StreamEvent&) override {}
  double seconds_between(const StreamEvent&, const StreamEvent&) override { return 0; }
};

// The CPU backend's arithmetic, saying it is a device with copy streams (as CUDA does), so the
// offload code takes its device paths: slots, pinned host arrays, shard fetches.
class CountingDevice final : public test::ForwardingBackend, public DeviceStreams {
 public:
  CountingDevice() : ForwardingBackend(make_cpu_backend(1)) {}
  Device device() const override { return Device::cuda; }
  Buffer allocate(size_t bytes) override { return counted(bytes, false); }
  Buffer allocate_host_pinned(size_t bytes) override { return counted(bytes, true); }
  void* compute_stream() const override { return nullptr; }
  int device_ordinal() const override { return 0; }
  std::unique_ptr<CopyStream> make_copy_stream() override {
    return std::make_unique<ImmediateCopyStream>();
  }
};

struct Measured {
  double device = 0, pinned = 0;
  double staging = 0;  // what the optimizer reports as its offload staging (mem_staging)
};

// Device and pinned bytes alive after `steps` training steps of the real model and
// optimizer at ZeRO `zero` on one rank.
Measured train_and_count(const ModelConfig& c, int zero, const ShardOffload& optimizer,
                         const ShardOffload& params, int batch, int steps = 2) {
  CountingDevice be;
  const Allocations& a = allocations();
  const size_t device0 = a.device, pinned0 = a.pinned;
  Measured m;
  {
    Transformer model(be, c, ZeroOptimizer::store_options(zero, 1));
    auto comm = make_self_communicator("dp");
    ZeroOptimizer opt(model, *comm, zero, {}, optimizer, params);
    std::vector<int32_t> tokens(size_t(batch) * c.seq_len);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % c.vocab);
    for (int s = 0; s < steps; ++s) {
      opt.begin_step(1);
      model.forward(tokens.data(), batch, c.seq_len);
      model.backward(tokens.data(), 1.0f / float(tokens.size()));
      opt.finish_gradients();
      opt.step(1e-3f);
    }
    m.device = double(a.device - device0);
    m.pinned = double(a.pinned - pinned0);
    m.staging = double(opt.memory().staging);
  }
  EXPECT_EQ(a.device, device0) << "device memory left allocated";
  return m;
}

// What offload adds to (or takes from) a rank's device memory and pins in host memory, as the
// real optimizer allocates it, against the plan: the staging appears, the offloaded state
// leaves. Buckets larger than a piece (several pieces per bucket), and smaller.
TEST(PlanOffloadStaging, MatchesWhatTheOptimizerAllocatesOnADevice) {
  testing::TempDir dir;
  const ModelConfig c = llama();
  const int batch = 2;
  struct Case {
    int zero;
    Offload optimizer, params;
    int64_t buffer;
  };
  const Case cases[] = {
      {1, Offload::cpu, Offload::none, 64 << 10},  {0, Offload::cpu, Offload::none, 8 << 10},
      {3, Offload::cpu, Offload::cpu, 64 << 10},   {3, Offload::none, Offload::cpu, 1 << 20},
      {3, Offload::nvme, Offload::nvme, 64 << 10}, {3, Offload::nvme, Offload::cpu, 48 << 10},
      {2, Offload::nvme, Offload::none, 8 << 10},
  };
  for (const Case& k : cases) {
    const std::string what = "zero " + std::to_string(k.zero) + " optimizer " +
                             offload_name(k.optimizer) + " params " + offload_name(k.params) +
                             " buffer " + std::to_string(k.buffer);
    const ShardOffload none{Offload::none, "", k.buffer};
    const Measured base = train_and_count(c, k.zero, none, none, batch);
    const Measured off = train_and_count(c, k.zero, {k.optimizer, dir.path().string(), k.buffer},
                                         {k.params, dir.path().string(), k.buffer}, batch);
    const StageMemory kept = plan(shape(Offload::none, Offload::none, k.buffer, batch), 1, k.zero);
    const StageMemory moved = plan(shape(k.optimizer, k.params, k.buffer, batch), 1, k.zero);
    ASSERT_GT(moved.offload_staging, 0) << what;
    EXPECT_EQ(off.device - base.device, moved.offload_staging - (kept.params - moved.params) -
                                            (kept.optimizer - moved.optimizer))
        << what;
    EXPECT_EQ(off.pinned - base.pinned, moved.host_pinned) << what;
    // The trainer's mem_staging is the plan's offload staging, item for item.
    EXPECT_EQ(off.staging, moved.offload_staging) << what;
    EXPECT_EQ(base.staging, 0.0) << what;
  }
}

}  // namespace
}  // namespace llmrun
