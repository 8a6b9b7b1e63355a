#pragma once
// The fp32 parameter store of an inference model whose linears run on quantized weights
// (GGUF, GPTQ, AWQ): each bucket points at memory that is reserved, not committed. Only the
// tensors written (norms, biases, embeddings) ever get pages; the linear weights' ranges stay
// untouched because the quantized runner never reads them.
#include <cstddef>
#include <memory>
#include <vector>

#include "model/bucket_store.h"

namespace llmrun {

class ReservedParams {
 public:
  // Attaches every bucket of `params` (built with allocate_params = false); `params` must not
  // outlive this object.
  explicit ReservedParams(BucketStore& params);
  ~ReservedParams();
  ReservedParams(const ReservedParams&) = delete;
  ReservedParams& operator=(const ReservedParams&) = delete;

 private:
  struct Range {
    void* p;
    size_t bytes;
  };
  std::vector<Range> ranges_;
};

}  // namespace llmrun
