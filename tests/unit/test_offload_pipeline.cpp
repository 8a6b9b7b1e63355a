// The offload pipeline's ordering and bookkeeping (train/offload_pipeline.h) on emulated
// streams (emulated_copy_stream.h): random execution orders must give the synchronous result
// bit for bit with no unordered access (copy lanes on two streams, or on one), the next
// bucket's first piece must be copied in while this bucket computes (and used, not copied
// again), host writes must drop it, and the overlap counts must match the simulated device
// timeline, where copies back run beside copies in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/device_streams.h"
#include "emulated_copy_stream.h"
#include "forwarding_backend.h"
#include "train/offload_pipeline.h"
#include "train/shard_store.h"

namespace llmrun {
namespace {

using test::EmulatedCopyStream;
using test::EmulatedStreams;

// Host arrays of several buckets, m and v per bucket, filled with distinct values.
struct HostState {
  std::vector<std::vector<float>> m, v;
  explicit HostState(const std::vector<int64_t>& sizes) {
    for (size_t b = 0; b < sizes.size(); ++b) {
      m.emplace_back(size_t(sizes[b]));
      v.emplace_back(size_t(sizes[b]));
      for (int64_t i = 0; i < sizes[b]; ++i) {
        m[b][size_t(i)] = 0.25f * float(i) + float(b);
        v[b][size_t(i)] = 1.0f / float(1 + i + 7 * b);
      }
    }
  }
  std::vector<Tensor> bucket(size_t b) {
    return {Tensor(m[b].data(), DType::f32, {int64_t(m[b].size())}),
            Tensor(v[b].data(), DType::f32, {int64_t(v[b].size())})};
  }
};

// The update every piece gets: depends on both arrays, the element's offset and the step, so
// a piece computed on stale data, or written back to the wrong place, changes the result.
// One compiled body for the pipeline and the reference (noipa: never inlined, cloned or
// folded at compile time, where sinf or an FMA contraction could round otherwise).
[[gnu::noipa]] void update(float* m, float* v, int64_t n, int64_t offset, int step) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::sin(float(offset + i) * 0.37f + float(step));
    m[i] = 0.9f * m[i] + 0.1f * g;
    v[i] = 0.99f * v[i] + 0.01f * g * g + 1e-3f * m[i];
  }
}

struct Emulated {
  std::shared_ptr<EmulatedStreams> streams;
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::unique_ptr<OffloadPipeline> pipe;
  Emulated(uint64_t seed, int64_t piece, double copy_bytes_per_s = 1e9, bool one_stream = false)
      : streams(std::make_shared<EmulatedStreams>(seed, copy_bytes_per_s)) {
    pipe = std::make_unique<OffloadPipeline>(
        *cpu, std::make_unique<EmulatedCopyStream>(streams, one_stream), 2, piece);
  }
  // The optimizer's use: each piece's update issued on the compute stream.
  OffloadPipeline::PieceFn updater(int step, double seconds = 0) {
    return [this, step, seconds](int64_t offset, const std::vector<Tensor>& p) {
      const Tensor m = p[0], v = p[1];
      streams->work(
          EmulatedStreams::compute_stream, {m, v}, {m, v}, seconds,
          [m, v, offset, step] { update(m.f32(), v.f32(), m.numel(), offset, step); }, "update");
    };
  }
  // One optimizer step over every bucket, telling the pipeline which bucket follows.
  void step(HostState& h, int step_no, bool hints, double seconds = 0) {
    for (size_t b = 0; b < h.m.size(); ++b)
      pipe->run(0, h.bucket(b), updater(step_no, seconds),
                hints && b + 1 < h.m.size() ? h.bucket(b + 1) : std::vector<Tensor>{});
  }
};

TEST(OffloadPipeline, RandomStreamOrdersGiveTheSynchronousResultWithNoRace) {
  const std::vector<int64_t> sizes = {10, 7, 23, 4};  // pieces of 4: partial last pieces too
  HostState want(sizes);
  for (int step = 1; step <= 2; ++step)
    for (size_t b = 0; b < sizes.size(); ++b)
      update(want.m[b].data(), want.v[b].data(), sizes[b], 0, step);
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    for (bool hints : {true, false}) {
      for (bool one_stream : {false, true}) {
        Emulated e(seed, 4, 1e9, one_stream);
        HostState got(sizes);
        e.step(got, 1, hints);
        e.step(got, 2, hints);
        e.pipe->settle();
        for (size_t b = 0; b < sizes.size(); ++b) {
          for (const Tensor& t : got.bucket(b)) e.streams->host_access(t, false, "the result");
          ASSERT_EQ(got.m[b], want.m[b]) << "seed " << seed << " bucket " << b;
          ASSERT_EQ(got.v[b], want.v[b]) << "seed " << seed << " bucket " << b;
        }
        ASSERT_TRUE(e.streams->races().empty())
            << e.streams->races().front() << " (one stream: " << one_stream << ")";
      }
    }
  }
}

// The checks above can fail: a compute that does not wait for its copy in is a race, and on
// some order reads stale data.
TEST(OffloadPipeline, EmulationReportsAComputeThatDoesNotWaitForItsCopy) {
  int stale = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    EmulatedStreams s(seed);
    float host = 5, dev = 0, seen = -1;
    const Tensor h(&host, DType::f32, {1}), d(&dev, DType::f32, {1}), out(&seen, DType::f32, {1});
    s.copy(EmulatedStreams::copy_in_stream, d, h);
    s.work(
        EmulatedStreams::compute_stream, {d}, {out}, 0, [&] { seen = dev; }, "use");
    s.drain();
    ASSERT_EQ(s.races().size(), 1u);
    EXPECT_NE(s.races()[0].find("use reads"), std::string::npos) << s.races()[0];
    stale += seen != 5;
  }
  EXPECT_GT(stale, 0);
  // With the wait: no race, never stale.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    EmulatedStreams s(seed);
    float host = 5, dev = 0, seen = -1;
    const Tensor h(&host, DType::f32, {1}), d(&dev, DType::f32, {1}), out(&seen, DType::f32, {1});
    s.copy(EmulatedStreams::copy_in_stream, d, h);
    const auto copied = s.mark(EmulatedStreams::copy_in_stream);
    s.wait(EmulatedStreams::compute_stream, *copied);
    s.work(
        EmulatedStreams::compute_stream, {d}, {out}, 0, [&] { seen = dev; }, "use");
    s.drain();
    EXPECT_TRUE(s.races().empty());
    EXPECT_EQ(seen, 5);
  }
}

// A host access is checked too: one the host did not wait for is reported.
TEST(OffloadPipeline, EmulationReportsAHostWriteTheHostDidNotWaitFor) {
  for (bool waited : {false, true}) {
    EmulatedStreams s(1);
    float host = 5, dev = 0;
    const Tensor h(&host, DType::f32, {1}), d(&dev, DType::f32, {1});
    s.copy(EmulatedStreams::copy_in_stream, d, h);
    if (waited) s.host_waits(*s.mark(EmulatedStreams::copy_in_stream));
    s.host_access(h, false, "host");  // reads after reads never conflict
    EXPECT_TRUE(s.races().empty());
    s.host_access(h, true, "host");
    EXPECT_EQ(s.races().size(), waited ? 0u : 1u);
    s.drain();
  }
}

// Issue order: bucket b+1's first piece is copied in before bucket b's last piece computes,
// and every piece is copied in exactly once (the piece copied ahead is the one used).
TEST(OffloadPipeline, NextBucketIsCopiedInWhileThisOneComputes) {
  const std::vector<int64_t> sizes = {8, 8, 8};  // two pieces of 4 per bucket
  Emulated e(7, 4);
  HostState h(sizes);
  e.streams->copy_name = [&h](const Tensor& dst, const Tensor& src) {
    for (size_t b = 0; b < h.m.size(); ++b)
      for (const std::vector<float>* a : {&h.m[b], &h.v[b]}) {
        const float* lo = a->data();
        if (src.data >= lo && src.data < lo + a->size())
          return "in " + std::to_string(b) + ":" + std::to_string(src.f32() - lo);
        if (dst.data >= lo && dst.data < lo + a->size())
          return "out " + std::to_string(b) + ":" + std::to_string(dst.f32() - lo);
      }
    return std::string("?");
  };
  e.step(h, 1, true);
  e.pipe->settle();
  // Reduce the issue log to one entry per piece and direction (m and v copy in pairs).
  std::vector<std::string> log;
  for (const std::string& n : e.streams->issued())
    if (log.empty() || log.back() != n) log.push_back(n);
  const std::vector<std::string> want = {
      "in 0:0", "in 0:4", "update",  "out 0:0",  // bucket 0's second piece in under the first
      "in 1:0", "update", "out 0:4",             // bucket 1's first piece under bucket 0's last
      "in 1:4", "update", "out 1:0",             //
      "in 2:0", "update", "out 1:4",             //
      "in 2:4", "update", "out 2:0",             //
      "update", "out 2:4"};
  EXPECT_EQ(log, want);
  EXPECT_TRUE(e.streams->races().empty());
}

// A host write after a run drops the piece copied in ahead: the next run copies it again and
// computes on the new values.
TEST(OffloadPipeline, HostWritesDropThePieceCopiedAhead) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Emulated e(seed, 4);
    HostState h({4, 4});
    e.pipe->run(0, h.bucket(0), e.updater(1), h.bucket(1));
    e.pipe->invalidate();
    for (const Tensor& t : h.bucket(1)) e.streams->host_access(t, true, "bucket 1");
    h.m[1][0] = 100, h.v[1][0] = 200;  // a checkpoint load, say
    HostState want({4, 4});
    want.m[1][0] = 100, want.v[1][0] = 200;
    update(want.m[1].data(), want.v[1].data(), 4, 0, 1);
    e.pipe->run(0, h.bucket(1), e.updater(1));
    e.pipe->settle();
    EXPECT_EQ(h.m[1], want.m[1]) << "seed " << seed;
    EXPECT_EQ(h.v[1], want.v[1]) << "seed " << seed;
    EXPECT_TRUE(e.streams->races().empty());
  }
}

// Hints that name memory this run writes back are ignored (the copy ahead would be stale).
TEST(OffloadPipeline, IgnoresAHintOverlappingTheCurrentRun) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Emulated e(seed, 4);
    HostState h({8}), want({8});
    std::vector<Tensor> all = h.bucket(0), tail = {all[0].flat(4, 4), all[1].flat(4, 4)};
    e.pipe->run(0, all, e.updater(1), tail);
    e.pipe->run(4, tail, e.updater(2));
    e.pipe->settle();
    update(want.m[0].data(), want.v[0].data(), 8, 0, 1);
    update(want.m[0].data() + 4, want.v[0].data() + 4, 4, 4, 2);
    EXPECT_EQ(h.m[0], want.m[0]) << "seed " << seed;
    EXPECT_EQ(h.v[0], want.v[0]) << "seed " << seed;
    EXPECT_TRUE(e.streams->races().empty());
  }
}

// Simulated time: a piece's copy in (m and v) takes 2 s, its copy back 2 s, its compute 10 s.
// With hints only the very first copy in is waited for. Without, every later bucket's first
// copy in waits too, behind the copy back of the piece before (4 s each).
TEST(OffloadPipeline, CountsHiddenAndExposedCopiesOnTheDeviceTimeline) {
  const std::vector<int64_t> sizes = {8, 8, 8};  // 6 pieces of 4 floats (16 bytes per array)
  for (bool hints : {true, false}) {
    Emulated e(3, 4, /*copy_bytes_per_s=*/16);
    HostState h(sizes);
    e.step(h, 1, hints, /*seconds=*/10);
    e.pipe->settle();
    const OverlapCounter c = e.pipe->transfers();
    EXPECT_NEAR(c.flight_s, 6 * (2 + 2), 1e-9) << "hints " << hints;
    const double exposed = hints ? 2 : 2 + 2 * 4;
    // settle()'s real host wait also counts as exposed: microseconds, but a loaded machine can
    // deschedule the test for tens of milliseconds in it. It only adds, and the schedules
    // compared differ by whole simulated seconds.
    EXPECT_LE(c.flight_s - c.hidden_s, exposed + 0.5) << "hints " << hints;
    EXPECT_GE(c.flight_s - c.hidden_s, exposed - 1e-9);
  }
}

// The two lanes on the simulated timeline, when the copies set the pace: a piece's copy in
// (m and v) takes 2 s, its copy back 2 s, its compute 1 s. On one stream every copy back
// queues in front of the next copy in; on two, piece k's copy back runs beside piece k+2's
// copy in, so the compute stands waiting less and the run ends sooner.
TEST(OffloadPipeline, CopiesBackRunBesideCopiesInOnTheirOwnLane) {
  const std::vector<int64_t> sizes = {16, 16};  // 8 pieces of 4 floats (16 bytes per array)
  double exposed[2] = {0, 0}, end[2] = {0, 0};
  for (bool one_stream : {true, false}) {
    Emulated e(5, 4, /*copy_bytes_per_s=*/16, one_stream);
    HostState h(sizes);
    const auto start = e.streams->mark(EmulatedStreams::compute_stream);
    e.step(h, 1, true, /*seconds=*/1);
    const auto last_compute = e.streams->mark(EmulatedStreams::compute_stream);
    e.pipe->settle();
    const OverlapCounter c = e.pipe->transfers();
    EXPECT_NEAR(c.flight_s, 8 * (2 + 2), 1e-9);
    exposed[one_stream] = c.flight_s - c.hidden_s;
    end[one_stream] = e.streams->seconds_between(*start, *last_compute);
    EXPECT_TRUE(e.streams->races().empty());
  }
  // One stream: in(k+1) queues behind out(k-1), so from the second piece on one arrives every
  // 4 s; the compute waits 2 s for the first, 1 s for the second, 3 s for each of the other
  // 6, and ends at 4 * 7 + 1.
  // Two lanes: in(k+2) waits only for out(k), which ends 1 s after in(k+1): two pieces every
  // 5 s, waited for 2 s and 1 s, and the compute ends at 20.
  // (exposed also holds settle()'s real host wait: at least the simulated figure, within 0.5 s
  // of it however loaded the machine; see CountsHiddenAndExposedCopiesOnTheDeviceTimeline.)
  EXPECT_GE(exposed[1], 2 + 1 + 6 * 3 - 1e-9);
  EXPECT_LE(exposed[1], 2 + 1 + 6 * 3 + 0.5);
  EXPECT_NEAR(end[1], 29, 1e-9);
  EXPECT_GE(exposed[0], 2 + 1 + 3 * (2 + 1) - 1e-9);
  EXPECT_LE(exposed[0], 2 + 1 + 3 * (2 + 1) + 0.5);
  EXPECT_NEAR(end[0], 20, 1e-9);
  EXPECT_LT(exposed[0], exposed[1]);
}

// Without a copy stream (a backend that has none), pieces go through one slot with the
// backend's own copies: same result.
TEST(OffloadPipeline, WithoutACopyStreamCopiesSynchronously) {
  auto cpu = make_cpu_backend(1);
  OffloadPipeline pipe(*cpu, nullptr, 2, 3);
  HostState h({10}), want({10});
  pipe.run(5, h.bucket(0), [](int64_t offset, const std::vector<Tensor>& p) {
    update(p[0].f32(), p[1].f32(), p[0].numel(), offset, 1);
  });
  update(want.m[0].data(), want.v[0].data(), 10, 5, 1);
  EXPECT_EQ(h.m[0], want.m[0]);
  EXPECT_EQ(h.v[0], want.v[0]);
  EXPECT_FALSE(pipe.asynchronous());
  EXPECT_EQ(pipe.transfers().flight_s, 0);
}

// A device backend whose memory is host memory and whose compute stream is emulated: it
// offers the emulated copy stream, copies on the compute stream as CUDA's copy() does (the
// host waits for them), and says it is a device, so ShardStore stages chunks through it.
class EmulatedDevice final : public test::ForwardingBackend, public DeviceStreams {
 public:
  explicit EmulatedDevice(std::shared_ptr<EmulatedStreams> s)
      : ForwardingBackend(make_cpu_backend(1)), streams_(std::move(s)) {}
  Device device() const override { return Device::cuda; }
  void* compute_stream() const override { return nullptr; }
  int device_ordinal() const override { return 0; }
  std::unique_ptr<CopyStream> make_copy_stream() override {
    return std::make_unique<EmulatedCopyStream>(streams_);
  }
  void copy(Tensor dst, const Tensor& src) override {
    streams_->work(
        EmulatedStreams::compute_stream, {src}, {dst}, 0,
        [dst, src] { std::memcpy(dst.data, src.data, dst.bytes()); }, "backend copy");
    streams_->host_waits(*streams_->mark(EmulatedStreams::compute_stream));
  }

 private:
  std::shared_ptr<EmulatedStreams> streams_;
};

// ShardStore with cpu offload on a device: whole buckets with will_visit's hints and buckets
// in two calls (the rest of the bucket guessed), then reads and writes from the host, on
// random stream orders: the synchronous result, no unordered access, copies counted.
TEST(OffloadPipeline, ShardStoreStreamsHostStateThroughTheCopyStream) {
  const std::vector<int64_t> sizes = {3000, 1500, 2500};  // pieces of 1024
  HostState want(sizes);
  for (int step = 1; step <= 3; ++step)
    for (size_t b = 0; b < sizes.size(); ++b)
      update(want.m[b].data(), want.v[b].data(), sizes[b], 0, step);
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto streams = std::make_shared<EmulatedStreams>(seed);
    EmulatedDevice dev(streams);
    ShardOffload where;
    where.kind = Offload::cpu;
    where.buffer_bytes = 1024 * 4 * 2 * 2;  // two slots of 1024 floats per array
    ShardStore store(dev, "optimizer", sizes, 2, where, 0);
    EXPECT_EQ(store.max_chunk(), 1024);
    HostState init(sizes);
    for (size_t b = 0; b < sizes.size(); ++b)
      for (int a = 0; a < 2; ++a) store.write(int(b), a, init.bucket(b)[size_t(a)]);
    for (int step = 1; step <= 3; ++step)
      for (int b = 0; b < int(sizes.size()); ++b) {
        auto fn = [&](int64_t offset, const std::vector<Tensor>& mv) {
          const Tensor m = mv[0], v = mv[1];
          streams->work(
              EmulatedStreams::compute_stream, {m, v}, {m, v}, 0,
              [m, v, offset, step] { update(m.f32(), v.f32(), m.numel(), offset, step); },
              "update");
        };
        if (b + 1 < int(sizes.size())) store.will_visit(b + 1, 0, sizes[size_t(b) + 1]);
        if (step == 2) {  // two calls: the second half is guessed to follow the first
          store.for_each_chunk(b, 0, sizes[size_t(b)] / 2, fn);
          store.for_each_chunk(b, sizes[size_t(b)] / 2, sizes[size_t(b)], fn);
        } else {
          store.for_each_chunk(b, fn);
        }
      }
    HostState got(sizes);
    for (size_t b = 0; b < sizes.size(); ++b)
      for (int a = 0; a < 2; ++a) store.read(int(b), a, got.bucket(b)[size_t(a)]);
    for (size_t b = 0; b < sizes.size(); ++b) {
      ASSERT_EQ(got.m[b], want.m[b]) << "seed " << seed << " bucket " << b;
      ASSERT_EQ(got.v[b], want.v[b]) << "seed " << seed << " bucket " << b;
      // array() hands the host memory out only once the copies back have landed.
      ASSERT_EQ(store.array(int(b), 1).f32()[7], want.v[b][7]);
    }
    ASSERT_TRUE(streams->races().empty()) << streams->races().front();
    EXPECT_GT(store.transfers().flight_s, 0);
  }
}

// ZeRO-3's use of host-held parameter shards on a device (ZeroOptimizer::gather_params): each
// forward fetches bucket b + 2's shard while bucket b computes, and the gather of bucket b is
// ordered behind its fetch on the device; the optimizer then streams the same host arrays
// through the pipeline. On random stream orders every gather sees the state the synchronous
// path gives, no access is unordered, and the forward never makes the host wait.
TEST(OffloadPipeline, GathersFetchShardsAheadWithoutTheHostWaiting) {
  const std::vector<int64_t> sizes = {3000, 1500, 2500};
  const int steps = 3, buckets = int(sizes.size());
  // want[s][b]: bucket b's shard as the forward of step s + 1 sees it (after s updates).
  std::vector<HostState> want;
  want.emplace_back(sizes);
  for (int s = 1; s < steps; ++s) {
    want.push_back(want.back());
    for (int b = 0; b < buckets; ++b)
      update(want[size_t(s)].m[size_t(b)].data(), want[size_t(s)].v[size_t(b)].data(),
             sizes[size_t(b)], 0, s);
  }
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto streams = std::make_shared<EmulatedStreams>(seed);
    EmulatedDevice dev(streams);
    ShardOffload where;
    where.kind = Offload::cpu;
    where.buffer_bytes = 1024 * 4 * 2 * 2;
    ShardStore store(dev, "params", sizes, 2, where, 0);
    ASSERT_TRUE(store.fetches_to_device());
    HostState init(sizes);
    for (int b = 0; b < buckets; ++b)
      for (int a = 0; a < 2; ++a) store.write(b, a, init.bucket(size_t(b))[size_t(a)]);
    // Device staging buffers (one per fetch, never reused) and what each gather saw.
    std::vector<HostState> staging, seen;
    for (int s = 0; s < steps; ++s) staging.emplace_back(sizes), seen.emplace_back(sizes);
    for (int s = 0; s < steps; ++s) {
      const int64_t host_waits = streams->host_waits_count();
      auto fetch = [&](int b) {
        for (int a = 0; a < 2; ++a)
          store.fetch(b, a, staging[size_t(s)].bucket(size_t(b))[size_t(a)]);
      };
      fetch(0);
      fetch(1);
      for (int b = 0; b < buckets; ++b) {
        if (b + 2 < buckets) fetch(b + 2);
        for (int a = 0; a < 2; ++a) {
          const Tensor from = staging[size_t(s)].bucket(size_t(b))[size_t(a)];
          const Tensor to = seen[size_t(s)].bucket(size_t(b))[size_t(a)];
          store.compute_after_fetch(from);
          streams->work(
              EmulatedStreams::compute_stream, {from}, {to}, 0,
              [from, to] { std::memcpy(to.data, from.data, from.bytes()); }, "gather");
        }
      }
      EXPECT_EQ(streams->host_waits_count(), host_waits) << "the forward waited on the host";
      if (s + 1 == steps) break;
      for (int b = 0; b < buckets; ++b) {
        if (b + 1 < buckets) store.will_visit(b + 1, 0, sizes[size_t(b) + 1]);
        store.for_each_chunk(b, [&](int64_t offset, const std::vector<Tensor>& mv) {
          const Tensor m = mv[0], v = mv[1];
          streams->work(
              EmulatedStreams::compute_stream, {m, v}, {m, v}, 0,
              [m, v, offset, step = s + 1] { update(m.f32(), v.f32(), m.numel(), offset, step); },
              "update");
        });
      }
    }
    streams->drain();
    for (int s = 0; s < steps; ++s)
      for (int b = 0; b < buckets; ++b) {
        ASSERT_EQ(seen[size_t(s)].m[size_t(b)], want[size_t(s)].m[size_t(b)])
            << "seed " << seed << " step " << s << " bucket " << b;
        ASSERT_EQ(seen[size_t(s)].v[size_t(b)], want[size_t(s)].v[size_t(b)])
            << "seed " << seed << " step " << s << " bucket " << b;
      }
    ASSERT_TRUE(streams->races().empty()) << streams->races().front();
    // Every copy is counted once: each step's fetches (2 arrays), and each optimizer step's
    // copies in and back (2 arrays each way).
    double bytes = 0;
    for (int64_t n : sizes) bytes += double(steps * 2 + (steps - 1) * 2 * 2) * double(n) * 4;
    EXPECT_NEAR(store.transfers().flight_s, bytes / 1e9, 1e-12);
  }
}

// A device whose device allocations are counted (its memory is host memory), with the emulated
// copy stream or with none (as the emulated-device backend of the e2e tests has none).
class CountingDevice final : public test::ForwardingBackend, public DeviceStreams {
 public:
  explicit CountingDevice(std::shared_ptr<EmulatedStreams> s)
      : ForwardingBackend(make_cpu_backend(1)), streams_(std::move(s)) {}
  Device device() const override { return Device::cuda; }
  Buffer allocate(size_t bytes) override {
    allocated += bytes;
    return ForwardingBackend::allocate(bytes);
  }
  void* compute_stream() const override { return nullptr; }
  int device_ordinal() const override { return 0; }
  std::unique_ptr<CopyStream> make_copy_stream() override {
    return streams_ ? std::make_unique<EmulatedCopyStream>(streams_) : nullptr;
  }
  size_t allocated = 0;  // device bytes, freed or not

 private:
  std::shared_ptr<EmulatedStreams> streams_;
};

// device_bytes() (the trainer's mem_staging) is what the pipeline allocated: two slots per
// array with a copy stream, one without; and a ShardStore of host-held arrays on a device
// allocates no other device memory than its pipeline's slots.
TEST(OffloadPipeline, DeviceBytesAreTheSlotsAllocated) {
  for (bool with_copy_stream : {true, false}) {
    const std::string what = with_copy_stream ? "with a copy stream" : "without a copy stream";
    auto streams = with_copy_stream ? std::make_shared<EmulatedStreams>(1) : nullptr;
    {
      CountingDevice dev(streams);
      OffloadPipeline pipe(dev, dev.make_copy_stream(), 3, 1000);
      EXPECT_EQ(pipe.asynchronous(), with_copy_stream);
      EXPECT_EQ(dev.allocated, size_t(with_copy_stream ? 2 : 1) * 3 * 1000 * 4) << what;
      EXPECT_EQ(pipe.device_bytes(), dev.allocated) << what;
    }
    for (int arrays : {1, 2}) {
      CountingDevice dev(streams);
      ShardOffload where;
      where.kind = Offload::cpu;
      where.buffer_bytes = 1024 * 4 * 2 * 2;  // pieces of 2048 floats (one array) or 1024 (two)
      ShardStore store(dev, "optimizer", {3000, 1500}, arrays, where, 0);
      EXPECT_GT(dev.allocated, 0u) << what;
      EXPECT_EQ(store.device_staging_bytes(), dev.allocated) << what << ", " << arrays << " arrays";
    }
  }
  // Nothing staged where nothing is offloaded, or on the CPU backend.
  CountingDevice dev(std::make_shared<EmulatedStreams>(1));
  EXPECT_EQ(ShardStore(dev, "optimizer", {3000}, 2, {}, 0).device_staging_bytes(), 0u);
  auto cpu = make_cpu_backend(1);
  ShardOffload where;
  where.kind = Offload::cpu;
  EXPECT_EQ(ShardStore(*cpu, "optimizer", {3000}, 2, where, 0).device_staging_bytes(), 0u);
}

}  // namespace
}  // namespace llmrun
