// weight_copy_bytes: bump allocation from 2 MiB-aligned, MADV_HUGEPAGE chunks.
#include "quant/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>

namespace llmrun::quant {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kChunkBytes = size_t(64) << 20;

// One mapping; copies carved from it hold it alive through aliasing shared_ptrs.
struct Chunk {
  uint8_t* base = nullptr;  // 2 MiB aligned
  size_t size = 0, used = 0;
  void* mapping = nullptr;
  size_t mapped = 0;
  explicit Chunk(size_t bytes) {
    // over-map by a huge page and use the aligned part: mmap only promises 4 KiB alignment
    mapped = bytes + kHugePage;
    mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) throw std::bad_alloc();
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) /
                                      kHugePage * kHugePage);
    size = bytes;
    // Advice only: where THP is off ("never") the chunk simply stays in 4 KiB pages.
    madvise(base, size, MADV_HUGEPAGE);
  }
  ~Chunk() { munmap(mapping, mapped); }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
};

// Gives back the chunk's memory past its last copy: the rest of the huge page that copy ended
// in was committed whole at the first touch. Bytes carved from there later read as zeros again.
void release_tail(Chunk& c) {
  const size_t tail = (c.used + 4095) / 4096 * 4096;
  if (tail < c.size) madvise(c.base + tail, c.size - tail, MADV_DONTNEED);
}

std::mutex arena_mutex;
std::weak_ptr<Chunk> current;  // expires when every copy carved from it is freed

}  // namespace

std::shared_ptr<uint8_t> weight_copy_bytes(size_t bytes) {
  const size_t n = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (n > kChunkBytes) {  // a mapping of its own, whole huge pages
    auto own = std::make_shared<Chunk>((n + kHugePage - 1) / kHugePage * kHugePage);
    return std::shared_ptr<uint8_t>(own, own->base);
  }
  std::lock_guard<std::mutex> lock(arena_mutex);
  std::shared_ptr<Chunk> c = current.lock();
  if (!c || c->size - c->used < n) {
    if (c) release_tail(*c);  // it takes no more copies
    c = std::make_shared<Chunk>(kChunkBytes);
    current = c;
  }
  uint8_t* p = c->base + c->used;
  c->used += n;
  return std::shared_ptr<uint8_t>(c, p);
}

void trim_weight_arena() {
  std::lock_guard<std::mutex> lock(arena_mutex);
  if (std::shared_ptr<Chunk> c = current.lock()) release_tail(*c);
}

std::shared_ptr<uint8_t> copy_weight_rows(
    const uint8_t* src, size_t stride, int64_t rows,
    const std::function<void(const uint8_t* source, size_t bytes)>& progress) {
  const size_t total = stride * size_t(rows);
  std::shared_ptr<uint8_t> dst = weight_copy_bytes(total);
  constexpr size_t kStep = size_t(1) << 20;
  for (size_t at = 0; at < total; at += kStep) {
    const size_t n = std::min(kStep, total - at);
    std::memcpy(dst.get() + at, src + at, n);
    if (progress) progress(src, at + n);
  }
  return dst;
}

}  // namespace llmrun::quant
