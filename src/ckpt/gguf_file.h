#pragma once
// GGUF files (version 2 and 3, little-endian), the container llama.cpp reads and writes:
//   "GGUF" u32 version, u64 tensor count, u64 key/value count,
//   key/value pairs (string key, u32 value type, value),
//   tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type,
//   u64 offset from the data section),
//   padding to general.alignment (32 by default), then the tensor data.
// Strings are a u64 length and the bytes; arrays a u32 element type, a u64 count, elements.
// The reader maps the file and hands out views; the writer streams tensor data one tensor at
// a time into a temporary sibling that is renamed over the target once complete.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quant/block_formats.h"
#include "util/mapped_file.h"

namespace llmrun {

// GGUF value types.
enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// One metadata value: its GGUF type (and element type for arrays) and the value as JSON
// (numbers, bools, strings, arrays of them).
struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType elem = GgufType::u32;  // arrays only
  nlohmann::json value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the innermost (row length)
  quant::QType type = quant::QType::f32;
  uint64_t offset = 0;  // from the start of the data section
  size_t bytes = 0;
  int64_t rows() const;  // product of ne[1..]
};

class GgufReader {
 public:
  // UserError naming the file and what is wrong: bad magic or version, a truncated header,
  // a tensor of a type llmrun does not read (named), data past the end of the file.
  explicit GgufReader(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // The value of `key`; UserError naming the key when it is missing.
  const nlohmann::json& get(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor(const std::string& name) const;  // UserError if missing
  const uint8_t* data(const GgufTensorInfo& t) const;
  // Resident memory (MappedFile::release): `t`'s pages once read for the last time (or only
  // compared), and the metadata once a loader has taken what it needs: drop_metadata() frees
  // the parsed key/value pairs (a tokenizer's 50k-entry arrays) and unmaps the header's pages,
  // after which has() is false and get() fails for every key; tensors stay readable.
  // `bytes`: only the tensor's first bytes (by default all of them).
  void release(const GgufTensorInfo& t, size_t bytes = SIZE_MAX) const;
  // MappedFile::release_read of `bytes` bytes of `t` from `offset` on (a row looked up).
  void release_read(const GgufTensorInfo& t, size_t offset, size_t bytes) const;
  void drop_metadata();

 private:
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> by_name_;
  size_t data_start_ = 0;
};

class GgufWriter {
 public:
  void set(const std::string& key, GgufType type, nlohmann::json value);
  void set_array(const std::string& key, GgufType elem, nlohmann::json values);
  // A tensor whose bytes `produce` writes into its argument (already sized) when the file is
  // written, so only one tensor's data is in memory at a time.
  using Producer = std::function<void(std::vector<uint8_t>& out)>;
  void add_tensor(const std::string& name, quant::QType type, std::vector<int64_t> ne,
                  Producer produce);
  // Writes the file atomically (a temporary sibling, fsynced, renamed over `path`).
  void write(const std::filesystem::path& path) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  std::vector<std::pair<std::string, GgufValue>> kv_;
  struct Pending {
    GgufTensorInfo info;
    Producer produce;
  };
  std::vector<Pending> tensors_;
};

}  // namespace llmrun
