#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace llmrun {

void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kPage = 4096;
  // smaller than a huge page: nothing to gain, and advising part of the heap splits its mapping
  if (bytes < (size_t(2) << 20)) return;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kPage - 1) / kPage * kPage;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) / kPage * kPage;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

}  // namespace llmrun
