#pragma once
// Sequential file I/O for checkpoints, with the XXH64 checksum computed in the same pass as the
// copy. Checkpoint save and load move every byte of a model's state: these keep it to one pass
// over memory and keep the disk busy while the CPU copies.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/checksum.h"

namespace llmrun {

// Writes a new file front to back. write() copies the caller's bytes into aligned staging
// buffers while hashing them; two background threads write each full buffer at its offset with
// O_DIRECT, so the bytes go from the buffer to the disk without a second copy into the page
// cache (filesystems without O_DIRECT, such as tmpfs before Linux 6.6, get ordinary writes of
// the same buffers).
// Every failure is a UserError naming the path.
class HashedFileWriter {
 public:
  // `size_hint`: the file's expected size, to keep staging small for small files.
  explicit HashedFileWriter(const std::filesystem::path& path, uint64_t size_hint = UINT64_MAX);
  ~HashedFileWriter();  // without finish(): stops the thread and closes; the caller removes the
                        // file
  HashedFileWriter(const HashedFileWriter&) = delete;
  HashedFileWriter& operator=(const HashedFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // Writes what is staged, cuts the file to the bytes written (the last O_DIRECT block is
  // padded), fsyncs when `sync`, closes.
  void finish(bool sync);

  uint64_t written() const { return written_; }
  uint64_t digest() const { return hash_.digest(); }
  bool direct() const { return direct_.load(); }

 private:
  struct Block {
    unsigned char* data = nullptr;
    uint64_t offset = 0;  // in the file
    size_t bytes = 0;
  };
  void submit_current();
  void take_free_block();
  void write_loop();
  void write_block(const Block& b);
  void rethrow_writer_error();
  void stop_thread();

  std::filesystem::path path_;
  int fd_ = -1;
  std::atomic<bool> direct_{false};
  size_t block_bytes_ = 0;
  std::vector<unsigned char*> storage_;
  Block current_;
  uint64_t written_ = 0;
  Xxh64 hash_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Block> queued_;         // full blocks waiting for the writer thread, in order
  std::vector<unsigned char*> free_;  // blocks the writer has finished with
  int error_ = 0;                     // errno of the writer thread's first failure
  const char* error_what_ = nullptr;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// A destination for bytes [offset, offset + bytes) of a file.
struct FileRange {
  uint64_t offset = 0;
  size_t bytes = 0;
  void* dst = nullptr;
};

// Reads the whole file front to back once, placing each range's bytes straight into its
// destination (ranges sorted by offset, not overlapping) and hashing every byte of the file as
// it arrives (one pass: copy and hash together); returns the XXH64 of the file. A file mostly in
// the page cache is copied from a populated map; otherwise blocks are read with O_DIRECT, two
// requests in flight, while the previous block is copied.
enum class ReadPath { automatic, page_cache, direct };  // tests force one
uint64_t read_file_hashed(const std::filesystem::path& path, const std::vector<FileRange>& ranges,
                          ReadPath how = ReadPath::automatic);

}  // namespace llmrun
