// Construction, memory, copies, casts and whole-tensor reductions of the CUDA backend.
#include "backend/cuda/cuda_backend.h"

#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dtype_dispatch.h"
#include "kernels/elementwise.cuh"
#include "kernels/geometry.cuh"
#include "kernels/reduce.cuh"

namespace llmrun {

namespace cuda {

float* dev_f32(const Tensor& t, const char* what) {
  LLMRUN_CHECK(t.data != nullptr && t.dtype == DType::f32 && t.device == Device::cuda,
               std::string(what) + " must be a CUDA f32 tensor");
  return static_cast<float*>(t.data);
}

int32_t* dev_i32(const Tensor& t, const char* what) {
  LLMRUN_CHECK(t.data != nullptr && t.dtype == DType::i32 && t.device == Device::cuda,
               std::string(what) + " must be a CUDA i32 tensor");
  return static_cast<int32_t*>(t.data);
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  LLMRUN_CHECK(a.numel() == b.numel(),
               std::string(what) + ": " + a.shape_str() + " vs " + b.shape_str());
}

}  // namespace cuda

using cuda::check;
using cuda::check_launch;
using cuda::dev_f32;

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal) {
  const int n = cuda_device_count();
  if (n == 0)
    throw UserError("no CUDA device visible (no NVIDIA driver, or no GPU in this machine)");
  if (device_ordinal < 0 || device_ordinal >= n)
    throw UserError("CUDA device " + std::to_string(device_ordinal) + " does not exist (" +
                    std::to_string(n) + " visible)");
  return std::make_unique<CudaBackend>(device_ordinal);
}

CudaBackend::CudaBackend(int ordinal) : ctx_(cuda::device_context(ordinal)), stream_(ctx_.stream) {
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, ordinal),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&max_optin_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal),
        "cudaDeviceGetAttribute");
}

Buffer CudaBackend::allocate_raw(size_t bytes, const std::string& what) {
  void* p = ctx_.allocator->allocate(bytes, uintptr_t(stream_), what);
  return Buffer(p, bytes, Device::cuda, &cuda::free_device_memory);
}

Buffer CudaBackend::allocate(size_t bytes) {
  Buffer b = allocate_raw(bytes, "a tensor buffer");
  check(cudaMemsetAsync(b.data(), 0, bytes, stream_), "allocate (zeroing)");
  return b;
}

Buffer CudaBackend::scratch(size_t bytes, const char* what) {
  return allocate_raw(bytes, std::string("scratch of ") + what);
}

Buffer CudaBackend::allocate_host_pinned(size_t bytes) {
  void* p = nullptr;
  const size_t n = bytes ? bytes : 1;
  if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    throw DeviceOutOfMemory("out of page-locked host memory allocating " + std::to_string(bytes) +
                            " bytes for a staging buffer");
  }
  std::memset(p, 0, n);
  return Buffer(p, bytes, Device::cpu, &cuda::free_pinned_memory);
}

void CudaBackend::synchronize() { check(cudaStreamSynchronize(stream_), "synchronize"); }

void CudaBackend::copy(Tensor dst, const Tensor& src) {
  LLMRUN_CHECK(dst.dtype == src.dtype, "copy: dtypes differ");
  cuda::check_same_numel(dst, src, "copy");
  if (dst.data == src.data || dst.numel() == 0) return;
  if (dst.device == Device::cpu && src.device == Device::cpu) {
    // Host to host: ops queued earlier may still be producing neither side, but keep order
    // simple: nothing on the stream touches host memory except copies, which synchronize.
    std::memmove(dst.data, src.data, dst.bytes());
    return;
  }
  // Uploads of a micro-batch's ids and the like: staged, so the stream keeps running.
  if (dst.device == Device::cuda && src.device == Device::cpu &&
      uploads_.upload(dst.data, src.data, dst.bytes()))
    return;
  check(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDefault, stream_), "copy");
  // A host side may be pageable memory that the caller reuses right after: finish the copy.
  if (dst.device == Device::cpu || src.device == Device::cpu)
    check(cudaStreamSynchronize(stream_), "copy (host side)");
}

void CudaBackend::copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) {
  LLMRUN_CHECK(dst.dtype == src.dtype && dst.rows() == src.rows(), "copy_cols: shapes differ");
  LLMRUN_CHECK(col_begin >= 0 && col_begin + dst.cols() <= src.cols(),
               "copy_cols: columns out of range");
  if (dst.numel() == 0) return;
  const size_t es = dtype_size(dst.dtype);
  const size_t width = size_t(dst.cols()) * es;
  const char* from = static_cast<const char*>(src.data) + size_t(col_begin) * es;
  check(cudaMemcpy2DAsync(dst.data, width, from, size_t(src.cols()) * es, width, size_t(dst.rows()),
                          cudaMemcpyDefault, stream_),
        "copy_cols");
  if (dst.device == Device::cpu || src.device == Device::cpu)
    check(cudaStreamSynchronize(stream_), "copy_cols (host side)");
}

// The inverse of copy_cols (OLMoE's q/k norms write their rows back into the fused qkv).
void CudaBackend::copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) {
  LLMRUN_CHECK(dst.dtype == src.dtype && dst.rows() == src.rows(), "copy_into_cols: shapes differ");
  LLMRUN_CHECK(col_begin >= 0 && col_begin + src.cols() <= dst.cols(),
               "copy_into_cols: columns out of range");
  if (src.numel() == 0) return;
  const size_t es = dtype_size(src.dtype);
  const size_t width = size_t(src.cols()) * es;
  char* to = static_cast<char*>(dst.data) + size_t(col_begin) * es;
  check(cudaMemcpy2DAsync(to, size_t(dst.cols()) * es, src.data, width, width, size_t(src.rows()),
                          cudaMemcpyDefault, stream_),
        "copy_into_cols");
  if (dst.device == Device::cpu || src.device == Device::cpu)
    check(cudaStreamSynchronize(stream_), "copy_into_cols (host side)");
}

void CudaBackend::fill(Tensor x, float value) {
  LLMRUN_CHECK(x.device == Device::cuda, "fill: x must be a CUDA tensor");
  const cuda::FillPattern f = cuda::fill_pattern(x.dtype, value);
  LLMRUN_CHECK(f.bytes != 0, std::string("fill: unsupported dtype ") + dtype_name(x.dtype));
  if (f.bytes == 4)
    kernels::fill_32(x.data, x.numel(), f.bits, stream_);
  else
    kernels::fill_16(x.data, x.numel(), static_cast<uint16_t>(f.bits), stream_);
  check_launch("fill");
}

void CudaBackend::cast(Tensor dst, const Tensor& src, float scale) {
  cuda::check_same_numel(dst, src, "cast");
  LLMRUN_CHECK(dst.device == Device::cuda && src.device == Device::cuda,
               "cast: both tensors must be CUDA tensors");
  const int64_t n = dst.numel();
  using kernels::HalfKind;
  switch (cuda::cast_route(dst.dtype, src.dtype)) {
    case cuda::CastRoute::f32_scale:
      kernels::cast_f32_f32(static_cast<float*>(dst.data), static_cast<const float*>(src.data), n,
                            scale, stream_);
      break;
    case cuda::CastRoute::f32_to_bf16:
    case cuda::CastRoute::f32_to_f16:
      kernels::cast_f32_half(static_cast<uint16_t*>(dst.data), static_cast<const float*>(src.data),
                             n, scale, dst.dtype == DType::bf16 ? HalfKind::bf16 : HalfKind::f16,
                             stream_);
      break;
    case cuda::CastRoute::bf16_to_f32:
    case cuda::CastRoute::f16_to_f32:
      kernels::cast_half_f32(static_cast<float*>(dst.data), static_cast<const uint16_t*>(src.data),
                             n, scale, src.dtype == DType::bf16 ? HalfKind::bf16 : HalfKind::f16,
                             stream_);
      break;
    case cuda::CastRoute::unsupported:
      LLMRUN_CHECK(false, std::string("cast: unsupported ") + dtype_name(src.dtype) + " -> " +
                              dtype_name(dst.dtype));
  }
  check_launch("cast");
}

Buffer CudaBackend::to_bf16(const Tensor& t, const char* what) {
  Buffer b = scratch(size_t(t.numel()) * 2, what);
  kernels::cast_f32_half(static_cast<uint16_t*>(b.data()), static_cast<const float*>(t.data),
                         t.numel(), 1.0f, kernels::HalfKind::bf16, stream_);
  check_launch(std::string("bf16 operand of ") + what);
  return b;
}

double CudaBackend::reduce_to_host(int op, const Tensor& x, const char* what) {
  const float* xp = dev_f32(x, what);
  Buffer ws = scratch(kernels::reduce_workspace_bytes() + sizeof(double), what);
  double* out =
      reinterpret_cast<double*>(static_cast<char*>(ws.data()) + kernels::reduce_workspace_bytes());
  kernels::reduce(static_cast<kernels::ReduceOp>(op), xp, x.numel(), out, nullptr, ws.data(),
                  stream_);
  check_launch(what);
  double host = 0;
  check(cudaMemcpyAsync(&host, out, sizeof host, cudaMemcpyDeviceToHost, stream_), what);
  check(cudaStreamSynchronize(stream_), what);
  return host;
}

double CudaBackend::sum_squares(const Tensor& x) {
  return reduce_to_host(int(kernels::ReduceOp::sum_squares), x, "sum_squares");
}

double CudaBackend::sum(const Tensor& x) {
  return reduce_to_host(int(kernels::ReduceOp::sum), x, "sum");
}

float CudaBackend::amax(const Tensor& x) {
  return static_cast<float>(reduce_to_host(int(kernels::ReduceOp::amax), x, "amax"));
}

void CudaBackend::sum_squares_into(Tensor out, const Tensor& x) {
  LLMRUN_CHECK(out.numel() == 1, "sum_squares_into: out must hold one value");
  float* o = dev_f32(out, "sum_squares_into out");
  const float* xp = dev_f32(x, "sum_squares_into x");
  Buffer ws = scratch(kernels::reduce_workspace_bytes(), "sum_squares_into");
  kernels::reduce(kernels::ReduceOp::sum_squares, xp, x.numel(), nullptr, o, ws.data(), stream_);
  check_launch("sum_squares_into");
}

void CudaBackend::amax_into(Tensor out, const Tensor& x) {
  LLMRUN_CHECK(out.numel() == 1, "amax_into: out must hold one value");
  float* o = dev_f32(out, "amax_into out");
  const float* xp = dev_f32(x, "amax_into x");
  Buffer ws = scratch(kernels::reduce_workspace_bytes(), "amax_into");
  kernels::reduce(kernels::ReduceOp::amax, xp, x.numel(), nullptr, o, ws.data(), stream_);
  check_launch("amax_into");
}

void CudaBackend::argmax_rows(Tensor ids, const Tensor& x) {
  const float* xp = dev_f32(x, "argmax_rows x");
  int32_t* ip = cuda::dev_i32(ids, "argmax_rows ids");
  LLMRUN_CHECK(ids.numel() == x.rows(), "argmax_rows: ids must hold one id per row of x");
  if (x.cols() == 0) return;
  kernels::argmax_rows(ip, xp, x.rows(), x.cols(), stream_);
  check_launch("argmax_rows");
}

void CudaBackend::sum_rows(Tensor out, const Tensor& x, bool accumulate) {
  float* op = dev_f32(out, "sum_rows out");
  const float* xp = dev_f32(x, "sum_rows x");
  const int64_t rows = x.rows(), cols = x.cols();
  LLMRUN_CHECK(out.numel() == cols, "sum_rows: out " + out.shape_str() + " for x " + x.shape_str());
  Buffer ws = scratch(kernels::column_reduce_workspace_bytes(rows, cols, 1), "sum_rows");
  kernels::sum_rows(op, xp, rows, cols, accumulate, ws.data(), stream_);
  check_launch("sum_rows");
}

}  // namespace llmrun
