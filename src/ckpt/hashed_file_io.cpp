#include "ckpt/hashed_file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

namespace {

// O_DIRECT needs offsets, lengths and memory aligned to the device's logical block; 4 KiB
// covers every common one.
constexpr size_t kAlign = 4096;
// 8 MiB blocks, written by two threads: two requests in flight keep a (virtual) disk busier
// than one, and a third block is filled meanwhile (24 MiB of staging per file).
constexpr size_t kBlockBytes = 8u << 20;
constexpr size_t kMaxBlocks = 3;
constexpr int kWriterThreads = 2;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HashedFileWriter::HashedFileWriter(const std::filesystem::path& path, uint64_t size_hint)
    : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path.c_str(), flags, 0644);  // tmpfs and friends
  if (fd_ < 0) throw_io_error(path_, "cannot create file", errno);
  block_bytes_ =
      std::min<uint64_t>(kBlockBytes, round_up(std::max<uint64_t>(size_hint, 1), kAlign));
}

HashedFileWriter::~HashedFileWriter() {
  stop_thread();
  if (fd_ >= 0) ::close(fd_);
  for (unsigned char* p : storage_) std::free(p);  // every block, wherever it was
}

void HashedFileWriter::write(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    if (!current_.data) take_free_block();
    const size_t n = std::min(bytes, block_bytes_ - current_.bytes);
    hash_.update_copy(current_.data + current_.bytes, p, n);
    current_.bytes += n;
    written_ += n;
    p += n;
    bytes -= n;
    if (current_.bytes == block_bytes_) submit_current();
  }
}

void HashedFileWriter::take_free_block() {
  std::unique_lock lock(mu_);
  if (free_.empty() && storage_.size() < kMaxBlocks) {
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, block_bytes_));
    if (!p) throw std::bad_alloc();
    storage_.push_back(p);
    free_.push_back(p);
  }
  cv_.wait(lock, [&] { return !free_.empty() || error_ != 0; });
  if (error_ != 0) {
    lock.unlock();
    rethrow_writer_error();
  }
  current_ = {free_.back(), written_, 0};
  free_.pop_back();
}

void HashedFileWriter::submit_current() {
  {
    std::lock_guard lock(mu_);
    queued_.push_back(current_);
  }
  current_ = {};
  if (threads_.empty())
    for (int t = 0; t < kWriterThreads; ++t) threads_.emplace_back([this] { write_loop(); });
  cv_.notify_all();
}

void HashedFileWriter::write_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queued_.empty() || stopping_; });
    if (queued_.empty()) return;
    const Block b = queued_.front();
    queued_.erase(queued_.begin());
    const bool failed = error_ != 0;
    lock.unlock();
    if (!failed) write_block(b);  // after a failure the rest is only handed back
    lock.lock();
    free_.push_back(b.data);
    cv_.notify_all();
  }
}

void HashedFileWriter::write_block(const Block& b) {
  size_t len = b.bytes;
  if (direct_) {
    // The file is cut back to its size at finish(); the padding only fills the last block.
    const size_t padded = round_up(len, kAlign);
    std::memset(b.data + len, 0, padded - len);
    len = padded;
  }
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pwrite(fd_, b.data + done, len - done, off_t(b.offset + done));
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {
      // The filesystem took O_DIRECT at open but not this alignment: write through the page cache.
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) {
        direct_ = false;
        continue;
      }
    }
    std::lock_guard lock(mu_);
    error_ = n < 0 ? errno : EIO;
    error_what_ = "cannot write";
    return;
  }
  // Without O_DIRECT, start the writeback now so that the final fsync has little left to do.
  if (!direct_) (void)::sync_file_range(fd_, off_t(b.offset), off_t(len), SYNC_FILE_RANGE_WRITE);
}

void HashedFileWriter::stop_thread() {
  if (threads_.empty()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void HashedFileWriter::rethrow_writer_error() { throw_io_error(path_, error_what_, error_); }

void HashedFileWriter::finish(bool sync) {
  if (current_.bytes > 0) {
    submit_current();
  } else if (current_.data) {
    std::lock_guard lock(mu_);
    free_.push_back(current_.data);
    current_ = {};
  }
  stop_thread();
  if (error_ != 0) rethrow_writer_error();
  // O_DIRECT wrote the last block padded to 4 KiB: cut the file back to its bytes.
  if (::ftruncate(fd_, off_t(written_)) != 0) throw_io_error(path_, "cannot truncate", errno);
  if (sync && ::fsync(fd_) != 0) throw_io_error(path_, "cannot fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    throw_io_error(path_, "cannot close", errno);  // NFS reports late errors here
}

// ---------------------------------------------------------------------------------------

namespace {

// Where the reader is in the caller's ranges: bytes of the file arrive in order, each is hashed,
// and those inside a range are copied to its destination in the same pass.
class RangeSink {
 public:
  explicit RangeSink(const std::vector<FileRange>& ranges) : ranges_(ranges) {}
  // Bytes [offset, offset + len) of the file, which follow the previous call's.
  void consume(const unsigned char* src, uint64_t offset, size_t len) {
    while (len > 0) {
      while (next_ < ranges_.size() && ranges_[next_].offset + ranges_[next_].bytes <= offset)
        ++next_;
      size_t n = len;
      if (next_ < ranges_.size() && ranges_[next_].offset <= offset) {
        const FileRange& r = ranges_[next_];
        n = size_t(std::min<uint64_t>(len, r.offset + r.bytes - offset));
        hash_.update_copy(static_cast<unsigned char*>(r.dst) + (offset - r.offset), src, n);
      } else {
        if (next_ < ranges_.size())
          n = size_t(std::min<uint64_t>(len, ranges_[next_].offset - offset));
        hash_.update(src, n);
      }
      src += n, offset += n, len -= n;
    }
  }
  uint64_t digest() const { return hash_.digest(); }

 private:
  const std::vector<FileRange>& ranges_;
  size_t next_ = 0;
  Xxh64 hash_;
};

// Whether most of the file is in the page cache (mincore over an unpopulated map). A kernel
// that will not say (another owner's file) reads as "not cached": the direct path is right either
// way.
bool mostly_cached(int fd, uint64_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return false;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec((size + page - 1) / page);
  size_t resident = 0;
  if (::mincore(p, size, vec.data()) == 0)
    for (unsigned char v : vec) resident += v & 1;
  ::munmap(p, size);
  return resident * 2 >= vec.size();
}

// A cached file: map it populated and copy + hash from the page cache in one user-space pass.
uint64_t read_mapped(const std::filesystem::path& path, int fd, uint64_t size, RangeSink& sink) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) throw_io_error(path, "cannot mmap", errno);
  sink.consume(static_cast<const unsigned char*>(p), 0, size);
  ::munmap(p, size);
  return sink.digest();
}

// A file on disk: blocks read with O_DIRECT by two threads (two requests in flight keep a
// virtual disk busy) into a ring of aligned buffers, copied + hashed by the caller in file
// order. No page-cache copy, and the checkpoint does not evict the page cache's other data.
class DirectReader {
 public:
  static constexpr size_t kBlock = 4u << 20;
  static constexpr int kSlots = 4, kThreads = 2;

  DirectReader(const std::filesystem::path& path, uint64_t size) : path_(path), size_(size) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd_ < 0 && errno == EINVAL)
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // no O_DIRECT here
    if (fd_ < 0) throw_io_error(path_, "cannot open", errno);
    blocks_ = int64_t((size_ + kBlock - 1) / kBlock);
    for (Slot& s : slots_) {
      s.data = static_cast<unsigned char*>(std::aligned_alloc(kAlign, kBlock));
      if (!s.data) throw std::bad_alloc();
    }
    for (int t = 0; t < kThreads; ++t) threads_.emplace_back([this] { read_loop(); });
  }
  ~DirectReader() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (Slot& s : slots_) std::free(s.data);
    ::close(fd_);
  }

  uint64_t run(RangeSink& sink) {
    for (int64_t i = 0; i < blocks_; ++i) {
      Slot& s = slots_[i % kSlots];
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return s.ready_block == i || error_ != 0; });
        if (error_ != 0)
          throw_io_error(path_,
                         error_ == EIO ? "ends early (truncated while reading?)" : "cannot read",
                         error_);
      }
      sink.consume(s.data, uint64_t(i) * kBlock, block_bytes(i));
      {
        std::lock_guard lock(mu_);
        consumed_ = i + 1;
      }
      cv_.notify_all();
    }
    return sink.digest();
  }

 private:
  struct Slot {
    unsigned char* data = nullptr;
    int64_t ready_block = -1;
  };
  size_t block_bytes(int64_t i) const {
    return size_t(std::min<uint64_t>(kBlock, size_ - uint64_t(i) * kBlock));
  }

  void read_loop() {
    for (;;) {
      int64_t i;
      {
        std::unique_lock lock(mu_);
        i = claimed_++;
        // A slot is free once the caller has consumed the block kSlots before this one.
        cv_.wait(lock, [&] { return stopping_ || i >= blocks_ || i < consumed_ + kSlots; });
        if (stopping_ || i >= blocks_ || error_ != 0) return;
      }
      const int err = read_block(i);
      std::lock_guard lock(mu_);
      if (err != 0 && error_ == 0) error_ = err;
      if (err == 0) slots_[i % kSlots].ready_block = i;
      cv_.notify_all();
    }
  }

  int read_block(int64_t i) {
    unsigned char* dst = slots_[i % kSlots].data;
    const size_t want = block_bytes(i);
    const size_t len =
        (want + kAlign - 1) / kAlign * kAlign;  // O_DIRECT reads whole blocks; EOF cuts it
    size_t done = 0;
    while (done < want) {
      const ssize_t r = ::pread(fd_, dst + done, len - done, off_t(uint64_t(i) * kBlock + done));
      if (r > 0)
        done += size_t(r);
      else if (r == 0)
        return EIO;
      else if (errno != EINTR)
        return errno;
    }
    return 0;
  }

  std::filesystem::path path_;
  uint64_t size_;
  int fd_ = -1;
  int64_t blocks_ = 0;
  Slot slots_[kSlots];
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t claimed_ = 0, consumed_ = 0;
  int error_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

uint64_t read_file_hashed(const std::filesystem::path& path, const std::vector<FileRange>& ranges,
                          ReadPath how) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_io_error(path, "cannot stat", err);
  }
  const uint64_t size = uint64_t(st.st_size);
  uint64_t end = 0;
  for (const FileRange& r : ranges) {
    LLMRUN_CHECK(r.offset >= end, "file ranges must be sorted and disjoint");
    end = r.offset + r.bytes;
  }
  if (end > size) {
    ::close(fd);
    throw_io_error(path, "is shorter than the tensor data it should hold (truncated?)", EIO);
  }
  RangeSink sink(ranges);
  if (size == 0) {
    ::close(fd);
    return sink.digest();
  }
  try {
    uint64_t h;
    if (how == ReadPath::page_cache || (how == ReadPath::automatic && mostly_cached(fd, size)))
      h = read_mapped(path, fd, size, sink);
    else
      h = DirectReader(path, size).run(sink);
    ::close(fd);
    return h;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace llmrun
