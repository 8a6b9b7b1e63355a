// Which kernel serves a cast or a fill of given element types on the device. Plain C++ (no CUDA
// headers) so that the dispatch is unit-tested without a GPU.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace llmrun::cuda {

enum class CastRoute { f32_scale, f32_to_bf16, f32_to_f16, bf16_to_f32, f16_to_f32, unsupported };
CastRoute cast_route(DType dst, DType src);

// A fill writes `bits` into every element of `bytes` (4 or 2) bytes: the value as the element
// type encodes it (i32 truncates like static_cast, bf16/f16 round to nearest even).
struct FillPattern {
  int bytes = 0;  // 0: dtype cannot be filled
  uint32_t bits = 0;
};
FillPattern fill_pattern(DType t, float value);

}  // namespace llmrun::cuda
