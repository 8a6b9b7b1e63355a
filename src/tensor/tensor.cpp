#include "tensor/tensor.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <cstring>

#include "tensor/half_convert.h"

namespace llmrun {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::fp8_e5m2:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::i32:
      return "i32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::fp8_e5m2:
      return "fp8_e5m2";
  }
  return "?";
}

Tensor::Tensor(void* d, DType t, std::initializer_list<int64_t> dims, Device dev)
    : data(d), dtype(t), device(dev), ndim(static_cast<int>(dims.size())) {
  LLMRUN_CHECK(dims.size() <= 4, "at most 4 dimensions");
  int i = 0;
  for (int64_t v : dims) shape[i++] = v;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims, device);
  LLMRUN_CHECK(t.numel() == numel(), "view " + t.shape_str() + " of " + shape_str());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  LLMRUN_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "slice out of range");
  Tensor t = *this;
  int64_t row = numel() / shape[0];
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::flat(int64_t begin, int64_t count) const {
  LLMRUN_CHECK(begin >= 0 && begin + count <= numel(), "flat range out of bounds");
  return Tensor(static_cast<char*>(data) + static_cast<size_t>(begin) * dtype_size(dtype), dtype,
                {count}, device);
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static void free_aligned(void* p) { std::free(p); }

// Large buffers come straight from mmap: the kernel hands out zero pages and commits each on
// first touch, so a KV pool or an activation arena sized for the worst case holds resident
// memory only for what is used (a memset would commit all of it at once). A 64-byte header
// in front keeps the mapping's length for munmap.
constexpr size_t kMappedBytes = size_t(1) << 20, kMapHeader = 64;
static void unmap_buffer(void* p) {
  char* base = static_cast<char*>(p) - kMapHeader;
  size_t len = 0;
  std::memcpy(&len, base, sizeof len);
  munmap(base, len);
}

Buffer Buffer::host(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  if (rounded >= kMappedBytes) {
    const size_t len = rounded + kMapHeader;
    void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    std::memcpy(base, &len, sizeof len);
    return Buffer(static_cast<char*>(base) + kMapHeader, bytes, Device::cpu, &unmap_buffer);
  }
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::cpu, &free_aligned);
}

Tensor Buffer::as(DType t, std::initializer_list<int64_t> dims, size_t byte_offset) const {
  Tensor v(static_cast<char*>(data()) + byte_offset, t, dims, dev_);
  LLMRUN_CHECK(byte_offset + v.bytes() <= bytes_, "view past the end of its buffer");
  return v;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t h) { return half::bf16_to_f32(h); }
uint16_t f32_to_f16(float f) { return half::f32_to_f16(f); }
float f16_to_f32(uint16_t h) { return half::f16_to_f32(h); }

}  // namespace llmrun
