#pragma once
// The value a quantized plan gives one weight row against one activation row at the active
// SIMD level: the x16 dot (a one-row group; a lane's arithmetic involves no other row) where
// the type runs in the x16 layout, vec_dot otherwise. Tests compare plans to it bitwise.
#include <cstdint>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/x16_layout.h"

namespace llmrun::quant {

// a: the activation row as prepare_activation wrote it.
inline float plan_row_reference(QType t, int64_t cols, const uint8_t* row, const uint8_t* a) {
  const detail::X16Ops* ops = detail::x16_ops(t);
  if (!ops) return vec_dot(t, cols, row, a);
  const detail::X16Matrix m(t, ops, 1, cols, row, row_bytes(t, cols));
  std::vector<uint8_t> prepared(m.act_bytes());
  if (m.prepares_act())
    m.prepare_act(a, prepared.data());
  else
    prepared.assign(a, a + activation_row_bytes(t, cols));
  float v = 0;
  m.run(0, 1, prepared.data(), 0, 1, &v, 0, nullptr, false);
  return v;
}

}  // namespace llmrun::quant
