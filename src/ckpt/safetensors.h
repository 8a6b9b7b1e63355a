// src/ckpt owns checkpoint and model files: safetensors I/O, Hugging Face import and
// export, and distributed checkpoints with resharding.
//
// safetensors layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the data section, offsets relative to its start.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace llmrun {

class MappedFile;

// "F32", "BF16", ... as safetensors spells llmrun's dtypes.
const char* safetensors_dtype_name(DType t);

class SafetensorsWriter {
 public:
  // Record a tensor to write; `data` is not copied and must stay valid until write().
  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  // A host tensor stored as it is.
  void add(std::string name, const Tensor& t);
  // A host f32 tensor converted to bf16 or f16 while writing (export with --dtype),
  // so no converted copy of the whole model is ever held in memory.
  void add(std::string name, const Tensor& src_f32, DType target);
  void set_metadata(std::map<std::string, std::string> metadata) {
    metadata_ = std::move(metadata);
  }

  // Stream the file to `path` (fsynced). Data goes in add order within each element
  // width, widest first, so every tensor is aligned to its element size. Write into
  // an AtomicDir or a temp name for crash safety: this call alone is not atomic.
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;      // as stored in the file
    DType src_dtype;  // as held in memory (f32 when converting)
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;  // in the file
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensor {
  std::string dtype_tag;       // as in the file: "F32", "I64", ...
  std::optional<DType> dtype;  // empty for valid safetensors dtypes llmrun has no use for
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the read-only map; unaligned in general
  size_t bytes = 0;

  int64_t numel() const;
  std::string shape_str() const;
};

// A safetensors file mapped read-only. The constructor validates the whole header,
// so a corrupt or truncated file fails at open with its name, not mid-load.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafetensorsTensor& info(const std::string& name) const;  // UserError if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copy tensor `name` into dst as f32, converting from F32, BF16 or F16. The stored
  // shape must hold exactly `numel` elements.
  void read_f32(const std::string& name, float* dst, int64_t numel) const;
  // Same, into an f32 host tensor whose shape must equal the stored shape.
  void read_f32(const std::string& name, const Tensor& dst) const;

 private:
  void parse_header();
  void convert_f32(const std::string& name, const SafetensorsTensor& t, float* dst) const;

  std::filesystem::path path_;
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace llmrun
