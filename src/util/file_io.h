// Small RAII wrappers over POSIX files: every failure becomes a UserError that names
// the path and the system's reason, because a bad path or a full disk is the user's to fix.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace llmrun {

// "PATH: WHAT: strerror(errno)", the one shape every I/O error message takes.
[[noreturn]] void throw_io_error(const std::filesystem::path& path, std::string_view what, int err);

// A file opened for writing (created or truncated). Writes are unbuffered: callers
// write large blocks (tensor data) or build small files in memory first.
class FileWriter {
 public:
  explicit FileWriter(const std::filesystem::path& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void sync();  // fsync: the bytes are on disk when this returns
  // Starts writeback of everything written so far without waiting for it (sync_file_range),
  // so the disk works while the caller produces the next bytes; a later fsync then has
  // little left to wait for.
  void start_writeback();
  void close();  // reports errors that a silent close in the destructor would hide

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The whole file as bytes.
std::string read_file(const std::filesystem::path& path);

// fsync an existing file or directory by path (directories need it so that renames
// and new entries survive a crash).
void fsync_path(const std::filesystem::path& path);

}  // namespace llmrun
