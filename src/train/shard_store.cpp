#include "train/shard_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>

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
    // The backend computes on its own memory only: chunks of host-held arrays visit it.
    device_chunk_ =
        std::min(largest, std::max<int64_t>(1024, where_.buffer_bytes / (2 * arrays_ * 4)));
    for (int a = 0; a < arrays_; ++a)
      device_slot_.push_back(be.allocate(size_t(device_chunk_) * 4));
  }
  if (in_memory()) {
    for (int64_t n : shard_) {
      auto& bucket = mem_.emplace_back();
      // cpu: host memory even when the backend's own memory is a device's.
      for (int a = 0; a < arrays_; ++a)
        bucket.push_back(where_.kind == Offload::cpu ? Buffer::host(size_t(n) * 4)
                                                     : be.allocate(size_t(n) * 4));
    }
    return;
  }
  // Two slots of one buffer per array share the budget; none needs to outgrow the largest shard.
  chunk_ = std::max<int64_t>(1024, where_.buffer_bytes / (2 * arrays_ * 4));
  chunk_ = std::max<int64_t>(1, std::min(chunk_, *std::max_element(shard_.begin(), shard_.end())));
  for (auto& slot : slots_)
    for (int a = 0; a < arrays_; ++a) slot.push_back(Buffer::host(size_t(chunk_) * 4));
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
  for (int fd : fds_) close(fd);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string ShardStore::file(int b) const {
  return dir_ + "/bucket-" + std::to_string(b) + "." + name_;
}

Tensor ShardStore::array(int b, int a) const { return mem_[b][a].as(DType::f32, {shard_[b]}); }

int64_t ShardStore::max_chunk() const {
  int64_t n = 0;
  for (int64_t s : shard_) n = std::max(n, in_memory() ? s : std::min(s, chunk_));
  return device_chunk_ > 0 ? std::min(n, device_chunk_) : n;
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
  if (in_memory()) return be_.copy(dst, array(b, a).flat(first, n));
  const off_t at = off_t(a * shard_[b] + first) * 4;
  if (dst.device == Device::cpu) return pread_all(fds_[b], dst.data, size_t(n) * 4, at, file(b));
  Buffer staging = Buffer::host(size_t(n) * 4);
  pread_all(fds_[b], staging.data(), staging.bytes(), at, file(b));
  be_.copy(dst, staging.as(DType::f32, {n}));
}

void ShardStore::write_range(int b, int a, int64_t first, const Tensor& src) {
  const int64_t n = src.numel();
  LLMRUN_CHECK(first >= 0 && first + n <= shard_[b], "shard write outside the shard");
  if (in_memory()) return be_.copy(array(b, a).flat(first, n), src);
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

void ShardStore::run_chunk(int64_t offset, const std::vector<Tensor>& host_chunk,
                           const ChunkFn& fn) {
  if (device_chunk_ == 0 || host_chunk.empty() || host_chunk[0].device != Device::cpu)
    return fn(offset, host_chunk);
  const int64_t n = host_chunk[0].numel();
  std::vector<Tensor> dev(host_chunk.size());
  for (int64_t at = 0; at < n; at += device_chunk_) {
    const int64_t len = std::min(device_chunk_, n - at);
    for (size_t a = 0; a < host_chunk.size(); ++a) {
      dev[a] = device_slot_[a].as(DType::f32, {len});
      be_.copy(dev[a], host_chunk[a].flat(at, len));
    }
    fn(offset + at, dev);
    for (size_t a = 0; a < host_chunk.size(); ++a) be_.copy(host_chunk[a].flat(at, len), dev[a]);
  }
}

void ShardStore::for_each_chunk(int b, int64_t begin, int64_t end, const ChunkFn& fn) {
  LLMRUN_CHECK(0 <= begin && begin <= end && end <= shard_[b], "chunk range outside the shard");
  if (begin == end) return;
  std::vector<Tensor> chunk(static_cast<size_t>(arrays_));
  if (in_memory()) {
    for (int a = 0; a < arrays_; ++a) chunk[a] = array(b, a).flat(begin, end - begin);
    run_chunk(begin, chunk, fn);
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
