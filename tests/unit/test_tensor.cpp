#include <gtest/gtest.h>

#include "tensor/tensor.h"

using namespace llmrun;

TEST(Tensor, ViewsAndSlices) {
  Buffer b = Buffer::host(24 * 4);
  Tensor t = b.as(DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.cols(), 4);
  Tensor s = t.slice(1, 2);
  EXPECT_EQ(s.f32(), t.f32() + 12);
  EXPECT_EQ(s.numel(), 12);
  EXPECT_EQ(t.view({6, 4}).rows(), 6);
  EXPECT_THROW(t.view({5, 4}), std::logic_error);
  EXPECT_THROW(b.as(DType::f32, {25}), std::logic_error);
}

TEST(Tensor, HalfConversionsRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f) << f;
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);  // f16's largest finite value
  // Round to nearest even: 1 + 2^-8 lies halfway between two bf16 values, goes to 1.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
}
