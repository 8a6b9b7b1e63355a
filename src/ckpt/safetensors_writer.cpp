#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>

#include "ckpt/hashed_file_io.h"
#include "ckpt/safetensors.h"
#include "util/file_io.h"

namespace llmrun {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; the writer copies memory as it is");

static size_t shape_numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) {
    LLMRUN_CHECK(d >= 0, "negative dimension");
    n *= static_cast<size_t>(d);
  }
  return n;
}

static std::vector<int64_t> tensor_shape(const Tensor& t) {
  return std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim);
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  LLMRUN_CHECK(name != "__metadata__", "reserved safetensors name");
  for (const Entry& e : entries_) LLMRUN_CHECK(e.name != name, "duplicate tensor " + name);
  const size_t bytes = shape_numel(shape) * dtype_size(dtype);
  LLMRUN_CHECK(data != nullptr || bytes == 0, "tensor " + name + " has no data");
  entries_.push_back({std::move(name), dtype, dtype, std::move(shape), data, bytes, {}});
}

void SafetensorsWriter::add(std::string name, const Tensor& t) {
  LLMRUN_CHECK(t.device == Device::cpu, "safetensors writes host tensors");
  add(std::move(name), t.dtype, tensor_shape(t), t.data);
}

void SafetensorsWriter::add(std::string name, const Tensor& src, DType target) {
  if (target == src.dtype) return add(std::move(name), src);
  LLMRUN_CHECK(src.device == Device::cpu, "safetensors writes host tensors");
  LLMRUN_CHECK(src.dtype == DType::f32 && (target == DType::bf16 || target == DType::f16),
               "on-the-fly conversion is f32 to bf16 or f16");
  add(std::move(name), target, tensor_shape(src), src.data);
  entries_.back().src_dtype = DType::f32;
}

void SafetensorsWriter::add_produced(std::string name, DType dtype, std::vector<int64_t> shape,
                                     DType src_dtype, Producer produce) {
  LLMRUN_CHECK(src_dtype == dtype ||
                   (src_dtype == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16)),
               "on-the-fly conversion is f32 to bf16 or f16");
  LLMRUN_CHECK(name != "__metadata__", "reserved safetensors name");
  for (const Entry& e : entries_) LLMRUN_CHECK(e.name != name, "duplicate tensor " + name);
  const size_t bytes = shape_numel(shape) * dtype_size(dtype);
  entries_.push_back(
      {std::move(name), dtype, src_dtype, std::move(shape), nullptr, bytes, std::move(produce)});
}

namespace {

// Converts in fixed-size chunks so the extra memory stays small for any tensor size.
void write_converted(HashedFileWriter& out, const float* src, size_t n, DType target) {
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint16_t> buf(std::min(n, kChunk));
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    for (size_t i = 0; i < count; ++i)
      buf[i] = target == DType::bf16 ? f32_to_bf16(src[begin + i]) : f32_to_f16(src[begin + i]);
    out.write(buf.data(), count * sizeof(uint16_t));
  }
}

}  // namespace

std::string SafetensorsWriter::header_text(std::vector<const Entry*>& order) const {
  // Wider element types first (stable, so add order holds within a width), as the
  // reference writer does: with the 8-byte-aligned data section every tensor then
  // starts at a multiple of its element size, and readers may use it in place.
  order.clear();
  for (const Entry& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });

  // ordered_json keeps the tensors in data order, which makes headers easy to read.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    header[e->name] = {{"dtype", safetensors_dtype_name(e->dtype)},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->bytes}}};
    offset += e->bytes;
  }
  std::string text = header.dump();
  // Padding with spaces (valid JSON whitespace) aligns the data section to 8 bytes.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

uint64_t SafetensorsWriter::file_bytes() const {
  std::vector<const Entry*> order;
  uint64_t n = 8 + header_text(order).size();
  for (const Entry& e : entries_) n += e.bytes;
  return n;
}

WrittenSafetensors SafetensorsWriter::write(const std::filesystem::path& path, bool sync) const {
  std::vector<const Entry*> order;
  const std::string text = header_text(order);
  WrittenSafetensors info;
  uint64_t total = 8 + text.size();
  for (const Entry* e : order) total += e->bytes;
  // Every byte goes through the writer, so the checksum covers exactly what is on disk.
  HashedFileWriter out(path, total);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  out.write(len, sizeof len);
  out.write(text.data(), text.size());
  for (const Entry* e : order) {
    info.offsets[e->name] = out.written();
    const void* src = e->produce ? e->produce() : e->data;
    if (e->src_dtype == e->dtype)
      out.write(src, e->bytes);
    else
      write_converted(out, static_cast<const float*>(src), e->bytes / 2, e->dtype);
  }
  out.finish(sync);
  info.bytes = out.written();
  info.checksum = out.digest();
  return info;
}

}  // namespace llmrun
