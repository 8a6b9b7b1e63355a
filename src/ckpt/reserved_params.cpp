#include "ckpt/reserved_params.h"

#include <sys/mman.h>

#include <algorithm>
#include <string>

#include "util/error.h"

namespace llmrun {

ReservedParams::ReservedParams(BucketStore& params) {
  for (int b = 0; b < params.num_buckets(); ++b) {
    const int64_t n = std::max<int64_t>(params.padded_numel(b), 1);
    const size_t bytes = size_t(n) * 4;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      for (const Range& r : ranges_) munmap(r.p, r.bytes);
      throw UserError("cannot reserve " + std::to_string(bytes) + " bytes");
    }
    ranges_.push_back({p, bytes});
    params.attach(b, Tensor(p, DType::f32, {params.padded_numel(b)}));
  }
}

ReservedParams::~ReservedParams() {
  for (const Range& r : ranges_) munmap(r.p, r.bytes);
  ranges_.clear();
}

}  // namespace llmrun
