#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "util/file_io.h"

namespace llmrun {

MappedFile::MappedFile(const std::filesystem::path& path, bool populate) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_io_error(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_io_error(path, "cannot map", EINVAL);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    // Readers go through whole files front to back (checksums, tensor loads): populating the
    // map up front costs one kernel walk instead of a page fault per 4 KiB, and the kernel
    // still drops these clean pages under memory pressure, so files larger than RAM work.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_io_error(path, "cannot mmap", err);
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

void MappedFile::release(size_t offset, size_t bytes) const {
  if (!data_ || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t end = std::min(size_, offset + bytes) / page * page;  // whole pages only
  const size_t begin = (offset + page - 1) / page * page;
  if (end > begin)  // advice only: a failure leaves the pages mapped, nothing else changes
    ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void MappedFile::release_read(size_t offset, size_t bytes) const {
  if (!data_ || offset >= size_) return;
  constexpr size_t kWindow = size_t(64) << 10;
  const size_t begin = offset / kWindow * kWindow;
  const size_t end = std::min(size_, (offset + bytes + kWindow - 1) / kWindow * kWindow);
  // advice only; the pages are clean, a later read faults them back in
  ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace llmrun
