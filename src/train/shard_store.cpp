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
  try {
    finish_io(true);  // the file I/O still under way, before the files close
  } catch (...) {
  }
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
  OverlapCounter c;
  {
    std::lock_guard<std::mutex> lock(io_mu_);
    c = transfers_;
  }
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
  finish_io(false);  // the file holds the last write-back
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
  finish_io(true);  // the chunk read ahead may hold what this overwrites
  const off_t at = off_t(a * shard_[b] + first) * 4;
  if (src.device == Device::cpu) return pwrite_all(fds_[b], src.data, size_t(n) * 4, at, file(b));
  Buffer staging = Buffer::host(size_t(n) * 4);
  be_.copy(staging.as(DType::f32, {n}), src);
  pwrite_all(fds_[b], staging.data(), staging.bytes(), at, file(b));
}

void ShardStore::read_chunk(int b, int64_t offset, int64_t len, std::vector<Buffer>& slot) const {
  if (on_chunk_read_) on_chunk_read_(b, offset);
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

ShardStore::Visit ShardStore::following(int b, int64_t end) {
  if (end < shard_[b]) return {b, end, shard_[b]};
  const Visit v = next_visit_;
  next_visit_ = {};
  return v;
}

void ShardStore::finish_io(bool drop_read_ahead) const {
  std::lock_guard<std::mutex> lock(io_mu_);
  if (write_behind_.valid()) write_behind_.get(transfers_);
  if (drop_read_ahead && read_ahead_.task.valid()) {
    read_ahead_.task.get(transfers_);
    read_ahead_ = {};
  }
}

void ShardStore::for_each_chunk(int b, int64_t begin, int64_t end, const ChunkFn& fn) {
  LLMRUN_CHECK(0 <= begin && begin <= end && end <= shard_[b], "chunk range outside the shard");
  if (begin == end) return;
  std::vector<Tensor> chunk(static_cast<size_t>(arrays_));
  // What follows: the rest of this bucket, or will_visit's range once the bucket ends.
  const Visit next_call = following(b, end);
  if (in_memory()) {
    std::vector<Tensor> next;
    if (next_call.b >= 0) next = host_range(next_call.b, next_call.begin, next_call.end);
    run_chunk(begin, host_range(b, begin, end), fn, next);
    return;
  }
  auto len_at = [&](int64_t off) { return std::min(chunk_, end - off); };
  // The previous call's I/O: its last write-back (the file chunk and slot of it), and the
  // chunk it read ahead, which holds this call's first one when the guess was right (or
  // named a longer range from the same element on).
  TimedTask reading, writing;
  int cur = 0;
  {
    std::lock_guard<std::mutex> lock(io_mu_);
    writing = std::move(write_behind_);
    write_behind_ = {};
    ReadAhead ahead = std::move(read_ahead_);
    read_ahead_ = {};
    if (ahead.task.valid() && ahead.b == b && ahead.offset == begin && ahead.len >= len_at(begin)) {
      cur = ahead.slot;
      reading = std::move(ahead.task);
    } else {
      if (ahead.task.valid()) ahead.task.get(transfers_);  // a wrong guess: read, unused
      // The first chunk has nothing to hide behind; it goes to the slot not being written,
      // after the write-back when that is of the same elements (a bucket visited again).
      const Visit& w = write_behind_range_;
      if (writing.valid() && w.b == b && w.begin < begin + len_at(begin) && begin < w.end)
        writing.get(transfers_);
      cur = writing.valid() ? 1 - write_behind_slot_ : 0;
      const double t0 = steady_seconds();
      read_chunk(b, begin, len_at(begin), slots_[cur]);
      const double read_s = steady_seconds() - t0;
      transfers_.add(read_s, read_s);
    }
  }
  // The later reads and every write-back run beside fn (transfers_ counts how much of them it
  // hid). The next call's first chunk is read while this call's last one is in fn, unless it
  // overlaps this call's range (it would be read before being written back).
  const bool read_next_call = next_call.b >= 0 && next_call.begin < next_call.end &&
                              !(next_call.b == b && next_call.begin < end && begin < next_call.end);
  ReadAhead ahead;
  for (int64_t off = begin; off < end; off += chunk_, cur ^= 1) {
    if (reading.valid()) {
      std::lock_guard<std::mutex> lock(io_mu_);
      reading.get(transfers_);
    }
    const int64_t next = off + chunk_;
    if (next < end || read_next_call) {
      // The other slot is free once its previous chunk has been written back.
      if (writing.valid()) {
        std::lock_guard<std::mutex> lock(io_mu_);
        writing.get(transfers_);
      }
      if (next < end) {
        reading = TimedTask::start(
            [this, b, next, n = len_at(next), cur] { read_chunk(b, next, n, slots_[cur ^ 1]); });
      } else {
        ahead.b = next_call.b;
        ahead.offset = next_call.begin;
        ahead.len = std::min(chunk_, next_call.end - next_call.begin);
        ahead.slot = cur ^ 1;
        ahead.task = TimedTask::start([this, nb = ahead.b, at = ahead.offset, n = ahead.len,
                                       slot = ahead.slot] { read_chunk(nb, at, n, slots_[slot]); });
      }
    }
    const int64_t len = len_at(off);
    for (int a = 0; a < arrays_; ++a) chunk[a] = slots_[cur][a].as(DType::f32, {len});
    run_chunk(off, chunk, fn);
    if (writing.valid()) {
      std::lock_guard<std::mutex> lock(io_mu_);
      writing.get(transfers_);
    }
    writing = TimedTask::start([this, b, off, len, cur] { write_chunk(b, off, len, slots_[cur]); });
    if (off + chunk_ >= end) {
      // Both go on after the call returns; read_range, write_range and the next call wait.
      std::lock_guard<std::mutex> lock(io_mu_);
      write_behind_ = std::move(writing);
      write_behind_slot_ = cur;
      write_behind_range_ = {b, off, off + len};
      read_ahead_ = std::move(ahead);
    }
  }
}

}  // namespace llmrun
