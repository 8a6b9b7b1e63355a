// Crash-safe publication of files and directories: readers see the old version or
// the complete new one, never a half-written mix (a checkpoint "latest" must load).
#pragma once
#include <filesystem>
#include <string_view>

namespace llmrun {

// Write a directory atomically. The caller fills path() (a sibling of final_path
// named "<final>.tmp-<pid>"), then commit() makes it final_path. Destroying an
// uncommitted AtomicDir removes the temporary directory, so an exception while
// writing leaves nothing behind.
class AtomicDir {
 public:
  explicit AtomicDir(std::filesystem::path final_path);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::filesystem::path& path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }

  // fsync every file and directory inside, rename over final_path (an existing
  // directory there is moved aside first and removed afterwards), fsync the parent.
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool committed_ = false;
};

// Replace the file at `path` with `bytes`: temp file, fsync, rename, fsync parent.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace llmrun
