// GGUF reading (over a memory map) and writing (header in memory, tensors streamed).
#include "ckpt/gguf_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

using json = nlohmann::json;
using quant::QType;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// A bounds-checked cursor over the mapped header.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t size, std::string where)
      : p_(p), size_(size), where_(std::move(where)) {}
  template <typename T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string() {
    const uint64_t n = read<uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  void need(uint64_t n) const {
    if (n > size_ - pos_)
      throw UserError(where_ + ": the GGUF header ends early (truncated file?) at byte " +
                      std::to_string(pos_));
  }
  const uint8_t* p_;
  size_t size_, pos_ = 0;
  std::string where_;
};

json read_scalar(Cursor& c, GgufType t, const std::string& where, const std::string& key) {
  switch (t) {
    case GgufType::u8:
      return c.read<uint8_t>();
    case GgufType::i8:
      return c.read<int8_t>();
    case GgufType::u16:
      return c.read<uint16_t>();
    case GgufType::i16:
      return c.read<int16_t>();
    case GgufType::u32:
      return c.read<uint32_t>();
    case GgufType::i32:
      return c.read<int32_t>();
    case GgufType::f32:
      return c.read<float>();
    case GgufType::boolean:
      return c.read<uint8_t>() != 0;
    case GgufType::string:
      return c.string();
    case GgufType::u64:
      return c.read<uint64_t>();
    case GgufType::i64:
      return c.read<int64_t>();
    case GgufType::f64:
      return c.read<double>();
    case GgufType::array:
      break;
  }
  throw UserError(where + ": metadata key " + key + " has value type " +
                  std::to_string(uint32_t(t)) + ", which GGUF does not define");
}

void put_bytes(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <typename T>
void put(std::string& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void write_scalar(std::string& out, GgufType t, const json& v) {
  switch (t) {
    case GgufType::u8:
      return put<uint8_t>(out, v.get<uint8_t>());
    case GgufType::i8:
      return put<int8_t>(out, v.get<int8_t>());
    case GgufType::u16:
      return put<uint16_t>(out, v.get<uint16_t>());
    case GgufType::i16:
      return put<int16_t>(out, v.get<int16_t>());
    case GgufType::u32:
      return put<uint32_t>(out, v.get<uint32_t>());
    case GgufType::i32:
      return put<int32_t>(out, v.get<int32_t>());
    case GgufType::f32:
      return put<float>(out, v.get<float>());
    case GgufType::boolean:
      return put<uint8_t>(out, v.get<bool>() ? 1 : 0);
    case GgufType::string:
      return put_string(out, v.get<std::string>());
    case GgufType::u64:
      return put<uint64_t>(out, v.get<uint64_t>());
    case GgufType::i64:
      return put<int64_t>(out, v.get<int64_t>());
    case GgufType::f64:
      return put<double>(out, v.get<double>());
    case GgufType::array:
      break;
  }
  LLMRUN_CHECK(false, "GGUF writer: nested arrays are not written");
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

int64_t GgufTensorInfo::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
  return r;
}

GgufReader::GgufReader(const std::filesystem::path& path) {
  file_ = std::make_unique<MappedFile>(path, /*populate=*/false);
  const std::string where = path.string();
  Cursor c(reinterpret_cast<const uint8_t*>(file_->data()), file_->size(), where);
  if (file_->size() < 4 || c.read<uint32_t>() != kMagic)
    throw UserError(where + ": not a GGUF file (it does not start with \"GGUF\")");
  version_ = c.read<uint32_t>();
  if (version_ != 2 && version_ != 3)
    throw UserError(where + ": GGUF version " + std::to_string(version_) +
                    "; llmrun reads versions 2 and 3");
  const uint64_t n_tensors = c.read<uint64_t>(), n_kv = c.read<uint64_t>();
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string();
    GgufValue v;
    v.type = GgufType(c.read<uint32_t>());
    if (v.type == GgufType::array) {
      v.elem = GgufType(c.read<uint32_t>());
      const uint64_t n = c.read<uint64_t>();
      if (v.elem == GgufType::array)
        throw UserError(where + ": metadata key " + key + " is an array of arrays");
      if (n > file_->size())
        throw UserError(where + ": metadata key " + key + " claims " + std::to_string(n) +
                        " elements, more than the file has bytes");
      v.value = json::array();
      for (uint64_t k = 0; k < n; ++k) v.value.push_back(read_scalar(c, v.elem, where, key));
    } else {
      v.value = read_scalar(c, v.type, where, key);
    }
    kv_[key] = std::move(v);
  }
  uint64_t alignment = kDefaultAlignment;
  if (has("general.alignment")) {
    const json& a = get("general.alignment");
    if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 ||
        (a.get<uint64_t>() & (a.get<uint64_t>() - 1)))
      throw UserError(where + ": general.alignment must be a power of two");
    alignment = a.get<uint64_t>();
  }
  if (n_tensors > file_->size()) throw UserError(where + ": tensor count past the file size");
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string();
    const uint32_t n_dims = c.read<uint32_t>();
    if (n_dims == 0 || n_dims > 4)
      throw UserError(where + ": tensor " + t.name + " has " + std::to_string(n_dims) +
                      " dimensions (1 to 4 allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(int64_t(c.read<uint64_t>()));
    const uint32_t type = c.read<uint32_t>();
    if (!quant::is_known_type(type) || QType(type) == QType::q8_k)
      throw UserError(
          where + ": tensor " + t.name + " has ggml type " + std::to_string(type) +
          "; llmrun reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K");
    t.type = QType(type);
    t.offset = c.read<uint64_t>();
    for (int64_t d : t.ne)
      if (d <= 0) throw UserError(where + ": tensor " + t.name + " has an empty dimension");
    if (!quant::fits(t.type, t.ne[0]))
      throw UserError(where + ": tensor " + t.name + " has rows of " + std::to_string(t.ne[0]) +
                      " values, not whole " + quant::type_name(t.type) + " blocks");
    t.bytes = quant::row_bytes(t.type, t.ne[0]) * size_t(t.rows());
    by_name_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  data_start_ = align_up(c.pos(), alignment);
  for (const GgufTensorInfo& t : tensors_)
    if (data_start_ + t.offset + t.bytes > file_->size())
      throw UserError(where + ": tensor " + t.name + "'s data runs past the end of the file");
}

const json& GgufReader::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) throw UserError(path().string() + ": metadata key " + key + " is missing");
  return it->second.value;
}

const GgufTensorInfo* GgufReader::find_tensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufReader::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw UserError(path().string() + ": tensor " + name + " is missing");
  return *t;
}

const uint8_t* GgufReader::data(const GgufTensorInfo& t) const {
  return reinterpret_cast<const uint8_t*>(file_->data()) + data_start_ + t.offset;
}

void GgufReader::release(const GgufTensorInfo& t, size_t bytes) const {
  file_->release(data_start_ + t.offset, std::min(bytes, t.bytes));
}

void GgufReader::release_read(const GgufTensorInfo& t, size_t offset, size_t bytes) const {
  file_->release_read(data_start_ + t.offset + offset, bytes);
}

void GgufReader::drop_metadata() {
  std::map<std::string, GgufValue>().swap(kv_);
  file_->release(0, data_start_);
}

void GgufWriter::set(const std::string& key, GgufType type, json value) {
  kv_.push_back({key, GgufValue{type, GgufType::u32, std::move(value)}});
}

void GgufWriter::set_array(const std::string& key, GgufType elem, json values) {
  kv_.push_back({key, GgufValue{GgufType::array, elem, std::move(values)}});
}

void GgufWriter::add_tensor(const std::string& name, QType type, std::vector<int64_t> ne,
                            Producer produce) {
  GgufTensorInfo t;
  t.name = name;
  t.ne = std::move(ne);
  t.type = type;
  t.bytes = quant::row_bytes(type, t.ne[0]) * size_t(t.rows());
  uint64_t offset = 0;
  if (!tensors_.empty()) {
    const GgufTensorInfo& last = tensors_.back().info;
    offset = align_up(last.offset + last.bytes, kDefaultAlignment);
  }
  t.offset = offset;
  tensors_.push_back({std::move(t), std::move(produce)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  std::string head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const auto& [key, v] : kv_) {
    put_string(head, key);
    put<uint32_t>(head, uint32_t(v.type));
    if (v.type == GgufType::array) {
      put<uint32_t>(head, uint32_t(v.elem));
      put<uint64_t>(head, v.value.size());
      for (const json& e : v.value) write_scalar(head, v.elem, e);
    } else {
      write_scalar(head, v.type, v.value);
    }
  }
  for (const Pending& p : tensors_) {
    put_string(head, p.info.name);
    put<uint32_t>(head, uint32_t(p.info.ne.size()));
    for (int64_t d : p.info.ne) put<uint64_t>(head, uint64_t(d));
    put<uint32_t>(head, uint32_t(p.info.type));
    put<uint64_t>(head, p.info.offset);
  }
  head.resize(size_t(align_up(head.size(), kDefaultAlignment)), '\0');

  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  try {
    FileWriter f(tmp);
    f.write(head);
    uint64_t written = 0;
    std::vector<uint8_t> bytes;
    const std::string zeros(kDefaultAlignment, '\0');
    for (const Pending& p : tensors_) {
      f.write(zeros.data(), size_t(p.info.offset - written));
      bytes.assign(p.info.bytes, 0);
      p.produce(bytes);
      f.write(bytes.data(), bytes.size());
      written = p.info.offset + p.info.bytes;
      f.start_writeback();
    }
    f.sync();
    f.close();
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  fsync_path(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
}

}  // namespace llmrun
