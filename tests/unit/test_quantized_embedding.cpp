// The quantized token table lookup: each looked-up row equals the dequantized table row bit
// for bit (what the fp32 copy it replaces held), an id < 0 gives zeros, an id past the table is
// refused.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "quant/quantized_embedding.h"

using namespace llmrun;
using namespace llmrun::quant;

TEST(QuantizedEmbedding, RowsEqualTheDequantizedTable) {
  const int64_t vocab = 40, cols = 256;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> table(size_t(vocab * cols));
  for (float& x : table) x = nd(rng);
  for (QType t : {QType::q8_0, QType::q4_0, QType::q4_k, QType::q6_k, QType::f16}) {
    SCOPED_TRACE(type_name(t));
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> q(rb * size_t(vocab));
    for (int64_t r = 0; r < vocab; ++r)
      quantize_row(t, table.data() + r * cols, q.data() + size_t(r) * rb, cols);
    std::vector<int32_t> ids = {7, 0, -1, 39, 7};
    std::vector<float> out(ids.size() * size_t(cols), 5.0f), want(static_cast<size_t>(cols));
    embedding_lookup({t, q.data(), vocab, cols},
                     Tensor(out.data(), DType::f32, {int64_t(ids.size()), cols}),
                     Tensor(ids.data(), DType::i32, {int64_t(ids.size())}));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0)
        std::fill(want.begin(), want.end(), 0.0f);
      else
        dequantize_row(t, q.data() + size_t(ids[i]) * rb, want.data(), cols);
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(out[i * size_t(cols) + size_t(c)], want[size_t(c)]);
    }
    std::vector<int32_t> bad = {40};
    EXPECT_THROW(
        embedding_lookup({t, q.data(), vocab, cols}, Tensor(out.data(), DType::f32, {1, cols}),
                         Tensor(bad.data(), DType::i32, {1})),
        std::logic_error);
  }
}
