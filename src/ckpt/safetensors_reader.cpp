#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "ckpt/safetensors_dtype.h"
#include "util/mapped_file.h"

namespace llmrun {

namespace {

// A real header is a few hundred bytes per tensor; anything near this is not one.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::shape_str() const { return shape_string(shape); }

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, bool populate)
    : path_(path), file_(std::make_unique<MappedFile>(path, populate)) {
  parse_header();
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

void SafetensorsFile::parse_header() {
  auto fail = [&](const std::string& what) -> UserError {
    return UserError(path_.string() + ": safetensors header: " + what);
  };
  const size_t size = file_->size();
  if (size < 8)
    throw fail("file is " + std::to_string(size) + " bytes, too short for the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(file_->data()[i]);
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " is over 100 MB (not a safetensors file?)");
  if (n > size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the " +
               std::to_string(size) + "-byte file (truncated?)");

  const char* text = reinterpret_cast<const char*>(file_->data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::parse_error& e) {
    throw fail(std::string("invalid JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("not a JSON object");

  const std::byte* data = file_->data() + 8 + n;
  const uint64_t data_size = size - 8 - n;
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw fail("__metadata__." + k + " is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name + ": ";
    if (!entry.is_object()) throw fail(where + "entry is not an object");

    SafetensorsTensor t;
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) throw fail(where + "no dtype");
    const SafetensorsDtype* dt = find_safetensors_dtype(dtype_it->get<std::string>());
    if (!dt) throw fail(where + "unknown dtype " + dtype_it->dump());
    t.dtype_tag = std::string(dt->tag);
    t.dtype = dt->dtype;

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) throw fail(where + "no shape");
    uint64_t numel = 1;
    for (const auto& d : *shape_it) {
      if (!d.is_number_unsigned())
        throw fail(where + "shape " + shape_it->dump() + " is not a list of sizes");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel))
        throw fail(where + "shape " + shape_it->dump() + " is too large");
      t.shape.push_back(static_cast<int64_t>(dim));
    }

    auto off_it = entry.find("data_offsets");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned())
      throw fail(where + "data_offsets must be [begin, end]");
    const uint64_t begin = (*off_it)[0].get<uint64_t>(), end = (*off_it)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw fail(where + "data_offsets " + off_it->dump() + " outside the data section of " +
                 std::to_string(data_size) + " bytes (truncated?)");
    uint64_t expect = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dt->size), &expect) || end - begin != expect)
      throw fail(where + "data_offsets " + off_it->dump() + " span " + std::to_string(end - begin) +
                 " bytes, but " + t.dtype_tag + " " + t.shape_str() + " needs " +
                 std::to_string(numel * dt->size));
    t.data = data + begin;
    t.bytes = static_cast<size_t>(end - begin);
    t.file_offset = 8 + n + begin;
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    ranges.push_back({begin, end, &it->first});
  }

  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  const Range* last = nullptr;  // the non-empty range reaching furthest so far
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;  // an empty tensor shares no bytes with anything
    if (last && r.begin < last->end)
      throw fail("tensors " + *last->name + " and " + *r.name + " overlap");
    if (!last || r.end > last->end) last = &r;
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsTensor& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw UserError(path_.string() + ": no tensor named " + name);
  return it->second;
}

void SafetensorsFile::convert_f32(const std::string& name, const SafetensorsTensor& t,
                                  float* dst) const {
  const size_t n = static_cast<size_t>(t.numel());
  const auto* src = static_cast<const unsigned char*>(t.data);
  if (t.dtype == DType::f32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  if (t.dtype != DType::bf16 && t.dtype != DType::f16)
    throw UserError(path_.string() + ": tensor " + name + " has dtype " + t.dtype_tag +
                    "; only F32, BF16 and F16 tensors load as f32");
  const bool bf16 = t.dtype == DType::bf16;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);  // the data section need not be 2-byte aligned
    dst[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

void SafetensorsFile::read_f32(const std::string& name, float* dst, int64_t numel) const {
  const SafetensorsTensor& t = info(name);
  if (t.numel() != numel)
    throw UserError(path_.string() + ": tensor " + name + " has shape " + t.shape_str() + " (" +
                    std::to_string(t.numel()) + " elements), expected " + std::to_string(numel) +
                    " elements");
  convert_f32(name, t, dst);
}

void SafetensorsFile::read_f32(const std::string& name, const Tensor& dst) const {
  LLMRUN_CHECK(dst.device == Device::cpu, "read_f32 fills host tensors");
  const SafetensorsTensor& t = info(name);
  const std::vector<int64_t> want(dst.shape.begin(), dst.shape.begin() + dst.ndim);
  if (t.shape != want)
    throw UserError(path_.string() + ": tensor " + name + " has shape " + t.shape_str() +
                    ", expected " + shape_string(want));
  convert_f32(name, t, dst.f32());
}

}  // namespace llmrun
