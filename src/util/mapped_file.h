// A read-only memory map of a whole file. Readers of large files (safetensors,
// indexed datasets) take views into the map instead of copying the bytes.
#pragma once
#include <cstddef>
#include <filesystem>

namespace llmrun {

class MappedFile {
 public:
  // UserError if it cannot open/map. `populate` reads the whole file in up front (for readers
  // that go through all of it); without it pages come in as they are touched.
  explicit MappedFile(const std::filesystem::path& path, bool populate = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Unmaps this process's copy of the whole pages inside [offset, offset + bytes): data read
  // once (a header, a table copied elsewhere) stops counting in the resident set. The pages
  // are clean, so a later read faults them back in from the page cache unchanged.
  void release(size_t offset, size_t bytes) const;
  // Unmaps the pages a read of [offset, offset + bytes) mapped: the 64 KiB-aligned windows
  // around it (a page fault maps its neighbours too, up to the kernel's fault_around_bytes,
  // 64 KiB by default), whole pages of other data in those windows included.
  void release_read(size_t offset, size_t bytes) const;

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;  // null for an empty file: mmap cannot map 0 bytes
  size_t size_ = 0;
};

}  // namespace llmrun
