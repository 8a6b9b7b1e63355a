// The safetensors dtype table shared by the writer and the reader.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

#include "tensor/tensor.h"

namespace llmrun {

struct SafetensorsDtype {
  std::string_view tag;        // as spelled in the header
  size_t size;                 // bytes per element
  std::optional<DType> dtype;  // llmrun's equivalent, if it has one
};

// nullptr for a tag safetensors does not define.
const SafetensorsDtype* find_safetensors_dtype(std::string_view tag);

}  // namespace llmrun
