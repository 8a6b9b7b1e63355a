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
#include <functional>
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

// What write() put on disk: the file's size, its XXH64 checksum and where each tensor's
// bytes start (absolute file offsets), for checkpoint indexes.
struct WrittenSafetensors {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  std::map<std::string, uint64_t> offsets;
};

class SafetensorsWriter {
 public:
  // Produces a tensor's source bytes (dtype `src_dtype`) just before they are written and
  // returns a pointer valid until the next call; lets conversions stream one tensor at a
  // time (a transposed copy, a view into a mapped file) instead of holding the model twice.
  using Producer = std::function<const void*()>;

  // Record a tensor to write; `data` is not copied and must stay valid until write().
  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  // A host tensor stored as it is.
  void add(std::string name, const Tensor& t);
  // A host f32 tensor converted to bf16 or f16 while writing (export with --dtype),
  // so no converted copy of the whole model is ever held in memory.
  void add(std::string name, const Tensor& src_f32, DType target);
  // A tensor whose f32 (or `dtype`) data comes from `produce` at write time, stored as `dtype`
  // (converted from f32 when dtype is bf16/f16 and src_dtype is f32).
  void add_produced(std::string name, DType dtype, std::vector<int64_t> shape, DType src_dtype,
                    Producer produce);
  void set_metadata(std::map<std::string, std::string> metadata) {
    metadata_ = std::move(metadata);
  }

  // Stream the file to `path` (fsynced). Data goes in add order within each element
  // width, widest first, so every tensor is aligned to its element size. Write into
  // an AtomicDir or a temp name for crash safety: this call alone is not atomic.
  // `sync` false leaves the fsync to the caller (AtomicDir::commit fsyncs every file), so
  // several files' writeback overlaps instead of waiting file by file.
  WrittenSafetensors write(const std::filesystem::path& path, bool sync = true) const;
  // Bytes write() will produce (header included), to plan shards before writing.
  uint64_t file_bytes() const;
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    std::string name;
    DType dtype;      // as stored in the file
    DType src_dtype;  // as held in memory (f32 when converting)
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;      // in the file
    Producer produce;  // when set, replaces data
  };
  std::string header_text(std::vector<const Entry*>& order) const;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensor {
  std::string dtype_tag;       // as in the file: "F32", "I64", ...
  std::optional<DType> dtype;  // empty for valid safetensors dtypes llmrun has no use for
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the read-only map; unaligned in general
  size_t bytes = 0;
  uint64_t file_offset = 0;  // where the data starts in the file

  int64_t numel() const;
  std::string shape_str() const;
};

// A safetensors file mapped read-only. The constructor validates the whole header,
// so a corrupt or truncated file fails at open with its name, not mid-load.
class SafetensorsFile {
 public:
  // `populate`: map every page now (readers that copy every tensor); false when the tensors are
  // read another way and only the header is wanted from the map.
  explicit SafetensorsFile(const std::filesystem::path& path, bool populate = true);
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
