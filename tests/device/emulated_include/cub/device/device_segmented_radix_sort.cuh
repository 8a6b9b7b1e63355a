// CUB's segmented radix sort for kernels/sampling*.cu compiled under the CUDA emulation
// (llmrun-cuda-emulator): the same order as CUB's descending float sort (keys compared as
// CUB's radix digits, so -0.0 sorts below +0.0 and NaNs by their bits; equal keys keep their
// input order, as a radix sort does), run on the stream like every emulated kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "../../../cuda_emulation.h"

namespace cub {

struct DeviceSegmentedRadixSort {
  // The radix key of a float: its bits, flipped so that unsigned order is float order.
  static uint32_t radix_key(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }

  template <typename V, typename Offsets>
  static cudaError_t SortPairsDescending(void* temp, size_t& temp_bytes, const float* keys_in,
                                         float* keys_out, const V* values_in, V* values_out,
                                         int items, int segments, Offsets begin, Offsets end,
                                         int = 0, int = 32, cudaStream_t stream = nullptr) {
    constexpr size_t kTempBytes = 256;  // what the caller must provide (CUB asks for some too)
    if (temp == nullptr) {
      temp_bytes = kTempBytes;
      return cudaSuccess;
    }
    if (temp_bytes < kTempBytes || items < 0) std::abort();
    auto sort = [=] {
      std::vector<int> order;
      for (int s = 0; s < segments; ++s) {
        const int b = begin[s], e = end[s];
        order.resize(size_t(std::max(0, e - b)));
        std::iota(order.begin(), order.end(), b);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
          return radix_key(keys_in[x]) > radix_key(keys_in[y]);
        });
        std::vector<float> k(order.size());
        std::vector<V> v(order.size());
        for (size_t i = 0; i < order.size(); ++i) {
          k[i] = keys_in[order[i]];
          v[i] = values_in[order[i]];
        }
        std::copy(k.begin(), k.end(), keys_out + b);
        std::copy(v.begin(), v.end(), values_out + b);
      }
    };
    auto& hooks = llmrun_emu::runtime_hooks();
    if (hooks.submit)
      hooks.submit(stream, sort);
    else
      sort();
    return cudaSuccess;
  }
};

}  // namespace cub
