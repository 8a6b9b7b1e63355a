#include "util/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace llmrun {

void throw_io_error(const std::filesystem::path& path, std::string_view what, int err) {
  throw UserError(path.string() + ": " + std::string(what) + ": " + std::strerror(err));
}

FileWriter::FileWriter(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_io_error(path_, "cannot create file", errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io_error(path_, "cannot write", errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void FileWriter::sync() {
  if (::fsync(fd_) != 0) throw_io_error(path_, "cannot fsync", errno);
}

void FileWriter::start_writeback() {
  // Advisory: a filesystem without sync_file_range still gets the fsync that makes it durable.
  (void)::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
}

void FileWriter::close() {
  int fd = fd_;
  fd_ = -1;
  // NFS and some quota setups report write errors only at close.
  if (fd >= 0 && ::close(fd) != 0) throw_io_error(path_, "cannot close", errno);
}

std::string read_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error(path, "cannot open", errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw_io_error(path, "cannot read", err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void fsync_path(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error(path, "cannot open for fsync", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw_io_error(path, "cannot fsync", err);
}

}  // namespace llmrun
