// src/tensor owns element types and Tensor views over flat buffers. A Tensor never
// owns memory: buffers (Buffer) do, and every parameter, gradient and activation is a
// contiguous view into one of them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "util/error.h"

namespace llmrun {

enum class DType : uint8_t { f32, bf16, f16, fp8_e4m3, fp8_e5m2, i32 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class Device : uint8_t { cpu, cuda };

// A contiguous, row-major view: up to 4 dimensions. 2-D ops read a tensor as
// rows() x cols(), i.e. all leading dimensions flattened.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, 4> shape{0, 0, 0, 0};

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims, Device dev = Device::cpu);

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  bool empty() const { return data == nullptr; }

  // Host access to the elements. Device memory is the backend's alone: above src/backend it
  // moves only through Backend::copy, so these refuse a device tensor.
  float* f32() const {
    LLMRUN_CHECK(dtype == DType::f32, "tensor is not f32");
    LLMRUN_CHECK(device == Device::cpu,
                 "tensor " + shape_str() + " is in device memory: copy it to the host first");
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    LLMRUN_CHECK(dtype == DType::i32, "tensor is not i32");
    LLMRUN_CHECK(device == Device::cpu,
                 "tensor " + shape_str() + " is in device memory: copy it to the host first");
    return static_cast<int32_t*>(data);
  }
  // Same memory, new shape (numel must match).
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) along dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // The flat element range [begin, begin+count) as a 1-D tensor.
  Tensor flat(int64_t begin, int64_t count) const;
  std::string shape_str() const;
};

// Owning, 64-byte-aligned allocation. Created by a Backend (device memory) or with
// Buffer::host (pinned-free host memory for I/O staging).
class Buffer {
 public:
  using Deleter = void (*)(void*);
  Buffer() = default;
  Buffer(void* p, size_t bytes, Device dev, Deleter del) : ptr_(p, del), bytes_(bytes), dev_(dev) {}
  static Buffer host(size_t bytes);  // zero-initialised

  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }
  // A view of `count` elements of type t starting at element `offset` (in units of t).
  Tensor as(DType t, std::initializer_list<int64_t> dims, size_t byte_offset = 0) const;

 private:
  std::unique_ptr<void, Deleter> ptr_{nullptr, nullptr};
  size_t bytes_ = 0;
  Device dev_ = Device::cpu;
};

// bf16/f16 helpers used by casts and I/O on the host.
uint16_t f32_to_bf16(float f);  // round to nearest even
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

}  // namespace llmrun
