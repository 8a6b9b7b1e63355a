// Per-file checksums for checkpoints: XXH64 (Yann Collet's 64-bit hash, reimplemented
// here), fast enough (several GB/s on one core) that verifying a checkpoint costs less
// than reading it from disk, and strong enough to catch torn writes and bit rot.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace llmrun {

// Streaming XXH64 with seed 0: update() any number of times, then digest(). The result
// equals the reference xxhash's XXH64 of the concatenated bytes.
class Xxh64 {
 public:
  Xxh64();
  void update(const void* data, size_t bytes);
  // Copies `bytes` from src to dst and hashes them in the same pass: a checkpoint's bytes are
  // read from memory once, not once for the copy and once more for the checksum.
  void update_copy(void* dst, const void* src, size_t bytes);
  uint64_t digest() const;

 private:
  uint64_t acc_[4];
  unsigned char buf_[32];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

uint64_t xxh64(const void* data, size_t bytes);

// 16 lower-case hex digits, as stored in index.json.
std::string checksum_hex(uint64_t h);

}  // namespace llmrun
