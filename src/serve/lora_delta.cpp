// lora_host_delta: the CPU kernel of a row group's LoRA delta (see the header).
#include "serve/lora_delta.h"

#include <algorithm>
#include <cstring>

namespace llmrun {

namespace {

// 16 floats: one AVX-512 register, two AVX2 ones; GCC lowers the element-wise arithmetic to
// whatever -march offers without changing its per-lane results.
typedef float Lanes __attribute__((vector_size(64)));
static_assert(sizeof(Lanes) == kLoraLanes * sizeof(float));
// Column vectors per register tile: kLoraTileRows x kBlocks accumulators.
constexpr int kBlocks = 2;

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The first n floats (the rest zero): a y block at the end of a target's columns.
inline Lanes load(const float* p, int n) {
  if (n == int(kLoraLanes)) return load(p);
  Lanes v = {};
  for (int l = 0; l < n; ++l) v[l] = p[l];
  return v;
}

inline void store(float* p, Lanes v, int n) {
  if (n == int(kLoraLanes)) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  for (int l = 0; l < n; ++l) p[l] = v[l];
}

// u[i, c0 .. c0 + NB*16) = x[i] A^T for MR rows: u[i][c] sums x[i][k] * At[k][c] in k order.
template <int MR, int NB>
void a_tile(const float* x, int64_t in, const float* at, int64_t wpad, int64_t c0, float* u) {
  Lanes acc[MR][NB] = {};
  for (int64_t k = 0; k < in; ++k) {
    Lanes a[NB];
    for (int b = 0; b < NB; ++b) a[b] = load(at + k * wpad + c0 + b * kLoraLanes);
    for (int i = 0; i < MR; ++i) {
      const float xi = x[i * in + k];  // a scalar operand is broadcast to every lane
      for (int b = 0; b < NB; ++b) acc[i][b] += xi * a[b];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) store(u + i * wpad + c0 + b * kLoraLanes, acc[i][b], kLoraLanes);
}

struct BOperands {
  const float* u;  // [MR, wpad], this target's slice at u_begin
  int64_t wpad, u_begin, rank;
  const float* bt;  // [rank, cpad]
  int64_t cpad, cols;
  float* y;  // this target's first column of row 0
  int64_t y_cols;
};

// y[i][c0 .. c0 + NB*16) += u[i] (scale B)^T for MR rows: y[i][c] adds u[i][j] * Bt[j][c] to
// itself in j order. The last block may cover fewer than 16 columns.
template <int MR, int NB>
void b_tile(const BOperands& o, int64_t c0) {
  Lanes acc[MR][NB];
  int n[NB];
  for (int b = 0; b < NB; ++b)
    n[b] = int(std::min<int64_t>(kLoraLanes, o.cols - c0 - b * kLoraLanes));
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) acc[i][b] = load(o.y + i * o.y_cols + c0 + b * kLoraLanes, n[b]);
  for (int64_t j = 0; j < o.rank; ++j) {
    Lanes w[NB];
    for (int b = 0; b < NB; ++b) w[b] = load(o.bt + j * o.cpad + c0 + b * kLoraLanes);
    for (int i = 0; i < MR; ++i) {
      const float ui = o.u[i * o.wpad + o.u_begin + j];
      for (int b = 0; b < NB; ++b) acc[i][b] += ui * w[b];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) store(o.y + i * o.y_cols + c0 + b * kLoraLanes, acc[i][b], n[b]);
}

template <int MR>
void rows_tile(const LoraHostSite& s, const float* x, float* y, int64_t y_cols, float* u) {
  const int64_t wpad = lora_pad(s.width);
  int64_t c = 0;
  for (; c + kBlocks * kLoraLanes <= wpad; c += kBlocks * kLoraLanes)
    a_tile<MR, kBlocks>(x, s.in, s.at.data(), wpad, c, u);
  for (; c < wpad; c += kLoraLanes) a_tile<MR, 1>(x, s.in, s.at.data(), wpad, c, u);
  for (const LoraHostTarget& t : s.targets) {
    const BOperands o{
        u, wpad, t.u_begin, s.rank, t.bt.data(), lora_pad(t.cols), t.cols, y + t.col_begin, y_cols};
    int64_t c0 = 0;
    for (; c0 + kBlocks * kLoraLanes <= o.cpad; c0 += kBlocks * kLoraLanes)
      b_tile<MR, kBlocks>(o, c0);
    for (; c0 < o.cpad; c0 += kLoraLanes) b_tile<MR, 1>(o, c0);
  }
}

}  // namespace

int64_t LoraHostSite::macs_per_row() const {
  int64_t n = in * width;
  for (const LoraHostTarget& t : targets) n += rank * t.cols;
  return n;
}

void lora_host_delta(const LoraHostSite& site, const float* x, int64_t rows, float* y,
                     int64_t y_cols, float* u) {
  for (int64_t i = 0; i < rows; i += kLoraTileRows) {
    const float* xi = x + i * site.in;
    float* yi = y + i * y_cols;
    switch (std::min<int64_t>(kLoraTileRows, rows - i)) {
      case 4:
        rows_tile<4>(site, xi, yi, y_cols, u);
        break;
      case 3:
        rows_tile<3>(site, xi, yi, y_cols, u);
        break;
      case 2:
        rows_tile<2>(site, xi, yi, y_cols, u);
        break;
      default:
        rows_tile<1>(site, xi, yi, y_cols, u);
    }
  }
}

}  // namespace llmrun
