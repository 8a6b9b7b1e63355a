#include "ckpt/hf_weights.h"

#include "model/shard_copy.h"
#include "util/error.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& src, int64_t rows, int64_t cols) {
  std::vector<float> dst(src.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[size_t(c * rows + r)] = src[size_t(r * cols + c)];
  return dst;
}

}  // namespace

std::vector<HfTensor> export_hf_tensors(Backend& be, const BucketStore& store) {
  std::vector<HfTensor> out;
  const auto& layout = store.layout();
  for (int b = 0; b < store.num_buckets(); ++b) {
    for (int p = 0; p < static_cast<int>(layout[b].params.size()); ++p) {
      const ParamSpec& spec = layout[b].params[p];
      HfTensor t{spec.hf_name, spec.shape, std::vector<float>(size_t(spec.numel()))};
      be.copy(Tensor(t.data.data(), DType::f32, {spec.numel()}),
              store.tensor(b, p).view({spec.numel()}));
      if (spec.hf_transposed) {
        t.data = transposed(t.data, spec.shape[0], spec.shape[1]);
        t.shape = {spec.shape[1], spec.shape[0]};
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<int64_t> hf_shape(const ParamSpec& spec) {
  if (spec.hf_transposed) return {spec.shape[1], spec.shape[0]};
  return spec.shape;
}

const float* to_hf_layout(const ParamSpec& spec, const float* src, std::vector<float>& scratch) {
  if (!spec.hf_transposed) return src;
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  scratch.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) scratch[size_t(c * rows + r)] = src[size_t(r * cols + c)];
  return scratch.data();
}

void import_hf_tensors(Backend& be, BucketStore& store, const HfWeightFiles& files, bool progress) {
  const auto& layout = store.layout();
  double total_mb = 0;
  for (const BucketLayout& bucket : layout)
    for (const ParamSpec& spec : bucket.params) total_mb += double(spec.full_numel()) * 4 / 1e6;
  TerminalProgress shown("loading " + files.source(), total_mb, "MB", progress);
  std::vector<float> host;
  for (int b = 0; b < store.num_buckets(); ++b) {
    for (int p = 0; p < static_cast<int>(layout[b].params.size()); ++p) {
      // Files hold full tensors; a model-parallel rank keeps its part.
      const ParamSpec& spec = layout[b].params[p];
      std::vector<int64_t> hf_shape = spec.full_shape;
      if (spec.hf_transposed) hf_shape = {spec.full_shape[1], spec.full_shape[0]};
      const SafetensorsFile* found = files.find(spec.hf_name);
      if (!found) throw UserError(files.source() + ": tensor " + spec.hf_name + " is missing");
      const SafetensorsFile& file = *found;
      const SafetensorsTensor& info = file.info(spec.hf_name);
      if (info.shape != hf_shape)
        throw UserError(file.path().string() + ": tensor " + spec.hf_name + " has shape " +
                        info.shape_str() + ", the config implies " + shape_text(hf_shape));
      host.resize(size_t(spec.full_numel()));
      file.read_f32(spec.hf_name, host.data(), spec.full_numel());
      if (spec.hf_transposed) host = transposed(host, spec.full_shape[1], spec.full_shape[0]);
      extract_shard(be, spec, Tensor(host.data(), DType::f32, {spec.full_numel()}),
                    store.tensor(b, p));
      shown.advance(double(spec.full_numel()) * 4 / 1e6);
    }
  }
}

}  // namespace llmrun
