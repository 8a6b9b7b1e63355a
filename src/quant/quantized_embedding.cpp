// Quantized token table lookup (see the header).
#include "quant/quantized_embedding.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace llmrun::quant {

void embedding_lookup(const QuantTable& table, Tensor out, const Tensor& ids) {
  LLMRUN_CHECK(out.dtype == DType::f32 && ids.dtype == DType::i32 && out.rows() == ids.numel() &&
                   out.cols() == table.cols,
               "embedding_lookup: out " + out.shape_str() + " ids " + ids.shape_str());
  const int64_t n = ids.numel(), cols = table.cols;
  const int32_t* ip = ids.i32();
  for (int64_t i = 0; i < n; ++i)
    LLMRUN_CHECK(ip[i] < table.rows, "embedding_lookup: id " + std::to_string(ip[i]) +
                                         " outside a table of " + std::to_string(table.rows));
  float* o = out.f32();
  const size_t rb = row_bytes(table.type, cols);
#pragma omp parallel for if (n * cols > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    if (ip[i] < 0)
      std::fill(o + i * cols, o + (i + 1) * cols, 0.0f);
    else
      dequantize_row(table.type, table.data + size_t(ip[i]) * rb, o + i * cols, cols);
  }
}

}  // namespace llmrun::quant
