// The emulated NCCL's element arithmetic (see the header).
#include "emulated_nccl_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace emu_nccl {

namespace {

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// A 16-bit float: widened to float for each step, rounded back after it.
struct Bf16 {
  uint16_t bits;
  static float get(Bf16 v) { return bf16_to_float(v.bits); }
  static Bf16 put(float f) { return {float_to_bf16(f)}; }
};
struct F16 {
  _Float16 h;
  static float get(F16 v) { return float(v.h); }
  static F16 put(float f) { return {_Float16(f)}; }
};

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
  if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) {
    return T::put(float(combine(T::get(a), T::get(b), op)));
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap-around, as the GPU's integer adds
    switch (op) {
      case ncclProd:
        return T(U(a) * U(b));
      case ncclMax:
        return std::max(a, b);
      case ncclMin:
        return std::min(a, b);
      default:  // sum, avg
        return T(U(a) + U(b));
    }
  } else {
    switch (op) {
      case ncclProd:
        return a * b;
      case ncclMax:  // NaN propagates, as NCCL's fmax-free comparison does not promise either way
        return a != a ? a : (b != b ? b : std::max(a, b));
      case ncclMin:
        return a != a ? a : (b != b ? b : std::min(a, b));
      default:
        return a + b;
    }
  }
}

template <class T>
void reduce_typed(void* acc, const void* x, size_t n, ncclRedOp_t op) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(x);
  for (size_t i = 0; i < n; ++i) {
    T bi;
    std::memcpy(&bi, b + i, sizeof(T));
    a[i] = combine(a[i], bi, op);
  }
}

template <class T>
void divide_typed(void* acc, size_t n, int nranks) {
  T* a = static_cast<T*>(acc);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>)
      a[i] = T::put(T::get(a[i]) / float(nranks));
    else
      a[i] = T(a[i] / T(nranks));
  }
}

template <class F>
void dispatch(ncclDataType_t t, F&& f) {
  switch (t) {
    case ncclInt8:
      return f(int8_t{});
    case ncclUint8:
      return f(uint8_t{});
    case ncclInt32:
      return f(int32_t{});
    case ncclUint32:
      return f(uint32_t{});
    case ncclInt64:
      return f(int64_t{});
    case ncclUint64:
      return f(uint64_t{});
    case ncclFloat16:
      return f(F16{});
    case ncclFloat32:
      return f(float{});
    case ncclFloat64:
      return f(double{});
    case ncclBfloat16:
      return f(Bf16{});
    default:
      return;
  }
}

}  // namespace

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* type_name(ncclDataType_t t) {
  static const char* const names[] = {"ncclInt8",     "ncclUint8",      "ncclInt32",
                                      "ncclUint32",   "ncclInt64",      "ncclUint64",
                                      "ncclFloat16",  "ncclFloat32",    "ncclFloat64",
                                      "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return int(t) >= 0 && int(t) < int(ncclNumTypes) ? names[int(t)] : "an invalid data type";
}

const char* op_name(ncclRedOp_t op) {
  static const char* const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  return int(op) >= 0 && int(op) < int(ncclNumOps) ? names[int(op)] : "an invalid reduction";
}

bool reducible(ncclDataType_t t, ncclRedOp_t op) {
  return type_size(t) > 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2 && int(op) >= 0 &&
         int(op) < int(ncclNumOps);
}

void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  dispatch(t, [&](auto tag) { reduce_typed<decltype(tag)>(acc, x, n, op); });
}

void finish_avg(void* acc, size_t n, ncclDataType_t t, int nranks) {
  dispatch(t, [&](auto tag) { divide_typed<decltype(tag)>(acc, n, nranks); });
}

}  // namespace emu_nccl
