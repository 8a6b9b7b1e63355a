// Cast routes and fill bit patterns (see dtype_dispatch.h).
#include "backend/cuda/dtype_dispatch.h"

#include <bit>

namespace llmrun::cuda {

CastRoute cast_route(DType dst, DType src) {
  if (src == DType::f32) {
    if (dst == DType::f32) return CastRoute::f32_scale;
    if (dst == DType::bf16) return CastRoute::f32_to_bf16;
    if (dst == DType::f16) return CastRoute::f32_to_f16;
  } else if (dst == DType::f32) {
    if (src == DType::bf16) return CastRoute::bf16_to_f32;
    if (src == DType::f16) return CastRoute::f16_to_f32;
  }
  return CastRoute::unsupported;
}

FillPattern fill_pattern(DType t, float value) {
  switch (t) {
    case DType::f32:
      return {4, std::bit_cast<uint32_t>(value)};
    case DType::i32:
      return {4, std::bit_cast<uint32_t>(static_cast<int32_t>(value))};
    case DType::bf16:
      return {2, f32_to_bf16(value)};
    case DType::f16:
      return {2, f32_to_f16(value)};
    default:
      return {};
  }
}

}  // namespace llmrun::cuda
