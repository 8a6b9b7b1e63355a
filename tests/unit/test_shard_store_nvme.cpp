// ShardStore's nvme streaming (train/shard_store.h) with real files on the CPU: while a call's
// last chunk is in fn, the first chunk of the call expected next (the rest of the bucket, or
// will_visit's range) is being read already, and that call uses it instead of reading it
// again; the results are those of plain memory; host reads and writes between calls see and
// change the files as if nothing were under way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "train/shard_store.h"

namespace llmrun {
namespace {

// The chunk reads a store started, as (bucket, first element), seen from the reading threads.
class ReadLog {
 public:
  void attach(ShardStore& store) {
    store.on_chunk_read([this](int b, int64_t offset) {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_[{b, offset}];
      cv_.notify_all();
    });
  }
  // Whether the read of (b, offset) has started, waiting up to `seconds` for it.
  bool started(int b, int64_t offset, double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
      return count_.count({b, offset}) > 0;
    });
  }
  std::map<std::pair<int, int64_t>, int> counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    count_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int64_t>, int> count_;
};

// A distinct update per element, offset and step (as the offload pipeline tests use).
void update(float* m, float* v, int64_t n, int64_t offset, int step) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::sin(float(offset + i) * 0.37f + float(step));
    m[i] = 0.9f * m[i] + 0.1f * g;
    v[i] = 0.99f * v[i] + 0.01f * g * g + 1e-3f * m[i];
  }
}

struct NvmeStore {
  std::string dir;
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::unique_ptr<ShardStore> store;
  std::vector<std::vector<float>> m, v;  // the same state in plain memory
  ReadLog reads;
  explicit NvmeStore(const std::vector<int64_t>& sizes) {
    dir =
        (std::filesystem::temp_directory_path() / ("llmrun-nvme-test-" + std::to_string(getpid())))
            .string();
    std::filesystem::create_directories(dir);
    ShardOffload where;
    where.kind = Offload::nvme;
    where.nvme_path = dir;
    where.buffer_bytes = 1024 * 4 * 2 * 2;  // two slots of 1024 floats per array
    store = std::make_unique<ShardStore>(*cpu, "optimizer", sizes, 2, where, 0);
    for (size_t b = 0; b < sizes.size(); ++b) {
      m.emplace_back(size_t(sizes[b]));
      v.emplace_back(size_t(sizes[b]));
      for (int64_t i = 0; i < sizes[b]; ++i)
        m[b][size_t(i)] = 0.5f * float(i) - float(b), v[b][size_t(i)] = 1.0f / float(2 + i + b);
      store->write(int(b), 0, Tensor(m[b].data(), DType::f32, {sizes[b]}));
      store->write(int(b), 1, Tensor(v[b].data(), DType::f32, {sizes[b]}));
    }
    reads.attach(*store);
  }
  ~NvmeStore() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
  // One call over [begin, end) of bucket b, updating the store and the plain copy. When
  // `next` names the call expected after this one, the last chunk's fn waits for that call's
  // first read to start and records whether it did.
  void visit(int b, int64_t begin, int64_t end, int step, std::pair<int, int64_t> next,
             std::vector<bool>* read_ahead_seen) {
    store->for_each_chunk(b, begin, end, [&](int64_t off, const std::vector<Tensor>& mv) {
      if (off + mv[0].numel() == end && next.first >= 0)
        // (Up to 60 s: it returns at the read's start; a loaded machine can be slow to start it.)
        read_ahead_seen->push_back(reads.started(next.first, next.second, 60.0));
      update(mv[0].f32(), mv[1].f32(), mv[0].numel(), off, step);
    });
    update(m[size_t(b)].data() + begin, v[size_t(b)].data() + begin, end - begin, begin, step);
  }
  void expect_files_match(const std::string& what) {
    for (size_t b = 0; b < m.size(); ++b) {
      std::vector<float> got_m(m[b].size()), got_v(v[b].size());
      store->read(int(b), 0, Tensor(got_m.data(), DType::f32, {int64_t(got_m.size())}));
      store->read(int(b), 1, Tensor(got_v.data(), DType::f32, {int64_t(got_v.size())}));
      EXPECT_EQ(got_m, m[b]) << what << " bucket " << b;
      EXPECT_EQ(got_v, v[b]) << what << " bucket " << b;
    }
  }
};

TEST(ShardStoreNvme, NextCallsFirstChunkIsReadWhileTheLastChunkIsInFn) {
  const std::vector<int64_t> sizes = {2500, 1500, 3000};  // chunks of 1024: partial ones too
  NvmeStore s(sizes);
  EXPECT_EQ(s.store->max_chunk(), 1024);
  for (int step = 1; step <= 3; ++step) {
    s.reads.clear();
    std::vector<bool> seen;
    for (int b = 0; b < 3; ++b) {
      const int next = b + 1 < 3 ? b + 1 : -1;
      if (next >= 0) s.store->will_visit(next, 0, sizes[size_t(next)]);
      if (step == 2) {  // two calls: the second half is guessed to follow the first
        const int64_t half = sizes[size_t(b)] / 2;
        s.visit(b, 0, half, step, {b, half}, &seen);
        s.visit(b, half, sizes[size_t(b)], step, {next, 0}, &seen);
      } else {
        s.visit(b, 0, sizes[size_t(b)], step, {next, 0}, &seen);
      }
    }
    // Every expected call's first read had started while the call before was in its last fn.
    EXPECT_EQ(seen, std::vector<bool>(step == 2 ? 5 : 2, true)) << "step " << step;
    // And no chunk was read twice (the chunk read ahead was the one used).
    for (const auto& [at, n] : s.reads.counts())
      EXPECT_EQ(n, 1) << "step " << step << ": bucket " << at.first << " offset " << at.second;
    s.expect_files_match("step " + std::to_string(step));
  }
  const OverlapCounter c = s.store->transfers();
  EXPECT_GT(c.flight_s, 0);
  EXPECT_LE(c.hidden_s, c.flight_s);
}

// A wrong guess costs a read, not a result: the chunk read ahead is dropped.
TEST(ShardStoreNvme, AWrongGuessReadsTheChunkAgain) {
  NvmeStore s({1500, 1500});
  std::vector<bool> seen;
  s.store->will_visit(1, 0, 1500);
  s.visit(0, 0, 1500, 1, {1, 0}, &seen);
  s.visit(1, 512, 1500, 1, {-1, 0}, &seen);  // not the range announced
  EXPECT_EQ(seen, std::vector<bool>{true});
  EXPECT_EQ(s.reads.counts().count({1, 512}), 1u);
  s.expect_files_match("after a wrong guess");
}

// Host writes between calls reach the next call even when its first chunk was read ahead
// (the read is dropped), and host reads see the last call's write-back.
TEST(ShardStoreNvme, HostWritesBetweenCallsDropTheChunkReadAhead) {
  NvmeStore s({1000, 1000});
  std::vector<bool> seen;
  s.store->will_visit(1, 0, 1000);
  s.visit(0, 0, 1000, 1, {1, 0}, &seen);
  s.expect_files_match("read back under the write-behind");
  s.m[1][3] = 42;  // a checkpoint load, say
  s.store->write_range(1, 0, 3, Tensor(&s.m[1][3], DType::f32, {1}));
  s.visit(1, 0, 1000, 1, {-1, 0}, &seen);
  s.expect_files_match("after a host write");
}

// A call announced to follow over the range just visited is not read ahead: its chunk is
// written back only after the read would have started.
TEST(ShardStoreNvme, NoReadAheadOfTheRangeBeingWritten) {
  NvmeStore s({800});
  std::vector<bool> seen;
  for (int step = 1; step <= 3; ++step) {
    s.store->will_visit(0, 0, 800);
    s.visit(0, 0, 800, step, {-1, 0}, &seen);
  }
  s.expect_files_match("one bucket, visited again and again");
}

}  // namespace
}  // namespace llmrun
