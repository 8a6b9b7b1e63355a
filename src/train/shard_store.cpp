#include "train/shard_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>

#include "backend/device_streams.h"
#include "util/error.h"

namespace llmrun {

namespace {
[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  throw UserError("memory.offload: cannot " + what + " " + path + ": " + std::strerror(errno));
}

void pread_all(int fd, void* dst, size_t bytes, off_t at, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = pread(fd, p, bytes, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) io_fail("read", path);
    p += n, bytes -= size_t(n), at += n;
  }
}

void pwrite_all(int fd, const void* src, size_t bytes, off_t at, const std::string& path) {
  const char* p = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, bytes, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) io_fail("write", path);
    p += n, bytes -= size_t(n), at += n;
  }
}
}  // namespace

ShardStore::ShardStore(Backend& be, std::string name, const std::vector<int64_t>& shard_numel,
                       int arrays, const ShardOffload& where, int rank)
    : be_(be), name_(std::move(name)), shard_(shard_numel), arrays_(arrays), where_(where) {
  const int64_t largest =
      shard_.empty() ? 1 : std::max<int64_t>(1, *std::max_element(shard_.begin(), shard_.end()));
  if (be.device() != Device::cpu && where_.kind != Offload::none) {
    // The backend computes on its own memory only: chunks of host-held arrays visit it, in
    // pieces of two device slots that share the staging budget.
    const int64_t piece =
        std::min(largest, std::max<int64_t>(1024, where_.buffer_bytes / (2 * arrays_ * 4)));
    pipeline_ = std::make_unique<OffloadPipeline>(be, make_copy_stream(be), arrays_, piece);
  }
  // Host memory that the device copies from and to is page-locked, so the copies are
  // asynchronous (the CPU backend's is ordinary memory: it copies nothing).
  auto host_buffer = [&](size_t bytes) {
    return pipeline_ ? be.allocate_host_pinned(bytes) : Buffer::host(bytes);
  };
  if (in_memory()) {
    for (int64_t n : shard_) {
      auto& bucket = mem_.emplace_back();
      // cpu: host memory even when the backend's own memory is a device's.
      for (int a = 0; a < arrays_; ++a)
        bucket.push_back(where_.kind == Offload::cpu ? host_buffer(size_t(n) * 4)
                                                     : be.allocate(size_t(n) * 4));
    }
    return;
  }
  // Two slots of one buffer per array share the budget; none needs to outgrow the largest shard.
  chunk_ = std::max<int64_t>(1024, where_.buffer_bytes / (2 * arrays_ * 4));
  chunk_ = std::max<int64_t>(1, std::min(chunk_, *std::max_element(shard_.begin(), shard_.end())));
  for (auto& slot : slots_)
    for (int a = 0; a < arrays_; ++a) slot.push_back(host_buffer(size_t(chunk_) * 4));
  dir_ = (std::filesystem::path(where_.nvme_path) /
          ("llmrun-" + name_ + "-" + std::to_string(getpid()) + "-rank" + std::to_string(rank)))
             .string();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw UserError("memory.offload.nvme_path: cannot create " + dir_ + ": " + ec.message());
  for (size_t b = 0; b < shard_.size(); ++b) {
    const std::string path = file(int(b));
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) io_fail("create", path);
    fds_.push_back(fd);
    if (ftruncate(fd, off_t(shard_[b]) * 4 * arrays_) != 0) io_fail("size", path);  // zeros
  }
}

ShardStore::~ShardStore() {
  pipeline_.reset();  // its copies back finish before the host memory goes
  for (int fd : fds_) close(fd);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string ShardStore::file(int b) const {
  return dir_ + "/bucket-" + std::to_string(b) + "." + name_;
}

// The caller may read or write the array: the device copies of it finish first.
Tensor ShardStore::array(int b, int a) const {
  if (pipeline_) pipeline_->invalidate();
  return mem_[b][a].as(DType::f32, {shard_[b]});
}

std::vector<Tensor> ShardStore::host_range(int b, int64_t begin, int64_t end) const {
  std::vector<Tensor> r;
  for (int a = 0; a < arrays_; ++a)
    r.push_back(mem_[b][a].as(DType::f32, {shard_[b]}).flat(begin, end - begin));
  return r;
}

void ShardStore::fetch(int b, int a, const Tensor& dst) {
  LLMRUN_CHECK(fetches_to_device(), "shard fetch: only host-held arrays on a device backend");
  LLMRUN_CHECK(dst.numel() == shard_[b], "shard fetch: wrong size");
  pipeline_->fetch(dst, mem_[b][a].as(DType::f32, {shard_[b]}));
}

void ShardStore::compute_after_fetch(const Tensor& dst) { pipeline_->compute_waits_fetch(dst); }

void ShardStore::will_visit(int b, int64_t begin, int64_t end) {
  LLMRUN_CHECK(0 <= b && b < int(shard_.size()) && 0 <= begin && begin <= end && end <= shard_[b],
               "will_visit: range outside the shards");
  next_visit_ = {b, begin, end};
}

OverlapCounter ShardStore::transfers() const {
  OverlapCounter c = transfers_;
  if (pipeline_) c += pipeline_->transfers();
  return c;
}

int64_t ShardStore::max_chunk() const {
  int64_t n = 0;
  for (int64_t s : shard_) n = std::max(n, in_memory() ? s : std::min(s, chunk_));
  return pipeline_ ? std::min(n, pipeline_->piece()) : n;
}

size_t ShardStore::resident_bytes() const {
  if (!in_memory()) return size_t(chunk_) * 4 * 2 * arrays_;
  size_t n = 0;
  for (int64_t s : shard_) n += size_t(s) * 4 * arrays_;
  return n;
}

void ShardStore::read_range(int b, int a, int64_t first, const Tensor& dst) const {
  const int64_t n = dst.numel();
  LLMRUN_CHECK(first >= 0 && first + n <= shard_[b], "shard read outside the shard");
  if (in_memory()) {
    const Tensor src = mem_[b][a].as(DType::f32, {shard_[b]}).flat(first, n);
    // Host-held: the copies back to it must land first (on the device when dst is there).
    if (pipeline_ && src.device == Device::cpu && dst.device == Device::cpu)
      pipeline_->settle();
    else if (pipeline_ && src.device == Device::cpu)
      pipeline_->order_compute_after_copies();
    return be_.copy(dst, src);
  }
  const off_t at = off_t(a * shard_[b] + first) * 4;
  if (dst.device == Device::cpu) return pread_all(fds_[b], dst.data, size_t(n) * 4, at, file(b));
  Buffer staging = Buffer::host(size_t(n) * 4);
  pread_all(fds_[b], staging.data(), staging.bytes(), at, file(b));
  be_.copy(dst, staging.as(DType::f32, {n}));
}

void ShardStore::write_range(int b, int a, int64_t first, const Tensor& src) {
  const int64_t n = src.numel();
  LLMRUN_CHECK(first >= 0 && first + n <= shard_[b], "shard write outside the shard");
  if (in_memory()) return be_.copy(array(b, a).flat(first, n), src);  // array(): invalidates
  const off_t at = off_t(a * shard_[b] + first) * 4;
  if (src.device == Device::cpu) return pwrite_all(fds_[b], src.data, size_t(n) * 4, at, file(b));
  Buffer staging = Buffer::host(size_t(n) * 4);
  be_.copy(staging.as(DType::f32, {n}), src);
  pwrite_all(fds_[b], staging.data(), staging.bytes(), at, file(b));
}

void ShardStore::read_chunk(int b, int64_t offset, int64_t len, std::vector<Buffer>& slot) const {
  for (int a = 0; a < arrays_; ++a)
    pread_all(fds_[b], slot[a].data(), size_t(len) * 4, off_t(a * shard_[b] + offset) * 4, file(b));
}

void ShardStore::write_chunk(int b, int64_t offset, int64_t len,
                             const std::vector<Buffer>& slot) const {
  for (int a = 0; a < arrays_; ++a)
    pwrite_all(fds_[b], slot[a].data(), size_t(len) * 4, off_t(a * shard_[b] + offset) * 4,
               file(b));
}

void ShardStore::run_chunk(int64_t offset, const std::vector<Tensor>& host_chunk, const ChunkFn& fn,
                           const std::vector<Tensor>& next) {
  if (!pipeline_ || host_chunk.empty() || host_chunk[0].device != Device::cpu)
    return fn(offset, host_chunk);
  pipeline_->run(offset, host_chunk, fn, next);
  // nvme: the staging slot goes to the file (and is refilled) as soon as this returns.
  if (!in_memory()) pipeline_->settle();
}

void ShardStore::for_each_chunk(int b, int64_t begin, int64_t end, const ChunkFn& fn) {
  LLMRUN_CHECK(0 <= begin && begin <= end && end <= shard_[b], "chunk range outside the shard");
  if (begin == end) return;
  std::vector<Tensor> chunk(static_cast<size_t>(arrays_));
  if (in_memory()) {
    // What follows: the rest of this bucket, or will_visit's range once the bucket ends.
    std::vector<Tensor> next;
    if (end < shard_[b]) {
      next = host_range(b, end, shard_[b]);
    } else if (next_visit_.b >= 0) {
      next = host_range(next_visit_.b, next_visit_.begin, next_visit_.end);
      next_visit_ = {};
    }
    run_chunk(begin, host_range(b, begin, end), fn, next);
    return;
  }
  TimedTask reading, writing;
  auto len_at = [&](int64_t off) { return std::min(chunk_, end - off); };
  // The first chunk's read has nothing to hide behind; the later reads and every write-back
  // run beside fn's compute (transfers_ counts how much of them it hid).
  const double first_read = steady_seconds();
  read_chunk(b, begin, len_at(begin), slots_[0]);
  const double first_read_s = steady_seconds() - first_read;
  transfers_.add(first_read_s, first_read_s);
  int cur = 0;
  for (int64_t off = begin; off < end; off += chunk_, cur ^= 1) {
    if (reading.valid()) reading.get(transfers_);
    const int64_t next = off + chunk_;
    if (next < end) {
      // The other slot is free once its previous chunk has been written back.
      if (writing.valid()) writing.get(transfers_);
      reading = TimedTask::start(
          [this, b, next, n = len_at(next), cur] { read_chunk(b, next, n, slots_[cur ^ 1]); });
    }
    const int64_t len = len_at(off);
    for (int a = 0; a < arrays_; ++a) chunk[a] = slots_[cur][a].as(DType::f32, {len});
    run_chunk(off, chunk, fn);
    if (writing.valid()) writing.get(transfers_);
    writing = TimedTask::start([this, b, off, len, cur] { write_chunk(b, off, len, slots_[cur]); });
  }
  if (reading.valid()) reading.get(transfers_);
  if (writing.valid()) writing.get(transfers_);
}

}  // namespace llmrun
