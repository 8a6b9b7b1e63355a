#pragma once
// The mapping between llmrun's bucketed tensors and Hugging Face tensor names and layouts.
// Used for model export, import, and anything else that speaks Hugging Face names (the
// oracle tests read gradients by those names too).
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/hf_weight_files.h"
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

// Fills `store` from safetensors weights by Hugging Face names. Every tensor of the layout
// must be present with the Hugging Face shape; extra tensors in the files are ignored.
// `progress`: the "loading ... MB" line on a terminal (one rank of a multi-rank run shows it).
void import_hf_tensors(Backend& be, BucketStore& store, const HfWeightFiles& files,
                       bool progress = true);

// Hugging Face shape of a layout tensor (GPT-2 Conv1D weights are [in, out]).
std::vector<int64_t> hf_shape(const ParamSpec& spec);

// Converts one tensor between llmrun's [out, in] layout and Hugging Face's, when they differ
// (GPT-2 Conv1D weights); otherwise returns `src` untouched. `scratch` holds the result.
const float* to_hf_layout(const ParamSpec& spec, const float* src, std::vector<float>& scratch);

}  // namespace llmrun
