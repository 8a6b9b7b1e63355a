// The token embedding lookup of a quantized model: the table stays in its block format (as
// the GGUF file holds it, memory-mapped) and only the looked-up rows are dequantized, so a
// Q8_0/Q4 model never holds an fp32 copy of its largest matrix. Host memory only.
#pragma once
#include <cstdint>

#include "quant/block_formats.h"
#include "tensor/tensor.h"

namespace llmrun::quant {

struct QuantTable {
  QType type = QType::f32;
  const uint8_t* data = nullptr;  // rows of `cols` values in `type`
  int64_t rows = 0, cols = 0;
};

// out[n, :] = table[ids[n], :] for f32 out [N, cols] and i32 ids [N]; an id < 0 gives a zero
// row (as Backend::embedding_fwd); an id >= rows is a bug of the caller.
void embedding_lookup(const QuantTable& table, Tensor out, const Tensor& ids);

}  // namespace llmrun::quant
