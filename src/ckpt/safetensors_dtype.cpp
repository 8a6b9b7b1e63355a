#include "ckpt/safetensors_dtype.h"

#include <array>

#include "ckpt/safetensors.h"

namespace llmrun {

// Every dtype the format defines, so that a Hugging Face file holding, say, an I64
// buffer still opens; only the tensors llmrun reads need a DType.
static constexpr std::array<SafetensorsDtype, 15> kDtypes{{
    {"F32", 4, DType::f32},
    {"BF16", 2, DType::bf16},
    {"F16", 2, DType::f16},
    {"I32", 4, DType::i32},
    {"F8_E4M3", 1, DType::fp8_e4m3},
    {"F8_E5M2", 1, DType::fp8_e5m2},
    {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt},
    {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},
    {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},
    {"I8", 1, std::nullopt},
    {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},
}};

const SafetensorsDtype* find_safetensors_dtype(std::string_view tag) {
  for (const auto& d : kDtypes)
    if (d.tag == tag) return &d;
  return nullptr;
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t) return d.tag.data();  // the literals are NUL-terminated
  return "?";
}

}  // namespace llmrun
