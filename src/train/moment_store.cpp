#include "train/moment_store.h"

#include <fcntl.h>
#include <unistd.h>

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
    if (n <= 0) io_fail("read", path);
    p += n, bytes -= size_t(n), at += n;
  }
}

void pwrite_all(int fd, const void* src, size_t bytes, off_t at, const std::string& path) {
  const char* p = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, bytes, at);
    if (n <= 0) io_fail("write", path);
    p += n, bytes -= size_t(n), at += n;
  }
}
}  // namespace

MomentStore::MomentStore(Backend& be, const std::vector<int64_t>& shard_numel, const OptimizerOffload& offload,
                         int rank)
    : shard_(shard_numel), offload_(offload) {
  if (in_memory()) {
    for (int64_t n : shard_) {
      // cpu: host memory even when the backend's own memory is a device's.
      m_.push_back(offload_.kind == "cpu" ? Buffer::host(size_t(n) * 4) : be.allocate(size_t(n) * 4));
      v_.push_back(offload_.kind == "cpu" ? Buffer::host(size_t(n) * 4) : be.allocate(size_t(n) * 4));
    }
    return;
  }
  // Four staging buffers (two slots of m and v) share the budget.
  chunk_ = std::max<int64_t>(1024, offload_.buffer_bytes / (4 * 4));
  for (Slot& s : slots_) {
    s.m = Buffer::host(size_t(chunk_) * 4);
    s.v = Buffer::host(size_t(chunk_) * 4);
  }
  dir_ = (std::filesystem::path(offload_.nvme_path) /
          ("llmrun-optimizer-" + std::to_string(getpid()) + "-rank" + std::to_string(rank)))
             .string();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw UserError("memory.offload.nvme_path: cannot create " + dir_ + ": " + ec.message());
  for (size_t b = 0; b < shard_.size(); ++b) {
    const std::string path = dir_ + "/bucket-" + std::to_string(b) + ".moments";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) io_fail("create", path);
    fds_.push_back(fd);
    if (ftruncate(fd, off_t(shard_[b]) * 8) != 0) io_fail("size", path);  // zeros: fresh moments
  }
}

MomentStore::~MomentStore() {
  for (int fd : fds_) close(fd);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Tensor MomentStore::m(int b) const { return m_[b].as(DType::f32, {shard_[b]}); }
Tensor MomentStore::v(int b) const { return v_[b].as(DType::f32, {shard_[b]}); }

int64_t MomentStore::max_chunk() const {
  int64_t n = 0;
  for (int64_t s : shard_) n = std::max(n, in_memory() ? s : std::min(s, chunk_));
  return n;
}

size_t MomentStore::resident_bytes() const {
  if (!in_memory()) return size_t(chunk_) * 4 * 4;
  size_t n = 0;
  for (int64_t s : shard_) n += size_t(s) * 8;
  return n;
}

void MomentStore::read(int b, int64_t offset, int64_t len, Slot& slot) const {
  const std::string path = dir_ + "/bucket-" + std::to_string(b) + ".moments";
  pread_all(fds_[b], slot.m.data(), size_t(len) * 4, off_t(offset) * 4, path);
  pread_all(fds_[b], slot.v.data(), size_t(len) * 4, off_t(shard_[b] + offset) * 4, path);
}

void MomentStore::write(int b, int64_t offset, int64_t len, const Slot& slot) const {
  const std::string path = dir_ + "/bucket-" + std::to_string(b) + ".moments";
  pwrite_all(fds_[b], slot.m.data(), size_t(len) * 4, off_t(offset) * 4, path);
  pwrite_all(fds_[b], slot.v.data(), size_t(len) * 4, off_t(shard_[b] + offset) * 4, path);
}

void MomentStore::for_each_chunk(int b, const std::function<void(int64_t, Tensor, Tensor)>& fn) {
  if (in_memory()) {
    fn(0, m(b), v(b));
    return;
  }
  const int64_t n = shard_[b];
  std::future<void> reading, writing;
  auto len_at = [&](int64_t off) { return std::min(chunk_, n - off); };
  read(b, 0, len_at(0), slots_[0]);
  int cur = 0;
  for (int64_t off = 0; off < n; off += chunk_, cur ^= 1) {
    if (reading.valid()) reading.get();
    const int64_t next = off + chunk_;
    if (next < n) {
      // The other slot is free once its previous chunk has been written back.
      if (writing.valid()) writing.get();
      reading = std::async(std::launch::async, [this, b, next, &len_at, cur] { read(b, next, len_at(next), slots_[cur ^ 1]); });
    }
    const int64_t len = len_at(off);
    Slot& s = slots_[cur];
    fn(off, s.m.as(DType::f32, {len}), s.v.as(DType::f32, {len}));
    if (writing.valid()) writing.get();
    writing = std::async(std::launch::async, [this, b, off, len, cur] { write(b, off, len, slots_[cur]); });
  }
  if (reading.valid()) reading.get();
  if (writing.valid()) writing.get();
}

}  // namespace llmrun
