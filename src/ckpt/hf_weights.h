#pragma once
// The mapping between llmrun's bucketed tensors and Hugging Face tensor names and layouts.
// Used for model export, import, and anything else that speaks Hugging Face names (the
// oracle tests read gradients by those names too).
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/safetensors.h"
#include "model/bucket_store.h"

namespace llmrun {

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;  // Hugging Face layout
  std::vector<float> data;
};

// Every tensor of `store` (parameters, gradients, ...) in host memory under its Hugging Face
// name and layout (GPT-2 Conv1D weights transposed to [in, out]).
std::vector<HfTensor> export_hf_tensors(Backend& be, const BucketStore& store);

// Fills `store` from a safetensors file by Hugging Face names. Every tensor of the layout
// must be present with the Hugging Face shape; extra tensors in the file are ignored.
void import_hf_tensors(Backend& be, BucketStore& store, const SafetensorsFile& file);

}  // namespace llmrun
