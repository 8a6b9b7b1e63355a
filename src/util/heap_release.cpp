#include "util/heap_release.h"

#include <cstddef>  // defines __GLIBC__ on glibc systems (tested below)
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace llmrun {

void release_free_heap() {
#if defined(__GLIBC__)
  // Unlike free()'s own trimming (only the top of the heap), malloc_trim also returns free
  // pages between live allocations.
  malloc_trim(0);
#endif
}

}  // namespace llmrun
